"""Backfill of a file job on local Spark: each interval's files once, from landing or archive."""

from __future__ import annotations

import shutil
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hubflow.config import ConfigError
from hubflow.status.exit_codes import EXIT_OK
from hubflow_jobs.backfill_window import WindowError, window_label
from hubflow_jobs.builtins.files_to_lake import FilesToLakeConfig

from .helpers import (
    backfill_files,
    files_to_lake_config,
    landing_archive,
    landing_config,
    run_files_to_lake,
    write_config,
    write_json_landing_file,
)

pytestmark = pytest.mark.integration
PATTERN = "%Y/%m/%d/%H"
DAY = datetime(2026, 11, 22, tzinfo=UTC)


def _hour(h: int) -> datetime:
    return DAY + timedelta(hours=h)


def _config(base: Path, **source: Any) -> FilesToLakeConfig:
    config = landing_config(base, source={"interval_folder": PATTERN, **source})
    return files_to_lake_config(write_config(base / "job.yaml", config))


def _land(base: Path, hour: int, name: str, first_id: int, good: int, bad: int) -> set[int]:
    folder = base / "landing" / _hour(hour).strftime(PATTERN)
    folder.mkdir(parents=True, exist_ok=True)
    return write_json_landing_file(folder, name, first_id, good, bad)


def _by_window(spark: Any, path: Path) -> Counter:
    return Counter(r.window_start for r in spark.read.parquet(str(path)).select("window_start").collect())


def test_backfill_reads_each_intervals_files_once_from_landing_or_archive_and_reruns_replace(
    spark: Any, tmp_path: Path
) -> None:
    config = _config(tmp_path)
    ids = {
        10: _land(tmp_path, 10, "a.json", 0, 5, 2) | _land(tmp_path, 10, "b.json", 100, 4, 0),
        11: _land(tmp_path, 11, "c.json", 200, 6, 1),
        12: _land(tmp_path, 12, "d.json", 300, 3, 0) | _land(tmp_path, 12, "e.json", 400, 2, 1),
    }
    _land(tmp_path, 13, "f.json", 500, 9, 0)  # the next interval: never part of the three
    bad = {10: 2, 11: 1, 12: 1}

    # The normal job runs over the nested landing folders first and archives what it processed
    # (2 files per batch: the files of earlier batches are archived, the last batch's stay).
    assert run_files_to_lake(spark, config)[0] == EXIT_OK
    archived = {p.name for p in Path(landing_archive(config)).rglob("*.json")}
    still_landing = {p.name for p in (tmp_path / "landing").rglob("*.json")}
    assert archived and still_landing, "the test needs files in both places"
    # An archive move that was interrupted leaves a file in both places: it must be read once.
    twice = sorted(Path(landing_archive(config)).rglob("*.json"))[0]
    relative = twice.relative_to(landing_archive(config))
    shutil.copy(twice, tmp_path / "landing" / relative)

    output, quarantine = tmp_path / "lake" / "orders_backfill", tmp_path / "quarantine_backfill"
    for hour in (10, 11, 12):
        counts = backfill_files(spark, config, _hour(hour), _hour(hour + 1))
        assert counts["read"] == len(ids[hour]) + bad[hour]
        assert (counts["written"], counts["quarantined"]) == (len(ids[hour]), bad[hour])

    def check() -> None:
        rows = spark.read.parquet(str(output)).select("window_start", "id", "_source_file").collect()
        for hour in (10, 11, 12):
            got = [r.id for r in rows if r.window_start == window_label(_hour(hour))]
            assert sorted(got) == sorted(ids[hour])  # every record once: no loss, no duplicate
        assert len(rows) == sum(len(v) for v in ids.values())
        assert _by_window(spark, quarantine) == {window_label(_hour(h)): n for h, n in bad.items()}

    check()
    # Rerunning an interval replaces its partition.
    backfill_files(spark, config, _hour(10), _hour(12))  # two hours at once: a daily-style interval
    rows = spark.read.parquet(str(output)).select("window_start", "id").collect()
    merged = [r.id for r in rows if r.window_start == window_label(_hour(10))]
    assert sorted(merged) == sorted(ids[10] | ids[11])
    # A file whose records all turned bad: the rerun empties the output partition, fills quarantine.
    (c_file,) = [*(tmp_path / "archive").rglob("c.json"), *(tmp_path / "landing").rglob("c.json")]
    c_file.write_text("not json 1\nnot json 2\nnot json 3\n", encoding="utf-8")
    counts = backfill_files(spark, config, _hour(11), _hour(12))
    assert counts == {"files": 1, "read": 3, "written": 0, "quarantined": 3}
    windows = _by_window(spark, output)
    assert window_label(_hour(11)) not in windows
    assert windows[window_label(_hour(12))] == len(ids[12])
    assert _by_window(spark, quarantine)[window_label(_hour(11))] == 3


