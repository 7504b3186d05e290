"""Backfills of pipelines reading a Delta table: the rows of the interval (by
``sources.<name>.interval_column``) through the function again, replacing exactly the interval's rows
of the Delta sink and its quarantine once, reruns replacing again, other hours untouched; refused
with the reason while the sink's query has not read a commit adding rows of the interval, for a
function that keeps state, and by the key for a missing or wrong column."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from hubflow.status.exit_codes import EXIT_OK
from hubflow_jobs.backfill_window import BackfillRefused
from hubflow_jobs.pipeline import PipelineError
from hubflow_jobs.pipeline.backfill import backfill_pipeline, backfill_problem, check_window
from hubflow_jobs.pipeline.job import load_pipeline
from tests.support.lake import spark_rows

from .pipelines_support import pipeline_config, run_on_session, write_module

pytestmark = pytest.mark.integration

#: Readings scaled by ``params.factor``; a negative reading goes to the quarantine.
SCALED = """
from pyspark.sql import functions as F


def scaled(readings, params):
    reason = F.when(F.col("value") < 0, F.lit("negative"))
    value = (F.col("value") * params["factor"]).alias("value")
    return readings.select("id", "event_time", value, reason.alias("_quarantine_reason"))


def without_time(readings):
    return readings.select("id", "value")


def distinct_ids(readings):
    return readings.dropDuplicates(["id"])
"""

T0 = datetime(2026, 11, 25, 10, tzinfo=UTC)
HOUR = timedelta(hours=1)
UPSTREAM_SCHEMA = "id BIGINT, event_time TIMESTAMP, value BIGINT"


def _append(spark: Any, table: Path, ids: range, at: datetime) -> None:
    """One commit of the rows ``ids``: row ``n`` at ``n`` minutes after ``at``, value ``n`` (negative when
    ``n`` ends in 7)."""
    rows = [(n, at + timedelta(minutes=n), -n if n % 10 == 7 else n) for n in ids]
    frame = spark.createDataFrame(rows, UPSTREAM_SCHEMA).repartition(2)
    frame.write.format("delta").mode("append").save(str(table))


def doc_sources() -> dict[str, Any]:
    """The ``kind: delta`` source with ``interval_column`` of docs/pipelines.md "Backfill", as written."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "pipelines.md").read_text(encoding="utf-8")
    blocks = [textwrap.dedent(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.S)]
    block = next(b for b in blocks if "interval_column:" in b and b.startswith("sources:"))
    return yaml.safe_load(block)["sources"]


def _sections(base: Path, factor: int, column: str | None = "event_time", **extra: Any) -> dict[str, Any]:
    sources = doc_sources()
    assert sources["readings"]["interval_column"] == "event_time"
    sources["readings"]["path"] = str(base / "upstream")
    if column is None:
        del sources["readings"]["interval_column"]
    else:
        sources["readings"]["interval_column"] = column
    return {
        "sources": sources,
        "sinks": {
            "scaled": {
                "kind": "delta",
                "output_path": str(base / "lake" / "scaled"),
                "quarantine_path": str(base / "lake" / "scaled_quarantine"),
            }
        },
        "params": {"factor": factor},
        **extra,
    }


