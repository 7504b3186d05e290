"""The backlog the Event Hubs source reports: events and seconds behind, per partition and in total.

Against the emulator on a real local Spark: events sent in groups a second apart, read in batches
smaller than the hub holds; every batch's report must say exactly the events left after its end
and the enqueued-time span between the newest event and the last one the batch read (read back
from the events themselves).
"""

from __future__ import annotations

import datetime
import json
import time
from pathlib import Path
from typing import Any

import pytest

from pyspark_eventhubs import EventPosition
from pyspark_eventhubs.backlog import (
    BACKLOG_KEY,
    BacklogMeter,
    BacklogMetric,
    PartitionBacklog,
    backlog_count,
    backlog_report,
    backlog_seconds,
    partition_backlog,
)
from pyspark_eventhubs.positions import PartitionBounds
from tests.support.query_attempts import run_query, wait_available_now

EARLIEST = EventPosition.start_of_stream().to_json()
T0 = datetime.datetime(2026, 11, 28, 10, 0, tzinfo=datetime.UTC)


def test_partition_backlog_counts_events_and_the_span_of_enqueued_times() -> None:
    later = T0 + datetime.timedelta(seconds=7.5)
    assert partition_backlog(10, 25, later, T0) == PartitionBacklog(15, 7.5)
    assert partition_backlog(25, 25, later, T0) == PartitionBacklog(0, 0.0)  # caught up
    assert partition_backlog(30, 25, later, T0) == PartitionBacklog(0, 0.0)  # never negative
    assert partition_backlog(10, 25, later, None) == PartitionBacklog(15, None)


def test_report_sums_events_takes_the_largest_seconds_and_says_unknown() -> None:
    report = backlog_report(
        {"0": PartitionBacklog(3, 2.0), "1": PartitionBacklog(4, 9.0), "2": PartitionBacklog(0, 0.0)}
    )
    assert report == {
        "eventsBehindLatest": 7,
        "secondsBehindLatest": 9.0,
        "partitions": {
            "0": {"eventsBehindLatest": 3, "secondsBehindLatest": 2.0},
            "1": {"eventsBehindLatest": 4, "secondsBehindLatest": 9.0},
            "2": {"eventsBehindLatest": 0, "secondsBehindLatest": 0.0},
        },
    }
    assert backlog_count(report) == 7 and backlog_seconds(report) == 9.0
    partly = backlog_report({"0": PartitionBacklog(3, None), "1": PartitionBacklog(4, 9.0)})
    assert partly[BacklogMetric.SECONDS] == 9.0  # the largest known
    unknown = backlog_report({"0": PartitionBacklog(3, None)})
    assert unknown[BacklogMetric.SECONDS] is None and backlog_seconds(unknown) is None
    assert backlog_count({BacklogMetric.FILES: 2, BacklogMetric.SECONDS: 1.0}) == 2
    assert backlog_count(None) is None and backlog_count({}) is None


def test_meter_looks_up_few_partitions_per_trigger_in_turn_and_never_the_same_position_twice() -> None:
    """20 partitions behind, 8 lookups per trigger: the most behind first, then the ones not looked
    up yet; a position once known (looked up, or seen as a partition's newest event) is not asked
    for again; a caught-up partition needs no lookup."""
    asked: list[dict[str, int]] = []

    def lookup(positions: dict[str, int]) -> dict[str, datetime.datetime]:
        asked.append(dict(positions))
        return {pid: T0 + datetime.timedelta(seconds=seq) for pid, seq in positions.items()}

    def bounds(latest: dict[str, int]) -> dict[str, PartitionBounds]:
        return {
            pid: PartitionBounds(pid, 0, n, T0 + datetime.timedelta(seconds=n - 1))
            for pid, n in latest.items()
        }

    latest = {str(p): 100 + p for p in range(20)} | {"20": 50}
    end = {str(p): 10 for p in range(20)} | {"20": 50}  # partition 20 is caught up
    meter = BacklogMeter(lookup, max_lookups=8)
    first = meter.measure(end, bounds(latest))
    assert asked == [{str(p): 9 for p in range(19, 11, -1)}]  # the eight most behind
    parts = first[BacklogMetric.PARTITIONS]
    assert parts["19"] == {"eventsBehindLatest": 109, "secondsBehindLatest": 109.0}  # 118 s - 9 s
    assert parts["0"] == {"eventsBehindLatest": 90, "secondsBehindLatest": None}  # not its turn yet
    assert parts["20"] == {"eventsBehindLatest": 0, "secondsBehindLatest": 0.0}
    assert first[BacklogMetric.EVENTS] == sum(latest[p] - end[p] for p in latest)
    assert first[BacklogMetric.SECONDS] == 109.0

    meter.measure(end, bounds(latest))
    meter.measure(end, bounds(latest))
    assert [sorted(a, key=int) for a in asked[1:]] == [
        [str(p) for p in range(4, 12)],
        [str(p) for p in range(0, 4)],
    ]
    fourth = meter.measure(end, bounds(latest))
    assert len(asked) == 3 and all(
        p[BacklogMetric.SECONDS] is not None for p in fourth[BacklogMetric.PARTITIONS].values()
    )
    # Caught up at the newest event seen before: known from the ranges, nothing asked.
    meter.measure(dict(latest), bounds(latest))
    more = {pid: n + 5 for pid, n in latest.items()}
    report = meter.measure(dict(latest), bounds(more))
    assert len(asked) == 3 and report[BacklogMetric.SECONDS] == 5.0


