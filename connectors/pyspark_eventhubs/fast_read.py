"""Exact range reads on the fast receiver: events ``[start, end)`` of one partition as Arrow batches.

Same rules as ``receiver_cache.read_range`` on the SDK path: never a short read (a quiet broker
past ``eventhubs.receiverTimeout`` fails the task), a gap in sequence numbers fails the task,
events that expired before ``start`` is reached are data loss (an error with
``failOnDataLoss=true``, else logged, counted and skipped), one reconnect after a receiver error.
Sequence numbers are checked on the decoded Arrow column, not per Python object.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa

from .client import redact
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
) -> Iterator[pa.RecordBatch]:
    """Yield Arrow batches holding exactly the events ``[start, end)`` of one partition.

    ``borrow(seq)`` gives a receiver whose next event is ``seq`` (cached or new); a healthy one
    goes back through ``give_back``, a failed one is closed. ``on_data_loss(lost_from, lost_to)``
    raises or returns (``failOnDataLoss``).
    """
    if end <= start:
        return
    receiver = borrow(start)
    expected = start
    healthy = False
    retried = False
    try:
        while expected < end:
            try:
                want = min(end - expected, ARROW_BATCH_EVENTS)
                # All of [expected, end) exists (planned from the broker's metadata): wait for all.
                batch = receiver.receive(want, options.receiver_timeout, fill=True)
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
                receiver = borrow(expected)
                continue
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
                    raise EventHubsReadError(
                        f"Event hub {options.description} partition {partition_id}: received "
                        f"sequence number {first} but expected {expected}."
                    )
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
