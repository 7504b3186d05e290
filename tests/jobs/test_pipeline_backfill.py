"""Backfills of a user's pipeline: the interval's events through the function again, replacing the
interval's rows in its Delta sink and quarantine exactly once, reruns replacing again; refused with
the reason when the stream has not passed the interval, and before Spark for what cannot backfill."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hubflow.config import load_config
from hubflow.repository import PIPELINES_DIR_ENV
from hubflow.status.exit_codes import EXIT_CONFIG_ERROR, EXIT_OK
from hubflow_jobs.backfill_window import BackfillRefused
from hubflow_jobs.pipeline import PipelineError
from hubflow_jobs.pipeline.backfill import backfill_pipeline, backfill_problem
from hubflow_jobs.pipeline.binding import bind
from hubflow_jobs.pipeline.declarations import PipelineConfig
from hubflow_jobs.pipeline.job import load_pipeline
from tests.support.lake import spark_rows
from tests.support.spark_cluster import spark_env

from .helpers import JOBS_DIR, EmulatedHub, write_config
from .pipelines_support import pipeline_config, run_on_session, write_module

ENV_VAR = "HUBFLOW_TEST_PIPELINE_BACKFILL_CONNECTION"

#: Even-numbered events, tagged with ``params.tag``; those ending in 6 go to the quarantine.
EVEN_EVENTS = """
from pyspark.sql import functions as F


def even(telemetry, params):
    number = F.substring_index(F.col("body").cast("string"), "-", -1).cast("long")
    tag = F.lit(params["tag"]).alias("tag")
    rows = telemetry.select("enqueuedTime", "partition", "sequenceNumber", number.alias("number"), tag)
    reason = F.when(F.col("number") % 10 == 6, F.lit("ends in 6"))
    return rows.where(F.col("number") % 2 == 0).withColumn("_quarantine_reason", reason)


def numbers_only(telemetry):
    return telemetry.select(F.substring_index(F.col("body").cast("string"), "-", -1).cast("long").alias("n"))
