"""The fast partition receiver: the SDK opens the link, the connector reads its transfers in bulk.

azure-eventhub's receive loop reads one frame at a time (two socket reads each), decodes every
transfer into a ``Message`` of Python objects and refills link credit only when it reaches zero;
at ≈80 µs per event that, not the broker, bounded a partition's read speed. This receiver keeps
the SDK for everything but the bulk of the data:

* **the SDK** opens the connection (TCP or TLS on 5671, SASL, AMQP open/begin), authenticates
  (CBS put-token with a SAS key or an Azure AD token, and refreshes it), attaches the receiver
  link with the position filter, owner level and capabilities, processes every frame that is not
  a transfer on this link (flow, disposition, detach, close, CBS replies), and closes;
* **this module**, once the link is attached, reads the socket in large chunks, splits frames,
  takes the transfers of its own link (joining multi-frame deliveries), keeps the session and
  link counters the SDK keeps, grants credit before it runs out (at half, so the broker never
  waits; ``prefetchCount`` ahead, plus the events a task knows exist and waits for), and hands
  the message bytes to :func:`.delivery_decoder.decode_deliveries`, which makes Arrow columns
  without a Python object per event.

Frames are standard AMQP 1.0 (part 2 of the spec): nothing here is specific to the emulator. The
SDK's WebSocket transport is not read this way (``FastPathUnavailable``: use the SDK path).
Runs in executor Python workers; one receiver is used by one task at a time.
"""

from __future__ import annotations

import io
import logging
import ssl
import struct
import threading
import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from . import native
from .client import partition_consumer
from .delivery_decoder import DeliveryDecodeError, decode_deliveries, value_end
from .options import EventHubsOptions
from .partition_link import PartitionLink

log = logging.getLogger(__name__)

_U32 = struct.Struct(">I").unpack_from
_TRANSFER = 0x14
# Bytes taken from the socket per read call (TLS gives at most one 16 KiB record per call).
READ_CHUNK = 1 << 20
# The read buffer of each thread that receives: one per task thread, not one per receiver (a
# worker caching the receivers of 1,024 partitions would otherwise hold 1 GiB of them).
_THREAD = threading.local()
# Credit granted for events a task waits for, beyond prefetchCount, is capped at this many bytes.
DEMAND_BYTES = 16 << 20
# Seconds between keep-alive checks of an idle receiver (the SDK's own thread checks every second
# and pings after half the broker's idle timeout, 60 s on Azure).
KEEP_ALIVE_CHECK = 5.0
# Widths (constructor included) of the usual encodings of transfer fields: null, booleans, uint, ubyte.
_FIELD_WIDTH = {0x40: 1, 0x41: 1, 0x42: 1, 0x43: 1, 0x50: 2, 0x52: 2, 0x56: 2, 0x70: 5}
_NO_DATA = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError, TimeoutError)


class FastPathUnavailable(RuntimeError):
    """The connection cannot be read by this receiver (AMQP over WebSockets); use the SDK path."""


