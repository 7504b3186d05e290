"""The driver's view of one hub: partition ids, retained ranges, positions resolved to sequence numbers.

Runs on the Spark driver (the stream and batch readers plan with it). Everything the driver asks
the broker is here: partition ids and the retained range of each partition (over one kept-open
management connection, see ``management.py``), an enqueued time or offset turned into a sequence
number, and the enqueued time of an event at a sequence number (the backlog's seconds; one
short-lived receiver each from ``receiver_cache.py``). Every request is bounded by
``eventhubs.operationTimeout``; errors are re-raised with secrets scrubbed from their text.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .amqp_names import ENQUEUED_TIME, SEQUENCE_NUMBER
from .bounds_sweep import BoundsSweep
from .management import ManagementSession
from .options import EventHubsOptions
from .positions import EventPosition, PartitionBounds, partition_bounds

#: How often the driver re-lists the hub's partitions (a hub only ever gains partitions, rarely).
PARTITION_LIST_SECONDS = 30.0


class HubMetadata:
    """Driver-side view of one hub: partition ids and retained ranges over one kept-open connection.

    Every :meth:`bounds` call is one round trip on a :class:`~.management.ManagementSession`
    (all partitions at once); the partition list is asked for with it when it is older than
    :data:`PARTITION_LIST_SECONDS` (new partitions then appear in the next micro-batch).
    :meth:`recent_bounds` (planning a trigger) leaves a large hub's round to a background sweep.
    """

    def __init__(self, options: EventHubsOptions) -> None:
        self.options = options
        self.session = ManagementSession(options)
        self._known_ids: list[str] = []
        self._listed_at: float | None = None
        pace = options.management_requests_per_second
        self.sweep = BoundsSweep(self._fetch_chunk, pace, options.description)

    def close(self) -> None:
        """Stop the background sweep and close the connection; safe to call twice."""
        self.sweep.close(self.options.operation_timeout)
        self.session.close()

    def _listing_due(self) -> bool:
        return self._listed_at is None or time.monotonic() - self._listed_at >= PARTITION_LIST_SECONDS

    def partition_ids(self) -> list[str]:
        """The hub's partition ids, as the broker lists them (asked now)."""
        self._known_ids = self.session.hub_properties()["partition_ids"]
        self._listed_at = time.monotonic()
        return list(self._known_ids)

    def bounds(self, partition_ids: Iterable[str] | None = None) -> dict[str, PartitionBounds]:
        """Retained range of the given partitions, or of every partition of the hub.

        Without ``partition_ids``, the partitions listed last are asked for together with a new
        listing when that is due; partitions the new listing adds cost a second round trip.
        """
        if partition_ids is not None:
            ids = [str(p) for p in partition_ids]
            answer = self.session.run(include_hub=False, partition_ids=ids)
            return {pid: partition_bounds(answer["partitions"][pid]) for pid in ids}
        due = self._listing_due()
        answer = self.session.run(include_hub=due, partition_ids=self._known_ids)
        partitions = answer["partitions"]
        if due:
            self._known_ids = answer["hub"]["partition_ids"]
            self._listed_at = time.monotonic()
            missing = [pid for pid in self._known_ids if pid not in partitions]
            if missing:
                partitions.update(self.session.run(include_hub=False, partition_ids=missing)["partitions"])
        bounds = {pid: partition_bounds(partitions[pid]) for pid in self._known_ids}
        self.sweep.update(bounds)
        return bounds

    def recent_bounds(self) -> dict[str, PartitionBounds]:
        """Every partition's range for planning a trigger, without waiting for a large hub's round.

        A hub whose round fits one second of the pace (partitions + 1 requests within
        ``eventhubs.managementRequestsPerSecond``) gets a round now, as :meth:`bounds`. A larger one
        gets the newest answer for each partition from the background sweep (``bounds_sweep.py``),
        which this call starts when none is running; only partitions never answered yet (the first
        call, partitions the hub gained) are asked for now.
        """
        if not self._known_ids or len(self._known_ids) + 1 <= self.options.management_requests_per_second:
            return self.bounds()
        known = self.sweep.snapshot(self._known_ids)
        missing = [pid for pid in self._known_ids if pid not in known]
        if missing:
            known.update(self.bounds(missing))
            self.sweep.update(known)
        self.sweep.request(self._known_ids)
        return {pid: known[pid] for pid in self._known_ids}

    def _fetch_chunk(self, ids: list[str]) -> dict[str, PartitionBounds]:
        """One chunk of a background sweep (the sweep's thread), with the partition listing when due."""
        due = self._listing_due()
        answer = self.session.run(include_hub=due, partition_ids=ids)
        if due:
            self._known_ids = answer["hub"]["partition_ids"]
            self._listed_at = time.monotonic()
        return {pid: partition_bounds(answer["partitions"][pid]) for pid in ids}

    def resolve(self, position: EventPosition, bounds: PartitionBounds, end: bool = False) -> int:
        """The sequence number an EventPosition means in one partition.

        For a start position the result is the first sequence number to read; for an end
        position (``end=True``) it is the first one *not* to read. Offsets and enqueued times are
        looked up by receiving one event from the broker (prefetch 1); when no event is at or
        after the position the result is ``latest``. Results are clamped to the retained range.
        """
        kind = position.kind
        if kind == "earliest":
            return bounds.earliest
        if kind == "latest":
            return bounds.latest
        if kind == "seqNo":
            assert position.seq_no is not None
            # Start: inclusive → seq, exclusive → seq+1. End: inclusive → seq+1, exclusive → seq.
            first = position.seq_no + (0 if position.is_inclusive != end else 1)
            return max(bounds.earliest, min(first, bounds.latest))
        if bounds.earliest >= bounds.latest:
            return bounds.latest
        if kind == "offset":
            assert position.offset is not None
            selector: Any = position.offset
            inclusive = position.is_inclusive if not end else not position.is_inclusive
        else:
            assert position.enqueued_time is not None
            selector = position.enqueued_time
            inclusive = True  # first event enqueued at or after the time
            last = bounds.last_enqueued_time
            if last is not None and selector > last:
                return bounds.latest  # no event that late yet: no need to ask a receiver
        seq = self._first_sequence_at(bounds.partition_id, selector, inclusive)
        return bounds.latest if seq is None else max(bounds.earliest, min(seq, bounds.latest))

    def _first_sequence_at(self, partition_id: str, selector: Any, inclusive: bool) -> int | None:
        """Sequence number of the first event at a position, or None when there is none yet."""
        # Imported here: the driver needs the executor's receiver only for this lookup.
        from .receiver_cache import PartitionReceiver

        receiver = PartitionReceiver(
            self.options,
            partition_id,
            selector,
            prefetch=1,
            inclusive=inclusive,
            exclusive=False,
        )
        try:
            messages = receiver.receive(1, self.options.receiver_timeout)
            if not messages:
                return None
            ann = messages[0].message_annotations or {}
            return int(ann[SEQUENCE_NUMBER])
        finally:
            receiver.close()

    def enqueued_times(self, positions: Mapping[str, int]) -> dict[str, datetime.datetime]:
        """The enqueued time of the event at each partition's sequence number in ``positions``.

        One receiver per partition, opened together (a receiver's first read waits for the link's
        setup, so one after another would add up), each bounded by ``eventhubs.receiverTimeout``;
        a partition whose event does not come (expired, not there) is left out, and so is one whose
        receiver places on this machine are all taken (``receiver_slots``): this lookup neither
        waits for a place nor asks the tasks' cached receivers to give theirs up.
        """
        from .errors import EventHubsReadError
        from .receiver_cache import PartitionReceiver

        no_wait = dataclasses.replace(self.options, receiver_timeout=0.0)

        def enqueued(partition_id: str, seq: int) -> datetime.datetime | None:
            try:
                receiver = PartitionReceiver(no_wait, partition_id, seq, prefetch=1, exclusive=False)
            except EventHubsReadError:  # no free receiver place: the tasks' readers come first
                return None
            try:
                messages = receiver.receive(1, self.options.receiver_timeout)
            finally:
                receiver.close()
            if not messages:
                return None
            ann = messages[0].message_annotations or {}
            if int(ann.get(SEQUENCE_NUMBER, -1)) != seq or ann.get(ENQUEUED_TIME) is None:
                return None
            return datetime.datetime.fromtimestamp(int(ann[ENQUEUED_TIME]) / 1000, datetime.UTC)

        if not positions:
            return {}
        with ThreadPoolExecutor(max_workers=min(8, len(positions))) as pool:
            found = dict(zip(positions, pool.map(enqueued, positions, positions.values()), strict=True))
        return {pid: when for pid, when in found.items() if when is not None}
