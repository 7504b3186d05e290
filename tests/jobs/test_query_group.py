"""How the runner tells the last batch a query ran, on a real local Spark query that went idle."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from hubflow.status import JobStatus, StatusFolder
from hubflow_jobs.runtime.listener import StatusListener
from hubflow_jobs.runtime.query_group import last_batch_id, stop_after_batch

pytestmark = pytest.mark.integration


def test_idle_triggers_are_not_batches_so_nothing_waits_for_their_progress(
    spark: Any, tmp_path: Path
) -> None:
    """A query with nothing new lists idle triggers in its progress under the next batch's id; no
    listener event comes for them. The last batch it ran stays the one to wait for."""
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "a.json").write_text('{"a": 1}\n')
    status = JobStatus(StatusFolder(str(tmp_path / "status")), "idle_job")
    listener = StatusListener(status)
    spark.streams.addListener(listener)
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "200")
    query = (
        spark.readStream.schema("a INT")
        .json(str(landing))
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 120
        while not (query.lastProgress and query.lastProgress["batchId"] == 1):  # an idle trigger
            assert time.monotonic() < deadline, query.recentProgress
            assert query.exception() is None
            time.sleep(0.1)
        assert query.lastProgress["numInputRows"] == 0
        assert last_batch_id(query) == 0
        assert listener.wait_for_batch(last_batch_id(query), 30)  # batch 0's event did come
        started = time.monotonic()
        stop_after_batch(query, timeout_seconds=60)
        assert time.monotonic() - started < 30, "the stop waited for a batch that never ran"
    finally:
        query.stop()
        spark.streams.removeListener(listener)
        spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")
