"""Checkpoint offset JSON and admission control: batches never exceed the limit."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from pyspark_eventhubs.offsets import (
    make_offset,
    offset_seqs,
    pack_ranges,
    plan_ranges,
    sorted_partitions,
    split_limit,
    split_range,
)


def test_offset_json_is_the_scala_format() -> None:
    offset = make_offset("hub1", {"10": 5, "2": 7, "0": 0})
    assert json.dumps(offset) == '{"hub1": {"0": 0, "2": 7, "10": 5}}'
    assert offset_seqs(offset, "hub1") == {"0": 0, "2": 7, "10": 5}
    assert offset_seqs(json.loads('{"ehName1":{"0":456,"1":789}}'), "ehName1") == {"0": 456, "1": 789}
    with pytest.raises(ValueError, match="new checkpoint"):
        offset_seqs(offset, "hub2")


def test_split_is_proportional_to_backlog() -> None:
    start = {"0": 0, "1": 100, "2": 50}
    latest = {"0": 300, "1": 200, "2": 50}
    end = split_limit(start, latest, 100)
    assert end == {"0": 75, "1": 125, "2": 50}


def test_split_never_exceeds_the_limit_and_uses_it_fully() -> None:
    rng = random.Random(7)
    for _ in range(500):
        n = rng.randint(1, 12)
        start = {str(i): rng.randint(0, 1000) for i in range(n)}
        latest = {pid: seq + rng.choice([0, 0, 1, 3, 50, 5000]) for pid, seq in start.items()}
        limit = rng.randint(1, 3000)
        end = split_limit(start, latest, limit)
        taken = sum(end[p] - start[p] for p in start)
        backlog = sum(latest[p] - start[p] for p in start)
        assert taken == min(limit, backlog)
        assert all(start[p] <= end[p] <= latest[p] for p in start)


def test_small_backlogs_are_not_starved() -> None:
    start = {"0": 0, "1": 0}
    end = split_limit(start, {"0": 10_000, "1": 1}, 10)
    assert end["1"] == 1 and end["0"] == 9


def test_ranges_split_for_min_partitions() -> None:
    assert split_range(0, 10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert split_range(5, 7, 10) == [(5, 6), (6, 7)]
    assert split_range(5, 5, 2) == []
    ranges = plan_ranges({"0": 0, "1": 0, "2": 9}, {"0": 100, "1": 300, "2": 9}, 4)
    assert [r for r in ranges if r[0] == "2"] == []
    covered = {pid: sorted((lo, hi) for p, lo, hi in ranges if p == pid) for pid in ("0", "1")}
    assert covered["0"][0][0] == 0 and covered["0"][-1][1] == 100
    assert covered["1"][0][0] == 0 and covered["1"][-1][1] == 300
    assert len(ranges) >= 4
    assert plan_ranges({"0": 3}, {"0": 8}, None) == [("0", 3, 8)]


@pytest.mark.parametrize(
    ("sizes", "minimum"),
    [
        ([10, 10, 10], 4),  # round(4 * 10 / 30) = 1 each would give 3 tasks
        ([1, 1, 100], 5),
        ([7, 3], 9),
        ([2, 2, 2], 100),  # more tasks asked for than events: one event per task
        ([1000, 1, 1, 1, 1], 6),
    ],
)
def test_min_partitions_is_a_true_minimum(sizes: list[int], minimum: int) -> None:
    start = {str(i): 100 for i in range(len(sizes))}
    end = {str(i): 100 + size for i, size in enumerate(sizes)}
    ranges = plan_ranges(start, end, minimum)
    assert len(ranges) >= min(minimum, sum(sizes))
    for pid in start:  # every partition's range is covered once, in order, without gaps
        pieces = [(lo, hi) for p, lo, hi in ranges if p == pid]
        assert pieces[0][0] == start[pid] and pieces[-1][1] == end[pid]
        assert all(a[1] == b[0] for a, b in itertools.pairwise(pieces))
        assert all(lo < hi for lo, hi in pieces)


def test_exclusive_receivers_never_split_a_partition() -> None:
    ranges = plan_ranges({"0": 0, "1": 0}, {"0": 50, "1": 50}, 8, max_pieces=1)
    assert ranges == [("0", 0, 50), ("1", 0, 50)]


def test_partitions_sort_numerically() -> None:
    assert sorted_partitions(["10", "2", "0"]) == ["0", "2", "10"]


def _assert_each_range_once(tasks: list, ranges: list) -> None:
    flat = [r for task in tasks for r in task]
    assert sorted(flat) == sorted(ranges)
    assert all(task for task in tasks)
    for task in tasks:  # a task keeps the batch's order of its ranges
        assert task == [r for r in ranges if r in task]


def test_small_ranges_share_a_task_and_large_ones_keep_their_own() -> None:
    small = [("0", 0, 140), ("1", 10, 150), ("2", 0, 130), ("3", 5, 145)]
    assert pack_ranges(small, 2000) == [small]
    # 4 x 1000 events with tasks of about 2000: two tasks of two ranges each.
    medium = [(str(p), 0, 1000) for p in range(4)]
    tasks = pack_ranges(medium, 2000)
    _assert_each_range_once(tasks, medium)
    assert sorted(sum(hi - lo for _, lo, hi in task) for task in tasks) == [2000, 2000]
    large = [(str(p), 0, 5000) for p in range(4)]
    assert pack_ranges(large, 2000) == [[r] for r in large]


def test_packed_tasks_are_near_equal_largest_range_first() -> None:
    ranges = [("0", 0, 900), ("1", 0, 100), ("2", 0, 800), ("3", 0, 300), ("4", 0, 100)]
    tasks = pack_ranges(ranges, 1100)  # 2200 events: 2 tasks
    _assert_each_range_once(tasks, ranges)
    assert sorted(sum(hi - lo for _, lo, hi in task) for task in tasks) == [1100, 1100]


def test_packing_off_and_min_partitions_keep_their_task_counts() -> None:
    ranges = [(str(p), 0, 10) for p in range(6)]
    assert pack_ranges(ranges, 0) == [[r] for r in ranges]
    tasks = pack_ranges(ranges, 2000, min_tasks=4)
    _assert_each_range_once(tasks, ranges)
    assert len(tasks) == 4
    assert pack_ranges(ranges, 2000, min_tasks=9) == [[r] for r in ranges]
    assert pack_ranges([], 2000) == []
