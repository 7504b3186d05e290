"""lake_to_eventhubs on real Spark against the embedded emulator, read back with the real SDK:
every row published once with its body, key and properties; a restart publishes nothing new;
bronze output of eventhubs_to_lake replays to another hub; bad config exits 2 naming the key."""

from __future__ import annotations

import json
import os
import signal
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from hubflow.config import ConfigError, load_config
from hubflow.status.exit_codes import EXIT_CONFIG_ERROR, EXIT_OK
from hubflow_jobs.builtins.eventhubs_to_lake import EventHubsToLakeConfig
from hubflow_jobs.builtins.lake_to_eventhubs import LakeToEventHubsConfig
from hubflow_jobs.pipeline.job import start_function
from hubflow_jobs.runtime.runner import run_job
from hubflow_jobs.runtime.stop import StopRequest
from tests.support.emulator import start_test_emulator
from tests.support.processes import wait_until

from .helpers import (
    JOBS_DIR,
    EmulatedHub,
    event_count,
    eventhubs_config,
    last_log_line,
    python_job,
    read_status,
    receive_all,
    spark_submit,
    write_config,
)

pytestmark = pytest.mark.integration
start_eventhubs_to_lake = start_function("eventhubs_to_lake")
start_lake_to_eventhubs = start_function("lake_to_eventhubs")

ENV_VAR = "HUBFLOW_TEST_PUBLISH_CONNECTION"
LAKE_TO_EVENTHUBS = JOBS_DIR / "lake_to_eventhubs.py"
NAME = "lake_to_eventhubs"
ORDERS_SCHEMA = "order_id BIGINT, customer STRING, amount DOUBLE, region STRING"


def publisher_config(base: Path, table: Path, **overrides: Any) -> dict[str, Any]:
    """A valid lake_to_eventhubs config publishing the orders table at ``table`` (availableNow)."""
    config: dict[str, Any] = {
        "name": NAME,
        "trigger": {"availableNow": True},
        "checkpoint_root": str(base / "checkpoints"),
        "status_root": str(base / "status"),
        "spark_conf": {"spark.sql.shuffle.partitions": 2},
        "runtime": {"heartbeat_interval": "1 second", "poll_interval": "200 ms"},
        "source": {
            "path": str(table),
            "format": "parquet",
            "schema": ORDERS_SCHEMA,
            "max_files_per_trigger": 1,
        },
        "sink": {"connection_string_env": ENV_VAR},
        "message": {
            "body_json_columns": ["order_id", "customer", "amount"],
            "partition_key_column": "customer",
            "property_columns": ["order_id", "region"],
        },
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    return config


def write_orders(spark: Any, table: Path, first: int, count: int) -> None:
    """Append orders ``first .. first+count-1`` to the parquet table (every third has no region)."""
    rows = [
        (n, f"customer-{n % 5}", n * 1.5, None if n % 3 == 0 else "eu") for n in range(first, first + count)
    ]
    spark.createDataFrame(rows, ORDERS_SCHEMA).coalesce(1).write.mode("append").parquet(str(table))


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def described(partition: str, event: Any) -> dict[str, Any]:
    """An event as plain values: partition, key, body text, properties with text keys and values."""
    return {
        "partition": partition,
        "partition_key": _text(event.partition_key),
        "body": event.body_as_str(),
        "properties": {_text(k): _text(v) for k, v in (event.properties or {}).items()},
    }


def test_unknown_body_column_exits_2_naming_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=TOPSECRET")
    table = tmp_path / "orders"
    table.mkdir()
    config = publisher_config(tmp_path, table, message={"body_column": "payload"})
    del config["message"]["body_json_columns"]
    result = python_job(write_config(tmp_path / "job.yaml", config), script=LAKE_TO_EVENTHUBS)
    assert result.returncode == EXIT_CONFIG_ERROR
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .endswith(
            "jobs config error: message.body_column: 'payload' is not a column of the source table "
            "['order_id', 'customer', 'amount', 'region']"
        )
    )
    both = publisher_config(tmp_path, table, message={"body_column": "customer"})
    result = python_job(write_config(tmp_path / "job.yaml", both), script=LAKE_TO_EVENTHUBS)
    assert result.returncode == EXIT_CONFIG_ERROR
    assert "message.body_column: set exactly one of body_column or body_json_columns" in result.stderr
    bad_property = publisher_config(tmp_path, table, message={"property_columns": ["order_id", "colour"]})
    result = python_job(write_config(tmp_path / "job.yaml", bad_property), script=LAKE_TO_EVENTHUBS)
    assert result.returncode == EXIT_CONFIG_ERROR
    assert "message.property_columns.1: 'colour' is not a column" in result.stderr
    assert "TOPSECRET" not in result.stderr
    assert not (tmp_path / "checkpoints").exists()


