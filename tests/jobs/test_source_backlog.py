"""The backlog of Spark's file and Delta sources, measured by the jobs runtime's listener on a real
local Spark: each batch's progress in progress_history.jsonl says exactly the files (versions) left
and the age of the oldest of them, within what their modification (commit) times say."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import fsspec
import pytest

from hubflow.progress.history import read_history_file
from hubflow.progress.source_backlog import SourceBacklogs
from hubflow.status import JobStatus, StatusFolder
from hubflow_jobs.runtime.listener import StatusListener
from pyspark_eventhubs.backlog import BacklogMetric

pytestmark = pytest.mark.integration


def _run(spark: Any, df: Any, base: Path) -> tuple[list[dict[str, Any]], float, float]:
    """``df`` as one availableNow run with the runtime's listener; (each progress kept, start, end)."""
    folder = StatusFolder(str(base / "status"))
    checkpoint = str(base / "checkpoint")
    listener = StatusListener(JobStatus(folder, "job"), SourceBacklogs(checkpoint))
    spark.streams.addListener(listener)
    started = time.time()
    try:
        query = (
            df.writeStream.format("parquet")
            .option("path", str(base / "out"))
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(180) and query.exception() is None, query.exception()
        last = query.lastProgress["batchId"]
        assert listener.wait_for_batch(last, 60), "the listener never wrote the last batch"
    finally:
        spark.streams.removeListener(listener)
    ended = time.time()
    lines = (base / "status" / "progress_history.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines], started, ended


def test_files_behind_and_the_age_of_the_oldest_unread_file(spark: Any, tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    now = time.time()
    ages = {"a.json": 3000, "b.json": 2000, "c.json": 1000}  # Spark takes the oldest first
    for number, (name, age) in enumerate(ages.items()):
        path = landing / name
        path.write_text(json.dumps({"id": number}) + "\n")
        os.utime(path, (now - age, now - age))
    (landing / "_temporary.json").write_text('{"id": 99}\n')  # hidden from Spark: not a backlog
    df = spark.readStream.schema("id BIGINT").option("maxFilesPerTrigger", 1).json(str(landing))

    progress, started, ended = _run(spark, df, tmp_path)
    batches = [p for p in progress if p["num_input_rows"]]
    assert [p["num_input_rows"] for p in batches] == [1, 1, 1]
    reports = [p["sources"][0]["backlog"] for p in batches]
    assert [r[BacklogMetric.FILES] for r in reports] == [2, 1, 0]
    for report, oldest_unread in zip(reports, [2000, 1000, None], strict=True):
        seconds = report[BacklogMetric.SECONDS]
        if oldest_unread is None:
            assert seconds == 0.0
        else:  # measured between the run's start and end: the file's age then
            mtime = now - oldest_unread
            assert started - mtime - 1 <= seconds <= ended - mtime + 1, (seconds, oldest_unread)

    # The history the status page charts: files behind and seconds per batch.
    points = read_history_file(fsspec.filesystem("file"), str(tmp_path / "status")) or []
    assert [p["lag"] for p in points if p["num_input_rows"]] == [2, 1, 0]
    assert points[-1]["lag_seconds"] == 0.0 and points[0]["lag_seconds"] >= 1999


def test_delta_versions_behind_and_the_age_of_the_oldest_unread_commit(spark: Any, tmp_path: Path) -> None:
    from deltalake import DeltaTable

    table = str(tmp_path / "table")
    for number in range(3):  # versions 0, 1, 2: one file each
        spark.range(number * 10, number * 10 + 5).coalesce(1).write.format("delta").mode("append").save(table)
    commits = {int(c["version"]): int(c["timestamp"]) / 1000 for c in DeltaTable(table).history()}
    df = (
        spark.readStream.format("delta")
        .option("startingVersion", 0)
        .option("maxFilesPerTrigger", 1)
        .load(table)
    )

    progress, started, ended = _run(spark, df, tmp_path)
    batches = [p for p in progress if p["num_input_rows"]]
    assert [p["num_input_rows"] for p in batches] == [5, 5, 5]
    reports = [p["sources"][0]["backlog"] for p in batches]
    assert [r[BacklogMetric.VERSIONS] for r in reports] == [2, 1, 0]
    for report, oldest_unread in zip(reports, [1, 2, None], strict=True):
        seconds = report[BacklogMetric.SECONDS]
        if oldest_unread is None:
            assert seconds == 0.0
        else:
            stamp = commits[oldest_unread]
            assert started - stamp - 1 <= seconds <= ended - stamp + 1, (seconds, oldest_unread)
