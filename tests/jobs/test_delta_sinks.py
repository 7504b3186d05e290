"""Jobs writing Delta tables: one commit per micro-batch with the query's transaction, a replayed
batch skipped, and the same rows for Spark, delta-rs and DuckDB's Delta extension."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from hubflow.config import load_config
from hubflow.status.exit_codes import EXIT_FAILED, EXIT_OK
from hubflow_jobs.builtins.eventhubs_to_lake import EventHubsToLakeConfig
from hubflow_jobs.pipeline.job import start_function
from hubflow_jobs.runtime.runner import run_job
from hubflow_jobs.runtime.stop import StopRequest
from tests.support.lake import delta_rs_rows, delta_version, duckdb_rows, recorded_batch, spark_rows

from .helpers import (
    EmulatedHub,
    eventhubs_config,
    files_to_lake_config,
    lake_tables,
    landing_config,
    log_ids,
    read_status,
    run_files_to_lake,
    write_config,
    write_json_landing_file,
)

pytestmark = pytest.mark.integration
start_eventhubs_to_lake = start_function("eventhubs_to_lake")

ENV_VAR = "HUBFLOW_TEST_DELTA_CONNECTION"
BRONZE_COLUMNS = {
    "partition": "value",
    "sequenceNumber": "value",
    "body": "value",
    "enqueuedTime": "timestamp",
    "_ingested_at": "timestamp",
    "ingest_date": "date",
}


def _query_id(checkpoint: Path) -> str:
    return json.loads((checkpoint / "metadata").read_text())["id"]


def _drop_last_commit(checkpoint: Path) -> int:
    """Delete Spark's newest commit file, as a driver killed between the Delta commit and it would."""
    last = log_ids(checkpoint / "commits")[-1]
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    return last


def test_bronze_in_delta_holds_every_event_once_for_every_reader_and_a_replay_adds_nothing(
    spark: Any, eventhub: EmulatedHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_VAR, eventhub.connection_string)
    raw = eventhubs_config(
        tmp_path, eventhub, ENV_VAR, sink={"format": "delta"}, source={"max_events_per_trigger": 300}
    )
    config = load_config(write_config(tmp_path / "job.yaml", raw), EventHubsToLakeConfig)
    sent = eventhub.send_numbered(0, 800)
    binary = {"1": [bytes(range(256)), b"\x00\xff{not json"]}
    eventhub.send(binary)
    sent |= set(binary["1"])

    assert run_job(spark, config, start_eventhubs_to_lake, StopRequest()) == (
        EXIT_OK,
        "job eventhubs_to_lake finished: no more input (trigger availableNow)",
    )

    table, checkpoint = Path(config.sinks["bronze"].output_path), Path(config.checkpoint_location)
    rows = spark_rows(spark, table, BRONZE_COLUMNS)
    identities = [(r[0], r[1]) for r in rows]
    assert len(identities) == len(set(identities)) == len(sent), "every event once, by identity"
    assert {r[2] for r in rows} == sent
    assert delta_rs_rows(table, BRONZE_COLUMNS) == rows
    assert duckdb_rows(table, BRONZE_COLUMNS) == rows
    batches = log_ids(checkpoint / "commits")
    assert len(batches) >= 3, "max_events_per_trigger split the events into several batches"
    # One Delta commit per batch, each recording the query's transaction.
    assert delta_version(table) == batches[-1]
    assert recorded_batch(table, _query_id(checkpoint)) == batches[-1]

    replayed = _drop_last_commit(checkpoint)
    version = delta_version(table)
    code, reason = run_job(spark, config, start_eventhubs_to_lake, StopRequest())
    assert code == EXIT_OK, reason
    assert log_ids(checkpoint / "commits")[-1] == replayed, "Spark ran the batch again"
    assert delta_version(table) == version, "the Delta sink skipped the replayed batch: no new commit"
    assert spark_rows(spark, table, BRONZE_COLUMNS) == rows
    assert recorded_batch(table, _query_id(checkpoint)) == replayed


def test_files_to_delta_commit_both_tables_once_per_batch_and_skip_a_replay(
    spark: Any, tmp_path: Path
) -> None:
    raw = landing_config(tmp_path, source={"max_files_per_trigger": 1}, sink={"format": "delta"})
    config = files_to_lake_config(write_config(tmp_path / "job.yaml", raw))
    landing = tmp_path / "landing"
    expected = write_json_landing_file(landing, "a.json", 1, good=3, bad=1)
    expected |= write_json_landing_file(landing, "b.json", 10, good=3, bad=1)
    write_json_landing_file(landing, "c.json", 20, good=0, bad=2)  # a batch with no lake rows

    assert run_files_to_lake(spark, config)[0] == EXIT_OK

    output, quarantine = Path(lake_tables(config)[0]), Path(lake_tables(config)[1])
    checkpoint = Path(config.checkpoint_location)
    query = _query_id(checkpoint)
    assert log_ids(checkpoint / "commits") == [0, 1, 2]
    # Each table recorded every batch, the one with no rows for it included.
    assert (recorded_batch(output, query), recorded_batch(quarantine, query)) == (2, 2)
    assert sorted(r[0] for r in spark_rows(spark, output, {"id": "value"})) == sorted(expected)
    quarantined = spark_rows(spark, quarantine, {"reason": "value", "batch_id": "value"})
    assert len(quarantined) == 4 and {r[1] for r in quarantined} == {0, 1, 2}
    assert delta_rs_rows(quarantine, {"reason": "value", "batch_id": "value"}) == quarantined

    _drop_last_commit(checkpoint)
    versions = (delta_version(output), delta_version(quarantine))
    assert run_files_to_lake(spark, config)[0] == EXIT_OK
    assert log_ids(checkpoint / "commits")[-1] == 2, "the batch was run again"
    assert read_status(tmp_path)["counts"]["read"] == 2, "the replay read c.json's records again"
    assert (delta_version(output), delta_version(quarantine)) == versions, "and both tables skipped it"
    assert len(spark_rows(spark, quarantine, {"reason": "value"})) == 4


def test_a_delta_sink_refuses_a_folder_holding_a_parquet_table(spark: Any, tmp_path: Path) -> None:
    parquet = landing_config(tmp_path)
    write_json_landing_file(tmp_path / "landing", "a.json", 1, good=2, bad=0)
    config = files_to_lake_config(write_config(tmp_path / "job.yaml", parquet))
    assert run_files_to_lake(spark, config)[0] == EXIT_OK

    shutil.rmtree(tmp_path / "checkpoints")
    delta = landing_config(tmp_path, sink={"format": "delta"})
    config = files_to_lake_config(write_config(tmp_path / "job.yaml", delta))
    code, reason = run_files_to_lake(spark, config)
    assert code == EXIT_FAILED
    assert "sink.output_path" in reason and "holds a parquet table written by Spark's file sink" in reason
    assert not (tmp_path / "lake" / "orders" / "_delta_log").exists(), "nothing was written into it"
