"""The executor read path without Spark: exact ranges, receiver reuse, data loss, timeouts.

Runs ``read_range`` in the test process against the emulator with the real SDK; this is the code
every Spark task runs, and here its receiver cache can be inspected directly.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pyspark_eventhubs.errors import EventHubsDataLossError, EventHubsReadError
from pyspark_eventhubs.options import EventHubsOptions, parse_options
from pyspark_eventhubs.receiver_cache import RECEIVERS, ReceiverCache, read_range

from .conftest import Hub

pytestmark = pytest.mark.integration


def _read(options: EventHubsOptions, partition: str, start: int, end: int) -> list[tuple[int, bytes]]:
    rows: list[tuple[int, bytes]] = []
    for batch in read_range(options, partition, start, end):
        seqs, bodies = batch.column("sequenceNumber").to_pylist(), batch.column("body").to_pylist()
        rows.extend(zip(seqs, bodies, strict=True))
    return rows


@pytest.fixture
def filled(hub: Hub) -> Iterator[tuple[Hub, EventHubsOptions]]:
    hub.send([f"ev-{i}" for i in range(30)], partition="1")
    yield hub, parse_options(hub.options(**{"eventhubs.receiverTimeout": "PT2S"}))


def _cached(options: EventHubsOptions, partition: str) -> object:
    return RECEIVERS._idle.get(ReceiverCache.key(options, partition))


def test_consecutive_ranges_reuse_one_receiver_and_keep_its_prefetch(
    filled: tuple[Hub, EventHubsOptions],
) -> None:
    _, options = filled
    assert _read(options, "1", 0, 3) == [(i, f"ev-{i}".encode()) for i in range(3)]
    receiver = _cached(options, "1")
    assert receiver is not None and receiver.next_seq == 3  # type: ignore[attr-defined]
    # The rest was prefetched already; the next range continues on the same receiver.
    assert _read(options, "1", 3, 30) == [(i, f"ev-{i}".encode()) for i in range(3, 30)]
    assert _cached(options, "1") is receiver
    # A range elsewhere gets a fresh receiver at the right place.
    assert _read(options, "1", 10, 12) == [(10, b"ev-10"), (11, b"ev-11")]
    assert _cached(options, "1") is not receiver


def test_range_past_the_end_times_out_instead_of_returning_short(
    filled: tuple[Hub, EventHubsOptions],
) -> None:
    _, options = filled
    with pytest.raises(EventHubsReadError, match=r"receiverTimeout.*\[30, 35\)"):
        _read(options, "1", 25, 35)
    assert _cached(options, "1") is None  # a failed receiver is not reused


def test_expired_events_fail_or_are_skipped(filled: tuple[Hub, EventHubsOptions]) -> None:
    hub, options = filled
    hub.emulator.truncate("hub1", partition="1", before_sequence_number=12)
    with pytest.raises(EventHubsDataLossError, match=r"partition 1.*\[5, 12\)"):
        _read(options, "1", 5, 20)
    lenient = parse_options(hub.options(failOnDataLoss="false"))
    assert [seq for seq, _ in _read(lenient, "1", 5, 20)] == list(range(12, 20))
    assert _read(lenient, "1", 0, 8) == []  # everything asked for expired


def test_dropped_connection_is_reopened_at_the_right_sequence_number(
    filled: tuple[Hub, EventHubsOptions],
) -> None:
    hub, options = filled
    assert [seq for seq, _ in _read(options, "1", 0, 5)] == list(range(5))
    assert hub.emulator.faults.drop_connections() >= 1  # kills the cached receiver's connection
    hub.send([f"late-{i}" for i in range(5)], partition="1")
    rows = _read(options, "1", 5, 35)
    assert [seq for seq, _ in rows] == list(range(5, 35))
    assert rows[-1] == (34, b"late-4")
