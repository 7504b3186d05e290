"""Exact range reads on the fast receiver: events ``[start, end)`` of one partition as Arrow batches.

Same rules as ``receiver_cache.read_range`` on the SDK path: never a short read (a quiet broker
past ``eventhubs.receiverTimeout`` fails the task), a gap in sequence numbers fails the task,
events that expired before ``start`` is reached are data loss (an error with
``failOnDataLoss=true``, else logged, counted and skipped), also when nothing after them is left
(the broker is asked after a quiet spell), and receiver errors are retried as there
(``receiver_cache.ReadRetries``).
Sequence numbers are checked on the decoded Arrow column, not per Python object.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa

from .errors import EventHubsReadError
from .fast_receiver import FastPartitionReceiver
from .options import EventHubsOptions

log = logging.getLogger(__name__)

# Events per Arrow record batch handed to Spark.
ARROW_BATCH_EVENTS = 5000


def read_range(
    options: EventHubsOptions,
    partition_id: str,
    start: int,
    end: int,
    borrow: Callable[[int], FastPartitionReceiver],
    give_back: Callable[[FastPartitionReceiver], None],
    on_data_loss: Callable[[int, int], None],
    expired_to_the_end: Callable[[int, int], bool],
    after_error: Callable[[Exception, int], None],
    probe_seconds: float,
) -> Iterator[pa.RecordBatch]:
    """Yield Arrow batches holding exactly the events ``[start, end)`` of one partition.

    ``borrow(seq)`` gives a receiver whose next event is ``seq`` (cached or new); a healthy one
    goes back through ``give_back``, a failed one is closed. ``on_data_loss(lost_from, lost_to)``
    raises or returns (``failOnDataLoss``). After ``probe_seconds`` of a quiet link,
    ``expired_to_the_end(expected, end)`` asks the broker whether the rest of the range expired.
    ``after_error(exc, expected)`` raises (give up) or returns (reconnect): the SDK path's rules.
    """
    if end <= start:
        return
    receiver = borrow(start)
    expected = start
    healthy = False
    try:
        while expected < end:
            want = min(end - expected, ARROW_BATCH_EVENTS)
            try:
                # All of [expected, end) exists (planned from the broker's metadata): wait for all.
                batch = receiver.receive(want, min(probe_seconds, options.receiver_timeout), fill=True)
                expired = batch is None and expired_to_the_end(expected, end)
                if batch is None and not expired:
                    wait = max(0.0, options.receiver_timeout - probe_seconds)
                    batch = receiver.receive(want, wait, fill=True)
            except Exception as exc:
                after_error(exc, expected)
                receiver.close(wait=False)
                receiver = borrow(expected)
                continue
            if expired:
                on_data_loss(expected, end)
                return  # the receiver is closed: it waits before the gap
            if batch is None:
                raise EventHubsReadError(
                    f"Event hub {options.description} partition {partition_id}: no event arrived "
                    f"within eventhubs.receiverTimeout ({options.receiver_timeout:g} s) while "
                    f"reading sequence numbers [{expected}, {end}); the range was planned from "
                    "the broker's own metadata, so the broker is slow or unreachable."
                )
            seqs = batch.column(3)
            if seqs.null_count:
                raise EventHubsReadError(
                    f"Event hub {options.description} partition {partition_id}: an event without "
                    "a sequence number arrived; the task fails instead of guessing."
                )
            numbers = seqs.to_numpy()
            first = int(numbers[0])
            if first != expected:
                if first < expected:
                    raise went_back(options, partition_id, first, expected)
                on_data_loss(expected, min(first, end))
                if first >= end:  # everything left of this range expired; keep the events for later
                    receiver.unread(batch)
                    receiver.next_seq = first
                    healthy = True
                    return
                expected = first
            inside = min(end - expected, len(numbers))  # consecutive events before ``end``
            steps = np.diff(numbers[:inside])
            if steps.size and not (steps == 1).all():
                where = int(np.argmax(steps != 1))
                raise EventHubsReadError(
                    f"Event hub {options.description} partition {partition_id}: sequence numbers "
                    f"jump from {int(numbers[where])} to {int(numbers[where + 1])}; the task fails "
                    "instead of skipping events."
                )
            if inside < batch.num_rows:
                receiver.unread(batch.slice(inside))
                batch = batch.slice(0, inside)
            expected += inside
            yield batch
        receiver.next_seq = expected
        healthy = True
    finally:
        if healthy:
            give_back(receiver)
        else:
            receiver.close(wait=False)


def went_back(options: EventHubsOptions, partition_id: str, got: int, expected: int) -> EventHubsReadError:
    """The error when a receiver delivers an event before the one it was positioned at (both paths)."""
    return EventHubsReadError(
        f"Event hub {options.description} partition {partition_id}: received "
        f"sequence number {got} but expected {expected}."
    )
