"""One client connection: SASL, AMQP framing, sessions, flow, deliveries and token expiry, on asyncio
streams.

What an attach becomes (producer, consumer, $cbs or $management link) is decided in ``attach.py``;
the links themselves live in ``links.py``.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import math
import struct
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from . import frames as F
from . import limits, management
from .attach import LINK_MAX_MESSAGE_SIZE, on_attach
from .auth import Grant, grant_covers
from .codec import AmqpDecodeError, Described, Int, Symbol, UInt, UShort, decode
from .links import Link, Session
from .messages import STATUS_CODE, STATUS_DESCRIPTION, build_message, parse_request, unpack_delivery
from .roles import LinkRefused, ProtocolError, ServerRole

if TYPE_CHECKING:
    from .websocket import WebSocketStream

log = logging.getLogger("eventhubs_emulator")

OUR_MAX_FRAME_SIZE = 1024 * 1024
PRODUCER_CREDIT = 1000
SESSION_WINDOW = 0x7FFFFFFF

_HEADER = struct.Struct(">IBBH")
# What a client may still send on a session after ending it (closing frames, nothing that waits for
# an answer): dropped there, where anything else on a channel without a session is a framing error.
_SESSION_FRAMES = frozenset({F.DETACH, F.FLOW, F.DISPOSITION, F.END})


class HandshakeRefused(Exception):
    """SASL authentication failed; the outcome has been sent and the connection is closed."""


def plain_credentials_match(initial_response: Any, key_name: str, key: str) -> bool:
    """Whether a SASL PLAIN response (``[authzid] NUL authcid NUL passwd``) carries the key name and key."""
    if not isinstance(initial_response, bytes) or initial_response.count(b"\0") != 2:
        return False
    _authzid, authcid, passwd = initial_response.split(b"\0")
    return hmac.compare_digest(authcid, key_name.encode()) and hmac.compare_digest(passwd, key.encode())


class Connection:
    """Serves one client connection (TCP, or a WebSocket) until the client closes it or a fault drops it."""

    def __init__(
        self,
        server: ServerRole,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter | WebSocketStream,
    ) -> None:
        self.server = server
        self.broker = server.broker
        self.reader = reader
        self.writer = writer
        self.sessions: dict[int, Session] = {}
        # Channels whose session the client ended: the SDK may still send a detach there after its
        # end (it does when a partition is taken offline); such late frames are dropped.
        self._ended_channels: set[int] = set()
        self.remote_max_frame_size = 512
        self.grants: list[Grant] = []
        # Producer and consumer links by the entity path their token had to cover: when no token of
        # the connection covers it any more (expired, none put since), the link is detached.
        self._guarded: dict[Link, str] = {}
        self._expiry_timer: asyncio.TimerHandle | None = None
        self.closed = False
        self.amqp_started = False  # the AMQP protocol headers are exchanged (SASL, if any, is over)
        self.opened = False  # our open frame is sent
        self.remote_opened = False  # the client's open frame has arrived
        self._blocked: set[Link] = set()
        self._draining = False
        self._drain_task: asyncio.Future | None = None
        self._heartbeat_task: asyncio.Future | None = None
        self._handshake_deadline: asyncio.Timeout | None = None

    # ------------------------------------------------------------------------------------ plumbing
    def write(self, data: bytes) -> None:
        """Queue bytes on the socket (no-op once closed); past ``limits.SEND_BUFFER_LIMIT`` unsent
        bytes the client is not reading what it asked for, and the connection is dropped."""
        if self.closed:
            return
        self.writer.write(data)
        transport = self.writer.transport
        if transport is not None and transport.get_write_buffer_size() > limits.SEND_BUFFER_LIMIT:
            self._drop_reader(f"more than {limits.SEND_BUFFER_LIMIT} bytes it has not read")

    def is_congested(self) -> bool:
        """Whether the socket's send buffer is above the high-water mark."""
        transport = self.writer.transport
        return transport is not None and transport.get_write_buffer_size() > limits.SEND_HIGH_WATER

    async def drain(self) -> bool:
        """Wait until the client has read enough of what was sent; a client that reads nothing for
        ``limits.SEND_STALL_TIMEOUT`` seconds is dropped. Whether the connection is still up."""
        try:
            if not await limits.wait_until_read(self.writer):
                self._drop_reader(f"nothing read for {limits.SEND_STALL_TIMEOUT:g} s")
                return False
        except (ConnectionError, RuntimeError):
            return False
        return not self.closed

    def _drop_reader(self, why: str) -> None:
        """Abort a connection whose client does not read what the emulator sends it."""
        transport = self.writer.transport
        log.warning(
            "dropped the connection from %s: the client does not read what it asked for (%s; %d bytes "
            "unsent)",
            self.writer.get_extra_info("peername"),
            why,
            transport.get_write_buffer_size() if transport is not None else 0,
        )
        self.abort()

    def block(self, link: Link) -> None:
        """Pause a link until the send buffer drains, then pump it again."""
        self._blocked.add(link)
        if not self._draining:
            self._draining = True
            self._drain_task = asyncio.ensure_future(self._drain_then_resume())

    async def _drain_then_resume(self) -> None:
        try:
            if not await self.drain():
                return
        finally:
            self._draining = False
        blocked, self._blocked = self._blocked, set()
        for link in blocked:
            link.pump()

    def abort(self) -> None:
        """Drop the TCP connection at once (fault injection)."""
        self.closed = True
        transport = self.writer.transport
        if transport is not None:
            transport.abort()

    async def run(self, header: bytes | None = None, deadline: float | None = None) -> None:
        """Serve the connection: handshake, then frames until close.

        ``header`` is the protocol header when the caller already read it (to tell AMQP from HTTP);
        ``deadline`` (the loop's clock) is when the handshake - protocol headers, SASL, the client's
        open - must be over: ``limits.HANDSHAKE_TIMEOUT`` from now unless the caller's clock for the
        connection started earlier.
        """
        if deadline is None:
            deadline = asyncio.get_running_loop().time() + limits.HANDSHAKE_TIMEOUT
        try:
            async with asyncio.timeout_at(deadline) as handshake:
                self._handshake_deadline = handshake
                await self._handshake(header if header is not None else await self.reader.readexactly(8))
                await self._serve_frames()
        except TimeoutError:
            self._fail(
                "amqp:connection:forced",
                f"no open frame within {limits.HANDSHAKE_TIMEOUT:g} s of connecting (the handshake "
                "time-out); the connection is closed",
            )
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError, HandshakeRefused):
            pass
        except ProtocolError as exc:
            self._fail(exc.condition, exc.description)
        except AmqpDecodeError as exc:
            self._fail("amqp:decode-error", f"malformed frame: {exc}")
        except Exception as exc:  # a bug or bad input must not take the server down
            log.exception("connection failed")
            self._end_with_error("amqp:internal-error", f"emulator error: {type(exc).__name__}")
        finally:
            self._cleanup()

    async def _serve_frames(self) -> None:
        """Read and handle the client's frames until the connection closes."""
        while not self.closed:
            header = await self.reader.readexactly(8)
            size, doff, frame_type, channel = _HEADER.unpack(header)
            if size < 8 or size > OUR_MAX_FRAME_SIZE or doff < 2:
                raise ProtocolError("amqp:connection:framing-error", f"invalid frame header (size {size})")
            body = await self.reader.readexactly(size - 8) if size > 8 else b""
            if doff > 2:
                body = body[doff * 4 - 8 :]
            if not body:
                continue  # empty frame = heartbeat
            if frame_type != F.FRAME_AMQP:
                raise ProtocolError("amqp:connection:framing-error", "unexpected SASL frame after SASL")
            if delay := self.server.faults.response_delay():  # the slow-responses fault
                await asyncio.sleep(delay)
            self._handle_frame(channel, body)
            if self.is_congested():  # read no more of the client's frames until it reads ours
                await self.drain()

    def _fail(self, condition: str, description: str) -> None:
        """End the connection for the peer's protocol or decode error, logged in one line."""
        log.warning(
            "closing the connection from %s: %s (%s)",
            self.writer.get_extra_info("peername"),
            description,
            condition,
        )
        self._end_with_error(condition, description)

    def _end_with_error(self, condition: str, description: str) -> None:
        """Close with an AMQP error once the AMQP headers are exchanged; during SASL just drop.

        AMQP allows no frame before the open, so an error found before it goes out after our open.
        """
        if not self.amqp_started or self.closed:
            return
        if not self.opened:
            self._send_open()
        self._close_with_error(condition, description)

    async def _heartbeat(self, interval: float) -> None:
        """Send an empty frame every ``interval`` seconds while nothing else waits to go out: bytes
        still queued reach the client as soon as it reads, so a client that does not read gets no
        more of them."""
        while not self.closed:
            await asyncio.sleep(interval)
            transport = self.writer.transport
            if transport is None or transport.get_write_buffer_size() == 0:
                self.write(F.EMPTY_FRAME)

    def _close_with_error(self, condition: str, description: str) -> None:
        if self.closed:
            return
        self.write(F.frame(0, F.CLOSE, [F.Error.make(condition, description)]))
        self.closed = True

    def _cleanup(self) -> None:
        self.closed = True
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
        self._guarded.clear()
        for session in self.sessions.values():
            for link in session.links.values():
                link.close_local()
        self.sessions.clear()
        try:
            self.writer.close()
        except RuntimeError:
            pass
        self.server.connections.discard(self)

    async def _handshake(self, header: bytes) -> None:
        sasl_done = header == F.SASL_HEADER
        if sasl_done:
            self.writer.write(F.SASL_HEADER + F.sasl_mechanisms(["ANONYMOUS", "PLAIN", "MSSBCBS"]))
            code, fields, _ = await self._read_sasl_frame()
            if code != F.SASL_INIT:
                raise ProtocolError("amqp:connection:framing-error", "expected sasl-init")
            self._sasl_init(str(fields[0]), fields[1])
            self.writer.write(F.sasl_outcome(F.SASL_OK))
            header = await self.reader.readexactly(8)
        if header != F.AMQP_HEADER:
            if sasl_done and header[5:6] == bytes([F.FRAME_SASL]):
                log.warning(
                    "closing the connection from %s: a second SASL frame after the SASL outcome "
                    "(SASL happens once per connection; the AMQP header comes next)",
                    self.writer.get_extra_info("peername"),
                )
            # A protocol header we do not serve: answer the one we do and close (AMQP 1.0 2.2).
            self.writer.write(F.AMQP_HEADER)
            self.closed = True
            raise asyncio.IncompleteReadError(b"", None)
        self.writer.write(F.AMQP_HEADER)
        self.amqp_started = True

    def _sasl_init(self, mechanism: str, initial_response: Any) -> None:
        """Authenticate a sasl-init, or answer sasl-outcome ``auth`` and end the connection.

        ANONYMOUS / MSSBCBS: the client proves itself later with $cbs put-token. PLAIN: the user name and
        password are the shared access key name and key, which then cover the whole namespace (no
        $cbs needed), as on the service.
        """
        if mechanism in ("ANONYMOUS", "MSSBCBS"):
            return
        if mechanism == "PLAIN" and plain_credentials_match(
            initial_response, self.broker.config.key_name, self.broker.config.key
        ):
            self.grants.append(Grant(path="", expires_at=math.inf))
            return
        if mechanism == "PLAIN":
            reason = (
                "SASL PLAIN authentication failed: the user name must be the SharedAccessKeyName and "
                "the password its SharedAccessKey."
            )
        else:
            reason = f"SASL mechanism {mechanism!r} is not supported; use ANONYMOUS (then $cbs) or PLAIN."
        log.warning("refused a connection: %s", reason)
        self.writer.write(F.sasl_outcome(F.SASL_AUTH, reason.encode()))
        raise HandshakeRefused(reason)

    async def _read_sasl_frame(self) -> tuple[int, list, bytes]:
        header = await self.reader.readexactly(8)
        size, doff, _frame_type, _channel = _HEADER.unpack(header)
        if size < 8 or size > 65536 or doff < 2:
            raise ProtocolError("amqp:connection:framing-error", "invalid SASL frame")
        body = await self.reader.readexactly(size - 8)
        body = body[doff * 4 - 8 :]
        return self._performative(body)

    @staticmethod
    def _performative(body: bytes) -> tuple[int, list, bytes]:
        value, pos = decode(body, 0)
        if (
            not isinstance(value, Described)
            or not isinstance(value.value, list)
            or not isinstance(value.descriptor, int)
        ):
            raise ProtocolError("amqp:decode-error", "frame body is not a performative")
        code = int(value.descriptor)
        if code not in F.FIELD_COUNT:
            raise ProtocolError("amqp:decode-error", f"unknown performative 0x{code:02x}")
        if (wrong := F.check_fields(code, value.value)) is not None:
            raise ProtocolError("amqp:invalid-field", wrong)
        return code, F.pad(value.value, code), body[pos:]

    # ------------------------------------------------------------------------------------ dispatch
    def _handle_frame(self, channel: int, body: bytes) -> None:
        code, fields, payload = self._performative(body)
        if not self.remote_opened and code != F.OPEN:
            # AMQP 1.0 2.4.1: the open comes first; the service's stack refuses anything else then
            raise ProtocolError(
                "amqp:illegal-state",
                f"a {F.NAMES[code]} frame before the open: a connection starts with an open frame",
            )
        if code in _SESSION_FRAMES and channel not in self.sessions and channel in self._ended_channels:
            log.debug("dropped a %s on channel %d, whose session the client ended", F.NAMES[code], channel)
            return
        if code == F.TRANSFER:
            self._on_transfer(channel, fields, payload)
        elif code == F.FLOW:
            self._on_flow(channel, fields)
        elif code == F.DISPOSITION:
            pass  # our deliveries are all pre-settled
        elif code == F.OPEN:
            self._on_open(fields)
        elif code == F.BEGIN:
            self._on_begin(channel, fields)
        elif code == F.ATTACH:
            on_attach(self, channel, fields)
        elif code == F.DETACH:
            self._on_detach(channel, fields)
        elif code == F.END:
            self._on_end(channel)
        elif code == F.CLOSE:
            self.write(F.frame(0, F.CLOSE, [None]))
            self.closed = True
        else:
            raise ProtocolError("amqp:connection:framing-error", f"unexpected performative 0x{code:02x}")

    def session(self, channel: int) -> Session:
        """The session on ``channel``; a frame for a channel without one is a framing error."""
        session = self.sessions.get(channel)
        if session is None:
            raise ProtocolError("amqp:connection:framing-error", f"no session on channel {channel}")
        return session

    def _on_open(self, fields: list) -> None:
        if self.remote_opened:
            # As the service's AMQP stack (azure-amqp's state machine: "operation: R:OPEN, state:
            # Opened"): one open per connection; a second one ends it.
            raise ProtocolError(
                "amqp:illegal-state",
                "operation: R:OPEN, state: Opened - a second open frame on the connection; "
                "a connection is opened once",
            )
        self.remote_opened = True
        if self._handshake_deadline is not None:  # the handshake is over: no deadline any more
            self._handshake_deadline.reschedule(None)
        self.remote_max_frame_size = max(512, int(fields[2])) if fields[2] is not None else 0xFFFFFFFF
        if fields[4]:  # the client's idle time-out (ms): send empty frames at half of it
            idle_ms = int(fields[4])
            if idle_ms < limits.MIN_IDLE_TIMEOUT_MS:
                self.server.warn_once(
                    ("idle-time-out", str(idle_ms)),
                    "a client asked for an idle time-out of %d ms; raised to the emulator's floor of "
                    "%d ms (the service refuses an open below it with amqp:not-allowed)",
                    idle_ms,
                    limits.MIN_IDLE_TIMEOUT_MS,
                )
                idle_ms = limits.MIN_IDLE_TIMEOUT_MS
            self._heartbeat_task = asyncio.ensure_future(self._heartbeat(idle_ms / 2000))
        self._send_open()

    def _send_open(self) -> None:
        """Send our open frame."""
        self.write(
            F.frame(
                0,
                F.OPEN,
                [
                    f"eventhubs-emulator-{id(self.server):x}",
                    None,
                    UInt(OUR_MAX_FRAME_SIZE),
                    _ushort(65535),
                    None,
                    None,
                    None,
                    None,
                    None,
                    {Symbol("product"): "eventhubs-emulator"},
                ],
            )
        )
        self.opened = True

    def _on_begin(self, channel: int, fields: list) -> None:
        if channel in self.sessions:
            # A second session on a channel in use would orphan the first one's links (and their
            # receivers' places under the 5-per-partition limit). The service's AMQP stack refuses it
            # when it maps the remote channel (azure-amqp HandleTable.Add: amqp:session:handle-in-use)
            # and closes the connection with that error.
            raise ProtocolError(
                "amqp:session:handle-in-use",
                f"begin on channel {channel}, which a session already uses: The handle '{channel}' "
                "is already associated with a session",
            )
        session = Session(self, channel, int(fields[1] or 0))
        self.sessions[channel] = session
        self._ended_channels.discard(channel)
        self.write(
            F.frame(
                channel,
                F.BEGIN,
                [
                    _ushort(channel),
                    UInt(0),
                    UInt(SESSION_WINDOW),
                    UInt(SESSION_WINDOW),
                    UInt(0xFFFFFFFF),
                    None,
                    None,
                    None,
                ],
            )
        )

    def _on_end(self, channel: int) -> None:
        session = self.sessions.pop(channel, None)
        self._ended_channels.add(channel)
        if session is not None:
            for link in session.links.values():
                link.close_local()
        self.write(F.frame(channel, F.END, [None]))

    # ------------------------------------------------------------------------------- tokens/expiry
    def _largest_event_limit(self) -> int:
        return max(self.broker.max_event_size(h) for h in self.broker.hubs.values())

    def _authorized(self, entity_path: str) -> bool:
        """Whether a valid $cbs token of this connection covers ``entity_path``."""
        now = time.time()
        return any(g.expires_at > now and grant_covers(g.path, entity_path) for g in self.grants)

    def require_grant(self, link: Link, entity_path: str) -> None:
        """Guard ``link`` by the token covering ``entity_path``, or refuse it (no such token)."""
        if self._authorized(entity_path):
            self._guarded[link] = entity_path
            self._schedule_expiry_check()
            return
        raise LinkRefused(
            "amqp:unauthorized-access",
            f"Unauthorized access to '{entity_path}': put a valid token on $cbs for this entity first.",
        )

    def _schedule_expiry_check(self) -> None:
        """Run :meth:`_detach_expired` when the first token that now matters expires."""
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
            self._expiry_timer = None
        now = time.time()
        ends = [g.expires_at for g in self.grants if now < g.expires_at < math.inf]
        if self._guarded and ends:
            loop = asyncio.get_running_loop()
            self._expiry_timer = loop.call_later(min(ends) - now + 0.01, self._detach_expired)

    def _log_renewal(self, grant: Grant) -> None:
        """Log (INFO, one line) a put-token that renews the token of open consumer / producer links:
        links attached under an earlier token that the new one covers. A connection's first token for
        an entity, put before its links attach, is no renewal and is not logged; nor is the token."""
        kinds: dict[str, int] = {}
        hubs: set[str] = set()
        for link, path in self._guarded.items():
            if not link.closed and grant_covers(grant.path, path):
                kinds[link.kind] = kinds.get(link.kind, 0) + 1
                hubs.add(link.hub.name if link.hub is not None else path.split("/", 1)[0])
        if not kinds:
            return
        expiry = (
            "does not expire"
            if math.isinf(grant.expires_at)
            else "expires at " + datetime.fromtimestamp(grant.expires_at, UTC).isoformat(timespec="seconds")
        )
        log.info(
            "token renewed for open %s links of event %s %s on the connection from %s; the new token %s",
            " and ".join(f"{kind} ({count})" for kind, count in sorted(kinds.items())),
            "hub" if len(hubs) == 1 else "hubs",
            ", ".join(repr(h) for h in sorted(hubs)),
            self.writer.get_extra_info("peername"),
            expiry,
        )

    def _detach_expired(self) -> None:
        """Detach every link whose entity no unexpired token covers any more, as the service does
        when a token lapses without a new put-token (the client must refresh before expiry)."""
        self._expiry_timer = None
        for link, path in list(self._guarded.items()):
            if link.closed:
                del self._guarded[link]
            elif not self._authorized(path):
                del self._guarded[link]
                log.info("detached %s link %r: its token expired", link.kind, link.name)
                link.detach(
                    "amqp:unauthorized-access",
                    f"ExpiredToken: The token is expired and no new token was put on $cbs for '{path}'; "
                    "the link is closed.",
                )
        now = time.time()
        self.grants = [g for g in self.grants if g.expires_at > now]
        self._schedule_expiry_check()

    # ----------------------------------------------------------------------------------- flow/detach
    def grant_credit(self, link: Link, force: bool = False) -> None:
        """Top up a client sender's credit when it falls below half."""
        remaining = link.granted_until - link.received
        if not force and remaining > PRODUCER_CREDIT // 2:
            return
        link.granted_until = link.received + PRODUCER_CREDIT
        self._send_link_flow(link, link.received & 0xFFFFFFFF, PRODUCER_CREDIT, drain=False)

    def _send_link_flow(self, link: Link, delivery_count: int, credit: int, drain: bool) -> None:
        """A flow frame for ``link``: its session's windows, the delivery count and the credit."""
        session = link.session
        self.write(
            F.frame(
                session.channel,
                F.FLOW,
                [
                    UInt(session.next_incoming_id & 0xFFFFFFFF),
                    UInt(SESSION_WINDOW),
                    UInt(session.next_outgoing_id),
                    UInt(SESSION_WINDOW),
                    UInt(link.handle),
                    UInt(delivery_count),
                    UInt(credit),
                    None,
                    drain,
                    False,
                    None,
                ],
            )
        )

    def _on_flow(self, channel: int, fields: list) -> None:
        session = self.session(channel)
        handle = fields[4]
        if handle is None:
            return
        link = session.links.get(int(handle))
        if link is None or link.closed or link.client_sends:
            return
        client_count = fields[5] if fields[5] is not None else 0
        credit = int(fields[6] or 0)
        link.credit = (int(client_count) + credit - link.delivery_count) & 0xFFFFFFFF
        if link.credit > 0x7FFFFFFF:  # wrapped negative
            link.credit = 0
        if link.kind == "consumer":
            link.pump()
        else:
            link.flush_pending()
        if fields[8] and link.credit > 0:  # drain: use up the remaining credit
            link.delivery_count = (link.delivery_count + link.credit) & 0xFFFFFFFF
            link.credit = 0
            self._send_link_flow(link, link.delivery_count, 0, drain=True)

    def _on_detach(self, channel: int, fields: list) -> None:
        session = self.session(channel)
        handle = int(fields[0])
        link = session.links.pop(handle, None)
        if link is None:
            return
        if link.closed:
            return  # the client answers our detach
        log.debug("client detached %s link %r handle %d", link.kind, link.name, handle)
        link.close_local()
        self.write(F.frame(channel, F.DETACH, [UInt(handle), bool(fields[1]), None]))

    # ------------------------------------------------------------------------------------- transfers
    def _on_transfer(self, channel: int, fields: list, payload: bytes) -> None:
        session = self.session(channel)
        link = session.links.get(int(fields[0]))
        if link is None:
            raise ProtocolError(
                "amqp:session:unattached-handle", f"transfer on unattached handle {fields[0]}"
            )
        if link.closed or not link.client_sends:
            return
        if fields[9]:  # aborted
            link.partial = bytearray()
            link.partial_meta = None
            return
        if link.partial_meta is None:
            link.partial_meta = (fields[1], fields[3], bool(fields[4]))
        if fields[5]:  # more
            link.partial += payload
            if len(link.partial) > 2 * LINK_MAX_MESSAGE_SIZE + self._largest_event_limit():
                raise ProtocolError("amqp:link:message-size-exceeded", "delivery too large")
            return
        if link.partial:
            link.partial += payload
            payload = bytes(link.partial)
            link.partial = bytearray()
        delivery_id, message_format, settled = link.partial_meta
        link.partial_meta = None
        session.next_incoming_id += 1
        link.received += 1
        state = self._deliver(link, payload, message_format)
        if not settled and delivery_id is not None:
            self.write(
                F.frame(
                    channel, F.DISPOSITION, [True, UInt(delivery_id), UInt(delivery_id), True, state, None]
                )
            )
        self.grant_credit(link)

    def _deliver(self, link: Link, payload: bytes, message_format: int | None) -> Described:
        """Handle one complete delivery from the client; return its outcome."""
        if link.kind == "producer":
            return self._on_events(link, payload, message_format)
        try:
            message_id, props, body = parse_request(payload)
        except AmqpDecodeError as exc:
            return _rejected("amqp:decode-error", f"malformed request message: {exc}")
        if link.kind == "cbs":
            status, description, grant = management.put_token(self.broker, props, body)
            if status == 404:
                self.server.warn_once(("put-token", description), "refused a $cbs token: %s", description)
            if grant is not None:
                now = time.time()
                self.grants = [g for g in self.grants if g.expires_at > now] + [grant]
                self._schedule_expiry_check()
                self._log_renewal(grant)
            reply_props = {STATUS_CODE: Int(status), STATUS_DESCRIPTION: description}
            reply = build_message(None, reply_props, message_id)
        else:
            status, description, value = management.read(self.broker, props, self._authorized)
            reply_props = {
                STATUS_CODE: Int(status),
                STATUS_DESCRIPTION: description,
                "statusDescription": description,
            }
            reply = build_message(value, reply_props, message_id)
        reply_link = link.session.reply_link(link.kind)
        if reply_link is not None:
            reply_link.send_message(reply)
        return _accepted()

    def _on_events(self, link: Link, payload: bytes, message_format: int | None) -> Described:
        hub = link.hub
        assert hub is not None
        try:
            events, partition_key = unpack_delivery(payload, message_format)
        except AmqpDecodeError as exc:
            return _rejected("amqp:decode-error", f"malformed event message: {exc}")
        if not events:
            return _accepted()
        if self.server.faults.throttling():
            return _rejected(SERVER_BUSY, SERVER_BUSY_DESCRIPTION)
        limit = self.broker.max_event_size(hub)
        for event in events:
            if len(event) > limit:
                return _rejected(
                    "amqp:link:message-size-exceeded",
                    f"The received message (size {len(event)} bytes) exceeds the limit ({limit} bytes) "
                    f"currently allowed on the link.",
                )
        if link.partition_id is not None:
            target = hub.partitions[link.partition_id]
        else:
            target = hub.route(partition_key)
        target.append(events, partition_key)
        return _accepted()


#: What the service answers a send past the namespace's ingress quota (throttled).
SERVER_BUSY = "com.microsoft:server-busy"
SERVER_BUSY_DESCRIPTION = (
    "The request was terminated because the entity is being throttled. Error code : 50002. "
    "Sub error : 102. Please wait 4 seconds and try again."
)


def _accepted() -> Described:
    return Described(F.ACCEPTED, [])


def _rejected(condition: str, description: str) -> Described:
    return Described(F.REJECTED, [F.Error.make(condition, description)])


def _ushort(value: int) -> UShort:
    return UShort(value)
