"""One client connection: SASL, AMQP framing, sessions and links, driven by asyncio streams.

Link kinds, by the node the client attaches to:

- ``$cbs`` / ``$management``: request/response pairs (the response goes to the client's receiver link
  on the same node and session, with correlation-id = request message-id);
- ``<hub>`` or ``<hub>/Partitions/<id>`` with the client sending: a producer;
- ``<hub>/ConsumerGroups/<cg>/Partitions/<id>`` with the client receiving: a consumer, fed with
  pre-settled transfers as long as it has link credit.
"""

from __future__ import annotations

import asyncio
import logging
import re
import struct
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from . import frames as F
from .auth import Grant, TokenError, audience_path, grant_covers, verify_sas_token
from .codec import AmqpDecodeError, Described, Symbol, Timestamp, UByte, UInt, ULong, decode, encode
from .messages import build_message, parse_request, unpack_delivery
from .store import Hub, PartitionLog, now_ms

if TYPE_CHECKING:
    from .server import EmulatorServer

log = logging.getLogger("eventhubs_emulator")

OUR_MAX_FRAME_SIZE = 1024 * 1024
LINK_MAX_MESSAGE_SIZE = 1024 * 1024
PRODUCER_CREDIT = 1000
HIGH_WATER = 4 * 1024 * 1024
SESSION_WINDOW = 0x7FFFFFFF

EPOCH = Symbol("com.microsoft:epoch")
RUNTIME_METRIC = "com.microsoft:enable-receiver-runtime-metric"
SELECTOR_FILTER = "apache.org:selector-filter:string"
_SELECTOR = re.compile(
    r"amqp\.annotation\.x-opt-(offset|sequence-number|enqueued-time)\s*(>=|>|=)\s*'([^']*)'", re.IGNORECASE
)
_HEADER = struct.Struct(">IBBH")


class ProtocolError(Exception):
    """The peer broke the protocol; the connection is closed with this condition."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition
        self.description = description


class LinkRefused(Exception):
    """An attach cannot be honoured; the link is detached with this AMQP error."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition
        self.description = description


