"""Partition receivers in executor Python workers, cached across micro-batches, and exact reads.

Spark reuses Python workers between tasks, so a module-level cache keeps one receiver per
(credentials, hub, consumer group, partition) alive: the next micro-batch starts where the last
one stopped and finds its first events already prefetched. The cache key is a SHA-256 digest,
so the secret is not kept in a readable key.

A receiver is the SDK's partition consumer driven directly: events are taken from its prefetch
buffer only as far as a task needs, so events past a task's end stay buffered for the next task.
The connector relies here on ``EventHubConsumerClient._create_consumer`` and the consumer's
handler of azure-eventhub 5.15 (no public pull API exists in the sync SDK); the version range is
pinned in the package metadata.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from . import fast_read
from .client import consumer_client, redact
from .errors import EventHubsDataLossError, EventHubsReadError
from .fast_receiver import FastPartitionReceiver
from .options import EventHubsOptions
from .schema import messages_to_record_batch

log = logging.getLogger(__name__)

SEQUENCE_NUMBER = b"x-opt-sequence-number"
# Events per Arrow record batch handed to Spark.
ARROW_BATCH_EVENTS = 5000
# Receivers idle longer than this are closed instead of reused (the broker may have dropped them).
IDLE_SECONDS = 120.0
# Events skipped because they expired (failOnDataLoss=false), per worker process, for tests/logs.
DATA_LOSS_COUNTER: dict[str, int] = {}


def _seq(message: Any) -> int:
    return int((message.message_annotations or {})[SEQUENCE_NUMBER])


class PartitionReceiver:
    """One AMQP receiver on one partition, starting at a sequence number (or offset / time)."""

    def __init__(
        self,
        options: EventHubsOptions,
        partition_id: str,
        position: Any,
        prefetch: int,
        inclusive: bool = True,
        exclusive: bool | None = None,
        keep_alive: bool = True,
    ) -> None:
        self.options = options
        self.partition_id = partition_id
        self.next_seq: int | None = position if isinstance(position, int) else None
        self.last_used = time.monotonic()
        self._client = consumer_client(options)
        owner = 0 if (options.use_exclusive_receiver if exclusive is None else exclusive) else None
        self._consumer = self._client._create_consumer(
            options.consumer_group,
            partition_id,
            position,
            self._never_called,
            prefetch=prefetch,
            owner_level=owner,
            event_position_inclusive=inclusive,
        )
        if not keep_alive:
            # Short-lived receivers skip the SDK's keep-alive thread, whose join makes close()
            # wait up to a second.
            self._consumer._keep_alive = None
        self._prefetch = prefetch

    @staticmethod
    def _never_called(*_: Any) -> None:  # the consumer's callback; we read its buffer instead
        return None

    def receive(self, max_count: int, max_wait: float) -> list[Any]:
        """Up to ``max_count`` raw AMQP messages; waits at most ``max_wait`` s for the first."""
        consumer = self._consumer
        buffer = consumer._message_buffer
        deadline = time.monotonic() + max_wait
        while not buffer:
            if consumer._open():  # opens the link and authenticates; True when ready
                alive = consumer._handler.do_work(batch=self._prefetch)
                if alive is False:  # the broker closed the link or the connection
                    raise ConnectionError(f"receiver of partition {self.partition_id} closed")
            if buffer or time.monotonic() >= deadline:
                break
        take = min(max_count, len(buffer))
        messages = [buffer.popleft() for _ in range(take)]
        self.last_used = time.monotonic()
        return messages

    def close(self, wait: bool = True) -> None:
        """Close the link and the connection; never raises.

        ``wait=False`` closes in a daemon thread: the SDK's close joins its keep-alive thread,
        which can take a second, and nothing a task returns depends on it.
        """
        if not wait:
            threading.Thread(target=self.close, name="eventhubs-close", daemon=True).start()
            return
        for closeable in (self._consumer, self._client):
            try:
                closeable.close()
            except Exception:
                log.debug("closing a receiver of partition %s failed", self.partition_id)


class ReceiverCache:
    """Receivers of this worker process by key; a receiver is lent to one task at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[str, Any] = {}

    @staticmethod
    def key(options: EventHubsOptions, partition_id: str) -> str:
        """A digest of who reads what; the secret only enters the hash."""
        identity = "\0".join(
            [
                options.connection_string or "",
                options.namespace,
                options.client_id or "",
                options.eventhub_name,
                options.consumer_group,
                partition_id,
                str(options.use_exclusive_receiver),
                str(options.use_fast_receiver),
            ]
        )
        return hashlib.sha256(identity.encode()).hexdigest()

    def borrow(self, options: EventHubsOptions, partition_id: str, start: int) -> Any:
        """A receiver whose next event is ``start``: the cached one if it fits, else a new one."""
        key = self.key(options, partition_id)
        now = time.monotonic()
        with self._lock:
            cached = self._idle.pop(key, None)
            # Receivers nobody asked for in a while (another query, a finished stream) go away.
            stale = [k for k, r in self._idle.items() if now - r.last_used >= IDLE_SECONDS]
            expired = [self._idle.pop(k) for k in stale]
        for receiver in expired:
            receiver.close(wait=False)
        if cached is not None:
            fresh = time.monotonic() - cached.last_used < IDLE_SECONDS
            if cached.next_seq == start and fresh:
                return cached
            cached.close(wait=False)
        if options.use_fast_receiver:
            return FastPartitionReceiver(options, partition_id, start, options.prefetch_count)
        return PartitionReceiver(options, partition_id, start, options.prefetch_count)

    def give_back(self, options: EventHubsOptions, receiver: Any) -> None:
        """Keep a healthy receiver for the next task on this partition."""
        key = self.key(options, receiver.partition_id)
        with self._lock:
            previous = self._idle.pop(key, None)
            self._idle[key] = receiver
        if previous is not None:
            previous.close(wait=False)

    def close_all(self) -> None:
        """Close every cached receiver (tests, worker shutdown)."""
        with self._lock:
            receivers, self._idle = list(self._idle.values()), {}
        for receiver in receivers:
            receiver.close()


