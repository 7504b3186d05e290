"""What the backfill tests of the table sources (``kind: delta``, ``kind: parquet``) share: the
pipeline module, the upstream readings, the doc's source, the expected rows, the backfill as
``jobs/backfill.py`` runs it."""

from __future__ import annotations

import re
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from hubflow.status.exit_codes import EXIT_OK
from hubflow_jobs.pipeline import PipelineError
from hubflow_jobs.pipeline.backfill import backfill_pipeline, backfill_problem, check_window
from hubflow_jobs.pipeline.job import load_pipeline
from tests.support.lake import spark_rows

from .pipelines_support import pipeline_config, run_on_session

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


def readings(ids: range, at: datetime) -> list[tuple[int, datetime, int]]:
    """Row ``n`` at ``n`` minutes after ``at``, value ``n`` (negative when ``n`` ends in 7)."""
    return [(n, at + timedelta(minutes=n), -n if n % 10 == 7 else n) for n in ids]


def doc_sources(kind: str) -> dict[str, Any]:
    """The ``kind`` source with ``interval_column`` of docs/pipelines.md "Backfill", as written."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "pipelines.md").read_text(encoding="utf-8")
    blocks = [textwrap.dedent(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.S)]
    block = next(b for b in blocks if f"kind: {kind}" in b and "interval_column:" in b)
    return yaml.safe_load(block)["sources"]


def sections(
    kind: str, base: Path, factor: int, column: str | None = "event_time", **extra: Any
) -> dict[str, Any]:
    """The config sections of a ``scaled`` job on the doc's ``kind`` source under ``base``: its
    ``interval_column`` set to ``column`` (None: removed), a Delta sink with its quarantine."""
    sources = doc_sources(kind)
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


def rows(spark: Any, table: Path) -> list[tuple[int, int, int]]:
    """(id, hour, value) of every row of the table."""
    got = spark_rows(spark, table, {"id": "value", "event_time": "timestamp", "value": "value"})
    return sorted((n, (datetime.fromtimestamp(t / 1e6, UTC) - T0) // HOUR, v) for n, t, v in got)


def expected(ids: range, factor_of_hour: dict[int, int]) -> tuple[list[tuple[int, int, int]], ...]:
    good, bad = [], []
    for n in ids:
        hour = n // 60
        value = (-n if n % 10 == 7 else n) * factor_of_hour.get(hour, 1)
        (bad if n % 10 == 7 else good).append((n, hour, value))
    return sorted(good), sorted(bad)


def backfill(name: str, path: Path, start: datetime, end: datetime, spark: Any) -> dict[str, int]:
    """The backfill as ``jobs/backfill.py`` runs it, on the shared session."""
    config, binding = load_pipeline(name, str(path))
    problem = backfill_problem(config, binding)
    if problem:
        raise PipelineError(problem)
    check_window(config, start, end)
    return backfill_pipeline(spark, config, binding, start, end)


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
        backfill("scaled_readings:distinct_ids", stateful, start, end, spark)
    assert str(info.value).startswith(
        f"job ids: pipeline 'scaled_readings:distinct_ids' keeps state across batches "
        f"({tmp_path / 'checkpoints' / 'ids' / 'state'}: an aggregation, dropDuplicates or a "
        "stream-stream join)"
    )
    assert "backfill a stateless function" in str(info.value)
