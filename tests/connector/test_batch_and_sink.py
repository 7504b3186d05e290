"""Batch reads (time windows) and the sink (batch and streaming) against the emulator."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pyspark_eventhubs import EventPosition
from tests.support.query_attempts import run_query, wait_available_now

from .conftest import Hub, producer_links

pytestmark = pytest.mark.integration


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def test_batch_read_defaults_to_everything_retained(eh_spark: Any, hub: Hub) -> None:
    sent = hub.send_per_partition({"0": 3, "1": 0, "2": 7, "3": 1})
    rows = eh_spark.read.format("eventhubs").options(**hub.options()).load().collect()
    assert sorted(bytes(r.body).decode() for r in rows) == sorted(sent)
    assert {(r.partition, r.sequenceNumber) for r in rows if r.partition == "2"} == {
        ("2", i) for i in range(7)
    }


def test_batch_read_of_an_enqueued_time_window(eh_spark: Any, hub: Hub) -> None:
    before = hub.send_per_partition({"0": 4, "1": 4, "2": 4, "3": 4}, prefix="before")
    time.sleep(0.2)
    t0 = _now()
    time.sleep(0.05)
    inside = hub.send_per_partition({"0": 5, "1": 2, "3": 6}, prefix="inside")
    time.sleep(0.05)
    t1 = _now()
    time.sleep(0.2)
    after = hub.send_per_partition({"0": 3, "2": 3}, prefix="after")

    df = (
        eh_spark.read.format("eventhubs")
        .options(**hub.options())
        .option("eventhubs.startingPosition", EventPosition.from_enqueued_time(t0).to_json())
        .option("eventhubs.endingPosition", EventPosition.from_enqueued_time(t1).to_json())
        .load()
    )
    rows = df.collect()
    bodies = [bytes(r.body).decode() for r in rows]
    assert sorted(bodies) == sorted(inside)
    assert not (set(bodies) & (before | after))
    assert all(t0 <= r.enqueuedTime.replace(tzinfo=datetime.UTC) < t1 for r in rows)


def test_batch_read_with_per_partition_sequence_numbers(eh_spark: Any, hub: Hub) -> None:
    from pyspark_eventhubs import position_key

    hub.send_per_partition({"0": 10, "1": 10})
    starts = {
        position_key("hub1", 0): {"seqNo": 3, "isInclusive": True},
        position_key("hub1", 1): {"seqNo": 8, "isInclusive": False},
    }
    ends = {position_key("hub1", 0): {"seqNo": 5, "isInclusive": True}}
    import json

    rows = (
        eh_spark.read.format("eventhubs")
        .options(**hub.options())
        .option("eventhubs.startingPositions", json.dumps(starts))
        .option("eventhubs.endingPositions", json.dumps(ends))
        .option("eventhubs.endingPosition", '{"offset": "@latest"}')
        .load()
        .select("partition", "sequenceNumber")
        .collect()
    )
    assert sorted((r.partition, r.sequenceNumber) for r in rows) == [
        ("0", 3),
        ("0", 4),
        ("0", 5),
        ("1", 9),
    ]


def test_sink_round_trip_with_keys_and_properties(eh_spark: Any, hub: Hub) -> None:
    data = [(f"body-{i}", f"key-{i % 5}", {"n": str(i), "src": "test"}) for i in range(200)]
    df = eh_spark.createDataFrame(data, "body string, partitionKey string, properties map<string,string>")
    df.repartition(3).write.format("eventhubs").options(**hub.options()).mode("append").save()

    rows = eh_spark.read.format("eventhubs").options(**hub.options()).load().collect()
    assert len(rows) == 200
    by_body = {bytes(r.body).decode(): r for r in rows}
    assert set(by_body) == {d[0] for d in data}
    partition_of_key: dict[str, set[str]] = {}
    for body, key, props in data:
        row = by_body[body]
        assert row.partitionKey == key
        assert row.properties == props
        partition_of_key.setdefault(key, set()).add(row.partition)
    assert all(len(p) == 1 for p in partition_of_key.values())  # a key always lands together

    by_id = eh_spark.createDataFrame([(b"x1", 2), (b"x2", 3), (b"x3", 2)], "body binary, partitionId int")
    by_id.write.format("eventhubs").options(**hub.options()).mode("append").save()
    rows = eh_spark.read.format("eventhubs").options(**hub.options()).load().collect()
    placed = {bytes(r.body): r.partition for r in rows if bytes(r.body).startswith(b"x")}
    assert placed == {b"x1": "2", b"x2": "3", b"x3": "2"}


def test_streaming_sink_copies_one_hub_into_another(eh_spark: Any, tmp_path: Path) -> None:
    from eventhubs_emulator import Emulator, EmulatorConfig

    with Emulator(EmulatorConfig.many_hubs({"src": 2, "dst": 3}), port=0) as emu:
        src = Hub(emu, "src", emu.connection_string("src"))
        dst = Hub(emu, "dst", emu.connection_string("dst"))
        sent = src.send_per_partition({"0": 30, "1": 25})

        def start() -> Any:
            return (
                eh_spark.readStream.format("eventhubs")
                .options(**src.options(**{"eventhubs.startingPosition": '{"offset": "-1"}'}))
                .option("maxEventsPerTrigger", "30")
                .load()
                .selectExpr("body", "concat('copy-', partition) AS partitionKey", "properties")
                .writeStream.format("eventhubs")
                .options(**dst.options())
                .option("checkpointLocation", str(tmp_path / "ckpt"))
                .trigger(availableNow=True)
                .start()
            )

        run_query(start, wait_available_now)
        rows = eh_spark.read.format("eventhubs").options(**dst.options()).load().collect()
        assert sorted(bytes(r.body).decode() for r in rows) == sorted(sent)
        assert {r.partitionKey for r in rows} == {"copy-0", "copy-1"}


def test_streaming_sink_keeps_its_producer_across_micro_batches_and_replaces_a_broken_one(
    eh_spark: Any, tmp_path: Path
) -> None:
    """A processingTime stream hub -> select -> hub, one round of events per micro-batch. The
    Python workers keep their producer between micro-batches: every batch's send (one small batch,
    round-robin, on the hub-level link) is on a link the emulator still has open after the last
    batch, and there are fewer such links than batches. Then the emulator drops every connection
    (as a restart does): the next batches open new producers, and every event arrives."""
    from eventhubs_emulator import Emulator, EmulatorConfig

    with Emulator(EmulatorConfig.many_hubs({"src": 2, "dst": 2}), port=0) as emu:
        src = Hub(emu, "src", emu.connection_string("src"))
        dst = Hub(emu, "dst", emu.connection_string("dst"))
        sent: set[str] = set()
        rounds = iter(range(1000))

        def send_round() -> None:
            sent.update(src.send_per_partition({"0": 5, "1": 5}, prefix=f"round{next(rounds)}"))

        def start() -> Any:
            return (
                eh_spark.readStream.format("eventhubs")
                .options(**src.options(**{"eventhubs.startingPosition": '{"offset": "-1"}'}))
                .load()
                .selectExpr("body")
                .writeStream.format("eventhubs")
                .options(**dst.options())
                .option("checkpointLocation", str(tmp_path / "ckpt"))
                .trigger(processingTime="100 milliseconds")
                .start()
            )

        def drive(query: Any) -> tuple[int, dict[str, int], dict[str, int]]:
            for _ in range(5):
                send_round()
                query.processAllAvailable()
            batches = sum(1 for p in query.recentProgress if p["numInputRows"] > 0)
            kept = producer_links(emu, "dst")
            assert emu.faults.drop_connections() > 0
            for _ in range(2):
                send_round()
                query.processAllAvailable()
            assert query.exception() is None
            return batches, kept, producer_links(emu, "dst")

        batches, kept, replaced = run_query(start, drive)
        rows = eh_spark.read.format("eventhubs").options(**dst.options()).load().collect()

    assert batches >= 5
    assert sum(kept.values()) == batches, "every batch sent on a link still open after the last one"
    assert len(kept) < batches, "batches shared producers (their links)"
    assert replaced and set(replaced).isdisjoint(kept), "new producers after the connections dropped"
    bodies = [bytes(r.body).decode() for r in rows]
    assert set(bodies) == sent, f"{len(sent - set(bodies))} events lost"


@pytest.fixture
def no_events_sent(hub: Hub) -> Iterator[Hub]:
    yield hub
    from azure.eventhub import EventHubConsumerClient

    client = EventHubConsumerClient.from_connection_string(hub.connection_string, "$Default")
    try:
        for pid in client.get_partition_ids():
            assert client.get_partition_properties(pid)["is_empty"], "an event was sent"
    finally:
        client.close()


@pytest.mark.parametrize(
    ("select", "named"),
    [
        ("'v' AS value", "'body'"),
        ("1 AS body", "'body'"),
        ("'b' AS body, map('a', 1) AS properties", "'properties'"),
    ],
)
def test_bad_sink_columns_fail_before_any_task(
    eh_spark: Any, no_events_sent: Hub, select: str, named: str
) -> None:
    df = eh_spark.sql(f"SELECT {select} FROM range(3)")
    with pytest.raises(Exception) as info:
        df.write.format("eventhubs").options(**no_events_sent.options()).mode("append").save()
    assert named in str(info.value)


def test_the_read_schema_writes_back_and_only_rows_setting_key_and_id_are_refused(
    eh_spark: Any,
) -> None:
    """As in the Scala sink: both columns may be there (the read schema has partition and
    partitionKey); a row that sets both is refused, naming the columns and the fix."""
    from eventhubs_emulator import Emulator, EmulatorConfig

    with Emulator(EmulatorConfig.many_hubs({"src": 2, "dst": 2}), port=0) as emu:
        src = Hub(emu, "src", emu.connection_string("src"))
        dst = Hub(emu, "dst", emu.connection_string("dst"))
        sent = src.send_per_partition({"0": 4, "1": 3})
        read = eh_spark.read.format("eventhubs").options(**src.options()).load()
        read.write.format("eventhubs").options(**dst.options()).mode("append").save()
        copied = eh_spark.read.format("eventhubs").options(**dst.options()).load().collect()
        assert sorted(bytes(r.body).decode() for r in copied) == sorted(sent)
        assert all(bytes(r.body).decode().startswith(f"e-{r.partition}-") for r in copied)

        src.send(["keyed"], key="user-1")
        keyed = (
            eh_spark.read.format("eventhubs")
            .options(**src.options())
            .load()
            .where("partitionKey IS NOT NULL")
        )
        with pytest.raises(Exception) as info:
            keyed.write.format("eventhubs").options(**dst.options()).mode("append").save()
        message = str(info.value)
        assert "sets both 'partitionKey' ('user-1') and 'partition'" in message
        assert "set one of them to null" in message


def test_min_partitions_splits_ranges_without_gaps_or_duplicates(eh_spark: Any, hub: Hub) -> None:
    sent = hub.send_per_partition({"0": 40, "1": 9})
    df = (
        eh_spark.read.format("eventhubs")
        .options(**hub.options(minPartitions="5", **{"eventhubs.useExclusiveReceiver": "false"}))
        .load()
    )
    assert df.rdd.getNumPartitions() >= 5
    rows = df.select("partition", "sequenceNumber", "body").collect()
    assert sorted(bytes(r.body).decode() for r in rows) == sorted(sent)
    assert sorted((r.partition, r.sequenceNumber) for r in rows) == sorted(
        [("0", i) for i in range(40)] + [("1", i) for i in range(9)]
    )


@pytest.mark.parametrize(("min_events_per_task", "tasks"), [(None, 1), ("0", 3), ("30", 2)])
def test_small_ranges_share_tasks_and_every_event_is_read_once(
    eh_spark: Any, hub: Hub, min_events_per_task: str | None, tasks: int
) -> None:
    """Default: 3 small ranges are one task; 0: one task per range; 30: tasks of about 30 events."""
    sent = hub.send_per_partition({"0": 25, "1": 9, "2": 0, "3": 17})
    extra = {} if min_events_per_task is None else {"eventhubs.minEventsPerTask": min_events_per_task}
    df = eh_spark.read.format("eventhubs").options(**hub.options(**extra)).load()
    assert df.rdd.getNumPartitions() == tasks
    rows = df.select("partition", "sequenceNumber", "body").collect()
    assert sorted(bytes(r.body).decode() for r in rows) == sorted(sent)
    assert sorted((r.partition, r.sequenceNumber) for r in rows) == sorted(
        [("0", i) for i in range(25)] + [("1", i) for i in range(9)] + [("3", i) for i in range(17)]
    )


def test_exclusive_receivers_read_the_same_events(eh_spark: Any, hub: Hub) -> None:
    sent = hub.send_per_partition({"2": 12})
    rows = (
        eh_spark.read.format("eventhubs")
        .options(**hub.options(**{"eventhubs.useExclusiveReceiver": "true"}))
        .load()
        .collect()
    )
    assert sorted(bytes(r.body).decode() for r in rows) == sorted(sent)
