"""A pipeline's ``kind: eventhubs_kafka`` source: Spark's Kafka source over the emulator's Kafka
endpoint, from the same connection string as ``kind: eventhubs``. One function runs both ways on the
same AMQP-sent events and lands the same rows; its checkpoint holds no secret."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hubflow.status.exit_codes import EXIT_OK

from .helpers import EmulatedHub
from .pipelines_support import (
    NUMBER_EVENTS,
    check_events_once,
    kill_after_first_commit,
    numbered_events,
    pipeline_config,
    query_id,
    recorded_batches,
    run_on_session,
    write_module,
)

pytestmark = pytest.mark.integration

ENV_VAR = "HUBFLOW_TEST_KAFKA_KIND_CONNECTION"

#: One row per event, from the columns both kinds fill alike.
ROWS = """
from pyspark.sql import functions as F


def rows(events):
    return events.select(
        "partition",
        "sequenceNumber",
        "enqueuedTime",
        "partitionKey",
        F.col("body").cast("string").alias("text"),
        F.col("properties")["device"].alias("device"),
        "properties",
    )
"""


@pytest.fixture
def kafka_hub() -> Iterator[tuple[EmulatedHub, str]]:
    """An emulator with hub ``hub1`` (2 partitions) and a Kafka port; the hub and its bootstrap address."""
    from eventhubs_emulator import Emulator, EmulatorConfig

    with Emulator(EmulatorConfig.many_hubs({"hub1": 2}, kafka_port=0)) as emulator:
        yield EmulatedHub("hub1", emulator.connection_string("hub1"), partitions=2), emulator.kafka_bootstrap
    from pyspark_eventhubs.receiver_cache import RECEIVERS

    RECEIVERS.close_all()


@pytest.fixture
def kafka_env(kafka_hub: tuple[EmulatedHub, str], monkeypatch: pytest.MonkeyPatch) -> tuple[EmulatedHub, str]:
    """``kafka_hub`` with its connection string in ``ENV_VAR``, where the sources' config points."""
    monkeypatch.setenv(ENV_VAR, kafka_hub[0].connection_string)
    return kafka_hub


def send_with_properties(hub: EmulatedHub, count: int, first: int = 0) -> set[str]:
    """Send ``count`` events over AMQP, each with application properties and a partition key; their texts."""
    from azure.eventhub import EventData, EventHubProducerClient

    producer = EventHubProducerClient.from_connection_string(hub.connection_string)
    texts = set()
    try:
        for key in ("a", "b", "c"):
            batch = producer.create_batch(partition_key=f"key-{key}")
            for n in range(first, first + count):
                if "abc"[n % 3] != key:
                    continue
                event = EventData(f"event-{n}")
                event.properties = {"device": f"d{n % 5}", "n": str(n)}
                batch.add(event)
                texts.add(f"event-{n}")
            producer.send_batch(batch)
    finally:
        producer.close()
    return texts


def _source(kind: str, bootstrap: str) -> dict[str, Any]:
    source: dict[str, Any] = {"kind": kind, "connection_string_env": ENV_VAR, "max_events_per_trigger": 40}
    if kind == "eventhubs_kafka":
        source["kafka_bootstrap_servers"] = bootstrap
    return source


def _assert_key_in_none(connection_string: str, paths: Iterable[Path]) -> str:
    """The shared access key of ``connection_string``, after checking no file of ``paths`` holds it."""
    key = connection_string.split("SharedAccessKey=")[1].split(";")[0]
    for path in paths:
        if path.is_file():
            assert key not in path.read_bytes().decode("utf-8", "replace"), f"the key leaked into {path}"
    return key


def _run(spark: Any, tmp_path: Path, kind: str, bootstrap: str) -> tuple[list[tuple], Path]:
    base = tmp_path / kind
    base.mkdir()
    config = pipeline_config(
        base,
        f"rows_{kind}",
        sources={"events": _source(kind, bootstrap)},
        sinks={"out": {"kind": "parquet", "output_path": str(base / "out")}},
    )
    assert run_on_session(spark, "kafka_rows:rows", config)[0] == EXIT_OK
    rows = spark.read.parquet(str(base / "out")).collect()
    # a map's entries in key order, so two maps compare by content
    as_tuples = [(*row[:6], json.dumps(row["properties"], sort_keys=True)) for row in rows]
    return sorted(as_tuples), base / "checkpoints" / f"rows_{kind}"