RECEIVERS = ReceiverCache()


def read_range(
    options: EventHubsOptions, partition_id: str, start: int, end: int
) -> Iterator[pa.RecordBatch]:
    """Yield Arrow batches holding exactly the events ``[start, end)`` of one partition.

    Fails (never returns short) when events do not arrive within ``eventhubs.receiverTimeout``,
    or when sequence numbers jump inside the range. Events before ``start`` that expired are data
    loss: an error with ``failOnDataLoss=true``; otherwise logged, counted, and skipped.
    """
    if end <= start:
        return
    if options.use_fast_receiver:
        yield from fast_read.read_range(
            options,
            partition_id,
            start,
            end,
            borrow=lambda seq: RECEIVERS.borrow(options, partition_id, seq),
            give_back=lambda receiver: RECEIVERS.give_back(options, receiver),
            on_data_loss=lambda lost_from, lost_to: _on_data_loss(options, partition_id, lost_from, lost_to),
        )
        return
    receiver = RECEIVERS.borrow(options, partition_id, start)
    expected = start
    healthy = False
    retried = False
    try:
        while expected < end:
            want = min(end - expected, ARROW_BATCH_EVENTS)
            try:
                messages = _receive_exactly(receiver, want, options.receiver_timeout)
            except EventHubsReadError:
                raise
            except Exception as exc:
                if retried:
                    raise EventHubsReadError(
                        f"Event hub {options.description} partition {partition_id}: receiving "
                        f"from sequence number {expected} failed: "
                        f"{redact(f'{type(exc).__name__}: {exc}', options)}"
                    ) from None
                log.warning(
                    "Event hub %s partition %s: receiver failed (%s); reconnecting at %d",
                    options.description,
                    partition_id,
                    type(exc).__name__,
                    expected,
                )
                retried = True
                receiver.close(wait=False)
                receiver = PartitionReceiver(options, partition_id, expected, options.prefetch_count)
                continue
            if not messages:
                raise EventHubsReadError(
                    f"Event hub {options.description} partition {partition_id}: no event arrived "
                    f"within eventhubs.receiverTimeout ({options.receiver_timeout:g} s) while "
                    f"reading sequence numbers [{expected}, {end}); the range was planned from "
                    "the broker's own metadata, so the broker is slow or unreachable."
                )
            first = _seq(messages[0])
            if first != expected:
                if first < expected:
                    raise EventHubsReadError(
                        f"Event hub {options.description} partition {partition_id}: received "
                        f"sequence number {first} but expected {expected}."
                    )
                _on_data_loss(options, partition_id, expected, min(first, end))
                if first >= end:
                    # Everything left of this range expired; keep the receiver's events for later.
                    receiver.next_seq = first
                    receiver._consumer._message_buffer.extendleft(reversed(messages))
                    healthy = True
                    return
                expected = first
            kept = []
            for message in messages:
                seq = _seq(message)
                if seq >= end:
                    break
                if seq != expected:
                    raise EventHubsReadError(
                        f"Event hub {options.description} partition {partition_id}: sequence "
                        f"numbers jump from {expected - 1} to {seq}; the task fails instead of "
                        "skipping events."
                    )
                kept.append(message)
                expected += 1
            leftover = messages[len(kept) :]
            if leftover:
                receiver._consumer._message_buffer.extendleft(reversed(leftover))
            if kept:
                yield messages_to_record_batch(partition_id, kept)
        receiver.next_seq = expected
        healthy = True
    finally:
        if healthy:
            RECEIVERS.give_back(options, receiver)
        else:
            receiver.close(wait=False)


def _receive_exactly(receiver: PartitionReceiver, want: int, timeout: float) -> list[Any]:
    """Collect up to ``want`` messages; returns early on a quiet link once some arrived."""
    deadline = time.monotonic() + timeout
    messages = receiver.receive(want, timeout)
    while messages and len(messages) < want:
        more = receiver.receive(want - len(messages), max(0.0, min(0.05, deadline - time.monotonic())))
        if not more:
            break
        messages.extend(more)
    return messages


def _on_data_loss(options: EventHubsOptions, partition_id: str, lost_from: int, lost_to: int) -> None:
    message = (
        f"Event hub {options.description} partition {partition_id}: events with sequence numbers "
        f"[{lost_from}, {lost_to}) expired before they were read (retention)."
    )
    if options.fail_on_data_loss:
        raise EventHubsDataLossError(
            message + " Set failOnDataLoss=false to skip them and continue from the earliest available event."
        )
    DATA_LOSS_COUNTER[partition_id] = DATA_LOSS_COUNTER.get(partition_id, 0) + (lost_to - lost_from)
    log.warning("%s Skipped (failOnDataLoss=false).", message)