class Link:
    """One attached link and its delivery state."""

    def __init__(self, session: Session, name: str, handle: int, client_sends: bool, kind: str) -> None:
        self.session = session
        self.name = name
        self.handle = handle
        self.client_sends = client_sends
        self.kind = kind  # "cbs", "management", "producer", "consumer"
        self.closed = False
        # we send (client receives)
        self.delivery_count = 0
        self.credit = 0
        self.pending: deque[bytes] = deque()
        # we receive (client sends)
        self.received = 0
        self.granted_until = 0
        self.partial = bytearray()
        self.partial_meta: tuple[int | None, int | None, bool] | None = None
        # producer / consumer
        self.hub: Hub | None = None
        self.partition_id: str | None = None
        self.consumer_group: str | None = None
        self.log: PartitionLog | None = None
        self.next_seq = 0
        self.epoch: int | None = None
        self.metrics = False
        self._delayed = False

    @property
    def connection(self) -> Connection:
        """The connection this link belongs to."""
        return self.session.connection

    def registry_key(self) -> tuple[str, str, str]:
        """(hub, consumer group, partition) in lower case: the receivers that compete for owner level."""
        assert self.hub is not None and self.consumer_group is not None and self.partition_id is not None
        return (self.hub.name.lower(), self.consumer_group.lower(), self.partition_id)

    # ------------------------------------------------------------------------------ sending to client
    def pump(self, after_delay: bool = False) -> None:
        """Send retained events from ``next_seq`` on, while the client has credit (consumer links).

        With the delay-deliveries fault on, events wait that long before going out (``after_delay``
        is set when the held-back pump finally runs).
        """
        if after_delay:
            self._delayed = False
        if self.closed or self.credit <= 0 or self.log is None or self._delayed:
            return
        conn = self.connection
        if conn.closed:
            return
        delay = conn.server.faults.delivery_delay()
        if delay > 0 and not after_delay:
            if self.next_seq - self.log.begin_seq < len(self.log.events):
                self._delayed = True
                asyncio.get_running_loop().call_later(delay, self.pump, True)
            return
        if conn.is_congested():
            conn.block(self)
            return
        events = self.log.events
        begin = self.log.begin_seq
        if self.next_seq < begin:
            self.next_seq = begin
        idx = self.next_seq - begin
        count = min(self.credit, len(events) - idx, 2000)
        if count <= 0:
            return
        session = self.session
        max_frame = conn.remote_max_frame_size
        out: list[bytes] = []
        metrics = None
        if self.metrics:
            metrics = _runtime_metrics(self.log)
        for i in range(idx, idx + count):
            seq, _offset, _enq, payload, hlen = events[i]
            if metrics is not None:
                payload = payload[:hlen] + metrics + payload[hlen:]
            did = session.next_outgoing_id
            session.next_outgoing_id = (did + 1) & 0xFFFFFFFF
            if len(payload) + F.TRANSFER_OVERHEAD <= max_frame:
                out.append(F.transfer_frames(session.channel, self.handle, did, seq, payload, max_frame)[0])
            else:
                out.extend(F.transfer_frames(session.channel, self.handle, did, seq, payload, max_frame))
        self.next_seq += count
        self.credit -= count
        self.delivery_count = (self.delivery_count + count) & 0xFFFFFFFF
        conn.write(b"".join(out))
        if self.credit > 0 and self.next_seq - self.log.begin_seq < len(self.log.events):
            asyncio.get_running_loop().call_soon(self.pump)

    def send_message(self, payload: bytes) -> None:
        """Queue a settled message (management / CBS reply) and send it when credit allows."""
        self.pending.append(payload)
        self.flush_pending()

    def flush_pending(self) -> None:
        """Send queued replies while there is credit."""
        conn = self.connection
        while self.pending and self.credit > 0 and not self.closed:
            payload = self.pending.popleft()
            did = self.session.next_outgoing_id
            self.session.next_outgoing_id = (did + 1) & 0xFFFFFFFF
            for f in F.transfer_frames(
                self.session.channel,
                self.handle,
                did,
                self.delivery_count,
                payload,
                conn.remote_max_frame_size,
            ):
                conn.write(f)
            self.credit -= 1
            self.delivery_count = (self.delivery_count + 1) & 0xFFFFFFFF

    def detach(self, condition: str | None = None, description: str | None = None) -> None:
        """Close the link from our side (with an AMQP error when given)."""
        if self.closed:
            return
        self.close_local()
        error = F.Error.make(condition, description) if condition else None
        self.connection.write(F.frame(self.session.channel, F.DETACH, [UInt(self.handle), True, error]))

    def close_local(self) -> None:
        """Forget the link: stop deliveries and leave the owner-level registry."""
        if self.closed:
            return
        self.closed = True
        if self.log is not None:
            self.log.listeners.discard(self.pump)
        if self.kind == "consumer" and None not in (self.hub, self.consumer_group, self.partition_id):
            self.connection.server.receivers.get(self.registry_key(), set()).discard(self)


def _runtime_metrics(log_: PartitionLog) -> bytes:
    last = log_.last_event()
    values = {
        Symbol("last_enqueued_sequence_number"): log_.next_seq - 1,
        Symbol("last_enqueued_offset"): str(log_.last_enqueued_offset()),
        Symbol("last_enqueued_time_utc"): Timestamp(last[2] if last else log_.last_enqueued_ms),
        Symbol("runtime_info_retrieval_time_utc"): Timestamp(now_ms()),
    }
    return encode(Described(0x71, values))


class Session:
    """One AMQP session: its links by handle and its delivery counters."""

    def __init__(self, connection: Connection, channel: int, next_incoming_id: int) -> None:
        self.connection = connection
        self.channel = channel
        self.next_outgoing_id = 0
        self.next_incoming_id = next_incoming_id
        self.links: dict[int, Link] = {}

    def reply_link(self, node: str) -> Link | None:
        """The client's receiver link on ``node`` ($cbs / $management) in this session."""
        for link in self.links.values():
            if link.kind == node and not link.client_sends and not link.closed:
                return link
        return None


