"""Streaming reads against the emulator on a real local Spark: exactly once, limits, data loss."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from pyspark_eventhubs import EventPosition
from pyspark_eventhubs.schema import EVENTHUBS_SCHEMA
from tests.support.query_attempts import run_query, wait_available_now

pytestmark = pytest.mark.integration

EARLIEST = EventPosition.start_of_stream().to_json()


def run_available_now(spark: Any, options: dict[str, str], checkpoint: Path, out: Path) -> list[dict]:
    """One availableNow run into parquet; returns the progress of every micro-batch."""

    def start() -> Any:
        df = spark.readStream.format("eventhubs").options(**options).load()
        return (
            df.writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )

    return run_query(start, lambda query: list(wait_available_now(query).recentProgress))


def read_bodies(spark: Any, out: Path) -> list[str]:
    return [bytes(r.body).decode() for r in spark.read.parquet(str(out)).select("body").collect()]


def test_available_now_reads_backlog_in_limited_batches_exactly_once_across_restart(
    eh_spark: Any, hub: Any, tmp_path: Path
) -> None:
    sent = hub.send_per_partition({"0": 40, "1": 90, "2": 10, "3": 90})  # 230 events
    options = hub.options(**{"eventhubs.startingPosition": EARLIEST, "maxEventsPerTrigger": "80"})
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"

    progress = run_available_now(eh_spark, options, ckpt, out)
    sizes = [p["numInputRows"] for p in progress if p["numInputRows"] > 0]
    assert sizes == [80, 80, 70]
    bodies = read_bodies(eh_spark, out)
    assert len(bodies) == 230 and set(bodies) == sent

    # The checkpoint holds the Scala connector's offset JSON.
    logs = [p for p in (ckpt / "offsets").iterdir() if p.name.isdigit()]
    last_offsets = max(logs, key=lambda p: int(p.name))
    assert json.loads(last_offsets.read_text().splitlines()[-1]) == {
        "hub1": {"0": 40, "1": 90, "2": 10, "3": 90}
    }
    # Spark's progress shows how far the hub is (reportLatestOffset), and the backlog left: none.
    latest = json.loads(progress[-1]["sources"][0]["latestOffset"])
    assert latest.pop("$backlog")["eventsBehindLatest"] == 0
    assert latest == {"hub1": {"0": 40, "1": 90, "2": 10, "3": 90}}

    more = hub.send_per_partition({"0": 7, "3": 5}, prefix="second")
    progress = run_available_now(eh_spark, options, ckpt, out)
    assert sum(p["numInputRows"] for p in progress) == 12
    bodies = read_bodies(eh_spark, out)
    assert len(bodies) == 242 and set(bodies) == sent | more

    # Nothing new: the run ends without reading anything.
    progress = run_available_now(eh_spark, options, ckpt, out)
    assert sum(p["numInputRows"] for p in progress) == 0


def test_processing_time_query_stopped_and_restarted_loses_and_repeats_nothing(
    eh_spark: Any, hub: Any, tmp_path: Path
) -> None:
    first = hub.send_per_partition({"0": 30, "1": 30, "2": 30, "3": 30})
    options = hub.options(**{"eventhubs.startingPosition": EARLIEST, "maxEventsPerTrigger": "60"})
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"

    def start() -> Any:
        return (
            eh_spark.readStream.format("eventhubs")
            .options(**options)
            .load()
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(ckpt))
            .trigger(processingTime="200 milliseconds")
            .start()
        )

    query = start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    second = hub.send_per_partition({"1": 11, "2": 3}, prefix="later")
    query = start()
    try:
        query.processAllAvailable()
        assert all(p["numInputRows"] <= 60 for p in query.recentProgress)
    finally:
        query.stop()
    bodies = read_bodies(eh_spark, out)
    assert len(bodies) == 134 and set(bodies) == first | second


def test_stream_schema_and_columns(eh_spark: Any, hub: Any, tmp_path: Path) -> None:
    hub.send(["k-event"], key="user-7", properties={"kind": "click"})
    df = (
        eh_spark.readStream.format("eventhubs")
        .options(**hub.options(**{"eventhubs.startingPosition": EARLIEST}))
        .load()
    )
    assert df.schema == EVENTHUBS_SCHEMA
    progress = run_available_now(
        eh_spark, hub.options(**{"eventhubs.startingPosition": EARLIEST}), tmp_path / "c", tmp_path / "o"
    )
    assert sum(p["numInputRows"] for p in progress) == 1
    row = eh_spark.read.parquet(str(tmp_path / "o")).collect()[0]
    assert bytes(row.body) == b"k-event"
    assert row.partitionKey == "user-7" and row.properties == {"kind": "click"}
    assert row.sequenceNumber == 0 and row.offset is not None and row.enqueuedTime is not None
    assert row.partition in {"0", "1", "2", "3"}


def test_new_partitions_are_picked_up_from_their_earliest_event(
    eh_spark: Any, hub: Any, tmp_path: Path
) -> None:
    before = hub.send_per_partition({"0": 5, "1": 5, "2": 5, "3": 5})
    options = hub.options(**{"eventhubs.startingPosition": EARLIEST})
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    run_available_now(eh_spark, options, ckpt, out)
    hub.emulator.add_partitions("hub1", 6)
    after = hub.send_per_partition({"4": 3, "5": 4, "0": 1}, prefix="grown")
    progress = run_available_now(eh_spark, options, ckpt, out)
    assert sum(p["numInputRows"] for p in progress) == 8
    rows = eh_spark.read.parquet(str(out)).select("partition", "body").collect()
    assert len(rows) == 28 and {bytes(r.body).decode() for r in rows} == before | after
    assert {r.partition for r in rows} == {"0", "1", "2", "3", "4", "5"}


def _lose_events(eh_spark: Any, hub: Any, tmp_path: Path, fail_on_data_loss: str) -> tuple[Any, Path]:
    """Read 20 events of partition 0, send 20 more, expire 10 of them; options for a 2nd run.

    The 2nd run uses another consumer group: a receiver cached by the 1st run would already hold
    the new events (prefetched before they expired — correctly not data loss), which would make
    the outcome depend on which Python worker gets the task.
    """
    hub.send([f"old-{i}" for i in range(20)], partition="0")
    options = hub.options(**{"eventhubs.startingPosition": EARLIEST, "failOnDataLoss": fail_on_data_loss})
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    run_available_now(eh_spark, options, ckpt, out)
    hub.send([f"new-{i}" for i in range(20)], partition="0")
    hub.emulator.truncate("hub1", partition="0", before_sequence_number=30)
    return {**options, "eventhubs.consumerGroup": "cg1"}, out


def test_fail_on_data_loss_true_fails_naming_partition_and_range(
    eh_spark: Any, hub: Any, tmp_path: Path
) -> None:
    options, out = _lose_events(eh_spark, hub, tmp_path, "true")
    with pytest.raises(Exception) as info:
        run_available_now(eh_spark, options, tmp_path / "ckpt", out)
    message = str(info.value)
    assert "partition 0" in message and "[20, 30)" in message
    assert "failOnDataLoss" in message


def test_fail_on_data_loss_false_skips_expired_events_and_continues(
    eh_spark: Any, hub: Any, tmp_path: Path
) -> None:
    options, out = _lose_events(eh_spark, hub, tmp_path, "false")
    progress = run_available_now(eh_spark, options, tmp_path / "ckpt", out)
    assert sum(p["numInputRows"] for p in progress) == 10
    bodies = set(read_bodies(eh_spark, out))
    assert bodies == {f"old-{i}" for i in range(20)} | {f"new-{i}" for i in range(10, 20)}


def _last_offsets(checkpoint: Path) -> dict:
    logs = [p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()]
    return json.loads(max(logs, key=lambda p: int(p.name)).read_text().splitlines()[-1])


def test_partition_whose_unread_events_all_expired_never_blocks_and_the_loss_is_reported(
    eh_spark: Any, hub: Any, tmp_path: Path
) -> None:
    """The driver moves the start past events that expired unread (failOnDataLoss=false) instead
    of planning a range no receiver can deliver (which used to wait out receiverTimeout and fail);
    the loss reaches the query's progress and, through the job runtime's listener, status.json."""
    from hubflow.status import JobStatus, StatusFolder
    from hubflow_jobs.runtime.listener import StatusListener, summarize_source

    hub.send([f"old-{i}" for i in range(20)], partition="0")
    options = hub.options(
        **{
            "eventhubs.startingPosition": EARLIEST,
            "failOnDataLoss": "false",
            "eventhubs.receiverTimeout": "PT4M",  # longer than run_available_now waits
        }
    )
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    run_available_now(eh_spark, options, ckpt, out)
    hub.send([f"gone-{i}" for i in range(10)], partition="0")
    hub.emulator.truncate("hub1", partition="0", before_sequence_number=30)  # partition 0 is empty now

    folder = StatusFolder(str(tmp_path / "status"))
    listener = StatusListener(JobStatus(folder, "bronze"))
    eh_spark.streams.addListener(listener)
    try:
        progress = run_available_now(eh_spark, options, ckpt, out)
        # Listener events arrive on Spark's listener bus after the query ended: wait for the one
        # carrying the loss (the status.json a job writes, which the status page reads).
        deadline = time.monotonic() + 60
        while not (folder.status() or {}).get("data_loss") and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        eh_spark.streams.removeListener(listener)
    assert sum(p["numInputRows"] for p in progress) == 0
    assert _last_offsets(ckpt) == {"hub1": {"0": 30, "1": 0, "2": 0, "3": 0}}
    loss = {"0": {"events": 10, "lastLostRange": [20, 30]}}
    assert json.loads(progress[-1]["sources"][0]["latestOffset"])["$dataLoss"] == loss
    summary = summarize_source(progress[-1].sources[0])
    assert summary["data_loss"] == loss
    assert summary["latest_offset"] == {"hub1": {"0": 30, "1": 0, "2": 0, "3": 0}}
    assert summary["backlog"]["eventsBehindLatest"] == 0
    status = folder.status() or {}
    assert status.get("data_loss") == {summary["description"]: loss}
    assert "$dataLoss" not in json.dumps(status) and "$backlog" not in json.dumps(status)

    hub.send(["after-the-gap"], partition="0")
    progress = run_available_now(eh_spark, options, ckpt, out)
    assert sum(p["numInputRows"] for p in progress) == 1
    assert sorted(read_bodies(eh_spark, out)) == sorted([f"old-{i}" for i in range(20)] + ["after-the-gap"])


def test_batch_limits_default_and_per_partition_rates_follow_the_scala_connector(
    eh_spark: Any, tmp_path: Path
) -> None:
    """maxEventsPerTrigger defaults to 1000 x partitions; eventhubs.maxRatePerPartition caps every
    partition per batch and eventhubs.maxRatesPerPartition single ones (the DStream rules)."""
    from eventhubs_emulator import Emulator, EmulatorConfig
    from pyspark_eventhubs import position_key

    from .conftest import Hub

    with Emulator(EmulatorConfig.single_hub("two", partition_count=2), port=0) as emu:
        hub = Hub(emu, "two", emu.connection_string("two"))
        sent = hub.send_per_partition({"0": 2030, "1": 20})
        base = hub.options(**{"eventhubs.startingPosition": EARLIEST})

        progress = run_available_now(eh_spark, base, tmp_path / "c1", tmp_path / "o1")
        assert [p["numInputRows"] for p in progress if p["numInputRows"]] == [2000, 50]

        rates = {
            **base,
            "eventhubs.maxRatePerPartition": "900",
            "eventhubs.maxRatesPerPartition": json.dumps({position_key("two", 1): 8}),
        }
        progress = run_available_now(eh_spark, rates, tmp_path / "c2", tmp_path / "o2")
        assert [p["numInputRows"] for p in progress if p["numInputRows"]] == [908, 908, 234]
        bodies = read_bodies(eh_spark, tmp_path / "o2")
        assert len(bodies) == 2050 and set(bodies) == sent