def test_an_interval_without_files_leaves_an_earlier_backfill_in_place(spark: Any, tmp_path: Path) -> None:
    config = _config(tmp_path)
    ids = _land(tmp_path, 10, "a.json", 0, 4, 0)
    assert backfill_files(spark, config, _hour(10), _hour(11))["written"] == 4
    shutil.rmtree(tmp_path / "landing" / "2026")  # purged by retention, say
    assert backfill_files(spark, config, _hour(10), _hour(11)) == {
        "files": 0,
        "read": 0,
        "written": 0,
        "quarantined": 0,
    }
    rows = spark.read.parquet(str(tmp_path / "lake" / "orders_backfill")).collect()
    assert sorted(r.id for r in rows) == sorted(ids)


def test_a_window_that_cuts_a_folder_or_a_config_without_the_layout_is_refused(tmp_path: Path) -> None:
    config = _config(tmp_path)
    with pytest.raises(WindowError, match=r"source\.interval_folder: the interval's start .* whole folders"):
        backfill_files(None, config, _hour(10) + timedelta(minutes=30), _hour(12))
    plain = write_config(tmp_path / "plain.yaml", landing_config(tmp_path))
    no_layout = files_to_lake_config(plain)
    with pytest.raises(WindowError, match=r"source\.interval_folder is not set"):
        backfill_files(None, no_layout, _hour(10), _hour(11))
    broken = landing_config(tmp_path, source={"interval_folder": "%Y/%b"})
    with pytest.raises(ConfigError, match=r"source.interval_folder: .*only %Y %m %d %j %H %M %S"):
        files_to_lake_config(write_config(tmp_path / "broken.yaml", broken))


def test_a_file_archived_between_listing_and_reading_is_read_from_the_archive(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scheduled run archiving files while a backfill reads them: the backfill lists again."""
    import hubflow_jobs.pipeline.files_backfill as backfill

    config = _config(tmp_path)
    ids = _land(tmp_path, 10, "a.json", 0, 4, 1) | _land(tmp_path, 10, "b.json", 10, 3, 0)
    real_listing = backfill.interval_files
    listings = []

    def list_then_archive_one(*args: Any) -> Any:
        paths, where = real_listing(*args)
        listings.append(where)
        if len(listings) == 1:  # move a listed landing file to where Spark's archiving puts it
            moved = Path(paths[0])
            target = Path(landing_archive(config)) / moved.relative_to(tmp_path / "landing")
            target.parent.mkdir(parents=True, exist_ok=True)
            moved.rename(target)
        return paths, where

    monkeypatch.setattr(backfill, "interval_files", list_then_archive_one)
    counts = backfill_files(spark, config, _hour(10), _hour(11))
    first, second = listings
    assert (first, second) == (
        {"landing": 2, "archive": 0, "in_both": 0},
        {"landing": 1, "archive": 1, "in_both": 0},
    )
    assert counts == {"files": 2, "read": 8, "written": 7, "quarantined": 1}
    rows = spark.read.parquet(str(tmp_path / "lake" / "orders_backfill")).collect()
    assert sorted(r.id for r in rows) == sorted(ids)