def test_one_function_reads_the_same_rows_through_kafka_as_through_amqp(
    spark: Any, kafka_env: tuple[EmulatedHub, str], tmp_path: Path, pipelines: Path
) -> None:
    hub, bootstrap = kafka_env
    write_module(pipelines, "kafka_rows", ROWS)
    texts = send_with_properties(hub, 60)

    amqp, _ = _run(spark, tmp_path, "eventhubs", bootstrap)
    kafka, checkpoint = _run(spark, tmp_path, "eventhubs_kafka", bootstrap)

    assert sorted(row[4] for row in kafka) == sorted(texts)  # every event once
    assert kafka == amqp
    sample = next(row for row in kafka if row[4] == "event-7")
    assert (sample[3], sample[5], json.loads(sample[6])) == ("key-b", "d2", {"device": "d2", "n": "7"})
    # Spark's Kafka source keeps the connector's offset shape: next sequence number per partition
    newest = max(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
    last = json.loads((checkpoint / "offsets" / str(newest)).read_text().splitlines()[-1])
    per_partition: dict[str, int] = {}
    for row in kafka:
        per_partition[row[0]] = max(per_partition.get(row[0], -1), row[1] + 1)
    assert last == {"hub1": per_partition}
    # ... which the checkpoint inspector and the health sensor read: no lag, then the events sent since
    from hubflow.supervision.health import check_health

    health = check_health(str(checkpoint), stalled_after=timedelta(hours=1), latest=("hub1", per_partition))
    assert (health.verdict, health.failed, health.lag) == ("healthy", False, dict.fromkeys(per_partition, 0))
    ahead = {partition: n + 5 for partition, n in per_partition.items()}
    lagging = check_health(
        str(checkpoint), stalled_after=timedelta(hours=1), latest=("hub1", ahead), max_lag_events=3
    )
    assert lagging.failed and lagging.lag == dict.fromkeys(per_partition, 5), lagging.reason
    # the connection string (in the JAAS config) is in no checkpoint file, and masked in the plan
    key = _assert_key_in_none(hub.connection_string, checkpoint.rglob("*"))
    plan = _source_plan(spark, _source("eventhubs_kafka", bootstrap))
    assert "kafka.sasl.jaas.config=*********(redacted)" in plan and "subscribe=hub1" in plan, plan
    assert key not in plan


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_kafka_source_pipeline_killed_9_resumes_with_each_event_once_and_no_secret_anywhere(
    spark: Any,
    kafka_hub: tuple[EmulatedHub, str],
    tmp_path: Path,
    pipelines: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kill -9 of ``spark-submit jobs/pipeline.py`` reading through Spark's Kafka source into Delta,
    after its first commit; an availableNow rerun does the rest. Its driver and task log, event log
    (what the UI's SQL and environment tabs show) and checkpoint hold no part of the secret."""
    from hubflow.repository import PIPELINES_DIR_ENV
    from hubflow.supervision.health import check_health, committed_sequence_numbers
    from hubflow_jobs.pipeline.job import load_pipeline, ship_module
    from hubflow_jobs.pipeline.streams import start_pipeline
    from hubflow_jobs.runtime.runner import run_job
    from hubflow_jobs.runtime.stop import StopRequest

    from . import helpers

    hub, bootstrap = kafka_hub
    write_module(pipelines, "kafka_numbered", NUMBER_EVENTS)
    output = tmp_path / "lake" / "numbered"
    source = {**_source("eventhubs_kafka", bootstrap), "max_events_per_trigger": 100}
    sections: dict[str, Any] = {
        "sources": {"telemetry": source},
        "sinks": {"numbered": {"kind": "delta", "output_path": str(output)}},
    }
    sent = hub.send_numbered(0, 500)
    events_dir = tmp_path / "spark-events"
    events_dir.mkdir()
    streaming = pipeline_config(
        tmp_path,
        "kafka_numbered",
        trigger={"processingTime": "1 second"},
        **sections,
        spark_conf={
            "spark.sql.shuffle.partitions": 2,
            "spark.ui.enabled": False,
            "spark.eventLog.enabled": True,
            "spark.eventLog.dir": str(events_dir),
            "spark.eventLog.compress": False,  # so that a grep reads it
            "spark.eventLog.buffer.kb": "1k",  # written as it goes: the driver is killed
        },
    )
    env = {ENV_VAR: hub.connection_string, PIPELINES_DIR_ENV: str(pipelines)}
    checkpoint = tmp_path / "checkpoints" / "kafka_numbered"
    log = tmp_path / "killed.log"
    driver = helpers.spark_submit(
        streaming,
        log,
        script=helpers.JOBS_DIR / "pipeline.py",
        extra_env=env,
        script_args=["--pipeline", "kafka_numbered:numbered"],
    )
    kill_after_first_commit(driver, checkpoint, log)

    monkeypatch.setenv(ENV_VAR, hub.connection_string)
    again = pipeline_config(tmp_path, "kafka_numbered", trigger={"availableNow": True}, **sections)
    config, binding = load_pipeline("kafka_numbered:numbered", str(again))
    ship_module(spark, binding)
    code, reason = run_job(spark, config, functools.partial(start_pipeline, binding=binding), StopRequest())
    assert code == EXIT_OK, reason

    check_events_once(numbered_events(spark, output), sent, hub.partitions)
    batches = helpers.log_ids(checkpoint / "commits")
    recorded = recorded_batches(output, query_id(checkpoint))
    assert recorded == batches == list(range(len(batches))), "each batch committed to the table once"

    # the health sensor's reading of Spark's Kafka offsets: the next sequence number per partition
    latest = ("hub1", {"0": 250, "1": 250})
    report = check_health(str(checkpoint), stalled_after=timedelta(hours=1), latest=latest)
    assert committed_sequence_numbers(report.report, "hub1") == {"0": 250, "1": 250}
    assert (report.failed, report.lag) == (False, {"0": 0, "1": 0}), report.reason
    behind = check_health(
        str(checkpoint), stalled_after=timedelta(hours=1), latest=("hub1", {"0": 260, "1": 253})
    )
    assert behind.lag == {"0": 10, "1": 3}

    written = [log, *events_dir.rglob("*"), *checkpoint.rglob("*")]
    assert any(path.name.startswith("events_") for path in written), "no event log was written"
    _assert_key_in_none(hub.connection_string, written)
    event_log = "".join(p.read_text(errors="replace") for p in events_dir.rglob("events_*"))
    assert "SparkListenerSQLExecutionStart" in event_log and "KafkaScan" in event_log, "the batches' plans"


#: Each event's number, tagged with ``params.tag``.
TAGGED = """
from pyspark.sql import functions as F


def tagged(telemetry, params):
    number = F.substring_index(F.col("body").cast("string"), "-", -1).cast("long")
    tag = F.lit(params["tag"]).alias("tag")
    return telemetry.select("enqueuedTime", "partition", "sequenceNumber", number.alias("number"), tag)
"""


def _after(moment: datetime) -> datetime:
    """The whole second after ``moment``, once it has passed."""
    boundary = moment.replace(microsecond=0) + timedelta(seconds=1)
    time.sleep(max(0.0, (boundary - datetime.now(UTC)).total_seconds()) + 0.2)
    return boundary


@pytest.mark.slow
def test_a_kafka_source_pipeline_backfills_an_interval_by_timestamp_each_event_once(
    spark: Any, kafka_env: tuple[EmulatedHub, str], tmp_path: Path, pipelines: Path
) -> None:
    from hubflow_jobs.backfill_window import BackfillRefused
    from hubflow_jobs.pipeline.backfill import backfill_pipeline
    from hubflow_jobs.pipeline.job import load_pipeline

    hub, bootstrap = kafka_env
    write_module(pipelines, "kafka_tagged", TAGGED)
    output = tmp_path / "lake" / "tagged"

    def config(tag: str) -> Path:
        return pipeline_config(
            tmp_path,
            "kafka_tagged",
            sources={"telemetry": {**_source("eventhubs_kafka", bootstrap), "max_events_per_trigger": 1000}},
            sinks={"tagged": {"kind": "delta", "output_path": str(output)}},
            params={"tag": tag},
        )

    hub.send_numbered(0, 10)  # before the interval
    start = _after(datetime.now(UTC))
    hub.send_numbered(100, 30)
    end = _after(datetime.now(UTC))
    hub.send_numbered(200, 10)  # after it
    assert run_on_session(spark, "kafka_tagged:tagged", config("v1"))[0] == EXIT_OK

    loaded, binding = load_pipeline("kafka_tagged:tagged", str(config("v2")))
    for _ in range(2):  # a rerun replaces the interval again
        counts = backfill_pipeline(spark, loaded, binding, start, end)
        assert counts["read"] == 30
        rows = spark.read.format("delta").load(str(output)).select("number", "tag").collect()
        assert sorted((r["number"], r["tag"]) for r in rows) == sorted(
            [(n, "v1") for n in [*range(10), *range(200, 210)]] + [(n, "v2") for n in range(100, 130)]
        )

    later_start = _after(datetime.now(UTC))
    hub.send_numbered(300, 4)
    later_end = _after(datetime.now(UTC))
    with pytest.raises(BackfillRefused, match="its query has not yet read partitions"):
        backfill_pipeline(spark, loaded, binding, later_start, later_end)


def _source_plan(spark: Any, source: dict[str, Any]) -> str:
    """The analyzed plan of the source's stream, options and all (as explain() and the UI print it)."""
    from hubflow_jobs.pipeline.declarations import EventHubsKafkaSource
    from hubflow_jobs.pipeline.streams import read_source

    frame = read_source(spark, EventHubsKafkaSource.model_validate(source))
    return frame._jdf.queryExecution().toString()


def test_spark_kafka_sink_writes_events_the_sdk_reads_back_over_amqp(
    spark: Any, kafka_hub: tuple[EmulatedHub, str]
) -> None:
    """Spark's Kafka sink with hubflow's client settings (:func:`client_options`) publishes each row
    once, to its partition, with its key and headers; the azure-eventhub SDK receives them."""
    from pyspark.sql import functions as F

    from hubflow_jobs.eventhubs_kafka import client_options

    from .helpers import receive_all

    hub, bootstrap = kafka_hub
    rows = spark.range(40).select(
        F.concat(F.lit("sunk-"), F.col("id").cast("string")).alias("value"),
        (F.col("id") % 2).cast("int").alias("partition"),
        F.concat(F.lit("k"), (F.col("id") % 3).cast("string")).alias("key"),
        F.array(
            F.struct(F.lit("n").alias("key"), F.col("id").cast("string").cast("binary").alias("value"))
        ).alias("headers"),
    )
    options = {**client_options(hub.connection_string, bootstrap), "topic": "hub1"}
    rows.write.format("kafka").options(**options).save()

    received = receive_all(hub.connection_string)
    got = sorted(
        (
            partition,
            event.body_as_str(),
            # the record's key is the x-opt-kafka-key annotation (docs/emulator.md), not a partition key
            event.raw_amqp_message.annotations.get(b"x-opt-kafka-key"),
            {k.decode(): v for k, v in event.properties.items()},
        )
        for partition, event in received
    )
    expected = sorted(
        (str(n % 2), f"sunk-{n}", f"k{n % 3}".encode(), {"n": str(n).encode()}) for n in range(40)
    )
    assert [g[:2] for g in got] == [e[:2] for e in expected]  # each row once, in its partition
    assert got == expected


def test_kafka_rows_take_the_last_of_a_repeated_header_and_an_empty_map_without_headers(spark: Any) -> None:
    """A Kafka producer may repeat a header (an AMQP event cannot): the last value wins, as the
    service's Kafka-to-AMQP mapping keeps it; a record without headers has empty properties."""
    from hubflow_jobs.eventhubs_kafka import as_eventhubs_rows

    schema = (
        "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
        "timestampType int, headers array<struct<key: string, value: binary>>"
    )
    records = [
        (None, b"a", "hub1", 0, 7, None, 1, [("k", b"1"), ("x", b"y"), ("k", b"2"), ("k", b"3")]),
        (b"pk", b"b", "hub1", 1, 8, None, 1, None),
    ]
    rows = {r["body"]: r for r in as_eventhubs_rows(spark.createDataFrame(records, schema)).collect()}
    assert rows[b"a"]["properties"] == {"k": "3", "x": "y"}
    assert (rows[b"b"]["properties"], rows[b"b"]["partitionKey"], rows[b"b"]["sequenceNumber"]) == (
        {},
        "pk",
        8,
    )
    assert (rows[b"a"]["partition"], rows[b"a"]["offset"], rows[b"a"]["systemProperties"]) == ("0", None, {})