def _rows(spark: Any, table: Path) -> list[tuple[int, int, int]]:
    """(id, hour, value) of every row of the table."""
    got = spark_rows(spark, table, {"id": "value", "event_time": "timestamp", "value": "value"})
    return sorted((n, (datetime.fromtimestamp(t / 1e6, UTC) - T0) // HOUR, v) for n, t, v in got)


def _expected(ids: range, factor_of_hour: dict[int, int]) -> tuple[list[tuple[int, int, int]], ...]:
    good, bad = [], []
    for n in ids:
        hour = n // 60
        value = (-n if n % 10 == 7 else n) * factor_of_hour.get(hour, 1)
        (bad if n % 10 == 7 else good).append((n, hour, value))
    return sorted(good), sorted(bad)


def _backfill(name: str, path: Path, start: datetime, end: datetime, spark: Any) -> dict[str, int]:
    """The backfill as ``jobs/backfill.py`` runs it, on the shared session."""
    config, binding = load_pipeline(name, str(path))
    problem = backfill_problem(config, binding)
    if problem:
        raise PipelineError(problem)
    check_window(config, start, end)
    return backfill_pipeline(spark, config, binding, start, end)


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
    assert (_rows(spark, output), _rows(spark, quarantine)) == _expected(ids, {})

    # Factor 10: the backfill of hour 1 replaces its rows, in the sink and the quarantine, twice.
    v10 = pipeline_config(tmp_path, "scaled", **_sections(tmp_path, 10))
    for _ in range(2):
        counts = _backfill("scaled_readings:scaled", v10, T0 + HOUR, T0 + 2 * HOUR, spark)
        assert counts["read"] == 60 and counts["written"] == 54 and counts["quarantined"] == 6
        assert (_rows(spark, output), _rows(spark, quarantine)) == _expected(ids, {1: 10})
    every = Counter(n for n, _, _ in _rows(spark, output) + _rows(spark, quarantine))
    assert sorted(every) == list(ids) and set(every.values()) == {1}, "every row once"

    # A commit the stream has not read yet, of hour 3 only: hour 1's backfill may go on (the
    # commit's statistics say it holds no row of hour 1).
    _append(spark, upstream, range(180, 240), T0)
    assert _backfill("scaled_readings:scaled", v10, T0 + HOUR, T0 + 2 * HOUR, spark)["read"] == 60
    # Late rows of hour 1 the stream has not read: the backfill would write them twice.
    version = _version(upstream)
    _append(spark, upstream, range(900, 960), T0 - 14 * HOUR)  # 900 // 60 = 15 -> hour 1 below
    assert _version(upstream) == version + 1
    with pytest.raises(BackfillRefused) as info:
        _backfill("scaled_readings:scaled", v10, T0 + HOUR, T0 + 2 * HOUR, spark)
    assert (
        f"sink 'scaled': its query has not yet read versions [{version + 1}] of {upstream}, which add "
        "rows of this interval (by sources.readings.interval_column: event_time)"
    ) in str(info.value)
    assert (_rows(spark, output), _rows(spark, quarantine)) == _expected(ids, {1: 10}), "nothing written"

    # Once the stream has read them, the backfill replaces hour 1 with every row of it once.
    assert run_on_session(spark, "scaled_readings:scaled", v10)[0] == EXIT_OK
    assert _backfill("scaled_readings:scaled", v10, T0 + HOUR, T0 + 2 * HOUR, spark)["read"] == 120
    hour_one = [(n, h, v) for n, h, v in _rows(spark, output) + _rows(spark, quarantine) if h == 1]
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
        _backfill("scaled_readings:scaled", unset, start, end, spark)
    assert str(info.value) == (
        "job scaled: sources.readings.interval_column is not set, so a backfill cannot tell which of the "
        "table's rows belong to an interval; set it to the table's time column (timestamp or date; the "
        "interval's rows are start <= column < end, in the table and in each Delta sink, which keeps it), "
        "e.g. interval_column: enqueuedTime"
    )
    missing = pipeline_config(tmp_path, "scaled", **_sections(tmp_path, 1, column="eventTime"))
    with pytest.raises(PipelineError) as info:
        _backfill("scaled_readings:scaled", missing, start, end, spark)
    assert str(info.value) == (
        f"job scaled: sources.readings.interval_column: 'eventTime' is not a column of the Delta table "
        f"{tmp_path / 'upstream'}; its columns are id, event_time, value. Name its time column "
        "(timestamp or date)"
    )
    wrong_type = pipeline_config(tmp_path, "scaled", **_sections(tmp_path, 1, column="id"))
    with pytest.raises(PipelineError, match=r"interval_column: the column 'id' of .* is bigint; a backfill"):
        _backfill("scaled_readings:scaled", wrong_type, start, end, spark)

    # A sink that drops the column: its rows of the interval cannot be found.
    path = pipeline_config(tmp_path, "scaled", **{**_sections(tmp_path, 1), "params": {}})
    with pytest.raises(PipelineError, match="sink 'scaled' has no column event_time; a backfill finds"):
        _backfill("scaled_readings:without_time", path, start, end, spark)

    # Before the job's first batch: its first run reads the interval itself.
    fine = pipeline_config(tmp_path, "scaled", **_sections(tmp_path, 1))
    with pytest.raises(BackfillRefused, match="sink 'scaled': its query has not committed a batch yet"):
        _backfill("scaled_readings:scaled", fine, start, end, spark)
    assert not (tmp_path / "lake").exists(), "nothing written"

    # A function that keeps state across batches (dropDuplicates on the stream).
    refuses_a_stateful_function(spark, tmp_path, _sections(tmp_path, 1), start, end)


def refuses_a_stateful_function(
    spark: Any, tmp_path: Path, sections: dict[str, Any], start: datetime, end: datetime
) -> None:
    """A ``distinct_ids`` job (dropDuplicates on the stream) over the source of ``sections`` runs,
    and its backfill is refused before reading: its checkpoint keeps state across batches."""
    sections = {**sections, "params": {}}
    sections["sinks"] = {"ids": {"kind": "delta", "output_path": str(tmp_path / "lake" / "ids")}}
    stateful = pipeline_config(tmp_path, "ids", **sections)
    assert run_on_session(spark, "scaled_readings:distinct_ids", stateful)[0] == EXIT_OK
    with pytest.raises(PipelineError) as info:
        _backfill("scaled_readings:distinct_ids", stateful, start, end, spark)
    assert str(info.value).startswith(
        f"job ids: pipeline 'scaled_readings:distinct_ids' keeps state across batches "
        f"({tmp_path / 'checkpoints' / 'ids' / 'state'}: an aggregation, dropDuplicates or a "
        "stream-stream join)"
    )
    assert "backfill a stateless function" in str(info.value)


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
        _backfill("scaled_readings:scaled", path, T0 + HOUR, T0 + 2 * HOUR, spark)
    assert (
        f"versions [{version}] of {upstream} added rows of this interval (by "
        "sources.readings.interval_column: event_time) while the backfill wrote what it had read of "
        f"version {version - 1}"
    ) in str(info.value)
    assert "Run the backfill of this interval again" in str(info.value)
    output, quarantine = tmp_path / "lake" / "scaled", tmp_path / "lake" / "scaled_quarantine"
    landed = {n for n, _, _ in _rows(spark, output) + _rows(spark, quarantine)}
    assert not landed & set(range(900, 910)), "the late rows the replacement removed"

    monkeypatch.setattr(table_backfill, "write_interval", real)
    assert _backfill("scaled_readings:scaled", path, T0 + HOUR, T0 + 2 * HOUR, spark)["read"] == 70
    every = Counter(n for n, _, _ in _rows(spark, output) + _rows(spark, quarantine))
    assert sorted(every) == [*range(120), *range(900, 910)] and set(every.values()) == {1}
