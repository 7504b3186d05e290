"""Backfills of pipelines reading a Delta table: the rows of the interval (by
``sources.<name>.interval_column``) through the function again, replacing exactly the interval's rows
of the Delta sink and its quarantine once, reruns replacing again, other hours untouched; refused
with the reason while the sink's query has not read a commit adding rows of the interval, for a
function that keeps state, and by the key for a missing or wrong column."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from hubflow.status.exit_codes import EXIT_OK
from hubflow_jobs.backfill_window import BackfillRefused
from hubflow_jobs.pipeline import PipelineError
from tests.support.lake import spark_rows

from . import table_backfill_support as tables
from .pipelines_support import pipeline_config, run_on_session, write_module
from .table_backfill_support import HOUR, SCALED, T0, UPSTREAM_SCHEMA

pytestmark = pytest.mark.integration


def _append(spark: Any, table: Path, ids: range, at: datetime) -> None:
    """One commit of the ``readings`` ``ids`` at ``at``."""
    frame = spark.createDataFrame(tables.readings(ids, at), UPSTREAM_SCHEMA).repartition(2)
    frame.write.format("delta").mode("append").save(str(table))


def _sections(base: Path, factor: int, column: str | None = "event_time", **extra: Any) -> dict[str, Any]:
    return tables.sections("delta", base, factor, column, **extra)


def test_a_delta_backfill_replaces_exactly_its_hour_once_and_waits_for_commits_of_that_hour(
    spark: Any, pipelines: Path, tmp_path: Path
) -> None:
    write_module(pipelines, "scaled_readings", SCALED)
    upstream = tmp_path / "upstream"
    # Three hours of readings (ids 0-59 in hour 0, 60-119 in hour 1, 120-179 in hour 2), in two commits.
    _append(spark, upstream, range(0, 100), T0)
    _append(spark, upstream, range(100, 180), T0)
    v1 = pipeline_config(tmp_path, "scaled", **_sections(tmp_path, 1))
    assert run_on_session(spark, "scaled_readings:scaled", v1)[0] == EXIT_OK
    output, quarantine = tmp_path / "lake" / "scaled", tmp_path / "lake" / "scaled_quarantine"
    ids = range(180)
    assert (tables.rows(spark, output), tables.rows(spark, quarantine)) == tables.expected(ids, {})

    # Factor 10: the backfill of hour 1 replaces its rows, in the sink and the quarantine, twice.
    v10 = pipeline_config(tmp_path, "scaled", **_sections(tmp_path, 10))
    for _ in range(2):
        counts = tables.backfill("scaled_readings:scaled", v10, T0 + HOUR, T0 + 2 * HOUR, spark)
        assert counts["read"] == 60 and counts["written"] == 54 and counts["quarantined"] == 6
        assert (tables.rows(spark, output), tables.rows(spark, quarantine)) == tables.expected(ids, {1: 10})
    every = Counter(n for n, _, _ in tables.rows(spark, output) + tables.rows(spark, quarantine))
    assert sorted(every) == list(ids) and set(every.values()) == {1}, "every row once"

    # A commit the stream has not read yet, of hour 3 only: hour 1's backfill may go on (the
    # commit's statistics say it holds no row of hour 1).
    _append(spark, upstream, range(180, 240), T0)
    assert tables.backfill("scaled_readings:scaled", v10, T0 + HOUR, T0 + 2 * HOUR, spark)["read"] == 60
    # Late rows of hour 1 the stream has not read: the backfill would write them twice.
    version = _version(upstream)
    _append(spark, upstream, range(900, 960), T0 - 14 * HOUR)  # 900 // 60 = 15 -> hour 1 below
    assert _version(upstream) == version + 1
    with pytest.raises(BackfillRefused) as info:
        tables.backfill("scaled_readings:scaled", v10, T0 + HOUR, T0 + 2 * HOUR, spark)
    assert (
        f"sink 'scaled': its query has not yet read versions [{version + 1}] of {upstream}, which add "
        "rows of this interval (by sources.readings.interval_column: event_time)"
    ) in str(info.value)
    assert (tables.rows(spark, output), tables.rows(spark, quarantine)) == tables.expected(ids, {1: 10}), (
        "nothing written"
    )

    # Once the stream has read them, the backfill replaces hour 1 with every row of it once.
    assert run_on_session(spark, "scaled_readings:scaled", v10)[0] == EXIT_OK
    assert tables.backfill("scaled_readings:scaled", v10, T0 + HOUR, T0 + 2 * HOUR, spark)["read"] == 120
    hour_one = [
        (n, h, v) for n, h, v in tables.rows(spark, output) + tables.rows(spark, quarantine) if h == 1
    ]
    assert Counter(n for n, _, _ in hour_one) == Counter([*range(60, 120), *range(900, 960)])
    assert {v == (-n if n % 10 == 7 else n) * 10 for n, _, v in hour_one} == {True}


def _version(table: Path) -> int:
    return max(int(p.stem) for p in (table / "_delta_log").glob("[0-9]*.json"))


def test_what_a_delta_backfill_cannot_do_is_refused_naming_the_key(
    spark: Any, pipelines: Path, tmp_path: Path
) -> None:
    write_module(pipelines, "scaled_readings", SCALED)
    _append(spark, tmp_path / "upstream", range(0, 120), T0)
    start, end = T0, T0 + HOUR

    unset = pipeline_config(tmp_path, "scaled", **_sections(tmp_path, 1, column=None))
    with pytest.raises(PipelineError) as info:
        tables.backfill("scaled_readings:scaled", unset, start, end, spark)
    assert str(info.value) == (
        "job scaled: sources.readings.interval_column is not set, so a backfill cannot tell which of the "
        "table's rows belong to an interval; set it to the table's time column (timestamp or date; the "
        "interval's rows are start <= column < end, in the table and in each Delta sink, which keeps it), "
        "e.g. interval_column: enqueuedTime"
    )
    missing = pipeline_config(tmp_path, "scaled", **_sections(tmp_path, 1, column="eventTime"))
    with pytest.raises(PipelineError) as info:
        tables.backfill("scaled_readings:scaled", missing, start, end, spark)
    assert str(info.value) == (
        f"job scaled: sources.readings.interval_column: 'eventTime' is not a column of the Delta table "
        f"{tmp_path / 'upstream'}; its columns are id, event_time, value. Name its time column "
        "(timestamp or date)"
    )
    wrong_type = pipeline_config(tmp_path, "scaled", **_sections(tmp_path, 1, column="id"))
    with pytest.raises(PipelineError, match=r"interval_column: the column 'id' of .* is bigint; a backfill"):
        tables.backfill("scaled_readings:scaled", wrong_type, start, end, spark)

    # A sink that drops the column: its rows of the interval cannot be found.
    path = pipeline_config(tmp_path, "scaled", **{**_sections(tmp_path, 1), "params": {}})
    with pytest.raises(PipelineError, match="sink 'scaled' has no column event_time; a backfill finds"):
        tables.backfill("scaled_readings:without_time", path, start, end, spark)

    # Before the job's first batch: its first run reads the interval itself.
    fine = pipeline_config(tmp_path, "scaled", **_sections(tmp_path, 1))
    with pytest.raises(BackfillRefused, match="sink 'scaled': its query has not committed a batch yet"):
        tables.backfill("scaled_readings:scaled", fine, start, end, spark)
    assert not (tmp_path / "lake").exists(), "nothing written"

    # A function that keeps state across batches (dropDuplicates on the stream).
    tables.refuses_a_stateful_function(spark, tmp_path, _sections(tmp_path, 1), start, end)


def test_telemetry_silver_as_shipped_backfills_an_hour_through_the_backfill_script(
    spark: Any, tmp_path: Path
) -> None:
    """jobs/configs/telemetry_silver.yaml (its paths under tmp_path): silver rows of an hour lost, the
    backfill of that hour by ``jobs/backfill.py --application bronze_to_silver`` (what Airflow and
    ``hubflow backfill`` run) puts back every event of it once; the next hour is not touched."""
    from hubflow.config import load_config
    from hubflow_jobs.builtins.bronze_to_silver import BronzeToSilverConfig
    from hubflow_jobs.pipeline.job import start_function
    from hubflow_jobs.runtime.runner import run_job
    from hubflow_jobs.runtime.stop import StopRequest
    from tests.support.spark_cluster import spark_env

    from .helpers import JOBS_DIR
    from .test_delta_source import FILE_ROWS, append_bronze

    shipped = (JOBS_DIR / "configs" / "telemetry_silver.yaml").read_text(encoding="utf-8")
    assert "interval_column: enqueuedTime" in shipped
    path = tmp_path / "telemetry_silver.yaml"
    path.write_text(shipped.replace("/opt/hubflow/data", str(tmp_path)), encoding="utf-8")
    bronze = tmp_path / "lake" / "telemetry_bronze"
    # Events enqueued at 10:00 + their sequence number in seconds: 0-19 in hour 10, 3600-3619 in 11.
    good = append_bronze(spark, bronze, 0, files=2, bad=1)
    good |= append_bronze(spark, bronze, 3600, files=2, bad=1)
    config = load_config(path, BronzeToSilverConfig)
    assert run_job(spark, config, start_function("bronze_to_silver"), StopRequest())[0] == EXIT_OK
    silver, quarantine = tmp_path / "lake" / "telemetry_silver", tmp_path / "quarantine" / "telemetry_silver"
    columns = {"sequenceNumber": "value", "device": "value", "_ingested_at": "timestamp"}
    before = spark_rows(spark, silver, columns)
    assert sorted(row[0] for row in before) == sorted(good)

    spark.sql(f"DELETE FROM delta.`{silver}` WHERE sequenceNumber < 10")  # hour 10's rows, partly lost
    window = ["--window-start", "2026-11-22T10:00:00Z", "--window-end", "2026-11-22T11:00:00Z"]
    command = [sys.executable, str(JOBS_DIR / "backfill.py"), "--application", "bronze_to_silver"]
    done = subprocess.run(
        [*command, "--config", str(path), *window],
        env=spark_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == EXIT_OK, done.stderr[-3000:]
    assert "backfill [2026-11-22 10:00:00+00:00, 2026-11-22 11:00:00+00:00) finished" in (
        done.stderr + done.stdout
    )
    after = spark_rows(spark, silver, columns)
    assert sorted(row[0] for row in after) == sorted(good), "every good event once"
    assert [row for row in after if row[0] >= 3600] == [row for row in before if row[0] >= 3600]
    bad = spark_rows(spark, quarantine, {"sequenceNumber": "value"})
    assert bad == [(2 * FILE_ROWS - 1,), (3600 + 2 * FILE_ROWS - 1,)], "each bad event once"


def test_rows_of_the_interval_added_while_the_backfill_writes_fail_it_and_a_rerun_repairs(
    spark: Any, pipelines: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Late rows of the interval committed to the table, and landed by the job, while the backfill
    writes what it read before: the replacement removes them, so the backfill fails saying to run it
    again; the rerun puts every row of the interval back once."""
    import hubflow_jobs.pipeline.table_backfill as table_backfill

    write_module(pipelines, "scaled_readings", SCALED)
    upstream = tmp_path / "upstream"
    _append(spark, upstream, range(0, 120), T0)
    path = pipeline_config(tmp_path, "scaled", **_sections(tmp_path, 1))
    assert run_on_session(spark, "scaled_readings:scaled", path)[0] == EXIT_OK
    real = table_backfill.write_interval

    def late_rows_landed_first(*args: Any) -> dict[str, int]:
        _append(spark, upstream, range(900, 910), T0 - 14 * HOUR)  # hour 1
        assert run_on_session(spark, "scaled_readings:scaled", path)[0] == EXIT_OK
        return real(*args)

    monkeypatch.setattr(table_backfill, "write_interval", late_rows_landed_first)
    version = _version(upstream) + 1
    with pytest.raises(BackfillRefused) as info:
        tables.backfill("scaled_readings:scaled", path, T0 + HOUR, T0 + 2 * HOUR, spark)
    assert (
        f"versions [{version}] of {upstream} added rows of this interval (by "
        "sources.readings.interval_column: event_time) while the backfill wrote what it had read of "
        f"version {version - 1}"
    ) in str(info.value)
    assert "Run the backfill of this interval again" in str(info.value)
    output, quarantine = tmp_path / "lake" / "scaled", tmp_path / "lake" / "scaled_quarantine"
    landed = {n for n, _, _ in tables.rows(spark, output) + tables.rows(spark, quarantine)}
    assert not landed & set(range(900, 910)), "the late rows the replacement removed"

    monkeypatch.setattr(table_backfill, "write_interval", real)
    assert tables.backfill("scaled_readings:scaled", path, T0 + HOUR, T0 + 2 * HOUR, spark)["read"] == 70
    every = Counter(n for n, _, _ in tables.rows(spark, output) + tables.rows(spark, quarantine))
    assert sorted(every) == [*range(120), *range(900, 910)] and set(every.values()) == {1}