class Connection:
    """Serves one TCP connection until the client closes it or a fault drops it."""

    def __init__(
        self, server: EmulatorServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.server = server
        self.broker = server.broker
        self.reader = reader
        self.writer = writer
        self.sessions: dict[int, Session] = {}
        self.remote_max_frame_size = 512
        self.grants: list[Grant] = []
        self.closed = False
        self._blocked: set[Link] = set()
        self._draining = False
        self._drain_task: asyncio.Future | None = None
        self._heartbeat_task: asyncio.Future | None = None

    # ------------------------------------------------------------------------------------ plumbing
    def write(self, data: bytes) -> None:
        """Queue bytes on the socket (no-op once closed)."""
        if not self.closed:
            self.writer.write(data)

    def is_congested(self) -> bool:
        """Whether the socket's send buffer is above the high-water mark."""
        transport = self.writer.transport
        return transport is not None and transport.get_write_buffer_size() > HIGH_WATER

    def block(self, link: Link) -> None:
        """Pause a link until the send buffer drains, then pump it again."""
        self._blocked.add(link)
        if not self._draining:
            self._draining = True
            self._drain_task = asyncio.ensure_future(self._drain_then_resume())

    async def _drain_then_resume(self) -> None:
        try:
            await self.writer.drain()
        except (ConnectionError, RuntimeError):
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

    async def run(self) -> None:
        """Serve the connection: handshake, then frames until close."""
        try:
            await self._handshake()
            while not self.closed:
                header = await self.reader.readexactly(8)
                size, doff, frame_type, channel = _HEADER.unpack(header)
                if size < 8 or size > OUR_MAX_FRAME_SIZE or doff < 2:
                    raise ProtocolError(
                        "amqp:connection:framing-error", f"invalid frame header (size {size})"
                    )
                body = await self.reader.readexactly(size - 8) if size > 8 else b""
                if doff > 2:
                    body = body[doff * 4 - 8 :]
                if not body:
                    continue  # empty frame = heartbeat
                if frame_type != F.FRAME_AMQP:
                    raise ProtocolError("amqp:connection:framing-error", "unexpected SASL frame after SASL")
                self._handle_frame(channel, body)
                if self.is_congested():
                    await self.writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        except ProtocolError as exc:
            self._close_with_error(exc.condition, exc.description)
        except AmqpDecodeError as exc:
            self._close_with_error("amqp:decode-error", f"malformed frame: {exc}")
        except Exception as exc:  # a bug or bad input must not take the server down
            log.exception("connection failed")
            self._close_with_error("amqp:internal-error", f"emulator error: {type(exc).__name__}")
        finally:
            self._cleanup()

    async def _heartbeat(self, interval: float) -> None:
        while not self.closed:
            await asyncio.sleep(interval)
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
        for session in self.sessions.values():
            for link in session.links.values():
                link.close_local()
        self.sessions.clear()
        try:
            self.writer.close()
        except RuntimeError:
            pass
        self.server.connections.discard(self)

    async def _handshake(self) -> None:
        header = await self.reader.readexactly(8)
        if header == F.SASL_HEADER:
            self.writer.write(F.SASL_HEADER + F.sasl_mechanisms(["ANONYMOUS", "PLAIN", "MSSBCBS"]))
            code, _fields, _ = await self._read_sasl_frame()
            if code != F.SASL_INIT:
                raise ProtocolError("amqp:connection:framing-error", "expected sasl-init")
            self.writer.write(F.sasl_outcome(0))
            header = await self.reader.readexactly(8)
        if header != F.AMQP_HEADER:
            self.writer.write(F.AMQP_HEADER)
            self.closed = True
            raise asyncio.IncompleteReadError(b"", None)
        self.writer.write(F.AMQP_HEADER)

    async def _read_sasl_frame(self) -> tuple[int, list, bytes]:
        header = await self.reader.readexactly(8)
        size, doff, _frame_type, _channel = _HEADER.unpack(header)
        if size < 8 or size > 65536:
            raise ProtocolError("amqp:connection:framing-error", "invalid SASL frame")
        body = await self.reader.readexactly(size - 8)
        body = body[doff * 4 - 8 :]
        return self._performative(body)

    @staticmethod
    def _performative(body: bytes) -> tuple[int, list, bytes]:
        value, pos = decode(body, 0)
        if not isinstance(value, Described) or not isinstance(value.value, list):
            raise ProtocolError("amqp:decode-error", "frame body is not a performative")
        code = int(value.descriptor)
        if code not in F.FIELD_COUNT:
            raise ProtocolError("amqp:decode-error", f"unknown performative 0x{code:02x}")
        return code, F.pad(value.value, code), body[pos:]

    # ------------------------------------------------------------------------------------ dispatch
    def _handle_frame(self, channel: int, body: bytes) -> None:
        code, fields, payload = self._performative(body)
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
            self._on_attach(channel, fields)
        elif code == F.DETACH:
            self._on_detach(channel, fields)
        elif code == F.END:
            self._on_end(channel)
        elif code == F.CLOSE:
            self.write(F.frame(0, F.CLOSE, [None]))
            self.closed = True
        else:
            raise ProtocolError("amqp:connection:framing-error", f"unexpected performative 0x{code:02x}")

    def _session(self, channel: int) -> Session:
        session = self.sessions.get(channel)
        if session is None:
            raise ProtocolError("amqp:connection:framing-error", f"no session on channel {channel}")
        return session

    def _on_open(self, fields: list) -> None:
        self.remote_max_frame_size = max(512, int(fields[2])) if fields[2] is not None else 0xFFFFFFFF
        if fields[4]:  # the client's idle timeout (ms): send empty frames at half that interval
            self._heartbeat_task = asyncio.ensure_future(self._heartbeat(max(int(fields[4]) / 2000, 0.05)))
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

    def _on_begin(self, channel: int, fields: list) -> None:
        session = Session(self, channel, int(fields[1] or 0))
        self.sessions[channel] = session
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
        if session is not None:
            for link in session.links.values():
                link.close_local()
        self.write(F.frame(channel, F.END, [None]))

    # --------------------------------------------------------------------------------------- attach
    def _on_attach(self, channel: int, fields: list) -> None:
        session = self._session(channel)
        name = fields[F.ATTACH_NAME]
        handle = int(fields[F.ATTACH_HANDLE])
        client_sends = not fields[F.ATTACH_ROLE]  # role false = sender
        source = fields[F.ATTACH_SOURCE]
        target = fields[F.ATTACH_TARGET]
        node_term = target if client_sends else source
        address = _address(node_term)
        kind = "producer" if client_sends else "consumer"
        node = address.strip("/").lower()
        if node in ("$cbs", "$management"):
            kind = node[1:]
            kind = "cbs" if kind == "cbs" else "management"
        link = Link(session, str(name), handle, client_sends, kind)
        if client_sends:
            link.received = int(fields[F.ATTACH_INITIAL_DELIVERY_COUNT] or 0)
        session.links[handle] = link
        refusal: LinkRefused | None = None
        try:
            if kind == "producer":
                self._setup_producer(link, address)
            elif kind == "consumer":
                self._setup_consumer(link, address, source, fields)
        except LinkRefused as exc:
            refusal = exc
        if source is None:
            source = Described(F.SOURCE, [address if not client_sends else name] + [None] * 10)
        if target is None:
            target = Described(F.TARGET, [address if client_sends else name] + [None] * 6)
        max_size = None
        if kind == "producer":
            # The link limit bounds a whole batch (as on the service: 1 MiB); each event is checked
            # against the hub's max event size when it arrives.
            hub_limit = self.broker.max_event_size(link.hub) if link.hub is not None else 0
            big_events = hub_limit > LINK_MAX_MESSAGE_SIZE
            max_size = ULong(hub_limit + 64 * 1024 if big_events else LINK_MAX_MESSAGE_SIZE)
        reply = [
            name,
            UInt(handle),
            client_sends,  # our role: receiver (true) when the client sends
            _ubyte(fields[3]),
            _ubyte(fields[4]),
            source,
            target,
            None,
            False,
            None if client_sends else UInt(0),
            max_size,
            None,
            None,
            None,
        ]
        self.write(F.frame(channel, F.ATTACH, reply))
        if refusal is not None:
            link.detach(refusal.condition, refusal.description)
            return
        if client_sends:
            self._grant_credit(link, force=True)
        elif kind == "consumer":
            assert link.log is not None
            link.log.listeners.add(link.pump)

    def _largest_event_limit(self) -> int:
        return max(self.broker.max_event_size(h) for h in self.broker.hubs.values())

    def _entity_path(self, *parts: str) -> str:
        return "/".join(p.lower() for p in parts)

    def _require_grant(self, entity_path: str) -> None:
        now = time.time()
        for grant in self.grants:
            if grant.expires_at > now and grant_covers(grant.path, entity_path):
                return
        raise LinkRefused(
            "amqp:unauthorized-access",
            f"Unauthorized access to '{entity_path}': put a valid token on $cbs for this entity first.",
        )

    def _setup_producer(self, link: Link, address: str) -> None:
        parts = [p for p in address.split("/") if p]
        hub = self.broker.hub(parts[0]) if parts else None
        if hub is None:
            raise LinkRefused(
                "amqp:not-found", f"The messaging entity '{parts[0] if parts else ''}' could not be found."
            )
        link.hub = hub
        if len(parts) == 3 and parts[1].lower() == "partitions":
            if parts[2] not in hub.partitions:
                raise LinkRefused(
                    "amqp:not-found", f"Partition '{parts[2]}' does not exist in event hub '{hub.name}'."
                )
            link.partition_id = parts[2]
        elif len(parts) != 1:
            raise LinkRefused("amqp:not-found", f"'{address}' is not an event hub or partition address.")
        self._require_grant(self._entity_path(hub.name))

    def _setup_consumer(self, link: Link, address: str, source: Any, fields: list) -> None:
        parts = [p for p in address.split("/") if p]
        if len(parts) != 5 or parts[1].lower() != "consumergroups" or parts[3].lower() != "partitions":
            raise LinkRefused(
                "amqp:not-found",
                f"'{address}' is not a consumer address (<hub>/ConsumerGroups/<group>/Partitions/<id>).",
            )
        hub = self.broker.hub(parts[0])
        if hub is None:
            raise LinkRefused("amqp:not-found", f"The messaging entity '{parts[0]}' could not be found.")
        link.hub = hub
        group = hub.consumer_groups.get(parts[2].lower())
        if group is None:
            raise LinkRefused(
                "amqp:not-found", f"The consumer group '{parts[2]}' does not exist in event hub '{hub.name}'."
            )
        link.consumer_group = group
        if parts[4] not in hub.partitions:
            raise LinkRefused(
                "amqp:not-found", f"Partition '{parts[4]}' does not exist in event hub '{hub.name}'."
            )
        link.partition_id = parts[4]
        self._require_grant(self._entity_path(hub.name, "consumergroups", group, "partitions", parts[4]))
        log_ = hub.partitions[parts[4]]
        link.log = log_
        link.next_seq = _start_position(log_, source)
        props = fields[F.ATTACH_PROPERTIES]
        if isinstance(props, dict) and props.get(EPOCH) is not None:
            link.epoch = int(props[EPOCH])
        caps = fields[F.ATTACH_DESIRED_CAPABILITIES]
        if isinstance(caps, str):
            caps = [caps]
        link.metrics = bool(caps) and RUNTIME_METRIC in [str(c) for c in caps]
        self._claim_ownership(link)

    def _claim_ownership(self, link: Link) -> None:
        registry = self.server.receivers.setdefault(link.registry_key(), set())
        existing = [other for other in registry if not other.closed]
        if link.epoch is None:
            owners = [o for o in existing if o.epoch is not None]
            if owners:
                raise LinkRefused(
                    "amqp:link:stolen",
                    f"Receiver with owner level '{owners[0].epoch}' already exists on partition "
                    f"'{link.partition_id}'; a receiver without owner level cannot be created.",
                )
        else:
            higher = [o for o in existing if o.epoch is not None and o.epoch > link.epoch]
            if higher:
                raise LinkRefused(
                    "amqp:link:stolen",
                    f"Receiver with a higher owner level '{higher[0].epoch}' already exists on partition "
                    f"'{link.partition_id}'; owner level '{link.epoch}' is refused.",
                )
            for other in existing:
                other.detach(
                    "amqp:link:stolen",
                    f"New receiver with owner level '{link.epoch}' was created on partition "
                    f"'{link.partition_id}'; this receiver was disconnected.",
                )
        registry.add(link)

    # ----------------------------------------------------------------------------------- flow/detach
    def _grant_credit(self, link: Link, force: bool = False) -> None:
        """Top up a client sender's credit when it falls below half."""
        remaining = link.granted_until - link.received
        if not force and remaining > PRODUCER_CREDIT // 2:
            return
        link.granted_until = link.received + PRODUCER_CREDIT
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
                    UInt(link.received & 0xFFFFFFFF),
                    UInt(PRODUCER_CREDIT),
                    None,
                    False,
                    False,
                    None,
                ],
            )
        )

    def _on_flow(self, channel: int, fields: list) -> None:
        session = self._session(channel)
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
            self.write(
                F.frame(
                    channel,
                    F.FLOW,
                    [
                        UInt(session.next_incoming_id & 0xFFFFFFFF),
                        UInt(SESSION_WINDOW),
                        UInt(session.next_outgoing_id),
                        UInt(SESSION_WINDOW),
                        UInt(link.handle),
                        UInt(link.delivery_count),
                        UInt(0),
                        None,
                        True,
                        False,
                        None,
                    ],
                )
            )

    def _on_detach(self, channel: int, fields: list) -> None:
        session = self._session(channel)
        handle = int(fields[0])
        link = session.links.pop(handle, None)
        if link is None:
            return
        if link.closed:
            return  # the client answers our detach
        link.close_local()
        self.write(F.frame(channel, F.DETACH, [UInt(handle), bool(fields[1]), None]))

    # ------------------------------------------------------------------------------------- transfers
    def _on_transfer(self, channel: int, fields: list, payload: bytes) -> None:
        session = self._session(channel)
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
        self._grant_credit(link)

    def _deliver(self, link: Link, payload: bytes, message_format: int | None) -> Described:
        """Handle one complete delivery from the client; return its outcome."""
        if link.kind == "producer":
            return self._on_events(link, payload, message_format)
        try:
            message_id, props, body = parse_request(payload)
        except AmqpDecodeError as exc:
            return _rejected("amqp:decode-error", f"malformed request message: {exc}")
        if link.kind == "cbs":
            status, description = self._put_token(props, body)
            reply_props = {"status-code": status, "status-description": description}
            reply = build_message(None, reply_props, message_id)
        else:
            status, description, value = self._management(props)
            reply_props = {
                "status-code": status,
                "status-description": description,
                "statusDescription": description,
            }
            reply = build_message(value, reply_props, message_id)
        reply_link = link.session.reply_link(link.kind)
        if reply_link is not None:
            reply_link.send_message(reply)
        return _accepted()

    def _put_token(self, props: dict, token: Any) -> tuple[int, str]:
        if props.get("operation") != "put-token":
            return 400, f"Unsupported $cbs operation {props.get('operation')!r}; only put-token is supported."
        try:
            grant = verify_sas_token(str(token), self.broker.config.key_name, self.broker.config.key)
        except TokenError as exc:
            return 401, f"InvalidSignature: {exc}."
        name = props.get("name")
        if isinstance(name, str) and audience_path(name) != grant.path:
            return 401, "InvalidAudience: the token's audience does not match the 'name' of the request."
        now = time.time()
        self.grants = [g for g in self.grants if g.expires_at > now] + [grant]
        return 202, "Accepted"

    def _management(self, props: dict) -> tuple[int, str, Any]:
        name = props.get("name")
        token = props.get("security_token")
        if props.get("operation") != "READ":
            return (
                400,
                f"Unsupported $management operation {props.get('operation')!r}; only READ is supported.",
                None,
            )
        if not isinstance(name, str):
            return 400, "The request has no 'name' (event hub name).", None
        hub = self.broker.hub(name)
        if hub is None:
            return 404, f"The messaging entity '{name}' could not be found.", None
        try:
            if token is not None:
                grant = verify_sas_token(str(token), self.broker.config.key_name, self.broker.config.key)
                if not grant_covers(grant.path, hub.name.lower()):
                    raise TokenError("the token's audience does not cover this event hub")
            else:
                self._require_grant(hub.name.lower())
        except (TokenError, LinkRefused) as exc:
            return 401, f"Unauthorized: {exc}", None
        kind = props.get("type")
        if kind == "com.microsoft:eventhub":
            return (
                200,
                "OK",
                {
                    "name": hub.name,
                    "type": "com.microsoft:eventhub",
                    "created_at": Timestamp(hub.created_ms),
                    "partition_count": len(hub.partitions),
                    "partition_ids": hub.partition_ids(),
                },
            )
        if kind == "com.microsoft:partition":
            pid = str(props.get("partition"))
            log_ = hub.partitions.get(pid)
            if log_ is None:
                return 404, f"Partition '{pid}' does not exist in event hub '{hub.name}'.", None
            last = log_.last_event()
            return (
                200,
                "OK",
                {
                    "name": hub.name,
                    "type": "com.microsoft:partition",
                    "partition": pid,
                    "begin_sequence_number": log_.begin_seq,
                    "last_enqueued_sequence_number": log_.next_seq - 1,
                    "last_enqueued_offset": str(log_.last_enqueued_offset()),
                    "last_enqueued_time_utc": Timestamp(last[2] if last else log_.last_enqueued_ms),
                    "is_partition_empty": log_.is_empty,
                },
            )
        return 400, f"Unknown $management type {kind!r}.", None

    def _on_events(self, link: Link, payload: bytes, message_format: int | None) -> Described:
        hub = link.hub
        assert hub is not None
        try:
            events, partition_key = unpack_delivery(payload, message_format)
        except AmqpDecodeError as exc:
            return _rejected("amqp:decode-error", f"malformed event message: {exc}")
        if not events:
            return _accepted()
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


