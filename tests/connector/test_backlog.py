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
    BacklogMetric,
    PartitionBacklog,
    backlog_count,
    backlog_report,
    backlog_seconds,
    partition_backlog,
)
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
    unknown = backlog_report({"0": PartitionBacklog(3, None), "1": PartitionBacklog(4, 9.0)})
    assert unknown[BacklogMetric.SECONDS] is None and backlog_seconds(unknown) is None
    assert backlog_count({BacklogMetric.FILES: 2, BacklogMetric.SECONDS: 1.0}) == 2
    assert backlog_count(None) is None and backlog_count({}) is None


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
