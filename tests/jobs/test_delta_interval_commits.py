"""Which commits of a Delta table after a query's offset may add rows of an interval, read from the
commit files as the Delta protocol writes them (no Spark): appends count, by their files' statistics
or partition value of the interval column; commits that remove rows (a stream fails on them or skips
them) and compaction (dataChange false) do not; a file without statistics may hold any."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hubflow.checkpoints.delta_source_log import appended_files, committed_delta_position
from hubflow_jobs.pipeline.delta_backfill import may_hold

START, END = datetime(2026, 11, 25, 11, tzinfo=UTC), datetime(2026, 11, 25, 12, tzinfo=UTC)


def _commit(table: Path, version: int, *actions: dict[str, Any]) -> None:
    log = table / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"commitInfo": {"operation": "WRITE"}}), *(json.dumps(a) for a in actions)]
    (log / f"{version:020d}.json").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _add(path: str, low: str | None = None, high: str | None = None, **extra: Any) -> dict[str, Any]:
    stats = {"numRecords": 3}
    if low is not None:
        stats |= {"minValues": {"t": low}, "maxValues": {"t": high}}
    return {"add": {"path": path, "dataChange": True, "stats": json.dumps(stats), **extra}}


def test_only_appends_that_may_hold_rows_of_the_interval_count(tmp_path: Path) -> None:
    table = tmp_path / "t"
    _commit(table, 0, _add("before.parquet", "2026-11-25T10:00:00.000Z", "2026-11-25T10:59:59.999Z"))
    _commit(table, 1, _add("inside.parquet", "2026-11-25T10:30:00.000Z", "2026-11-25T11:00:00.000Z"))
    removed = {"remove": {"path": "inside.parquet", "dataChange": True}}
    _commit(table, 2, removed, _add("rewritten.parquet", "2026-11-25T11:00:00.000Z", "2026-11-25T11:10:00Z"))
    compacted = {"remove": {"path": "before.parquet", "dataChange": False}}
    _commit(table, 3, compacted, {"add": {"path": "c.parquet", "dataChange": False, "stats": "{}"}})
    _commit(table, 4, _add("after.parquet", "2026-11-25T12:00:00.000Z", "2026-11-25T13:00:00.000Z"))
    _commit(table, 5, _add("nostats.parquet"))
    _commit(table, 6, _add("part.parquet", partitionValues={"t": "2026-11-25 11:30:00"}))
    _commit(table, 7, _add("nullpart.parquet", partitionValues={"t": None}))

    files = list(appended_files(str(table), 0, 7))
    assert [f.path for f in files] == [
        "before.parquet",
        "inside.parquet",
        "after.parquet",
        "nostats.parquet",
        "part.parquet",
        "nullpart.parquet",
    ], "neither the commit removing rows nor the compaction"
    holding = [f.version for f in files if may_hold(f, "t", START, END)]
    # Stats are kept to the millisecond: a max of 10:59:59.999 may be 10:59:59.9995, still before 11.
    assert holding == [1, 5, 6]
    assert [f.path for f in appended_files(str(table), 4, 4)] == ["after.parquet"]


def test_the_position_of_a_query_is_its_last_committed_batchs_delta_offset(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    assert committed_delta_position(str(checkpoint)) is None
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    offset = {"sourceVersion": 1, "reservoirId": "x", "reservoirVersion": 4, "index": -1}
    for batch, version in ((0, 2), (1, 4), (2, 6)):
        text = ["v1", json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {}})]
        offset = {**offset, "reservoirVersion": version, "isStartingVersion": batch == 0}
        (checkpoint / "offsets" / str(batch)).write_text("\n".join([*text, json.dumps(offset)]))
    for batch in (0, 1):  # batch 2 planned, not committed
        (checkpoint / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    position = committed_delta_position(str(checkpoint))
    assert position is not None
    assert (position.version, position.index, position.initial_snapshot) == (4, -1, False)
    assert position.first_unread_version == 4
