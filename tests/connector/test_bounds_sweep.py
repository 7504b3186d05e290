"""Planning a trigger over a hub larger than one second of the management pace waits for no request:
``HubMetadata.recent_bounds`` answers from the background sweep (``bounds_sweep.py``) and starts the
next one; a small hub still gets a round per trigger. Against the emulator, with the real SDK pieces.
"""

from __future__ import annotations

import threading

import pytest

from pyspark_eventhubs.bounds_sweep import BoundsSweep
from pyspark_eventhubs.hub_metadata import HubMetadata
from pyspark_eventhubs.options import parse_options
from pyspark_eventhubs.positions import PartitionBounds

from .conftest import Hub

# Four partitions at 2 requests/s: a round (5 requests) does not fit one second of the pace.
SLOW_PACE = {"eventhubs.managementRequestsPerSecond": "2"}
SWEEP_SECONDS = 120.0  # a generous bound for one 2-chunk sweep on a loaded machine


@pytest.mark.integration
def test_a_large_hub_is_planned_from_the_sweep_and_the_next_sweep_sees_new_events(hub: Hub) -> None:
    metadata = HubMetadata(parse_options(hub.options(**SLOW_PACE)))
    try:
        first = metadata.bounds()  # what initialOffset does: a full round, the sweep's first answers
        assert {pid: b.latest for pid, b in first.items()} == {"0": 0, "1": 0, "2": 0, "3": 0}
        hub.send_per_partition({"3": 7})

        planned = metadata.recent_bounds()  # no request of its own: the answers of the last round
        assert {pid: b.latest for pid, b in planned.items()} == {"0": 0, "1": 0, "2": 0, "3": 0}
        assert metadata.sweep.wait(SWEEP_SECONDS), "the sweep started by recent_bounds never ended"
        assert metadata.sweep.sweeps == 1

        swept = metadata.recent_bounds()  # the sweep started after the send saw the events
        assert {pid: (b.earliest, b.latest) for pid, b in swept.items()} == {
            "0": (0, 0),
            "1": (0, 0),
            "2": (0, 0),
            "3": (0, 7),
        }
    finally:
        metadata.close()
    assert metadata.sweep.wait(0), "close() left a sweep running"


@pytest.mark.integration
def test_a_small_hub_gets_a_round_per_trigger(hub: Hub) -> None:
    metadata = HubMetadata(parse_options(hub.options()))  # default pace 50/s: 5 requests fit
    try:
        assert metadata.recent_bounds()["1"].latest == 0
        hub.send_per_partition({"1": 4})
        assert metadata.recent_bounds()["1"].latest == 4
        assert metadata.sweep.sweeps == 0
    finally:
        metadata.close()


@pytest.mark.integration
def test_a_restarted_query_asks_for_partitions_never_answered(hub: Hub) -> None:
    """A run resumed from a checkpoint knows the partition ids but has no answers yet: it waits once."""
    hub.send_per_partition({"0": 2, "2": 3})
    metadata = HubMetadata(parse_options(hub.options(**SLOW_PACE)))
    try:
        assert metadata.partition_ids() == ["0", "1", "2", "3"]
        planned = metadata.recent_bounds()
        assert {pid: b.latest for pid, b in planned.items()} == {"0": 2, "1": 0, "2": 3, "3": 0}
    finally:
        metadata.close()


def _bounds(ids: list[str], latest: int) -> dict[str, PartitionBounds]:
    return {pid: PartitionBounds(pid, 0, latest) for pid in ids}


def test_a_failed_sweep_is_raised_by_the_next_snapshot_and_one_sweep_runs_at_a_time() -> None:
    release = threading.Event()
    calls: list[list[str]] = []

    def fetch(ids: list[str]) -> dict[str, PartitionBounds]:
        calls.append(ids)
        release.wait(30)
        if ids == ["c"]:
            raise ConnectionError("management link detached")
        return _bounds(ids, 5)

    sweep = BoundsSweep(fetch, chunk_size=2, description="hub")
    sweep.update(_bounds(["a", "b", "c"], 1))
    assert sweep.request(["a", "b", "c"])
    assert not sweep.request(["a", "b", "c"]), "a second sweep started while one was running"
    release.set()
    assert sweep.wait(30)
    assert calls == [["a", "b"], ["c"]]
    with pytest.raises(ConnectionError, match="detached"):
        sweep.snapshot(["a", "b", "c"])
    # Raised once; the answers the failed sweep did get are kept.
    assert {pid: b.latest for pid, b in sweep.snapshot(["a", "b", "c"]).items()} == {"a": 5, "b": 5, "c": 1}
    assert sweep.sweeps == 0
    sweep.close(5)
    assert not sweep.request(["a"]), "a closed sweep started again"
