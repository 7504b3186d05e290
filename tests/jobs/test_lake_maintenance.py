"""Delta maintenance on the local Spark: a dry run changes nothing and says what it would do;
the real run compacts small files, vacuums what no version within the retention needs, writes a
log checkpoint when the log is long, and keeps every row."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from hubflow_jobs.lake.maintenance import maintain_table, table_sizes
from tests.support.lake import delta_rs_rows, spark_rows

pytestmark = pytest.mark.integration


def small_files_table(spark: Any, table: Path, commits: int) -> None:
    """``commits`` appends of one small file each into two partitions, plus one overwrite (whose
    removed files only VACUUM deletes); no automatic log checkpoint, files deletable at once."""
    for commit in range(commits):
        rows = [(commit * 10 + i, "a" if i % 2 else "b") for i in range(10)]
        frame = spark.createDataFrame(rows, "id BIGINT, part STRING").repartition(1, "part")
        frame.write.format("delta").mode("append").partitionBy("part").save(str(table))
        if commit == 0:
            properties = (
                "'delta.checkpointInterval' = '1000', "
                "'delta.deletedFileRetentionDuration' = 'interval 0 hours'"
            )
            spark.sql(f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ({properties})")
    spark.sql(f"DELETE FROM delta.`{table}` WHERE id = 0")  # rewrites a file: one more removed file


def test_dry_run_changes_nothing_then_maintenance_compacts_vacuums_and_checkpoints(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    table = tmp_path / "orders"
    small_files_table(spark, table, commits=6)
    rows = spark_rows(spark, table, {"id": "value", "part": "value"})
    before = table_sizes(spark, str(table))
    assert before.live_files == 12 and before.commits_since_checkpoint == 8
    options = {"retention_hours": 0.0, "checkpoint_after_commits": 5}

    with caplog.at_level(logging.INFO, logger="hubflow_jobs"):
        report = maintain_table(spark, str(table), dry_run=True, **options)
    assert report["compaction"]["candidates"] == {"partitions": 2, "files": 12, "bytes": before.live_bytes}
    assert report["vacuum"]["files"] == 1, "the file the DELETE rewrote"
    assert report["checkpoint"] == {"commits_since_checkpoint": 8, "done": False}
    assert table_sizes(spark, str(table)) == before, "a dry run changes nothing"
    logged = caplog.text
    assert "would compact 12 small files" in logged and "VACUUM would delete 1 files" in logged
    assert "would write a log checkpoint (8 commits since the last one)" in logged
    assert f"before (dry run): version {before.version}, 12 live files" in logged

    report = maintain_table(spark, str(table), dry_run=False, **options)
    after = table_sizes(spark, str(table))
    assert report["compaction"]["files_removed"] == 12 and report["compaction"]["files_added"] == 2
    assert after.live_files == 2
    assert after.stored_files < before.stored_files, "VACUUM deleted the replaced files"
    assert report["checkpoint"]["done"] and after.commits_since_checkpoint == 0
    assert spark_rows(spark, table, {"id": "value", "part": "value"}) == rows, "every row kept"
    assert delta_rs_rows(table, {"id": "value", "part": "value"}) == rows

    # Nothing left to do: a second run compacts nothing and writes no checkpoint.
    again = maintain_table(spark, str(table), dry_run=False, **options)
    assert again["compaction"]["done"] is False and again["checkpoint"]["done"] is False


def test_a_table_not_written_yet_is_skipped(spark: Any, tmp_path: Path) -> None:
    report = maintain_table(
        spark, str(tmp_path / "none"), dry_run=False, retention_hours=168, checkpoint_after_commits=100
    )
    assert report == {"table": str(tmp_path / "none"), "exists": False}
