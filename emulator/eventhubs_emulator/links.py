"""Sessions and links: per-link delivery state, and feeding consumers from a partition log.

A consumer link sends the partition's stored events (already encoded with their annotations) as
pre-settled transfers while the client has credit, many frames per socket write; new events are pushed
at once because the link listens to its partition log.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

from . import frames as F
from . import limits
from .codec import Described, Symbol, Timestamp, UInt, encode
from .messages import (
    DELIVERY_ANNOTATIONS,
    LAST_ENQUEUED_OFFSET,
    LAST_ENQUEUED_SEQUENCE_NUMBER,
    LAST_ENQUEUED_TIME_UTC,
    with_delivery_annotations,
)
from .roles import ConnectionRole
from .store import Hub, PartitionLog, now_ms

log = logging.getLogger("eventhubs_emulator")


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
    def connection(self) -> ConnectionRole:
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
        metrics = encoded_metrics = None
        if self.metrics:
            metrics = _runtime_metrics(self.log)
            encoded_metrics = encode(Described(DELIVERY_ANNOTATIONS, metrics))
        size = 0
        for sent, i in enumerate(range(idx, idx + count), 1):
            seq, _offset, _enq, payload, hlen = events[i]
            if metrics is not None and encoded_metrics is not None:
                payload = with_delivery_annotations(payload, hlen, metrics, encoded_metrics)
            did = session.next_outgoing_id
            session.next_outgoing_id = (did + 1) & 0xFFFFFFFF
            if len(payload) + F.TRANSFER_OVERHEAD <= max_frame:
                out.append(F.transfer_frames(session.channel, self.handle, did, seq, payload, max_frame)[0])
            else:
                out.extend(F.transfer_frames(session.channel, self.handle, did, seq, payload, max_frame))
            size += len(payload)
            if size >= limits.PUMP_ROUND_BYTES:  # look at the send buffer again before more
                count = sent
                break
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
            registry = self.connection.server.receivers.get(self.registry_key(), set())
            registry.discard(self)
            log.debug(
                "consumer link %r closed: key %s, %d receivers left",
                self.name,
                self.registry_key(),
                len(registry),
            )


def _runtime_metrics(log_: PartitionLog) -> dict:
    last = log_.last_event()
    values = {
        Symbol(LAST_ENQUEUED_SEQUENCE_NUMBER): log_.next_seq - 1,
        Symbol(LAST_ENQUEUED_OFFSET): str(log_.last_enqueued_offset()),
        Symbol(LAST_ENQUEUED_TIME_UTC): Timestamp(last[2] if last else log_.last_enqueued_ms),
        Symbol("runtime_info_retrieval_time_utc"): Timestamp(now_ms()),
    }
    return values


class Session:
    """One AMQP session: its links by handle and its delivery counters."""

    def __init__(self, connection: ConnectionRole, channel: int, next_incoming_id: int) -> None:
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
