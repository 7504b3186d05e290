"""Backfills of pipelines reading a parquet lake table (``kind: parquet``: Spark's file sink's table):
the rows of the interval (by ``sources.<name>.interval_column``) of the files its ``_spark_metadata``
log lists, never a stray file, through the function again, replacing exactly the interval's rows of
the Delta sink and its quarantine once, reruns replacing again, other hours untouched; refused with
the reason while the sink's query has not read a file with rows of the interval, when such files
were committed while it wrote, for a function that keeps state, and by the key for a missing or
wrong column."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from hubflow.checkpoints.file_sink_log import committed_files
from hubflow.status.exit_codes import EXIT_OK
from hubflow_jobs.backfill_window import BackfillRefused
from hubflow_jobs.lake.file_sink import ExactlyOnceFileSink
from hubflow_jobs.pipeline import PipelineError

from . import table_backfill_support as tables
from .pipelines_support import pipeline_config, run_on_session, write_module
from .table_backfill_support import HOUR, SCALED, T0, UPSTREAM_SCHEMA

pytestmark = pytest.mark.integration

SCALED_READINGS = "scaled_readings:scaled"


def _commit(spark: Any, table: Path, batch: int, ids: range, at: datetime) -> None:
    """File sink batch ``batch`` of the ``readings`` ``ids`` at ``at``, in two files."""
    ExactlyOnceFileSink(spark, str(table)).add_batch(
        batch, spark.createDataFrame(tables.readings(ids, at), UPSTREAM_SCHEMA).repartition(2)
    )


def _sections(base: Path, factor: int, column: str | None = "event_time") -> dict[str, Any]:
    parquet = tables.sections("parquet", base, factor, column)
    assert parquet["sources"]["readings"]["schema"] == UPSTREAM_SCHEMA
    return parquet


def test_a_parquet_backfill_replaces_exactly_its_hour_once_and_waits_for_files_of_that_hour(
    spark: Any, pipelines: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hubflow_jobs.pipeline.table_backfill as table_backfill

    write_module(pipelines, "scaled_readings", SCALED)
    upstream = tmp_path / "upstream"
    # Three hours of readings (ids 0-59 in hour 0, 60-119 in hour 1, 120-179 in hour 2), two batches.
    _commit(spark, upstream, 0, range(0, 100), T0)
    _commit(spark, upstream, 1, range(100, 180), T0)
    # A stray file of hour 1 no batch lists (a failed batch's leftover): no reader sees its rows.
    stray = [(n, T0 + HOUR, n) for n in range(500, 510)]
    spark.createDataFrame(stray, UPSTREAM_SCHEMA).coalesce(1).write.parquet(str(tmp_path / "stray"))
    (next((tmp_path / "stray").glob("part-*.parquet"))).rename(upstream / "part-stray.parquet")
    v1 = pipeline_config(tmp_path, "scaled", **_sections(tmp_path, 1))
    assert run_on_session(spark, SCALED_READINGS, v1)[0] == EXIT_OK
    output, quarantine = tmp_path / "lake" / "scaled", tmp_path / "lake" / "scaled_quarantine"
    ids = range(180)
    assert (tables.rows(spark, output), tables.rows(spark, quarantine)) == tables.expected(ids, {})

    # Factor 10: the backfill of hour 1 replaces its rows, in the sink and the quarantine, twice.
    v10 = pipeline_config(tmp_path, "scaled", **_sections(tmp_path, 10))
    for _ in range(2):
        counts = tables.backfill(SCALED_READINGS, v10, T0 + HOUR, T0 + 2 * HOUR, spark)
        assert counts["read"] == 60 and counts["written"] == 54 and counts["quarantined"] == 6
        assert (tables.rows(spark, output), tables.rows(spark, quarantine)) == tables.expected(ids, {1: 10})
    every = Counter(n for n, _, _ in tables.rows(spark, output) + tables.rows(spark, quarantine))
    assert sorted(every) == list(ids) and set(every.values()) == {1}, "every row once, no stray one"

    # A batch the stream has not read yet, of hour 3 only: hour 1's backfill may go on (its files'
    # event_time values, INT96 without statistics, are read: none of hour 1).
    _commit(spark, upstream, 2, range(180, 240), T0)
    assert tables.backfill(SCALED_READINGS, v10, T0 + HOUR, T0 + 2 * HOUR, spark)["read"] == 60
    # Late rows of hour 1 the stream has not read: the backfill would write them twice.
    _commit(spark, upstream, 3, range(900, 960), T0 - 14 * HOUR)  # 900 // 60 = 15 -> hour 1 below
    with pytest.raises(BackfillRefused) as info:
        tables.backfill(SCALED_READINGS, v10, T0 + HOUR, T0 + 2 * HOUR, spark)
    assert (
        f"sink 'scaled': its query has not yet read batches [3] of {upstream}, which add rows of this "
        "interval (by sources.readings.interval_column: event_time)"
    ) in str(info.value)
    assert (tables.rows(spark, output), tables.rows(spark, quarantine)) == tables.expected(ids, {1: 10}), (
        "nothing written"
    )

    # Once the stream has read them, the backfill replaces hour 1 with every row of it once.
    assert run_on_session(spark, SCALED_READINGS, v10)[0] == EXIT_OK
    assert tables.backfill(SCALED_READINGS, v10, T0 + HOUR, T0 + 2 * HOUR, spark)["read"] == 120
    hour_one = [
        (n, h, v) for n, h, v in tables.rows(spark, output) + tables.rows(spark, quarantine) if h == 1
    ]
    assert Counter(n for n, _, _ in hour_one) == Counter([*range(60, 120), *range(900, 960)])
    assert {v == (-n if n % 10 == 7 else n) * 10 for n, _, v in hour_one} == {True}

    # Late rows of hour 1 committed, and landed by the job, while the backfill writes what it read:
    # the replacement removes them, so it fails saying to run it again; the rerun puts them back.
    real = table_backfill.write_interval

    def late_rows_landed_first(*args: Any) -> dict[str, int]:
        _commit(spark, upstream, 4, range(960, 970), T0 - 15 * HOUR)  # 960 // 60 = 16 -> hour 1
        assert run_on_session(spark, SCALED_READINGS, v10)[0] == EXIT_OK
        return real(*args)

    monkeypatch.setattr(table_backfill, "write_interval", late_rows_landed_first)
    with pytest.raises(BackfillRefused) as info:
        tables.backfill(SCALED_READINGS, v10, T0 + HOUR, T0 + 2 * HOUR, spark)
    assert (
        f"batches [4] of {upstream} added rows of this interval (by sources.readings.interval_column: "
        "event_time) while the backfill wrote what it had read up to batch 3"
    ) in str(info.value)
    assert "Run the backfill of this interval again" in str(info.value)
    landed = {n for n, _, _ in tables.rows(spark, output) + tables.rows(spark, quarantine)}
    assert not landed & set(range(960, 970)), "the late rows the replacement removed"
    monkeypatch.setattr(table_backfill, "write_interval", real)
    assert tables.backfill(SCALED_READINGS, v10, T0 + HOUR, T0 + 2 * HOUR, spark)["read"] == 130
    every = Counter(n for n, _, _ in tables.rows(spark, output) + tables.rows(spark, quarantine))
    assert sorted(every) == [*range(240), *range(900, 970)] and set(every.values()) == {1}
    assert len(committed_files(str(upstream))) == 10, "two files a batch, the stray one not listed"


def test_what_a_parquet_backfill_cannot_do_is_refused_naming_the_key(
    spark: Any, pipelines: Path, tmp_path: Path
) -> None:
    write_module(pipelines, "scaled_readings", SCALED)
    _commit(spark, tmp_path / "upstream", 0, range(0, 120), T0)
    start, end = T0, T0 + HOUR

    unset = pipeline_config(tmp_path, "scaled", **_sections(tmp_path, 1, column=None))
    with pytest.raises(PipelineError) as info:
        tables.backfill(SCALED_READINGS, unset, start, end, spark)
    assert str(info.value) == (
        "job scaled: sources.readings.interval_column is not set, so a backfill cannot tell which of the "
        "table's rows belong to an interval; set it to the table's time column (timestamp or date; the "
        "interval's rows are start <= column < end, in the table and in each Delta sink, which keeps it), "
        "e.g. interval_column: enqueuedTime"
    )
    missing = pipeline_config(tmp_path, "scaled", **_sections(tmp_path, 1, column="eventTime"))
    with pytest.raises(PipelineError) as info:
        tables.backfill(SCALED_READINGS, missing, start, end, spark)
    assert str(info.value) == (
        f"job scaled: sources.readings.interval_column: 'eventTime' is not a column of the parquet table "
        f"{tmp_path / 'upstream'}; its columns are id, event_time, value. Name its time column "
        "(timestamp or date)"
    )
    wrong_type = pipeline_config(tmp_path, "scaled", **_sections(tmp_path, 1, column="id"))
    with pytest.raises(PipelineError, match=r"interval_column: the column 'id' of .* is bigint; a backfill"):
        tables.backfill(SCALED_READINGS, wrong_type, start, end, spark)

    # Before the job's first batch: its first run reads the interval itself.
    fine = pipeline_config(tmp_path, "scaled", **_sections(tmp_path, 1))
    with pytest.raises(BackfillRefused, match=r"sink 'scaled': its query has not yet read batches \[0\]"):
        tables.backfill(SCALED_READINGS, fine, start, end, spark)
    assert not (tmp_path / "lake").exists(), "nothing written"

    # A function that keeps state across batches (dropDuplicates on the stream).
    tables.refuses_a_stateful_function(spark, tmp_path, _sections(tmp_path, 1), start, end)