class FastPartitionReceiver(PartitionLink):
    """One receiver link on one partition, read in bulk into Arrow record batches."""

    def __init__(
        self,
        options: EventHubsOptions,
        partition_id: str,
        position: Any,
        prefetch: int,
        inclusive: bool = True,
        exclusive: bool | None = None,
    ) -> None:
        self._prefetch = max(1, prefetch)
        self.prefetch = self._prefetch
        # The same host-wide receiver slot as the SDK path's receiver (released by close()).
        super().__init__(options, partition_id, position)
        from azure.eventhub import TransportType

        if self._client._config.transport_type != TransportType.Amqp:
            self._client.close()
            self.slot.release()
            raise FastPathUnavailable(
                "the fast receiver reads AMQP over TCP/TLS only; set eventhubs.useFastReceiver=false "
                "for AMQP over WebSockets"
            )
        self._consumer = partition_consumer(
            self._client, options, partition_id, position, self._prefetch, inclusive, exclusive
        )
        self._consumer._keep_alive = None  # no SDK thread reading the socket behind our back
        self._attached = False
        self._conn: Any = None
        self._link: Any = None
        self._session: Any = None
        self._transport: Any = None
        self._sock: Any = None
        self._sock_timeout: float | None = None
        self._channel = -1
        self._handle = -1
        self._buf = bytearray()
        # Complete deliveries found in _buf[:_scan_pos] and not yet decoded.
        self._scan_pos = 0
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._assembled: list[tuple[int, bytes]] = []  # (index in _starts, joined payload)
        self._partial: bytearray | None = None  # a multi-frame delivery being received
        self._backlog: pa.RecordBatch | None = None  # decoded events handed back (unread)
        self._state = threading.Lock()
        self._busy = False
        self._closed = threading.Event()
        self._demand = 0  # events the current receive call waits for (fill)
        self._event_size = 512  # bytes per delivery, from the last block
        self._layout: _TransferLayout | None = None  # of the last plain transfer on this link

    # ------------------------------------------------------------------------------ reading events
    def receive(self, max_count: int, max_wait: float, fill: bool = False) -> pa.RecordBatch | None:
        """Up to ``max_count`` events in order, or None when none arrived within ``max_wait`` s.

        Returns as soon as some events are here and the socket has nothing more right now; with
        ``fill`` (the caller knows ``max_count`` events exist) it waits for all of them, up to
        ``max_wait``, so that a catch-up read hands Spark large batches.
        """
        with self._state:
            if self._closed.is_set():
                raise ConnectionError(f"receiver of partition {self.partition_id} is closed")
            self._busy = True
        try:
            return self._receive(max_count, max_wait, fill)
        finally:
            self.last_used = time.monotonic()
            with self._state:
                self._busy = False

    def unread(self, batch: pa.RecordBatch) -> None:
        """Put decoded events back in front of the stream (they come first in the next receive)."""
        if batch.num_rows == 0:
            return
        if self._backlog is None:
            self._backlog = batch
        else:
            table = pa.Table.from_batches([batch, self._backlog])
            self._backlog = table.combine_chunks().to_batches()[0]

    def _receive(self, max_count: int, max_wait: float, fill: bool) -> pa.RecordBatch | None:
        if self._backlog is not None:
            batch = self._backlog
            if batch.num_rows > max_count:
                self._backlog = batch.slice(max_count)
                return batch.slice(0, max_count)
            self._backlog = None
            return batch
        deadline = time.monotonic() + max_wait
        if not self._attached and not self._attach(deadline):
            return None
        self._demand = max_count if fill else 0
        self._housekeeping()
        self._scan(max_count)
        while len(self._starts) < max_count:
            waiting = fill or not self._starts
            timeout = max(0.0, min(1.0, deadline - time.monotonic())) if waiting else 0.0
            if not self._recv(timeout):
                if not waiting or time.monotonic() >= deadline:
                    break
                continue
            self._scan(max_count)
        self._demand = 0
        if not self._starts:
            return None
        data, starts, ends = self._take_block()
        self._event_size = max(1, len(data) // len(starts))
        try:
            return decode_deliveries(data, starts, ends, self.partition_id)
        except DeliveryDecodeError as exc:
            raise DeliveryDecodeError(f"partition {self.partition_id}: {exc}") from None

    def open(self, timeout: float) -> bool:
        """Connect, authenticate and attach now rather than at the first receive; False on timeout."""
        return self._attached or self._attach(time.monotonic() + timeout)

    def _attach(self, deadline: float) -> bool:
        """Let the SDK connect, authenticate and attach; then take over the socket. False on timeout."""
        consumer = self._consumer
        while not consumer._open():  # connection, SASL, CBS token, attach: all the SDK's
            if time.monotonic() >= deadline:
                return False
        handler = consumer._handler
        self._conn = handler._connection
        self._link = handler._link
        self._session = self._link._session
        self._transport = self._conn._transport
        self._sock = self._transport.sock
        self._sock_timeout = self._sock.gettimeout()
        # Bytes the SDK read past its last frame (after a socket timeout) come first.
        self._buf += self._transport._read_buffer.read()
        self._transport._read_buffer = io.BytesIO()
        self._channel = next(ch for ch, s in self._conn._incoming_endpoints.items() if s is self._session)
        self._handle = self._link.remote_handle
        self._link.flow(link_credit=self._prefetch)
        self._attached = True
        threading.Thread(target=self._keep_alive, name="eventhubs-keep-alive", daemon=True).start()
        return True

    def _housekeeping(self) -> None:
        """What the SDK's receive loop does besides reading: token refresh, idle pings, credit."""
        cbs = self._consumer._handler._cbs_authenticator
        if cbs is not None:
            cbs.handle_token()  # sends a new token when the old one nears expiry; raises on failure
        self._conn._get_remote_timeout(time.time())  # an empty frame if the broker would time out
        self._check_link()
        self._top_up()

    def _top_up(self) -> None:
        """Grant credit again once half of it is used: ``prefetchCount`` events ahead of the task.

        Events a task waits for (``fill``: they exist, the range was planned from the broker's
        metadata) are not prefetching: they get credit on top, up to ``DEMAND_BYTES`` of events.
        """
        wanted = self._demand - len(self._starts)
        if wanted > 0:
            wanted = min(wanted, max(1, DEMAND_BYTES // self._event_size))
        target = self._prefetch + max(0, wanted)
        if self._link.current_link_credit <= target // 2:
            self._link.flow(link_credit=target)

    def _recv(self, timeout: float) -> bool:
        """Append what the socket has (waiting up to ``timeout`` s for something); False if nothing."""
        sock = self._sock
        chunk = _read_chunk()
        sock.settimeout(timeout)
        try:
            received = sock.recv_into(chunk)
        except _NO_DATA:
            return False
        finally:
            sock.settimeout(self._sock_timeout)
        if received == 0:
            raise ConnectionError(f"the broker closed the connection of partition {self.partition_id}")
        self._buf += chunk[:received]
        self._conn._last_frame_received_time = time.time()
        return True

    # ---------------------------------------------------------------------------- frames
    def _scan(self, limit: int) -> None:
        """Find complete deliveries in the buffer (up to ``limit``); other frames go to the SDK.

        A transfer laid out as the last plain one on this link (:class:`_TransferLayout`) is taken
        with three byte comparisons (by the compiled loop when :mod:`.native` has it); any other
        frame is parsed field by field.
        """
        buf = self._buf
        size_total = len(buf)
        pos = self._scan_pos
        starts, ends = self._starts, self._ends
        frames = deliveries = 0
        layout = self._layout
        fast = native.accel
        while len(starts) < limit and pos + 8 <= size_total:
            if fast is not None and layout is not None and self._partial is None:
                # the compiled layout check, up to the first frame it does not take
                taken = len(starts)
                pos = fast.scan_laid_out(
                    buf, pos, limit - taken, layout.head, layout.tag_at, layout.tag_size,
                    layout.tail_at, layout.tail, layout.payload_at, starts, ends,
                )  # fmt: skip
                taken = len(starts) - taken
                frames += taken
                deliveries += taken
                if len(starts) >= limit or pos + 8 > size_total:
                    break
            size = _U32(buf, pos)[0]
            end = pos + size
            if end > size_total:
                break
            if size <= 8:
                if size < 8:
                    raise DeliveryDecodeError(f"invalid AMQP frame size {size}")
                pos = end  # an empty frame (heartbeat)
                continue
            if (
                layout is not None
                and pos + layout.payload_at <= end
                and buf.startswith(layout.head, pos + 4)
                and buf.startswith(layout.tag_size, pos + layout.tag_at)
                and buf.startswith(layout.tail, pos + layout.tail_at)
                and self._partial is None
            ):
                starts.append(pos + layout.payload_at)
                ends.append(end)
                frames += 1
                deliveries += 1
                pos = end
                continue
            kind = self._transfer(buf, pos, end)
            if kind is None:
                # Anything else (flow, detach, a CBS reply, ...) is the SDK's to process.
                self._account(frames, deliveries)
                frames = deliveries = 0
                body = pos + 4 * buf[pos + 4]
                self._to_sdk(buf[pos + 6] << 8 | buf[pos + 7], bytes(buf[body:end]), buf[pos + 5])
                pos = end
                continue
            frames += 1
            deliveries += kind
            layout = self._layout
            pos = end
        self._scan_pos = pos
        self._account(frames, deliveries)

    def _transfer(self, buf: bytearray, pos: int, end: int) -> int | None:
        """Take the frame at ``pos`` if it is a transfer on this link: the number of deliveries it
        completes (0 or 1); None for any other frame. A plain single-frame transfer becomes the
        link's :class:`_TransferLayout`."""
        body = pos + 4 * buf[pos + 4]
        if not (
            buf[pos + 5] == 0
            and (buf[pos + 6] << 8 | buf[pos + 7]) == self._channel
            and buf[body] == 0x00
            and buf[body + 1] == 0x53
            and buf[body + 2] == _TRANSFER
            and buf[body + 3] in (0xC0, 0xD0)
        ):
            return None
        if buf[body + 3] == 0xC0:
            count = buf[body + 5]
            field = body + 6
            payload = body + 5 + buf[body + 4]
        else:
            count = _U32(buf, body + 8)[0]
            field = body + 12
            payload = body + 8 + _U32(buf, body + 4)[0]
        code = buf[field]
        if code == 0x52:
            link_handle = buf[field + 1]
            field += 2
        elif code == 0x43:
            link_handle = 0
            field += 1
        elif code == 0x70:
            link_handle = _U32(buf, field + 1)[0]
            field += 5
        else:
            link_handle = -1
        if link_handle != self._handle:
            return None
        widths = _FIELD_WIDTH
        more = aborted = False
        delivery_id = tag = -1
        if count > 5:
            # delivery-id, delivery-tag, message-format, settled; then more
            for index in range(4):
                code = buf[field]
                if index == 0:
                    delivery_id = field
                elif index == 1:
                    tag = field
                width = widths.get(code)
                if width:
                    field += width
                elif code == 0xA0:
                    field += 2 + buf[field + 1]
                else:
                    field = value_end(buf, field)
            more = buf[field] == 0x41 or (buf[field] == 0x56 and buf[field + 1] == 1)
            if count > 9:
                for _ in range(4):  # more, rcv-settle-mode, state, resume; then aborted
                    width = widths.get(buf[field])
                    field = field + width if width else value_end(buf, field)
                aborted = buf[field] == 0x41 or (buf[field] == 0x56 and buf[field + 1] == 1)
        if aborted:  # the broker gave up on this delivery: drop it (a gap fails the read)
            self._partial = None
            return 0 if more else 1
        if more or self._partial is not None:
            if self._partial is None:
                self._partial = bytearray()
            self._partial += buf[payload:end]
            if more:
                return 0
            self._assembled.append((len(self._starts), bytes(self._partial)))
            self._partial = None
            self._starts.append(-1)
            self._ends.append(-1)
            return 1
        self._starts.append(payload)
        self._ends.append(end)
        if (
            delivery_id > 0
            and tag > delivery_id
            and buf[tag] == 0xA0
            and buf[delivery_id] in (0x43, 0x52, 0x70)
        ):
            self._layout = _TransferLayout.of(buf, pos, delivery_id, tag, payload)
        return 1

    def _account(self, frames: int, deliveries: int) -> None:
        """Update the session and link counters as the SDK would have for these transfers."""
        if frames == 0:
            return
        session, link = self._session, self._link
        session.next_incoming_id += frames
        session.remote_outgoing_window -= frames
        session.incoming_window -= frames
        if session.incoming_window <= session.target_incoming_window // 2:
            session.incoming_window = session.target_incoming_window
            session._outgoing_flow()
        if deliveries:
            link.current_link_credit -= deliveries
            link.delivery_count = (link.delivery_count + deliveries) & 0xFFFFFFFF
            self._top_up()

    def _to_sdk(self, channel: int, body: bytes, frame_type: int) -> None:
        """Let the SDK's connection process one frame, then fail if it ended our link."""
        from azure.eventhub._pyamqp._decode import decode_frame

        if frame_type != 0:
            raise DeliveryDecodeError(f"unexpected AMQP frame type {frame_type}")
        self._conn._process_incoming_frame(channel, decode_frame(memoryview(body)))
        self._check_link()

    def _check_link(self) -> None:
        from azure.eventhub._pyamqp.constants import LinkState

        if self._conn._error is not None:
            raise self._conn._error
        if self._link._error is not None:
            raise self._link._error
        if self._link.state != LinkState.ATTACHED:
            raise ConnectionError(f"receiver link of partition {self.partition_id} is {self._link.state}")

    def _take_block(self) -> tuple[bytes, list[int], list[int]]:
        """The scanned deliveries as (bytes, starts, ends); their frames leave the buffer."""
        pos = self._scan_pos
        starts, ends = self._starts, self._ends
        if self._assembled:
            data = bytearray(self._buf[:pos])
            for index, payload in self._assembled:
                starts[index] = len(data)
                data += payload
                ends[index] = len(data)
            block = bytes(data)
        else:
            with memoryview(self._buf) as view:
                block = view[:pos].tobytes()  # one copy (a bytearray slice would make two)
        del self._buf[:pos]
        self._scan_pos = 0
        self._starts, self._ends, self._assembled = [], [], []
        return block, starts, ends

    # ------------------------------------------------------------------------------ life cycle
    def _keep_alive(self) -> None:
        """While no task uses the receiver, send the empty frames the broker needs to keep it open."""
        while not self._closed.wait(KEEP_ALIVE_CHECK):
            with self._state:
                if self._busy or self._closed.is_set():
                    continue
                try:
                    self._conn._get_remote_timeout(time.time())
                except Exception:
                    log.debug("keep-alive of partition %s failed", self.partition_id)

    def close(self, wait: bool = True) -> None:
        """Close the link and the connection; never raises (``wait=False``: in a daemon thread)."""
        if not wait:
            threading.Thread(target=self.close, name="eventhubs-close", daemon=True).start()
            return
        with self._state:
            self._closed.set()
        if self._transport is not None:
            # Unread bytes back to the SDK, so it stays in step with the stream while it closes.
            self._transport._read_buffer = io.BytesIO(bytes(self._buf[self._scan_pos :]))
        for closeable in (self._consumer, self._client):
            try:
                closeable.close()
            except Exception:
                log.debug("closing a receiver of partition %s failed", self.partition_id)
        self.slot.release()


@dataclass(frozen=True)
class _TransferLayout:
    """A plain transfer's bytes around what changes from one delivery to the next (its delivery-id
    and delivery-tag values), relative to the frame's start: a frame with the same ``head`` (data
    offset, frame type, channel, performative list size and count, handle, the delivery-id's
    constructor), the same tag constructor and size, and the same ``tail`` (message format, settled,
    more, settle mode, state, resume, aborted, batchable) is a complete delivery on this link whose
    message starts at ``payload_at``; only its delivery-id and tag bytes differ."""

    head: bytes
    tag_at: int
    tag_size: bytes
    tail_at: int
    tail: bytes
    payload_at: int

    @classmethod
    def of(cls, buf: bytearray, pos: int, delivery_id: int, tag: int, payload: int) -> _TransferLayout:
        tail_at = tag + 2 + buf[tag + 1]
        return cls(
            head=bytes(buf[pos + 4 : delivery_id + 1]),
            tag_at=tag - pos,
            tag_size=bytes(buf[tag : tag + 2]),
            tail_at=tail_at - pos,
            tail=bytes(buf[tail_at:payload]),
            payload_at=payload - pos,
        )


def _read_chunk() -> memoryview:
    """This thread's socket read buffer (:data:`READ_CHUNK` bytes), made on its first use."""
    chunk = getattr(_THREAD, "chunk", None)
    if chunk is None:
        chunk = _THREAD.chunk = memoryview(bytearray(READ_CHUNK))
    return chunk