def _accepted() -> Described:
    return Described(F.ACCEPTED, [])


def _rejected(condition: str, description: str) -> Described:
    return Described(F.REJECTED, [F.Error.make(condition, description)])


def _ubyte(value: Any) -> UByte | None:
    return None if value is None else UByte(int(value))


def _ushort(value: int) -> Any:
    from .codec import UShort

    return UShort(value)


def _address(term: Any) -> str:
    """The path part of a source/target address (scheme and host removed)."""
    if isinstance(term, Described) and isinstance(term.value, list) and term.value:
        raw = term.value[0]
    else:
        raw = None
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    if not isinstance(raw, str):
        return ""
    if "://" in raw:
        raw = raw.split("://", 1)[1]
        raw = raw.split("/", 1)[1] if "/" in raw else ""
    return raw.strip("/")


def _start_position(log_: PartitionLog, source: Any) -> int:
    """The first sequence number a new consumer link delivers, from its selector filter."""
    filters = None
    if isinstance(source, Described) and isinstance(source.value, list) and len(source.value) > 7:
        filters = source.value[7]
    expression = None
    if isinstance(filters, dict):
        for key, value in filters.items():
            if str(key) == SELECTOR_FILTER or (
                isinstance(value, Described) and str(value.descriptor) == SELECTOR_FILTER
            ):
                expression = value.value if isinstance(value, Described) else value
    if expression is None:
        return log_.next_seq  # no position: like "@latest"
    if isinstance(expression, bytes):
        expression = expression.decode("utf-8", "replace")
    match = _SELECTOR.search(str(expression))
    if match is None:
        raise LinkRefused("com.microsoft:argument-error", f"Unsupported selector filter: {expression!r}.")
    field, op, value = match.group(1).lower(), match.group(2), match.group(3)
    inclusive = op in (">=", "=")
    try:
        if field == "offset":
            if value == "-1":
                return log_.begin_seq
            if value == "@latest":
                return log_.next_seq
            return log_.first_seq_after_offset(int(value), inclusive)
        if field == "sequence-number":
            seq = int(value)
            return max(seq if inclusive else seq + 1, log_.begin_seq)
        return log_.first_seq_after_time(int(value), inclusive)
    except ValueError:
        raise LinkRefused(
            "com.microsoft:argument-error", f"The {field} in the selector filter is not a number: {value!r}."
        ) from None
