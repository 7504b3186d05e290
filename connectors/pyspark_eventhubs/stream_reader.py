"""The streaming reader: offsets and planning on the driver, exact range reads on executors.

Driver side (one long-lived Python worker per query run, so instance state lives as long as the
run): one :class:`~.hub_metadata.HubMetadata` — a kept-open management connection — answers every
planning round in one round trip. ``initialOffset`` resolves the starting positions once;
``latestOffset(start, limit)`` reads every partition's retained range (for a hub larger than one
second of the management pace, the newest answers of a background sweep: ``bounds_sweep.py``),
picks up new partitions at their earliest event, decides data loss (``data_loss.py``: a start
below the earliest retained event fails the query or moves the start up), applies
``eventhubs.maxRate(s)PerPartition`` and admission control (``maxEventsPerTrigger``, default
1000 x partitions, split by backlog) and, under ``Trigger.AvailableNow``, never goes past the
target recorded when the run started. It then measures the backlog the batch leaves (events after
its end, and the seconds between the newest event and the last one the batch reads; see
``backlog.py``), which ``reportLatestOffset`` hands to the query's progress.

Executor side: ``read()`` gets a pickled reader plus one :class:`~.read_tasks.EventHubsReadTask`
and reads exactly ``[from, until)`` of each of its partition ranges (see ``read_tasks.py``). All
resumable state is in the offset dict, which is all Spark's checkpoint holds for a Python source.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from .backlog import BACKLOG_KEY, BacklogMeter
from .data_loss import DATA_LOSS_KEY, DataLossLedger
from .hub_metadata import HubMetadata
from .offsets import SeqMap, make_offset, offset_seqs, split_limit
from .options import DEFAULT_EVENTS_PER_TRIGGER_PER_PARTITION, EventHubsOptions
from .positions import PartitionBounds
from .read_tasks import EventHubsReadTask, plan_tasks, read_task

log = logging.getLogger(__name__)


class EventHubsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("eventhubs")``: micro-batches with admission control."""

    def __init__(self, options: EventHubsOptions) -> None:
        self.options = options
        self._metadata: HubMetadata | None = None
        self._bounds: dict[str, PartitionBounds] = {}
        self._available_now_target: SeqMap | None = None
        self._data_loss = DataLossLedger(options)
        # The start latestOffset moved up for data loss, so that partitions() plans the same.
        self._planned: tuple[SeqMap, SeqMap] | None = None
        self._backlog_meter = BacklogMeter(lambda positions: self._hub().enqueued_times(positions))
        self._backlog: dict[str, Any] | None = None

    # The metadata client holds sockets; the pickled copy sent to executors must not carry it.
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_metadata"] = None
        state["_bounds"] = {}
        state["_planned"] = None
        state["_backlog_meter"] = None
        state["_backlog"] = None
        return state

    def _hub(self) -> HubMetadata:
        if self._metadata is None:
            self._metadata = HubMetadata(self.options)
        return self._metadata

    def _refresh_bounds(self) -> dict[str, PartitionBounds]:
        self._bounds = self._hub().bounds()
        return self._bounds

    def initialOffset(self) -> dict:
        """Starting positions resolved to sequence numbers (done once, for a new checkpoint)."""
        bounds = self._refresh_bounds()
        seqs = {
            pid: self._hub().resolve(self.options.starting_position_for(pid), b) for pid, b in bounds.items()
        }
        log.info("Event hub %s: starting at %s", self.options.description, seqs)
        return make_offset(self.options.eventhub_name, seqs)

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxEventsPerTrigger`` as ``ReadMaxRows``; unset, 1000 x the hub's partitions (Scala)."""
        limit = self.options.max_events_per_trigger
        if limit is None:
            partitions = len(self._bounds) or len(self._hub().partition_ids())
            limit = DEFAULT_EVENTS_PER_TRIGGER_PER_PARTITION * max(1, partitions)
        return ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        """Record what is in the hub now: this run reads up to here and then ends."""
        self._available_now_target = {pid: b.latest for pid, b in self._refresh_bounds().items()}
        log.info(
            "Event hub %s: availableNow target %s",
            self.options.description,
            self._available_now_target,
        )

    def _with_new_partitions(self, seqs: SeqMap) -> SeqMap:
        """``seqs`` plus partitions that appeared since, starting at their earliest event."""
        full = dict(seqs)
        for pid, b in self._bounds.items():
            if pid not in full:
                log.info(
                    "Event hub %s: new partition %s, starting at its earliest event %d",
                    self.options.description,
                    pid,
                    b.earliest,
                )
                full[pid] = b.earliest
        return full

    def _earliest(self) -> SeqMap:
        return {pid: b.earliest for pid, b in self._bounds.items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The end of the next micro-batch, within ``limit`` and the availableNow target.

        A large hub's ranges come from the background sweep (``HubMetadata.recent_bounds``).
        """
        bounds = self._bounds = self._hub().recent_bounds()
        checkpointed = offset_seqs(start, self.options.eventhub_name)
        begin = dict(checkpointed)
        target = self._available_now_target
        if target is not None:
            # Only partitions that existed when the run started; never past the target.
            for pid in target:
                begin.setdefault(pid, bounds[pid].earliest if pid in bounds else target[pid])
        else:
            begin = self._with_new_partitions(begin)
        begin = self._data_loss.clamp(begin, self._earliest())
        self._planned = (checkpointed, begin)
        latest = {pid: bounds[pid].latest for pid in begin if pid in bounds}
        if target is not None:
            latest = {pid: min(seq, target.get(pid, seq)) for pid, seq in latest.items()}
        # Never move backwards (a recreated hub or a lagging replica): keep the start.
        latest = {pid: max(seq, latest.get(pid, seq)) for pid, seq in begin.items()}

        if not isinstance(limit, ReadAllAvailable):
            for pid, seq in begin.items():
                cap = self.options.max_events_per_partition(pid)
                if cap is not None:
                    latest[pid] = min(latest[pid], seq + cap)
        if isinstance(limit, ReadMaxRows):
            end = split_limit(begin, latest, limit.max_rows)
        elif isinstance(limit, ReadMinRows):
            backlog = sum(latest[pid] - begin[pid] for pid in begin)
            end = latest if backlog >= limit.min_rows else dict(begin)
        else:
            end = latest
        self._backlog = self._backlog_meter.measure(end, bounds)
        if end == checkpointed:
            return start
        return make_offset(self.options.eventhub_name, end)

    def reportLatestOffset(self) -> dict | None:
        """The newest sequence numbers seen by the last ``latestOffset`` (Spark shows the lag).

        It also carries the backlog the planned batch leaves under ``"$backlog"`` (``backlog.py``)
        and, after data loss with ``failOnDataLoss=false``, the run's losses under
        ``"$dataLoss"`` (``data_loss.py``): the one channel from a Python source to the query's
        progress.
        """
        if not self._bounds:
            return None
        report = make_offset(self.options.eventhub_name, {pid: b.latest for pid, b in self._bounds.items()})
        losses = self._data_loss.report()
        if losses:
            report[DATA_LOSS_KEY] = losses
        if self._backlog is not None:
            report[BACKLOG_KEY] = self._backlog
        return report

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        """The batch's tasks: one per partition range (more with ``minPartitions``), small ranges
        sharing a task (``eventhubs.minEventsPerTask``; see ``read_tasks.plan_tasks``).

        Called right after ``latestOffset`` with its start, or — for a batch planned before a
        restart — alone: then the retained ranges are read again and data loss decided here.
        """
        begin = offset_seqs(start, self.options.eventhub_name)
        until = offset_seqs(end, self.options.eventhub_name)
        if self._planned is not None and self._planned[0] == begin:
            begin = {**begin, **self._planned[1]}
        else:
            if not self._bounds or any(pid not in self._bounds for pid in until):
                self._refresh_bounds()
            for pid in until:
                if pid not in begin:
                    begin[pid] = min(self._bounds[pid].earliest if pid in self._bounds else 0, until[pid])
            begin = self._data_loss.clamp(begin, self._earliest(), until)
        exclusive = self.options.use_exclusive_receiver
        return list(plan_tasks(self.options, begin, until, max_pieces=1 if exclusive else None))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Executor: Arrow batches with exactly the task's ranges, or an error."""
        assert isinstance(partition, EventHubsReadTask)
        return read_task(self.options, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: Spark's checkpoint is the only record of progress."""

    def stop(self) -> None:
        """Close the driver's broker connection when the query run ends."""
        if self._metadata is not None:
            self._metadata.close()
            self._metadata = None