def test_source_keys_must_fit_the_table_format(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=s")
    table = tmp_path / "orders"
    table.mkdir()

    def error(**source: Any) -> str:
        config = publisher_config(tmp_path, table, source=source)
        config["source"] = {k: v for k, v in config["source"].items() if v is not None}
        with pytest.raises(ConfigError) as caught:
            load_config(write_config(tmp_path / "job.yaml", config), LakeToEventHubsConfig)
        return str(caught.value)

    assert "source.skip_change_commits: is a Delta source option; it needs format: delta" in error(
        skip_change_commits=True
    )
    assert "source.path: " in error(format="delta", schema=None) and "is not a Delta table" in error(
        format="delta", schema=None
    )
    (table / "_delta_log").mkdir()
    assert "source.schema: is for format: parquet; a Delta table knows its columns" in error(format="delta")


def test_publishes_each_row_once_with_body_key_and_properties(
    spark: Any, eventhub: EmulatedHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_VAR, eventhub.connection_string)
    table = tmp_path / "lake" / "orders"
    write_orders(spark, table, 0, 30)
    write_orders(spark, table, 30, 10)
    config = load_config(
        write_config(tmp_path / "job.yaml", publisher_config(tmp_path, table)), LakeToEventHubsConfig
    )

    code, reason = run_job(spark, config, start_lake_to_eventhubs, StopRequest())
    assert code == EXIT_OK, reason
    events = [described(*received) for received in receive_all(eventhub.connection_string)]
    assert len(events) == 40
    by_order = {json.loads(e["body"])["order_id"]: e for e in events}
    assert sorted(by_order) == list(range(40)), "every row exactly once"
    partitions_of_key: dict[str, set[str]] = defaultdict(set)
    for number, event in by_order.items():
        assert json.loads(event["body"]) == {
            "order_id": number,
            "customer": f"customer-{number % 5}",
            "amount": number * 1.5,
        }
        assert event["partition_key"] == f"customer-{number % 5}"
        expected_properties = {"order_id": str(number)} | ({} if number % 3 == 0 else {"region": "eu"})
        assert event["properties"] == expected_properties
        partitions_of_key[event["partition_key"]].add(event["partition"])
    assert all(len(partitions) == 1 for partitions in partitions_of_key.values()), partitions_of_key
    status = read_status(tmp_path, NAME)
    assert status["state"] == "stopped"
    assert status["last_progress"]["batch_id"] == 1, "two files, max_files_per_trigger 1: two batches"

    # A restart after a completed run: the checkpoint says both files are published.
    code, reason = run_job(spark, config, start_lake_to_eventhubs, StopRequest())
    assert code == EXIT_OK, reason
    assert event_count(eventhub.connection_string) == 40

    write_orders(spark, table, 40, 5)
    code, reason = run_job(spark, config, start_lake_to_eventhubs, StopRequest())
    assert code == EXIT_OK, reason
    numbers = sorted(
        json.loads(e.body_as_str())["order_id"] for _, e in receive_all(eventhub.connection_string)
    )
    assert numbers == list(range(45))


def test_delta_bronze_output_replays_to_another_hub(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """eventhubs_to_lake's Delta table, read incrementally by delta-spark's source, to another hub."""
    from azure.eventhub import EventData, EventHubProducerClient

    with start_test_emulator(tmp_path, ingest=4, replay=2) as emulator:
        ingest, replay = emulator.connection_string("ingest"), emulator.connection_string("replay")
        producer = EventHubProducerClient.from_connection_string(ingest)
        sent = {}
        try:
            for key in ("k1", "k2", "k3"):
                batch = producer.create_batch(partition_key=key)
                for n in range(6):
                    body = f"{key}-{n}".encode() + bytes([0, 255])  # raw bytes survive the round trip
                    event = EventData(body)
                    event.properties = {"n": str(n)}
                    batch.add(event)
                    sent[body] = (key, str(n))
                producer.send_batch(batch)
        finally:
            producer.close()

        monkeypatch.setenv("HUBFLOW_TEST_INGEST_CONNECTION", ingest)
        hub = EmulatedHub("ingest", ingest, partitions=4)
        bronze_config = eventhubs_config(
            tmp_path, hub, "HUBFLOW_TEST_INGEST_CONNECTION", sink={"format": "delta"}
        )
        bronze = load_config(write_config(tmp_path / "bronze.yaml", bronze_config), EventHubsToLakeConfig)
        code, reason = run_job(spark, bronze, start_eventhubs_to_lake, StopRequest())
        assert code == EXIT_OK, reason

        monkeypatch.setenv(ENV_VAR, replay)
        replay_config = publisher_config(
            tmp_path,
            Path(bronze.sinks["bronze"].output_path),
            source={"path": bronze.sinks["bronze"].output_path, "max_files_per_trigger": 100},
            message={
                "body_column": "body",
                "partition_key_column": "partitionKey",
                "properties_map_column": "properties",
                "property_columns": ["sequenceNumber"],
            },
        )
        for key in ("schema", "format"):  # a Delta table (the default format) knows its columns
            del replay_config["source"][key]
        del replay_config["message"]["body_json_columns"]
        config = load_config(write_config(tmp_path / "replay.yaml", replay_config), LakeToEventHubsConfig)
        code, reason = run_job(spark, config, start_lake_to_eventhubs, StopRequest())
        assert code == EXIT_OK, reason

        replayed = receive_all(replay)
        assert event_count(replay) == len(sent)
        bodies = {b"".join(event.body): (partition, event) for partition, event in replayed}
        assert set(bodies) == set(sent)
        partitions_of_key: dict[str, set[str]] = defaultdict(set)
        for body, (partition, event) in bodies.items():
            key, n = sent[body]
            assert _text(event.partition_key) == key
            properties = {_text(k): _text(v) for k, v in event.properties.items()}
            assert properties["n"] == n
            assert properties["sequenceNumber"].isdigit()
            partitions_of_key[key].add(partition)
        assert all(len(p) == 1 for p in partitions_of_key.values())

        # A restart publishes nothing again: the checkpoint holds the table version it read up to.
        code, reason = run_job(spark, config, start_lake_to_eventhubs, StopRequest())
        assert code == EXIT_OK, reason
        assert event_count(replay) == len(sent)


def test_spark_submit_forwards_new_files_until_sigterm(
    spark: Any, eventhub: EmulatedHub, tmp_path: Path
) -> None:
    table = tmp_path / "lake" / "orders"
    write_orders(spark, table, 0, 12)
    config = publisher_config(tmp_path, table, trigger={"availableNow": False, "processingTime": "1 second"})
    path = write_config(tmp_path / "job.yaml", config)
    log = tmp_path / "run.log"
    job = spark_submit(path, log, script=LAKE_TO_EVENTHUBS, extra_env={ENV_VAR: eventhub.connection_string})
    try:
        wait_until(
            lambda: event_count(eventhub.connection_string) == 12 or job.poll() is not None,
            180,
            "the first file to be published",
        )
        assert job.poll() is None, last_log_line(log)
        write_orders(spark, table, 12, 8)  # a file landing while the job runs is forwarded
        wait_until(
            lambda: event_count(eventhub.connection_string) == 20 or job.poll() is not None,
            120,
            "the second file to be published",
        )
        job.send_signal(signal.SIGTERM)
        assert job.wait(120) == EXIT_OK, last_log_line(log)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    assert "stopped gracefully" in last_log_line(log)
    numbers = sorted(
        json.loads(e.body_as_str())["order_id"] for _, e in receive_all(eventhub.connection_string)
    )
    assert numbers == list(range(20))
    key = dict(part.split("=", 1) for part in eventhub.connection_string.split(";") if "=" in part)
    assert key["SharedAccessKey"] not in log.read_text(), "the SAS key leaked into the log"
