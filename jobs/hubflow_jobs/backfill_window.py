"""The window of a backfill and what every backfill shares, whatever its source.

A scheduled job's normal runs are streaming runs (availableNow) that resume from the checkpoint.
A backfill run (Airflow's ``backfill create``, or the UI's Backfill) must instead process exactly
its data interval ``[window_start, window_end)`` and be safe to rerun. Every job that backfills is
a pipeline (:mod:`hubflow_jobs.pipeline.backfill` runs it, the built-ins ``eventhubs_to_lake`` and
``files_to_lake`` included); this module has what it uses:

* the window given on the command line (:func:`parse_window`) and the landing folders of an
  interval (:func:`folders_of_window`, from the source's ``interval_folder``);
* the refusal every backfill raises when it would double or lose rows (:class:`BackfillRefused`);
* parquet sinks: the side table ``<output_path>_backfill`` partitioned by ``window_start``
  (:func:`backfill_path`, :func:`overwrite_window_partition`); the streaming file sink's
  ``_spark_metadata`` log hides files written by batch jobs into its own folder.

A Delta sink's interval is replaced in one ``replaceWhere`` transaction
(:func:`hubflow_jobs.lake.tables.replace_rows`). Rerunning an interval replaces its rows, never
adds to them. The checkpoint is not touched.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any
from urllib.parse import unquote

from hubflow.utc_times import utc_time
from hubflow_jobs.interval_folders import IntervalFolderError, folders_of_interval

log = logging.getLogger(__name__)

WINDOW_COLUMN = "window_start"


class WindowError(ValueError):
    """The window given on the command line cannot be used."""


class BackfillRefused(RuntimeError):
    """Replacing the interval now would double or lose rows; the message says why and what to do."""


def parse_window(start: str, end: str) -> tuple[datetime, datetime]:
    """Two ISO-8601 times (UTC when no zone is given) with start < end."""
    first, last = utc_time(start), utc_time(end)
    for given, parsed in ((start, first), (end, last)):
        if parsed is None:
            raise WindowError(f"window times must be ISO-8601, e.g. 2026-11-22T10:00:00Z: {given!r} is not")
    assert first is not None and last is not None
    if not first < last:
        raise WindowError(f"--window-start {start} must be before --window-end {end}")
    return first, last


def backfill_path(table: str) -> str:
    """Where a table's backfills go: ``<table>_backfill`` (``table`` is an output path)."""
    return table.rstrip("/") + "_backfill"


def window_label(start: datetime) -> str:
    """The partition value of a window: its start, ISO-8601 in UTC, e.g. ``2026-11-22T10:00:00Z``."""
    return start.strftime("%Y-%m-%dT%H:%M:%SZ")


def folders_of_window(pattern: str | None, key: str, job: str, start: datetime, end: datetime) -> list[str]:
    """The landing folders (relative) of ``[start, end)`` for the layout ``pattern``, the config's
    ``key``; WindowError naming that key when it is not set or the window cuts a folder."""
    if pattern is None:
        raise WindowError(
            f"job {job}: {key} is not set, so a backfill cannot tell which landing folder holds an "
            "interval's files; set it to the landing layout, e.g. %Y/%m/%d/%H"
        )
    try:
        return folders_of_interval(pattern, start, end)
    except IntervalFolderError as exc:
        raise WindowError(f"{key}: {exc}") from None


def overwrite_window_partition(frame: Any, table: str, label: str) -> None:
    """Replace the ``window_start=label`` partition of ``table`` with ``frame``'s rows.

    Dynamic overwrite replaces only partitions that receive rows, so an empty ``frame`` removes
    the partition instead: a rerun in which every record of a file turned bad (or good) must not
    leave the earlier run's rows behind.
    """
    from hubflow.storage.azure import url_to_fs

    if frame.isEmpty():
        fs, root = url_to_fs(table)
        if fs.isdir(root):
            for folder in fs.ls(root, detail=False):
                # Spark %-escapes partition values in folder names (":" -> "%3A"); compare decoded.
                if unquote(folder.rstrip("/").rsplit("/", 1)[-1]) == f"{WINDOW_COLUMN}={label}":
                    fs.rm(folder, recursive=True)
        return
    frame.write.mode("overwrite").option("partitionOverwriteMode", "dynamic").partitionBy(
        WINDOW_COLUMN
    ).parquet(table)
