"""Partition receivers in executor Python workers, cached across micro-batches, and exact reads.

Spark reuses Python workers between tasks, so a module-level cache keeps a receiver per
(credentials, hub, consumer group, partition) alive between micro-batches: the next micro-batch
starts where the last one stopped and finds its first events already prefetched. The cache key
is a SHA-256 digest, so the secret is not kept in a readable key.

What the cache guarantees (see also ``receiver_slots.py``):

* a worker process holds at most one receiver per key — cached or lent to its one task — and
  closes a cached receiver that is not at the needed sequence number *before* opening another;
* every receiver holds a host-wide slot, so one machine never has more receivers open per
  partition and consumer group than the service allows (5; 1 with an owner level);
* a task with several ranges opens the receivers of its later ranges all at once, ahead of
  reading them (:meth:`ReceiverCache.open_ahead`), instead of one connection, authentication and
  attach after the other; a borrow waits for a receiver of its key still opening;
* an idle receiver is closed by a timer thread :data:`IDLE_SECONDS` after its last use — its
  link, socket and prefetched events do not wait for a next borrow that may never come — and
  within a quarter of a second when another process on the machine waits for its slot.

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
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from . import fast_read
from .amqp_binary import tag_binary_properties
from .amqp_names import SEQUENCE_NUMBER
from .client import partition_consumer
from .errors import EventHubsDataLossError, EventHubsReadError
from .fast_receiver import FastPartitionReceiver
from .management import ManagementSession
from .options import EventHubsOptions
from .partition_link import PartitionLink
from .positions import partition_bounds
from .receiver_slots import is_wanted, no_slot_message
from .redaction import redact
from .schema import messages_to_record_batch

log = logging.getLogger(__name__)

# Events per Arrow record batch handed to Spark.
ARROW_BATCH_EVENTS = 5000
# Receivers idle this long are closed by the cache's timer. Below the service's 60 s inactivity
# limit of a connection, so a cached receiver needs no keep-alive traffic of its own.
IDLE_SECONDS = 30.0
# How long a cached receiver may take to drop the events before a task's start (see _fast_forward).
FAST_FORWARD_SECONDS = 1.0
# How many receivers one worker process opens at once ahead of a task's later ranges.
OPEN_AHEAD_THREADS = 8
# How often the timer looks at idle receivers (idle timeout, slots wanted by other processes).
REAP_SECONDS = 0.25
# AMQP conditions with which the service asks the client to come back (a partition being moved, a
# forced close, a busy broker): a read reconnects for up to eventhubs.receiverTimeout.
RETRY_CONDITIONS = ("amqp:link:detach-forced", "amqp:connection:forced", "com.microsoft:server-busy")
# A task whose link stays quiet this long asks the broker whether its events expired meanwhile.
PROBE_SECONDS = 2.0
# Events skipped because they expired (failOnDataLoss=false), per worker process, for tests/logs.
DATA_LOSS_COUNTER: dict[str, int] = {}


def _seq(message: Any) -> int:
    return int((message.message_annotations or {})[SEQUENCE_NUMBER])


class PartitionReceiver(PartitionLink):
    """One AMQP receiver on one partition, starting at a sequence number (or offset / time).

    Holds a host-wide receiver slot from construction to :meth:`close` (see :class:`PartitionLink`).
    Its whole interface is :meth:`receive`, :meth:`put_back` and :meth:`close`, plus ``prefetch``,
    and ``next_seq`` / ``last_used`` / ``idle_since`` / ``slot`` kept for the cache.
    """

    def __init__(
        self,
        options: EventHubsOptions,
        partition_id: str,
        position: Any,
        prefetch: int,
        inclusive: bool = True,
        exclusive: bool | None = None,
    ) -> None:
        super().__init__(options, partition_id, position)
        try:
            self._consumer = partition_consumer(
                self._client, options, partition_id, position, prefetch, inclusive, exclusive
            )
        except BaseException:
            self.slot.release()
            raise
        self._tag_binary_properties()
        # No SDK keep-alive thread: it would read the socket beside the task, and its join makes
        # close() wait up to a second. An idle receiver is closed long before the service's
        # inactivity limit instead (IDLE_SECONDS).
        self._consumer._keep_alive = None
        self.prefetch = prefetch

    def _tag_binary_properties(self) -> None:
        """Hook the handler the consumer creates so binary property values stay marked binary."""
        consumer = self._consumer
        create_handler = consumer._create_handler

        def create_tagging_handler(auth: Any) -> None:
            create_handler(auth)
            handler = consumer._handler
            on_transfer = handler._message_received

            def tagged(frame: Any, message: Any) -> None:
                tag_binary_properties(frame[11], message)  # frame[11]: the transfer's payload
                on_transfer(frame, message)

            handler._message_received = tagged  # the link is created later, with this callback

        consumer._create_handler = create_tagging_handler

    def receive(self, max_count: int, max_wait: float) -> list[Any]:
        """Up to ``max_count`` raw AMQP messages; waits at most ``max_wait`` s for the first.

        Reads at most ``max_count`` frames off the socket: a task asks for the events it needs,
        never for a prefetch-sized batch that would wait for events produced after its end. Link
        credit is topped up to the prefetch whenever half of it is used, so the broker never
        stops mid-read for want of credit.
        """
        consumer = self._consumer
        buffer = consumer._message_buffer
        deadline = time.monotonic() + max_wait
        while not buffer:
            if consumer._open():  # opens the link and authenticates; True when ready
                handler = consumer._handler
                link = handler._link
                if link.current_link_credit < self.prefetch // 2:
                    link.flow(link_credit=self.prefetch)
                frames = max(1, min(max_count, link.current_link_credit))
                alive = handler.do_work(batch=frames)
                if alive is False:  # the broker closed the link or the connection
                    raise ConnectionError(f"receiver of partition {self.partition_id} closed")
            if buffer or time.monotonic() >= deadline:
                break
        take = min(max_count, len(buffer))
        messages = [buffer.popleft() for _ in range(take)]
        self.last_used = time.monotonic()
        return messages

    def open(self, timeout: float) -> bool:
        """Connect, authenticate and attach now rather than at the first receive; False on timeout."""
        deadline = time.monotonic() + timeout
        while not self._consumer._open():
            if time.monotonic() >= deadline:
                return False
        return True

    def put_back(self, messages: list[Any]) -> None:
        """Return unused messages to the front of the buffer (the next read starts with them)."""
        self._consumer._message_buffer.extendleft(reversed(messages))

    def close(self) -> None:
        """Close the link and the connection, then free the slot; never raises."""
        for closeable in (self._consumer, self._client):
            try:
                closeable.close()
            except Exception:
                log.debug("closing a receiver of partition %s failed", self.partition_id)
        self.slot.release()


class ReceiverCache:
    """Receivers of this worker process by key; a receiver is lent to one task at a time.

    A daemon thread closes receivers idle for ``idle_seconds`` and those whose slot another
    process on the machine is waiting for.
    """

    def __init__(self, idle_seconds: float = IDLE_SECONDS) -> None:
        self.idle_seconds = idle_seconds
        self._lock = threading.Condition()
        self._idle: dict[str, PartitionReceiver] = {}
        self._opening: dict[str, threading.Event] = {}  # keys being opened ahead, set when done
        self._opener_slots = threading.BoundedSemaphore(OPEN_AHEAD_THREADS)
        self._timer: threading.Thread | None = None

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
        """A receiver whose next event is ``start``: the cached one if it fits, else a new one.

        Waits first for a receiver of the same key that :meth:`open_ahead` is still opening (its
        slot acquisition and its open are each bounded by ``eventhubs.receiverTimeout``), so the
        process never holds two receivers of one key.
        """
        with self._lock:
            opening = self._opening.get(self.key(options, partition_id))
        if opening is not None:
            opening.wait(2 * options.receiver_timeout + 5)
        return self._take_or_open(options, partition_id, start)

    def open_ahead(self, options: EventHubsOptions, starts: Iterable[tuple[str, int]]) -> None:
        """Open the receivers of ``(partition id, start)`` concurrently and cache them at ``start``.

        A task packed with many small ranges would otherwise open their links one after another,
        each a connection, an authentication and an attach (several round trips to the service).
        Each is opened in its own daemon thread, at most :data:`OPEN_AHEAD_THREADS` at once. A
        failure is only logged: the task's own borrow opens again and reports it.
        """
        for partition_id, start in starts:
            key = self.key(options, partition_id)
            with self._lock:
                cached = self._idle.get(key)
                if key in self._opening or (cached is not None and cached.next_seq == start):
                    continue
                done = self._opening[key] = threading.Event()
            threading.Thread(
                target=self._open_into_cache,
                args=(options, partition_id, start, key, done),
                name=f"eventhubs-open-{partition_id}",
                daemon=True,
            ).start()

    def _open_into_cache(
        self, options: EventHubsOptions, partition_id: str, start: int, key: str, done: threading.Event
    ) -> None:
        """An open-ahead thread: a receiver at ``start``, attached, left in the cache."""
        try:
            with self._opener_slots:
                receiver = self._take_or_open(options, partition_id, start)
                try:
                    opened = receiver.open(options.receiver_timeout)
                except BaseException:
                    receiver.close()
                    raise
                if not opened:
                    receiver.close()
                    raise TimeoutError(f"not attached within {options.receiver_timeout:g} s")
                self.give_back(options, receiver)
        except Exception as exc:
            log.debug(
                "opening partition %s ahead of its read failed: %s", partition_id, redact(str(exc), options)
            )
        finally:
            with self._lock:
                self._opening.pop(key, None)
            done.set()

    def _take_or_open(self, options: EventHubsOptions, partition_id: str, start: int) -> Any:
        with self._lock:
            cached = self._idle.pop(self.key(options, partition_id), None)
        if cached is not None:
            if cached.next_seq == start or self._fast_forward(cached, start):
                return cached
            cached.close()  # before opening another: its slot may be the one we need
        if options.use_fast_receiver:
            return FastPartitionReceiver(options, partition_id, start, options.prefetch_count)
        return PartitionReceiver(options, partition_id, start, options.prefetch_count)

    @staticmethod
    def _fast_forward(receiver: Any, start: int) -> bool:
        """Move a receiver that is a little behind ``start`` forward by dropping the events before.

        Spark hands a partition's next range to whichever Python worker is free, so the receiver
        cached here often stopped a batch earlier. Its link has kept receiving (within its prefetch
        credit), so dropping those events costs milliseconds where a new receiver costs a
        connection, an authentication and a link. False (the caller opens a new receiver) when
        the gap is larger than the prefetch, the events do not come within a second, or sequence
        numbers jump (expired events: a fresh receiver and the data-loss rule handle that).
        """
        behind = start - (receiver.next_seq if receiver.next_seq is not None else start)
        if not 0 < behind <= receiver.prefetch:
            return False
        deadline = time.monotonic() + FAST_FORWARD_SECONDS
        try:
            if isinstance(receiver, FastPartitionReceiver):
                return _fast_forward_fast(receiver, start, deadline)
            while receiver.next_seq is not None and receiver.next_seq < start:
                wait = deadline - time.monotonic()
                messages = receiver.receive(start - receiver.next_seq, wait) if wait > 0 else []
                if not messages:
                    return False
                for message in messages:
                    if _seq(message) != receiver.next_seq:
                        return False
                    receiver.next_seq += 1
        except Exception:
            return False
        return True

    def give_back(self, options: EventHubsOptions, receiver: PartitionReceiver) -> None:
        """Keep a healthy receiver for the next task on this partition."""
        receiver.idle_since = time.time()
        with self._lock:
            previous = self._idle.pop(self.key(options, receiver.partition_id), None)
            self._idle[self.key(options, receiver.partition_id)] = receiver
            if self._timer is None:
                self._timer = threading.Thread(target=self._close_idle, name="eventhubs-idle", daemon=True)
                self._timer.start()
            self._lock.notify()
        if previous is not None:
            previous.close()

    def idle_count(self) -> int:
        """How many receivers are cached (tests)."""
        with self._lock:
            return len(self._idle)

    def cached(self, options: EventHubsOptions, partition_id: str) -> PartitionReceiver | None:
        """The cached receiver of a partition, if any (tests)."""
        with self._lock:
            return self._idle.get(self.key(options, partition_id))

    def _close_idle(self) -> None:
        """The timer thread: close expired and wanted receivers, for the life of the process."""
        while True:
            with self._lock:
                while not self._idle:
                    self._lock.wait()
                now = time.monotonic()
                done = [
                    key
                    for key, receiver in self._idle.items()
                    if now - receiver.last_used >= self.idle_seconds
                    or is_wanted(receiver.slot.key, receiver.idle_since)
                ]
                closing = [self._idle.pop(key) for key in done]
            for receiver in closing:
                receiver.close()
            time.sleep(REAP_SECONDS)

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
    or when sequence numbers jump inside the range. Events of the range that expired after the
    driver planned it are data loss: an error with ``failOnDataLoss=true``; otherwise logged,
    counted, and skipped — also when nothing after them is left to deliver (the broker's
    retained range is asked for when the link stays quiet for :data:`PROBE_SECONDS`).
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
            expired_to_the_end=lambda expected, end: _expired_to_the_end(
                options, partition_id, expected, end
            ),
            after_error=ReadRetries(options, partition_id).after,
            probe_seconds=PROBE_SECONDS,
        )
        return
    receiver = RECEIVERS.borrow(options, partition_id, start)
    expected = start
    healthy = False
    retries = ReadRetries(options, partition_id)
    try:
        while expected < end:
            want = min(end - expected, ARROW_BATCH_EVENTS)
            try:
                messages = _receive_exactly(receiver, want, min(PROBE_SECONDS, options.receiver_timeout))
                if not messages and _expired_to_the_end(options, partition_id, expected, end):
                    _on_data_loss(options, partition_id, expected, end)
                    return  # the receiver is closed: it waits before the gap
                if not messages:
                    wait = max(0.0, options.receiver_timeout - PROBE_SECONDS)
                    messages = _receive_exactly(receiver, want, wait)
            except (EventHubsReadError, EventHubsDataLossError):
                raise
            except Exception as exc:
                retries.after(exc, expected)
                receiver.close()
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
                    raise fast_read.went_back(options, partition_id, first, expected)
                _on_data_loss(options, partition_id, expected, min(first, end))
                if first >= end:
                    # Everything left of this range expired; keep the receiver's events for later.
                    receiver.next_seq = first
                    receiver.put_back(messages)
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
                receiver.put_back(leftover)
            if kept:
                yield messages_to_record_batch(partition_id, kept)
        receiver.next_seq = expected
        healthy = True
    finally:
        if healthy:
            RECEIVERS.give_back(options, receiver)
        else:
            receiver.close()


def _fast_forward_fast(receiver: FastPartitionReceiver, start: int, deadline: float) -> bool:
    """:meth:`ReceiverCache._fast_forward` for the fast receiver: drop decoded rows before ``start``."""
    while receiver.next_seq is not None and receiver.next_seq < start:
        wait = deadline - time.monotonic()
        batch = receiver.receive(start - receiver.next_seq, wait, fill=True) if wait > 0 else None
        if batch is None:
            return False
        seqs = batch.column("sequenceNumber")
        expected = list(range(receiver.next_seq, receiver.next_seq + batch.num_rows))
        if seqs.null_count or seqs.to_pylist() != expected:
            return False
        receiver.next_seq += batch.num_rows
    return True


class ReadRetries:
    """What one range read does after a receiver error (both receive paths).

    A link the service refused for its receiver quota (``resource-limit-exceeded``: receivers
    of other machines hold it, and close when idle) is retried every second for up to
    ``eventhubs.receiverTimeout``; any other error is retried once at a position, on a new
    receiver: a failure after events arrived since the last one is a new fault, retried again.
    """

    def __init__(self, options: EventHubsOptions, partition_id: str) -> None:
        self.options = options
        self.partition_id = partition_id
        self.failures = 0
        self.failed_at = -1
        self.refused_since: float | None = None

    def after(self, exc: Exception, expected: int) -> None:
        """Return to reconnect at ``expected``; raise :class:`EventHubsReadError` to give up."""
        options, partition_id = self.options, self.partition_id
        if expected > self.failed_at:
            self.failures = 0  # the read moved on since its last failure
        text = redact(f"{type(exc).__name__}: {exc}", options)
        refused = "resource-limit-exceeded" in text
        # The service asks for a retry (a partition being moved, a busy broker): keep reconnecting
        # for up to eventhubs.receiverTimeout, then give up naming its reason.
        asked_to_retry = any(condition in text for condition in RETRY_CONDITIONS)
        waiting = refused or asked_to_retry
        self.refused_since = (self.refused_since or time.monotonic()) if waiting else None
        if (
            self.refused_since is not None
            and time.monotonic() - self.refused_since < options.receiver_timeout
        ):
            if asked_to_retry:
                log.warning(
                    "Event hub %s partition %s: %s; reconnecting at %d",
                    options.description,
                    partition_id,
                    text.splitlines()[0],
                    expected,
                )
            time.sleep(1.0)
        elif refused:
            raise EventHubsReadError(no_slot_message(options, partition_id, None)) from None
        elif self.failures or asked_to_retry:
            raise EventHubsReadError(
                f"Event hub {options.description} partition {partition_id}: receiving "
                f"from sequence number {expected} failed: {text}"
            ) from None
        else:
            self.failures += 1
            self.failed_at = expected
            log.warning(
                "Event hub %s partition %s: receiver failed (%s); reconnecting at %d",
                options.description,
                partition_id,
                type(exc).__name__,
                expected,
            )


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


def _expired_to_the_end(options: EventHubsOptions, partition_id: str, expected: int, end: int) -> bool:
    """Whether the partition's events from ``expected`` on all expired (asked of the broker)."""
    session = ManagementSession(options)
    try:
        props = session.run(include_hub=False, partition_ids=[partition_id])["partitions"][partition_id]
    except Exception as exc:  # the read goes on waiting; the probe was only a shortcut
        log.debug("probing partition %s failed: %s", partition_id, redact(str(exc), options))
        return False
    finally:
        session.close()
    return partition_bounds(props).earliest >= end


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
