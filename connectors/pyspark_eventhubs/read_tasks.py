"""What one Spark task of a read holds, how a batch is cut into tasks, and how a task reads.

Both readers (streaming and batch) plan and read through here. Driver: :func:`plan_tasks` turns a
batch's ``[start, end)`` per partition into tasks — one range per partition, split for
``minPartitions`` (``offsets.plan_ranges``), small ranges packed into a shared task
(``offsets.pack_ranges``, ``eventhubs.minEventsPerTask``). Executor: :func:`read_task` reads the
task's ranges one after another, each exactly (``receiver_cache.read_range``), with the receivers
of the later ranges opened all at once before the first is read.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from . import worker_gc
from .offsets import PartitionRange, pack_ranges, plan_ranges
from .options import EventHubsOptions


@dataclass
class EventHubsReadTask(InputPartition):
    """One Spark task: events ``[from, until)`` of each ``(partition id, from, until)`` range."""

    ranges: tuple[PartitionRange, ...]

    def __post_init__(self) -> None:
        self.value = None


def plan_tasks(
    options: EventHubsOptions,
    start: Mapping[str, int],
    end: Mapping[str, int],
    max_pieces: int | None = None,
) -> list[EventHubsReadTask]:
    """Driver: the tasks of a batch; every event of ``[start, end)`` is in exactly one task.

    ``max_pieces`` caps how many ranges ``minPartitions`` may cut one partition into (1 with
    exclusive receivers, which would take each other's place).
    """
    ranges = plan_ranges(start, end, options.min_partitions, max_pieces)
    packed = pack_ranges(ranges, options.min_events_per_task, options.min_partitions)
    return [EventHubsReadTask(tuple(task)) for task in packed]


def read_task(options: EventHubsOptions, task: EventHubsReadTask) -> Iterator[pa.RecordBatch]:
    """Executor: Arrow batches with exactly the task's ranges, in order, or an error."""
    from .receiver_cache import RECEIVERS, read_range

    first_partition = task.ranges[0][0] if task.ranges else None
    later: dict[str, int] = {}
    for partition_id, from_seq, until_seq in task.ranges:
        if partition_id != first_partition and until_seq > from_seq:
            later.setdefault(partition_id, from_seq)
    RECEIVERS.open_ahead(options, later.items())
    for partition_id, from_seq, until_seq in task.ranges:
        yield from read_range(options, partition_id, from_seq, until_seq)
    worker_gc.settle()
