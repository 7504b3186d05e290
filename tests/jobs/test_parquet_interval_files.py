"""Which committed files of a parquet table a backfill of an interval must wait for: the files its
``_spark_metadata`` log lists (compactions and deletions applied, hidden files not commits), and
whether a file may hold rows of ``[start, end)`` by its partition value, its footer statistics or
its values. No Spark: the files are written with pyarrow, the log as Spark writes it."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from hubflow.checkpoints.file_sink_log import committed_files
from hubflow_jobs.pipeline.parquet_backfill import file_may_hold

T0 = datetime(2026, 11, 25, 10, tzinfo=UTC)
HOUR = timedelta(hours=1)


def _log(table: Path, name: str, *entries: tuple[str, str]) -> None:
    """One ``_spark_metadata`` file: ``(file name, action)`` entries, as Spark's file sink writes them."""
    lines = ["v1"] + [
        json.dumps({"path": f"file://{table}/{file}", "size": 1, "isDir": False, "action": action})
        for file, action in entries
    ]
    (table / "_spark_metadata").mkdir(parents=True, exist_ok=True)
    (table / "_spark_metadata" / name).write_text("\n".join(lines), encoding="utf-8")


def test_committed_files_are_the_newest_compaction_and_the_batches_after_it(tmp_path: Path) -> None:
    assert committed_files(str(tmp_path)) == {}
    _log(tmp_path, "0", ("a.parquet", "add"))  # compacted into 1.compact, kept there
    _log(tmp_path, "1.compact", ("a.parquet", "add"), ("b.parquet", "add"))
    _log(tmp_path, "2", ("c.parquet", "add"), ("a.parquet", "delete"))
    _log(tmp_path, ".3.0b1c.tmp", ("d.parquet", "add"))  # being written: not a commit
    assert committed_files(str(tmp_path)) == {
        f"file://{tmp_path}/b.parquet": 1,
        f"file://{tmp_path}/c.parquet": 2,
    }


def _file(path: Path, values: list[datetime | None], **options: object) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table(
        {"id": list(range(len(values))), "event_time": pa.array(values, pa.timestamp("us", "UTC"))}
    )
    pq.write_table(table, path, **options)  # type: ignore[arg-type]
    return f"file://{path}"


def test_a_file_may_hold_rows_of_an_interval_by_its_statistics_its_values_or_its_partition(
    tmp_path: Path,
) -> None:
    start, end = T0 + HOUR, T0 + 2 * HOUR
    before = [T0, T0 + timedelta(minutes=59)]
    inside = [T0 + timedelta(minutes=30), T0 + timedelta(minutes=61)]
    for stats in (True, False):  # footer statistics, else the values (Spark's INT96 has none)
        assert not file_may_hold(
            _file(tmp_path / f"{stats}-a.parquet", before, write_statistics=stats), "event_time", start, end
        )
        assert file_may_hold(
            _file(tmp_path / f"{stats}-b.parquet", inside, write_statistics=stats), "event_time", start, end
        )
    assert not file_may_hold(_file(tmp_path / "nulls.parquet", [None, None]), "event_time", start, end)
    assert file_may_hold(_file(tmp_path / "other.parquet", before), "at", start, end), "no such column: may"
    day = date(2026, 11, 25)
    # A partition column's value is in the path (Spark escapes ':' as %3A, the URI '%' as %25).
    hour = tmp_path / "event_time=2026-11-25 11%3A00%3A00" / "part-0.parquet"
    partitioned = _file(hour, before).replace(" ", "%20").replace("%3A", "%253A")
    assert file_may_hold(partitioned, "event_time", start, end)
    assert not file_may_hold(partitioned, "event_time", T0, start)
    dated = _file(tmp_path / f"event_date={day}" / "part-0.parquet", inside)
    assert file_may_hold(dated, "event_date", datetime(2026, 11, 25, tzinfo=UTC), start)
    assert not file_may_hold(dated, "event_date", start, end)
