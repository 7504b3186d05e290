"""A pipeline's ``kind: eventhubs_kafka`` source: Spark's Kafka source over the emulator's Kafka
endpoint, from the same connection string as ``kind: eventhubs``. One function runs both ways on the
same AMQP-sent events and lands the same rows; its checkpoint holds no secret."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hubflow_jobs import EXIT_OK

from .helpers import EmulatedHub
from .pipelines_support import pipeline_config, run_on_session, write_module

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
    source: dict[str, Any] = {"kind": kind, "connection_string_env": ENV_VAR, "max_events_per_trigger": 25}
    if kind == "eventhubs_kafka":
        source["kafka_bootstrap_servers"] = bootstrap
    return source


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
    spark: Any,
    kafka_hub: tuple[EmulatedHub, str],
    tmp_path: Path,
    pipelines: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hub, bootstrap = kafka_hub
    monkeypatch.setenv(ENV_VAR, hub.connection_string)
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
    # the connection string (in the JAAS config) is in no checkpoint file
    key = hub.connection_string.split("SharedAccessKey=")[1].split(";")[0]
    for path in checkpoint.rglob("*"):
        if path.is_file():
            assert key not in path.read_bytes().decode("utf-8", "replace"), path
