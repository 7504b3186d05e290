"""A pipeline's ``kind: eventhubs_kafka`` sink: the function's rows through Spark's Kafka sink and the
emulator's Kafka endpoint, read back over AMQP by the unmodified azure-eventhub SDK. The sink is the
one docs/pipelines.md shows, as written (its emulator line uncommented with the emulator's port)."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hubflow.config import ConfigError, load_config
from hubflow.status.exit_codes import EXIT_FAILED, EXIT_OK
from hubflow_jobs.pipeline import PipelineConfig

from .helpers import EmulatedHub, event_count, receive_all, write_config, write_json_landing_file
from .pipelines_support import pipeline_config, run_on_session, write_module

pytestmark = pytest.mark.integration

DOC = Path(__file__).parents[2] / "docs" / "pipelines.md"
#: The variable the docs' example names.
ENV_VAR = "ALERTS_EVENTHUBS_CONNECTION"

#: Good orders as events: rows with ids not divisible by 5 keyed k0..k2, the others to partition 1
#: without a key; an id property on each; a column the sink leaves out. ``no_body`` lacks ``body``.
ORDERS_TO_EVENTS = """
from pyspark.sql import functions as F

from hubflow_jobs.pipeline import RAW_RECORD


def events(orders):
    good = orders.where(F.col(RAW_RECORD).isNull() & F.col("id").isNotNull())
    keyed = F.col("id") % 5 != 0
    return good.select(
        F.to_json(F.struct("id", "name")).alias("body"),
        F.when(keyed, F.concat(F.lit("k"), (F.col("id") % 3).cast("string"))).alias("partitionKey"),
        F.when(~keyed, F.lit("1")).alias("partitionId"),
        F.create_map(
            F.lit("source"), F.lit("orders"), F.lit("id"), F.col("id").cast("string")
        ).alias("properties"),
        F.lit("left out").alias("other"),
    )


def no_body(orders):
    return orders.select(F.col("name").alias("text"))
"""


def doc_sink() -> dict[str, Any]:
    """The ``kind: eventhubs_kafka`` sink of docs/pipelines.md, as written."""
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    block = next(b for b in blocks if "kind: eventhubs_kafka" in b and b.startswith("sinks:"))
    return yaml.safe_load(block)["sinks"]


@pytest.fixture(scope="module")
def alerts_hub() -> Iterator[tuple[EmulatedHub, str]]:
    """An emulator with the docs' hub ``alerts`` (2 partitions) and a Kafka port; the hub, its bootstrap."""
    from eventhubs_emulator import Emulator, EmulatorConfig

    with Emulator(EmulatorConfig.many_hubs({"alerts": 2}, kafka_port=0)) as emulator:
        yield (
            EmulatedHub("alerts", emulator.connection_string("alerts"), partitions=2),
            emulator.kafka_bootstrap,
        )


def _sections(landing: Path, bootstrap: str) -> dict[str, Any]:
    sinks = doc_sink()
    sinks["alerts"]["kafka_bootstrap_servers"] = bootstrap  # the docs' commented emulator line
    return {
        "sources": {
            "orders": {
                "kind": "files",
                "path": str(landing),
                "format": "json",
                "schema": "id BIGINT, name STRING",
            }
        },
        "sinks": sinks,
    }


