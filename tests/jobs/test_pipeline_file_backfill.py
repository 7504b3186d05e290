"""Backfills of a user's pipeline reading landing files: an interval's files (from landing or the
archive) through the function again, replacing their rows in the Delta sink and its quarantine
exactly once, reruns replacing again; refused with the reason when the stream has not processed a
file of the interval, when a file the table holds is gone, and when the sink lost the file's name."""

from __future__ import annotations

import shutil
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hubflow.config import archive_root
from hubflow.status.exit_codes import EXIT_OK
from hubflow_jobs.backfill_window import BackfillRefused
from hubflow_jobs.pipeline import PipelineError
from hubflow_jobs.pipeline.backfill import backfill_pipeline
from hubflow_jobs.pipeline.job import load_pipeline

from .helpers import write_json_landing_file
from .pipelines_support import pipeline_config, run_on_session, write_module

pytestmark = pytest.mark.integration
PATTERN = "%Y/%m/%d/%H"
DAY = datetime(2026, 11, 22, tzinfo=UTC)

#: Every record tagged with ``params.tag``; records that do not parse or have no id to the quarantine.
TAGGED = """
from pyspark.sql import functions as F


def tagged(orders, params):
    reason = F.when(F.col("_raw_record").isNotNull(), F.lit("not json")).when(
        F.col("id").isNull(), F.lit("no id")
    )
    rows = orders.select("id", "_raw_record", "_source_file", F.lit(params["tag"]).alias("tag"))
    return rows.withColumn("_quarantine_reason", reason)


def nameless(orders):
    return orders.select("id")
"""


def _hour(h: int) -> datetime:
    return DAY + timedelta(hours=h)


def _land(landing: Path, hour: int, name: str, first_id: int, good: int, bad: int) -> set[int]:
    folder = landing / _hour(hour).strftime(PATTERN)
    folder.mkdir(parents=True, exist_ok=True)
    return write_json_landing_file(folder, name, first_id, good, bad)


def _sections(base: Path, tag: str) -> dict[str, Any]:
    return {
        "sources": {
            "orders": {
                "kind": "files",
                "path": str(base / "landing"),
                "format": "json",
                "schema": "id BIGINT, name STRING",
                "max_files_per_trigger": 1,
                "archive_dir": str(base / "archive"),
                "interval_folder": PATTERN,
            }
        },
        "sinks": {
            "out": {
                "kind": "delta",
                "output_path": str(base / "lake" / "out"),
                "quarantine_path": str(base / "lake" / "bad"),
            }
        },
        "params": {"tag": tag},
    }


def _tags(spark: Any, table: Path, key: str) -> Counter:
    """(value of ``key``, tag) of every row, counted."""
    return Counter((row[key], row["tag"]) for row in spark.read.format("delta").load(str(table)).collect())


def test_a_files_pipeline_backfill_replaces_its_intervals_files_from_landing_or_archive_and_a_rerun_again(
    spark: Any, pipelines: Path, tmp_path: Path
) -> None:
    landing = tmp_path / "landing"
    write_module(pipelines, "orders_pipeline", TAGGED)
    ids = {
        10: _land(landing, 10, "a.json", 0, 5, 2) | _land(landing, 10, "b.json", 100, 4, 0),
        11: _land(landing, 11, "c.json", 200, 6, 1),
    }
    v1 = pipeline_config(tmp_path, "orders", **_sections(tmp_path, "v1"))
    assert run_on_session(spark, "orders_pipeline:tagged", v1)[0] == EXIT_OK
    output, quarantine = tmp_path / "lake" / "out", tmp_path / "lake" / "bad"
    every_id = ids[10] | ids[11]
    assert _tags(spark, output, "id") == Counter({(i, "v1"): 1 for i in every_id})
    assert _tags(spark, quarantine, "_quarantine_reason") == Counter(
        {("not json", "v1"): 2, ("no id", "v1"): 1}
    )
    archive = Path(archive_root(str(landing), str(tmp_path / "archive")))
    archived = {p.name for p in archive.rglob("*.json")}
    assert archived and archived < {"a.json", "b.json", "c.json"}, "some files archived, the last batch's not"

    # The same config with tag v2: hour 10's rows are replaced (from wherever its files are now),
    # hour 11's stay v1; a rerun replaces them again.
    v2 = pipeline_config(tmp_path, "orders", **_sections(tmp_path, "v2"))
    config, binding = load_pipeline("orders_pipeline:tagged", str(v2))
    for _ in range(2):
        counts = backfill_pipeline(spark, config, binding, _hour(10), _hour(11))
        assert counts["files"] == 2 and counts["read"] == 11
        assert counts[str(output)] == 9 and counts[str(quarantine)] == 2
        assert (counts["written"], counts["quarantined"]) == (9, 2), "the totals of outputs and quarantines"
        expected = {(i, "v2" if i in ids[10] else "v1"): 1 for i in every_id}
        assert _tags(spark, output, "id") == Counter(expected)
        assert _tags(spark, quarantine, "_quarantine_reason") == Counter(
            {("not json", "v2"): 1, ("no id", "v2"): 1, ("not json", "v1"): 1}
        )
    paths = {row["_source_file"] for row in spark.read.format("delta").load(str(output)).collect()}
    assert all(str(landing) in path and str(archive) not in path for path in paths), "landing paths kept"

    # An interval without files changes nothing.
    assert backfill_pipeline(spark, config, binding, _hour(9), _hour(10)) == {
        "files": 0,
        "read": 0,
        "written": 0,
        "quarantined": 0,
    }

    # A file of the interval that the stream has not processed: it would be written twice.
    _land(landing, 11, "late.json", 900, 3, 0)
    with pytest.raises(BackfillRefused, match=r"sink 'out': its query has not processed 1 of the interval"):
        backfill_pipeline(spark, config, binding, _hour(11), _hour(12))
    assert not any(i >= 900 for i, _ in _tags(spark, output, "id")), "nothing written"

    # A file whose rows the table holds is gone from landing and archive: replacing would lose them.
    gone = next(p for p in [*landing.rglob("a.json"), *archive.rglob("a.json")])
    shutil.move(gone, tmp_path / "a.json.kept")
    with pytest.raises(BackfillRefused, match=r"holds rows of 1 files of this interval that are no longer"):
        backfill_pipeline(spark, config, binding, _hour(10), _hour(11))
    assert _tags(spark, output, "id") == Counter(expected), "nothing changed"


def test_a_files_pipeline_whose_sink_drops_the_file_name_is_refused_before_anything_is_written(
    spark: Any, pipelines: Path, tmp_path: Path
) -> None:
    write_module(pipelines, "orders_pipeline", TAGGED)
    _land(tmp_path / "landing", 10, "a.json", 0, 3, 0)
    sections = _sections(tmp_path, "v1")
    del sections["params"]
    del sections["sinks"]["out"]["quarantine_path"]
    config, binding = load_pipeline(
        "orders_pipeline:nameless", str(pipeline_config(tmp_path, "n", **sections))
    )
    with pytest.raises(PipelineError) as info:
        backfill_pipeline(spark, config, binding, _hour(10), _hour(11))
    assert (
        "pipeline 'orders_pipeline:nameless': sink 'out' has no column _source_file; a backfill finds and "
        "checks an interval's rows by the file each row came from (_source_file), so keep them in the "
        "DataFrame the function returns for it"
    ) in str(info.value)
    assert not (tmp_path / "lake").exists()
