"""The tests' poll (``tests.support.processes.wait_until``): it backs off from a costly predicate."""

from __future__ import annotations

import time
from itertools import pairwise

import pytest

from tests.support.processes import POLL_BACKOFF, wait_until


def test_a_costly_predicate_is_polled_at_most_a_third_of_the_time() -> None:
    calls: list[float] = []

    def slow_poll() -> bool:
        calls.append(time.monotonic())
        time.sleep(0.2)
        return len(calls) == 4

    assert wait_until(slow_poll, 30, "the fourth poll", interval=0.01) is True
    gaps = [later - earlier for earlier, later in pairwise(calls)]
    # each poll starts at least its predicate's 0.2 s plus POLL_BACKOFF times that after the last
    assert all(gap >= 0.2 * (1 + POLL_BACKOFF) * 0.95 for gap in gaps), gaps


def test_a_cheap_predicate_is_polled_every_interval() -> None:
    calls: list[float] = []
    wait_until(lambda: calls.append(time.monotonic()) or len(calls) == 3, 30, "three polls", interval=0.3)
    gaps = [later - earlier for earlier, later in pairwise(calls)]
    assert all(gap >= 0.3 for gap in gaps), gaps


def test_the_last_poll_is_at_the_deadline_and_a_timeout_names_what_it_waited_for() -> None:
    calls: list[float] = []
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="timed out after 1s waiting for the moon"):
        wait_until(lambda: calls.append(time.monotonic()), 1, "the moon", interval=0.4)
    assert calls[-1] - started >= 1.0, "polled once more at the deadline"
    assert time.monotonic() - started < 5, "no sleep past the deadline"
