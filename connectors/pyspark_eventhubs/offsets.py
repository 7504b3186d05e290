"""The streaming offset (what Spark writes to the checkpoint), the admission-control split and
the task plan of a batch (ranges split for ``minPartitions``, small ranges packed together).

The offset is the Scala connector's JSON: ``{"<hub>": {"0": 456, "1": 789}}`` — sequence numbers
only, start inclusive, end exclusive. It holds no secret and no namespace, so checkpoints written
by azure-event-hubs-spark and by this connector are interchangeable.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

SeqMap = dict[str, int]
PartitionRange = tuple[str, int, int]


def make_offset(eventhub_name: str, seqs: Mapping[str, int]) -> dict:
    """The offset dict for one hub, partitions in numeric order (stable JSON in the checkpoint)."""
    ordered = {pid: int(seqs[pid]) for pid in sorted(seqs, key=_partition_sort_key)}
    return {eventhub_name: ordered}


def offset_seqs(offset: Mapping | None, eventhub_name: str) -> SeqMap:
    """Sequence numbers per partition from an offset dict; empty if the hub is not in it.

    A checkpoint written for another hub name is an error: resuming it would silently re-read
    or skip everything.
    """
    if not offset:
        return {}
    if eventhub_name not in offset:
        raise ValueError(
            f"The checkpoint offset names event hub(s) {sorted(offset)} but this query reads "
            f"{eventhub_name!r}; use a new checkpoint location for a different hub."
        )
    return {str(pid): int(seq) for pid, seq in offset[eventhub_name].items()}


def _partition_sort_key(pid: str) -> tuple[int, str]:
    return (int(pid), pid) if pid.isdigit() else (1 << 62, pid)


def sorted_partitions(pids: object) -> list[str]:
    """Partition ids in numeric order ("2" before "10")."""
    return sorted((str(p) for p in pids), key=_partition_sort_key)  # type: ignore[attr-defined]


def split_limit(start: Mapping[str, int], latest: Mapping[str, int], limit: int) -> SeqMap:
    """End offsets that admit at most ``limit`` events, shared by backlog.

    Each partition with a backlog gets one event, then the rest of the limit is shared in
    proportion to the remaining backlogs, rounded down; the events left over by rounding go one
    each to the partitions with the largest remainders. The batch holds exactly
    ``min(limit, total backlog)`` events. Partitions in ``latest`` but not in ``start`` are not
    this function's business: callers resolve their start first.
    """
    if limit < 0:
        raise ValueError("limit must be >= 0")
    backlog = {pid: max(0, latest[pid] - start[pid]) for pid in start if pid in latest}
    total = sum(backlog.values())
    if total <= limit:
        return {pid: max(start[pid], latest.get(pid, start[pid])) for pid in start}
    waiting = [pid for pid, size in backlog.items() if size > 0]
    # Every partition with a backlog first gets one event (the largest backlogs when the limit
    # is smaller than the number of such partitions), so a small partition is never starved.
    waiting.sort(key=lambda pid: (-backlog[pid], _partition_sort_key(pid)))
    shares = {pid: 0 for pid in backlog}
    for pid in waiting[:limit]:
        shares[pid] = 1
    left = limit - sum(shares.values())
    rest = {pid: backlog[pid] - shares[pid] for pid in backlog}
    rest_total = sum(rest.values())
    if left > 0 and rest_total > 0:
        remainders: list[tuple[int, str]] = []
        for pid, size in rest.items():
            numerator = left * size
            shares[pid] += numerator // rest_total
            remainders.append((numerator % rest_total, pid))
        left = limit - sum(shares.values())
        # Largest remainder first; ties go to the lower partition id for determinism.
        remainders.sort(key=lambda item: (-item[0], _partition_sort_key(item[1])))
        for _, pid in remainders:
            if left == 0:
                break
            if shares[pid] < backlog[pid]:
                shares[pid] += 1
                left -= 1
    return {pid: start[pid] + shares.get(pid, 0) for pid in start}


def split_range(start: int, end: int, pieces: int) -> list[tuple[int, int]]:
    """Cut ``[start, end)`` into at most ``pieces`` contiguous, non-empty, near-equal ranges."""
    size = end - start
    if size <= 0:
        return []
    pieces = max(1, min(pieces, size))
    step, extra = divmod(size, pieces)
    ranges = []
    lo = start
    for i in range(pieces):
        hi = lo + step + (1 if i < extra else 0)
        ranges.append((lo, hi))
        lo = hi
    return ranges


def plan_ranges(
    start: Mapping[str, int],
    end: Mapping[str, int],
    min_partitions: int | None,
    max_pieces: int | None = None,
) -> list[PartitionRange]:
    """``(partition id, from, until)`` for every non-empty partition range of a batch.

    One range per Event Hubs partition; with ``min_partitions`` larger than the number of
    non-empty ranges, ranges are split so the batch has **at least** ``min_partitions`` tasks
    (fewer only when it holds fewer events, or when ``max_pieces`` caps each partition: one with
    exclusive receivers, which would take each other's place). Pieces go to ranges in proportion
    to their sizes (largest remainders first), each range getting at least one.
    """
    ranges = [
        (pid, start[pid], end[pid])
        for pid in sorted_partitions(end)
        if pid in start and end[pid] > start[pid]
    ]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    sizes = [hi - lo for _, lo, hi in ranges]
    caps = [size if max_pieces is None else min(size, max_pieces) for size in sizes]
    total = sum(sizes)
    target = min(min_partitions, sum(caps))
    pieces = [max(1, min(cap, target * size // total)) for size, cap in zip(sizes, caps, strict=True)]
    while sum(pieces) < target:
        # The range furthest below its proportional share (target * size / total) gets one more.
        best = max(
            (i for i in range(len(ranges)) if pieces[i] < caps[i]),
            key=lambda i: (target * sizes[i] - pieces[i] * total, -i),
        )
        pieces[best] += 1
    result: list[PartitionRange] = []
    for (pid, lo, hi), count in zip(ranges, pieces, strict=True):
        result.extend((pid, a, b) for a, b in split_range(lo, hi, count))
    return result


def pack_ranges(
    ranges: list[PartitionRange], min_events_per_task: int, min_tasks: int | None = None
) -> list[list[PartitionRange]]:
    """Group a batch's ranges into tasks so that small ranges share one.

    Every Spark task of a Python source costs a round trip to a Python worker (measured: about
    45 ms of a 2-core machine's time per task; docs/benchmarks.md), while reading a thousand
    events takes about 25 ms. So a batch of ``total`` events gets
    ``ceil(total / min_events_per_task)`` tasks — never more than it has ranges, never fewer than
    ``min_tasks`` (``minPartitions``) — and its ranges go to the tasks largest first, each to the
    task with the fewest events so far (tasks come out near-equal). A range is never split here.
    ``min_events_per_task`` 0 gives one task per range (the Scala connector's plan). Within a
    task, ranges keep the batch's order; every range is in exactly one task.
    """
    if not ranges:
        return []
    total = sum(hi - lo for _, lo, hi in ranges)
    wanted = math.ceil(total / min_events_per_task) if min_events_per_task > 0 else len(ranges)
    count = min(len(ranges), max(wanted, min_tasks or 1))
    if count == len(ranges):
        return [[r] for r in ranges]
    tasks: list[list[int]] = [[] for _ in range(count)]
    loads = [0] * count
    for index in sorted(range(len(ranges)), key=lambda i: (ranges[i][1] - ranges[i][2], i)):
        lightest = min(range(count), key=lambda t: (loads[t], t))
        tasks[lightest].append(index)
        loads[lightest] += ranges[index][2] - ranges[index][1]
    return [[ranges[i] for i in sorted(task)] for task in tasks]