def test_each_row_is_one_event_with_its_body_key_and_properties_and_a_rerun_sends_none_again(
    spark: Any,
    alerts_hub: tuple[EmulatedHub, str],
    tmp_path: Path,
    pipelines: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hub, bootstrap = alerts_hub
    monkeypatch.setenv(ENV_VAR, hub.connection_string)
    write_module(pipelines, "orders_kafka", ORDERS_TO_EVENTS)
    landing = tmp_path / "landing"
    landing.mkdir()
    ids = write_json_landing_file(landing, "a.json", 1, good=30, bad=2)
    config = pipeline_config(tmp_path, "orders_kafka", **_sections(landing, bootstrap))

    assert run_on_session(spark, "orders_kafka:events", config)[0] == EXIT_OK
    ids |= write_json_landing_file(landing, "b.json", 100, good=10, bad=1)
    assert run_on_session(spark, "orders_kafka:events", config)[0] == EXIT_OK  # b's rows only

    events = receive_all(hub.connection_string)
    bodies = [json.loads(event.body_as_str()) for _, event in events]
    assert sorted(body["id"] for body in bodies) == sorted(ids), "every good order exactly once"
    partitions_of_key = defaultdict(set)
    for partition, event in events:
        number = json.loads(event.body_as_str())["id"]
        assert json.loads(event.body_as_str()) == {"id": number, "name": f"n{number}"}
        # headers arrive as application properties with binary values (Event Hubs' Kafka mapping)
        assert event.properties == {b"source": b"orders", b"id": str(number).encode()}
        key = (event.raw_amqp_message.annotations or {}).get(b"x-opt-kafka-key")
        assert event.partition_key is None  # a Kafka key is not the AMQP partition key
        if number % 5:
            assert key == f"k{number % 3}".encode()
            partitions_of_key[key].add(partition)
        else:
            assert (key, partition) == (None, "1")  # partitionId picked it
    assert all(len(found) == 1 for found in partitions_of_key.values()), partitions_of_key
    assert len(partitions_of_key) == 3


def test_a_frame_without_body_fails_the_start_naming_the_column_and_sends_nothing(
    spark: Any,
    alerts_hub: tuple[EmulatedHub, str],
    tmp_path: Path,
    pipelines: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hub, bootstrap = alerts_hub
    monkeypatch.setenv(ENV_VAR, hub.connection_string)
    write_module(pipelines, "orders_kafka", ORDERS_TO_EVENTS)
    landing = tmp_path / "landing"
    landing.mkdir()
    write_json_landing_file(landing, "a.json", 1, good=3, bad=0)
    config = pipeline_config(tmp_path, "orders_no_body", **_sections(landing, bootstrap))
    before = event_count(hub.connection_string)

    code, reason = run_on_session(spark, "orders_kafka:no_body", config)

    assert code == EXIT_FAILED
    assert "pipeline 'orders_kafka:no_body': sink 'alerts' (kind eventhubs_kafka): " in reason, reason
    assert "needs a 'body' column (string or binary); got columns ['text']" in reason, reason
    assert event_count(hub.connection_string) == before


@pytest.mark.parametrize(
    ("keys", "named", "problem"),
    [
        ({"consumer_group": "$Default"}, "sinks.alerts.consumer_group", "joins no consumer group; remove it"),
        ({"starting_position": "earliest"}, "sinks.alerts.starting_position", "remove it"),
        (
            {"options": {"eventhubs.operationTimeout": "PT60S"}},
            "sinks.alerts.options.eventhubs.operationTimeout",
            "is an option of format('eventhubs')",
        ),
        ({"options": {"topic": "other"}}, "sinks.alerts.options.topic", "is set by the job itself"),
        (
            {"options": {"kafka.transactional.id": "t1"}},
            "sinks.alerts.options.kafka.transactional.id",
            "does not write in Kafka transactions",
        ),
        (
            {"options": {"kafka.sasl.kerberos.service.name": "x"}},
            "sinks.alerts.options.kafka.sasl.kerberos.service.name",
            "come from connection_string_env",
        ),
        (
            {"kafka_bootstrap_servers": "localhost"},
            "sinks.alerts.kafka_bootstrap_servers",
            "is not host:port",
        ),
    ],
)
def test_a_sink_key_without_sense_for_kafka_is_refused_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keys: dict[str, Any], named: str, problem: str
) -> None:
    monkeypatch.setenv(
        ENV_VAR, "Endpoint=sb://ns1.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=s"
    )
    (tmp_path / "landing").mkdir()
    sections = _sections(tmp_path / "landing", "127.0.0.1:9093")
    sections["sinks"]["alerts"].update(keys)
    config = {
        "name": "alerts_job",
        "trigger": {"availableNow": True},
        "checkpoint_root": str(tmp_path / "checkpoints"),
        "status_root": str(tmp_path / "status"),
        **sections,
    }
    with pytest.raises(ConfigError) as caught:
        load_config(write_config(tmp_path / "job.yaml", config), PipelineConfig)
    message = str(caught.value)
    assert named in message and problem in message, message


def test_the_docs_sink_gives_the_services_kafka_settings_and_masks_the_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = "Endpoint=sb://ns1.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=s3cr3t"
    monkeypatch.setenv(ENV_VAR, service)
    (tmp_path / "landing").mkdir()
    config = {
        "name": "alerts_job",
        "trigger": {"availableNow": True},
        "checkpoint_root": str(tmp_path / "checkpoints"),
        "status_root": str(tmp_path / "status"),
        "sources": _sections(tmp_path / "landing", "x:1")["sources"],
        "sinks": doc_sink(),  # as written: the emulator line commented out
    }
    loaded = load_config(write_config(tmp_path / "job.yaml", config), PipelineConfig)
    options = loaded.sinks["alerts"].spark_options()
    assert {k: options[k] for k in ("kafka.bootstrap.servers", "kafka.security.protocol", "topic")} == {
        "kafka.bootstrap.servers": "ns1.servicebus.windows.net:9093",
        "kafka.security.protocol": "SASL_SSL",
        "topic": "alerts",
    }
    assert options["kafka.linger.ms"] == "20"
    # Microsoft's producer settings: under the 1,046,528-byte request the service takes, idle < 240 s
    assert {k: options[k] for k in ("kafka.max.request.size", "kafka.connections.max.idle.ms")} == {
        "kafka.max.request.size": "1000000",
        "kafka.connections.max.idle.ms": "180000",
    }
    assert "spark.redaction.regex" in loaded.extra_spark_conf()  # the connection string is masked
    # without eventhub_name the topic is the connection string's EntityPath, also an Entra ID one's
    del config["sinks"]["alerts"]["eventhub_name"]
    monkeypatch.setenv(ENV_VAR, "Endpoint=sb://ns1.servicebus.windows.net/;EntityPath=hub7")
    entra = load_config(write_config(tmp_path / "entra.yaml", config), PipelineConfig)
    assert entra.sinks["alerts"].topic() == "hub7"


def test_a_pipeline_with_an_eventhubs_kafka_sink_is_refused_a_backfill_naming_the_sink(
    tmp_path: Path, pipelines: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hubflow_jobs.pipeline.backfill import backfill_problem
    from hubflow_jobs.pipeline.job import load_pipeline

    monkeypatch.setenv(
        ENV_VAR, "Endpoint=sb://ns1.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=s"
    )
    write_module(pipelines, "orders_kafka", ORDERS_TO_EVENTS)
    (tmp_path / "landing").mkdir()
    sections = _sections(tmp_path / "landing", "x:1")
    sections["sources"]["orders"]["interval_folder"] = "%Y/%m/%d/%H"
    config, binding = load_pipeline(
        "orders_kafka:events", str(pipeline_config(tmp_path, "alerts_job", **sections))
    )

    problem = backfill_problem(config, binding)

    assert problem is not None and problem.endswith(
        "an Event Hub cannot take events back: sinks.alerts.kind: eventhubs_kafka"
    ), problem


def test_a_real_time_plan_spark_refuses_exits_2_naming_the_trigger_and_sends_nothing(
    spark: Any,
    alerts_hub: tuple[EmulatedHub, str],
    tmp_path: Path,
    pipelines: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/pipelines.md "Real-time pipelines": an aggregation is Spark's to refuse, at the start."""
    from hubflow.status import StatusFolder
    from hubflow.status.exit_codes import EXIT_CONFIG_ERROR

    hub, bootstrap = alerts_hub
    monkeypatch.setenv(ENV_VAR, hub.connection_string)
    write_module(
        pipelines,
        "counts_rt",
        """
        from pyspark.sql import functions as F


        def counts(events):
            per_partition = events.groupBy("partition").count()
            return per_partition.select(F.col("count").cast("string").alias("body"))
        """,
    )
    kafka = {
        "connection_string_env": ENV_VAR,
        "eventhub_name": "alerts",
        "kafka_bootstrap_servers": bootstrap,
    }
    config = pipeline_config(
        tmp_path,
        "counts_rt",
        trigger={"realTime": "5 seconds"},
        sources={"events": {"kind": "eventhubs_kafka", **kafka}},
        sinks={"counts": {"kind": "eventhubs_kafka", **kafka}},
    )
    before = event_count(hub.connection_string)
    code, reason = run_on_session(spark, "counts_rt:counts", config)
    assert code == EXIT_CONFIG_ERROR, reason
    said = "job counts_rt: trigger.realTime: Spark's real-time mode cannot run this pipeline ("
    assert reason.startswith(said) and "HashAggregateExec" in reason, reason
    status = StatusFolder(str(tmp_path / "status" / "counts_rt")).status() or {}
    assert status["exception"].startswith(said), "the status page says it too"
    assert event_count(hub.connection_string) == before
