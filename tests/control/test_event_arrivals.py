"""Which arrivals are new (``core.event_arrivals.new_arrivals``): beyond both what the job committed
and what was announced, per partition."""

from __future__ import annotations

from hubflow.event_schedule import new_arrivals


def test_arrivals_start_after_the_later_of_committed_and_announced() -> None:
    latest = {"0": 10, "1": 7, "2": 5, "3": 0}
    committed = {"0": 4, "1": 7, "2": 1}
    announced = {"0": 8, "2": 0}
    assert new_arrivals(latest, committed, announced) == {"0": (8, 10), "2": (1, 5)}


def test_a_partition_nobody_read_or_announced_starts_at_its_first_event() -> None:
    assert new_arrivals({"0": 3}, {}, {}) == {"0": (0, 3)}
    assert new_arrivals({"0": 3}, {}, {"0": 3}) == {}, "announced already"
    assert new_arrivals({"0": 3}, {"0": 5}, {}) == {}, "a checkpoint ahead of the hub's view: nothing new"
