"""What each layer of the emulator needs of the one that owns it, as structural types.

The server owns connections, a connection owns its sessions and links, and the admin API drives
the emulator. Each owned object keeps a reference back to its owner; these Protocols name what it
uses there, so ``links.py`` and ``attach.py`` need not import ``connection.py``, ``connection.py``
need not import ``server.py`` and ``admin.py`` need not import ``server.py`` (each of those imports
the other way).
Also home of :class:`LinkRefused`, which both the attach logic and the position parser raise, and of
:class:`ProtocolError`, which the connection and the attach logic raise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .store import Broker


class LinkRefused(Exception):
    """An attach cannot be honoured; the link is detached with this AMQP error."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition
        self.description = description


class ProtocolError(Exception):
    """The peer broke the protocol; the connection is closed with this condition."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition
        self.description = description


class ServerRole(Protocol):
    """What a connection and its links use of the server that accepted it."""

    broker: Broker
    faults: Any
    connections: set[Any]
    receivers: dict[tuple[str, str, str], set[Any]]  # the consumer links.Link objects per key

    def warn_once(self, key: tuple[str, ...], message: str, *args: Any) -> None: ...


class ConnectionRole(Protocol):
    """What a session and its links use of their connection."""

    server: ServerRole
    closed: bool
    remote_max_frame_size: int

    def write(self, data: bytes) -> None: ...

    def is_congested(self) -> bool: ...

    def block(self, link: Any) -> None: ...


class LinkSetupRole(ConnectionRole, Protocol):
    """What the attach handling (``attach.py``) uses of the connection it sets links up on."""

    broker: Broker

    def session(self, channel: int) -> Any: ...  # the links.Session on that channel

    def grant_credit(self, link: Any, force: bool = False) -> None: ...

    def require_grant(self, link: Any, entity_path: str) -> None: ...


class EmulatorRole(Protocol):
    """What the admin API drives: the running emulator's faults, hubs and retention."""

    faults: Any
    _server: Any
    _broker: Broker | None

    def _hubs_info(self, only: str | None = None) -> list[dict[str, Any]]: ...

    def _grow(self, hub: str, new_count: int) -> list[str]: ...

    def _truncate(self, hub: str, partition: str, before_sequence_number: int) -> int: ...
