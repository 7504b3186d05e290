"""A task with several ranges opens the receivers of its later ranges at once, ahead of reading them.

Runs ``read_task`` in the test process against the emulator with the real SDK (the code every
Spark task runs), on both receive paths, and counts the links the emulator sees.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest

from pyspark_eventhubs import receiver_cache
from pyspark_eventhubs.options import parse_options
from pyspark_eventhubs.read_tasks import EventHubsReadTask, read_task
from pyspark_eventhubs.receiver_cache import RECEIVERS

from .conftest import Hub

pytestmark = pytest.mark.integration


@dataclass
class Opened:
    """The receive path under test and the receivers constructed per partition on it."""

    path: str
    counts: Counter[str] = field(default_factory=Counter)


@pytest.fixture(params=["fast", "sdk"])
def opened(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Opened:
    """Counts the receivers constructed, on the fast receive path (the default) or the SDK's."""
    result = Opened(request.param)
    name = "FastPartitionReceiver" if request.param == "fast" else "PartitionReceiver"
    real = getattr(receiver_cache, name)

    class Counted(real):  # type: ignore[misc, valid-type]
        def __init__(self, options: Any, partition_id: str, *args: Any, **kwargs: Any) -> None:
            result.counts[partition_id] += 1
            super().__init__(options, partition_id, *args, **kwargs)

    monkeypatch.setattr(receiver_cache, name, Counted)
    return result


def _options(hub: Hub, opened: Opened) -> Any:
    fast = "true" if opened.path == "fast" else "false"
    return parse_options(
        hub.options(**{"eventhubs.useFastReceiver": fast, "eventhubs.receiverTimeout": "PT30S"})
    )


def _attached(hub: Hub, partition: str) -> int:
    return hub.emulator.consumer_count("hub1", partition)


def _wait_until(condition: Any, seconds: float = 60.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_a_packed_task_opens_its_later_receivers_before_it_reads_them(hub: Hub, opened: Opened) -> None:
    sent = hub.send_per_partition({"0": 5, "1": 5, "2": 5, "3": 5})
    options = _options(hub, opened)
    task = EventHubsReadTask((("0", 0, 5), ("1", 0, 5), ("2", 0, 5), ("3", 0, 5)))

    rows = read_task(options, task)
    first = next(rows)  # partition 0's events; the generator stops here until asked again
    assert set(first.column("partition").to_pylist()) == {"0"}
    assert _wait_until(lambda: all(_attached(hub, p) == 1 for p in "123")), (
        "partitions 1-3 should be attached while the task still reads partition 0: "
        f"{[_attached(hub, p) for p in '0123']}"
    )

    bodies = [b.decode() for b in first.column("body").to_pylist()]
    for batch in rows:
        bodies += [b.decode() for b in batch.column("body").to_pylist()]
    assert sorted(bodies) == sorted(sent)  # every event once
    assert {p: opened.counts[p] for p in "0123"} == {p: 1 for p in "0123"}  # one receiver per partition
    assert [_attached(hub, p) for p in "0123"] == [1, 1, 1, 1]
    RECEIVERS.close_all()


def test_a_borrow_waits_for_the_receiver_of_its_partition_still_opening(hub: Hub, opened: Opened) -> None:
    hub.send(["a", "b"], partition="2")
    options = _options(hub, opened)

    RECEIVERS.open_ahead(options, [("2", 0)])
    receiver = RECEIVERS.borrow(options, "2", 0)  # at once: the open above has not finished
    try:
        assert opened.counts["2"] == 1, "the borrow opened a second receiver beside the one opening ahead"
        assert receiver.next_seq == 0
        assert _attached(hub, "2") == 1
    finally:
        RECEIVERS.give_back(options, receiver)
        RECEIVERS.close_all()


def test_a_receiver_that_cannot_open_ahead_is_reported_by_the_read_itself(hub: Hub, opened: Opened) -> None:
    hub.send(["a"], partition="0")
    options = _options(hub, opened)
    task = EventHubsReadTask((("0", 0, 1), ("7", 0, 1)))  # hub1 has partitions 0-3

    with pytest.raises(Exception, match="7") as failure:
        list(read_task(options, task))
    assert "Traceback" not in str(failure.value)
    RECEIVERS.close_all()