def _send_groups(hub: Any, partition: str, groups: int, size: int) -> None:
    """``groups`` sends of ``size`` events to ``partition``, a second apart (distinct enqueued times)."""
    for group in range(groups):
        if group:
            time.sleep(1.0)
        hub.send([f"{partition}-{group}-{i}" for i in range(size)], partition=partition)


@pytest.mark.integration
def test_every_batch_reports_the_exact_backlog_it_leaves(eh_spark: Any, hub: Any, tmp_path: Path) -> None:
    _send_groups(hub, "0", groups=3, size=10)  # sequence numbers 0..29
    _send_groups(hub, "1", groups=2, size=10)  # 0..19; partitions 2 and 3 stay empty
    options = hub.options(**{"eventhubs.startingPosition": EARLIEST, "maxEventsPerTrigger": "20"})
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"

    def start() -> Any:
        df = eh_spark.readStream.format("eventhubs").options(**options).load()
        return (
            df.writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )

    progress = run_query(start, lambda query: list(wait_available_now(query).recentProgress))
    batches = [p for p in progress if p["numInputRows"] > 0]
    assert sum(p["numInputRows"] for p in batches) == 50
    assert len(batches) == 3  # 20, 20, 10: every batch but the last leaves a backlog

    rows = eh_spark.read.parquet(str(out)).select("partition", "sequenceNumber", "enqueuedTime").collect()
    enqueued = {(r.partition, r.sequenceNumber): r.enqueuedTime for r in rows}
    assert len(enqueued) == 50
    latest = {"0": 30, "1": 20, "2": 0, "3": 0}
    newest = {pid: enqueued.get((pid, n - 1)) for pid, n in latest.items()}

    behind_seen = []
    for batch in batches:
        source = batch["sources"][0]
        end = json.loads(source["endOffset"])["hub1"]
        report = json.loads(source["latestOffset"])[BACKLOG_KEY]
        expected_events = {pid: latest[pid] - end[pid] for pid in latest}
        parts = report["partitions"]
        assert {pid: p[BacklogMetric.EVENTS] for pid, p in parts.items()} == expected_events
        assert report[BacklogMetric.EVENTS] == sum(expected_events.values())
        for pid, part in parts.items():
            if expected_events[pid] == 0:
                assert part[BacklogMetric.SECONDS] == 0.0
                continue
            span = (newest[pid] - enqueued[(pid, end[pid] - 1)]).total_seconds()
            assert part[BacklogMetric.SECONDS] == pytest.approx(span, abs=0.002)
        seconds = [p[BacklogMetric.SECONDS] for p in parts.values()]
        assert report[BacklogMetric.SECONDS] == max(seconds)
        behind_seen.append(report[BacklogMetric.EVENTS])
    assert behind_seen == [30, 10, 0]
    # The first batch stops short of the last group of partition 0: at least the second between groups.
    first = json.loads(batches[0]["sources"][0]["latestOffset"])[BACKLOG_KEY]
    assert first[BacklogMetric.SECONDS] >= 0.9


@pytest.mark.integration
def test_enqueued_time_lookup_never_takes_a_readers_place(hub: Any) -> None:
    """With every receiver place of partition 0 held (the tasks' readers), the driver's lookup leaves
    that partition out at once, without asking the holders to give one up; partition 1 is answered
    with the enqueued time of the very event asked for."""
    from pyspark_eventhubs.hub_metadata import HubMetadata
    from pyspark_eventhubs.options import parse_options
    from pyspark_eventhubs.receiver_slots import ReceiverSlot, is_wanted, slot_key, slot_limit

    hub.send([f"a-{i}" for i in range(3)], partition="0")
    hub.send([f"b-{i}" for i in range(3)], partition="1")
    options = parse_options(hub.options())
    held = [ReceiverSlot.acquire(options, "0", 1.0) for _ in range(slot_limit(options))]
    metadata = HubMetadata(options)
    since = time.time()
    try:
        found = metadata.enqueued_times({"0": 1, "1": 2})
        newest = metadata.bounds(["1"])["1"].last_enqueued_time
    finally:
        metadata.close()
        for slot in held:
            slot.release()
    assert set(found) == {"1"}
    assert not is_wanted(slot_key(options, "0"), since)
    assert found["1"] == newest  # event 2 is partition 1's newest