"""


def _sections(base: Path, tag: str) -> dict[str, Any]:
    return {
        "sources": {"telemetry": {"kind": "eventhubs", "connection_string_env": ENV_VAR}},
        "sinks": {
            "even": {
                "kind": "delta",
                "output_path": str(base / "lake" / "even"),
                "quarantine_path": str(base / "lake" / "even_quarantine"),
            }
        },
        "params": {"tag": tag},
    }


def _rows(spark: Any, table: Path) -> list[tuple[int, str]]:
    return sorted(
        (number, tag) for number, tag in spark_rows(spark, table, {"number": "value", "tag": "value"})
    )


def _whole_second_after(moment: datetime) -> datetime:
    return moment.replace(microsecond=0) + timedelta(seconds=1)


def _pass(boundary: datetime) -> None:
    time.sleep(max(0.0, (boundary - datetime.now(UTC)).total_seconds()) + 0.2)


@pytest.mark.integration
def test_a_pipeline_backfill_replaces_its_interval_in_sink_and_quarantine_and_a_rerun_again(
    spark: Any, eventhub: EmulatedHub, pipelines: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_VAR, eventhub.connection_string)
    write_module(pipelines, "even_events", EVEN_EVENTS)
    start = datetime.now(UTC).replace(microsecond=0)
    eventhub.send_numbered(0, 40)
    end = _whole_second_after(datetime.now(UTC))
    _pass(end)
    eventhub.send_numbered(100, 20)  # enqueued after the interval
    v1 = pipeline_config(tmp_path, "even_events", **_sections(tmp_path, "v1"))
    assert run_on_session(spark, "even_events:even", v1)[0] == EXIT_OK
    output, quarantine = tmp_path / "lake" / "even", tmp_path / "lake" / "even_quarantine"
    evens = [n for n in [*range(0, 40), *range(100, 120)] if n % 2 == 0]
    assert _rows(spark, output) == [(n, "v1") for n in evens if n % 10 != 6]
    assert _rows(spark, quarantine) == [(n, "v1") for n in evens if n % 10 == 6]

    # The same config with tag v2: the interval's rows are replaced, the rest stay v1; twice.
    v2 = pipeline_config(tmp_path, "even_events", **_sections(tmp_path, "v2"))
    config, binding = load_pipeline("even_events:even", str(v2))
    for _ in range(2):
        counts = backfill_pipeline(spark, config, binding, start, end)
        assert counts["read"] == 40
        expected = [(n, "v2" if n < 100 else "v1") for n in evens]
        assert _rows(spark, output) == [row for row in expected if row[0] % 10 != 6]
        assert _rows(spark, quarantine) == [row for row in expected if row[0] % 10 == 6]
    assert counts[str(output)] == len([n for n in range(0, 40, 2) if n % 10 != 6])
    numbers = Counter(n for n, _ in _rows(spark, output) + _rows(spark, quarantine))
    assert set(numbers.values()) == {1}, "every event once"

    # Events the stream has not read yet: backfilling their interval would write them twice.
    later_start = datetime.now(UTC).replace(microsecond=0)
    eventhub.send_numbered(200, 8)
    later_end = _whole_second_after(datetime.now(UTC))
    _pass(later_end)
    with pytest.raises(BackfillRefused, match=r"sink 'even': its query has not yet read partitions \['0'"):
        backfill_pipeline(spark, config, binding, later_start, later_end)
    assert not any(n >= 200 for n, _ in _rows(spark, output)), "nothing written"


@pytest.mark.integration
def test_a_sink_without_the_events_identity_is_refused_by_name_before_anything_is_written(
    spark: Any, eventhub: EmulatedHub, pipelines: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_VAR, eventhub.connection_string)
    write_module(pipelines, "even_events", EVEN_EVENTS)
    sections = _sections(tmp_path, "v1")
    del sections["params"]
    path = pipeline_config(tmp_path, "numbers", **sections)
    config, binding = load_pipeline("even_events:numbers_only", str(path))
    start = datetime.now(UTC) - timedelta(hours=1)
    with pytest.raises(PipelineError) as info:
        backfill_pipeline(spark, config, binding, start, datetime.now(UTC))
    message = str(info.value)
    assert "sink 'even' has no column enqueuedTime, partition, sequenceNumber" in message
    assert "keep them in the DataFrame" in message
    assert not (tmp_path / "lake").exists()


def _config(tmp_path: Path, **sections: Any) -> PipelineConfig:
    base = {
        "name": "p",
        "trigger": {"availableNow": True},
        "checkpoint_root": str(tmp_path / "c"),
        "status_root": str(tmp_path / "s"),
        "sources": {"telemetry": {"kind": "eventhubs", "connection_string_env": ENV_VAR}},
        "sinks": {"out": {"kind": "delta", "output_path": str(tmp_path / "out")}},
        **sections,
    }
    return load_config(write_config(tmp_path / "p.yaml", base), PipelineConfig, check_environment=False)


def _telemetry(telemetry: Any) -> Any:
    return telemetry


def _orders(orders: Any) -> Any:
    return orders


def _two(telemetry: Any, orders: Any) -> Any:
    return telemetry


def _own(context: Any) -> Any:
    return None


def test_what_cannot_backfill_is_named_before_spark_starts(tmp_path: Path) -> None:
    assert backfill_problem(_config(tmp_path), bind(_telemetry, "m:f", ["telemetry"])) is None
    files = {"orders": {"kind": "files", "path": str(tmp_path / "in"), "format": "json", "schema": "id long"}}
    problem = backfill_problem(_config(tmp_path, sources=files), bind(_orders, "m:f", ["orders"]))
    assert problem == (
        "job p: sources.orders.interval_folder is not set, so a backfill cannot tell which landing folder "
        "holds an interval's files; set it to the landing layout, e.g. %Y/%m/%d/%H"
    )
    files["orders"]["interval_folder"] = "%Y/%m/%d/%H"
    assert backfill_problem(_config(tmp_path, sources=files), bind(_orders, "m:f", ["orders"])) is None
    parquet_source = {"orders": {"kind": "parquet", "path": str(tmp_path / "t"), "schema": "id long"}}
    problem = backfill_problem(_config(tmp_path, sources=parquet_source), bind(_orders, "m:f", ["orders"]))
    assert problem == (
        "job p: sources.orders.interval_column is not set, so a backfill cannot tell which of the table's "
        "rows belong to an interval; set it to the table's time column (timestamp or date; the interval's "
        "rows are start <= column < end, in the table and in each Delta sink, which keeps it), e.g. "
        "interval_column: enqueuedTime"
    )
    parquet_source["orders"]["interval_column"] = "at"
    parquet_config = _config(tmp_path, sources=parquet_source)
    assert backfill_problem(parquet_config, bind(_orders, "m:f", ["orders"])) is None
    two = {
        "telemetry": {"kind": "eventhubs", "connection_string_env": ENV_VAR},
        "orders": files["orders"],
    }
    problem = backfill_problem(_config(tmp_path, sources=two), bind(_two, "m:f", ["telemetry", "orders"]))
    assert problem == (
        "job p: a pipeline backfills an interval of one source of kind eventhubs, eventhubs_kafka, "
        "files, delta or parquet; its sources are telemetry (eventhubs), orders (files)"
    )
    parquet = {"out": {"kind": "parquet", "output_path": str(tmp_path / "out")}}
    assert backfill_problem(_config(tmp_path, sinks=parquet), bind(_telemetry, "m:f", ["telemetry"])) is None
    hub = {"out": {"kind": "eventhubs", "connection_string_env": ENV_VAR}}
    problem = backfill_problem(_config(tmp_path, sinks=hub), bind(_telemetry, "m:f", ["telemetry"]))
    assert problem == (
        "job p: a backfill replaces the interval's rows in lake sinks (delta, parquet); an Event Hub "
        "cannot take events back: sinks.out.kind: eventhubs"
    )
    problem = backfill_problem(_config(tmp_path), bind(_own, "m:own", ["telemetry"]))
    assert problem is not None and "pipeline 'm:own' starts its own queries" in problem


@pytest.mark.integration
def test_the_backfill_script_refuses_a_pipeline_that_cannot_backfill_with_exit_2(
    pipelines: Path, tmp_path: Path
) -> None:
    write_module(pipelines, "orders_pipeline", "def orders(orders):\n    return orders\n")
    (tmp_path / "in").mkdir()
    files = {"orders": {"kind": "files", "path": str(tmp_path / "in"), "format": "json", "schema": "id long"}}
    path = pipeline_config(
        tmp_path,
        "orders",
        sources=files,
        sinks={"out": {"kind": "delta", "output_path": str(tmp_path / "o")}},
    )
    window = ["--window-start", "2026-11-25T10:00:00Z", "--window-end", "2026-11-25T11:00:00Z"]
    command = [sys.executable, str(JOBS_DIR / "backfill.py"), "--config", str(path), *window]
    env = {**spark_env(), PIPELINES_DIR_ENV: str(pipelines)}
    done = subprocess.run(
        [*command, "--application", "orders_pipeline:orders"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == EXIT_CONFIG_ERROR, done.stderr
    assert "job orders: sources.orders.interval_folder is not set" in (done.stderr + done.stdout)
    done = subprocess.run(
        [*command, "--application", "eventhubs_aggregate"], env=env, capture_output=True, text=True
    )
    assert done.returncode == EXIT_CONFIG_ERROR
    assert (
        "--application eventhubs_aggregate: a backfill runs bronze_to_silver, eventhubs_to_lake, "
        "files_to_lake jobs "
        "and pipelines" in (done.stderr + done.stdout)
    )
