"""The batch reader: ``spark.read.format("eventhubs")`` over a range of positions.

Starting and ending positions (offsets, sequence numbers or enqueued times) are resolved to
sequence numbers on the driver when Spark plans the read; tasks then read exact ranges with the
same code as streaming. Defaults: earliest → latest (the Scala connector defaulted to
latest → latest, which reads nothing). A backfill reads one time window with
``{"enqueuedTime": t0}`` as start and ``{"enqueuedTime": t1}`` as end: events with
``t0 <= enqueuedTime < t1``.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from .hub_metadata import HubMetadata
from .options import EventHubsOptions
from .positions import EventPosition
from .read_tasks import EventHubsReadTask, plan_tasks, read_task


class EventHubsBatchReader(DataSourceReader):
    """Reads ``[start, end)`` of every partition once."""

    def __init__(self, options: EventHubsOptions) -> None:
        self.options = options

    def resolve_ranges(self) -> tuple[dict[str, int], dict[str, int]]:
        """Start (inclusive) and end (exclusive) sequence number of every partition."""
        hub = HubMetadata(self.options)
        try:
            bounds = hub.bounds()

            def resolve(pid: str) -> tuple[str, int, int]:
                b = bounds[pid]
                first = self.options.starting_position_for(pid, EventPosition.start_of_stream())
                last = self.options.ending_position_for(pid)
                return pid, hub.resolve(first, b), hub.resolve(last, b, end=True)

            # Offsets and enqueued times need a receiver each: resolve partitions in parallel.
            with concurrent.futures.ThreadPoolExecutor(max_workers=min(8, len(bounds) or 1)) as pool:
                resolved = list(pool.map(resolve, bounds))
            return {p: s for p, s, _ in resolved}, {p: e for p, _, e in resolved}
        finally:
            hub.close()

    def partitions(self) -> list[InputPartition]:
        """One task per non-empty partition range (more with ``minPartitions``), small ranges
        sharing a task (``eventhubs.minEventsPerTask``)."""
        start, end = self.resolve_ranges()
        return list(plan_tasks(self.options, start, end))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Executor: Arrow batches with exactly the task's ranges (nothing for Spark's empty dummy)."""
        if not isinstance(partition, EventHubsReadTask):
            return iter(())
        batches: Iterator[pa.RecordBatch] = read_task(self.options, partition)
        return batches
