"""Backfill of one data interval: a batch read of exactly that interval, replacing its rows.

A scheduled job's normal runs are streaming runs (availableNow) that resume from the checkpoint.
A backfill run (Airflow's ``backfill create``, or the UI's Backfill) must instead process exactly
its data interval ``[window_start, window_end)`` and be safe to rerun:

* Event Hubs: :func:`interval_events`, a batch read (``spark.read.format("eventhubs")``) from the
  first event enqueued at or after the start to the first one at or after the end. The backfill of
  a pipeline reading a hub (``eventhubs_to_lake`` is one) is :mod:`hubflow_jobs.pipeline.backfill`;
  it uses the predicate and the checks here.
* Files (``files_to_lake``): the files of the interval's folders (``source.interval_folder``),
  wherever they are now - still in the landing area or already archived. A file found in both
  places (an interrupted archive move) is read once, from the landing area. Bad records go to the
  quarantine, as in the streaming job, and rows read = written + quarantined.

Where the rows go depends on ``sink.format``:

* **delta** (the default): the interval's rows in the job's own table are replaced in one Delta
  transaction (``replaceWhere``: Event Hubs rows by ``enqueuedTime`` in the window, file rows by
  ``_source_file`` under the interval's folders; the quarantine likewise), while the stream keeps
  appending. A commit that conflicts with a concurrent one is retried
  (:func:`hubflow_jobs.lake_tables.replace_rows`). Rows read from the archive are recorded under
  their landing path, as the stream recorded them. Two checks come first, each refusing the
  backfill with the reason rather than doing harm: the stream must already have passed the
  interval (else it would later append the same events or files again), and every event or file
  the table holds for the interval must be in what the backfill read (else the replacement would
  delete rows whose source is gone - purged from the hub or the archive).
* **parquet**: rows go to the side table ``<sink.output_path>_backfill`` (and
  ``<sink.quarantine_path>_backfill``) partitioned by ``window_start``, overwriting only that
  partition (dynamic partition overwrite). The side table is separate on purpose: the streaming
  file sink's ``_spark_metadata`` log hides files written by batch jobs into its folder.

Rerunning an interval replaces its rows, never adds to them. The checkpoint is not touched.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from .config import join_path
from .eventhubs_config import EventHubSourceConfig
from .files_to_lake import (
    NOW_COLUMN,
    FilesToLakeConfig,
    archive_root,
    classify,
    parse_options,
    reader_schema,
    reconciled_counts,
    split_records,
    with_source_file,
)
from .interval_folders import IntervalFolderError, folders_of_interval
from .lake_tables import INGEST_DATE_COLUMN, delta_table_exists, replace_rows, sql_string
from .landing_area import (
    as_landing_path,
    files_read,
    interval_files,
    qualified_uri,
    retry_when_files_move,
)
from .utc_times import utc_time

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


def _position(moment: datetime) -> str:
    when = moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return f'{{"offset": null, "seqNo": -1, "enqueuedTime": "{when}", "isInclusive": true}}'


def interval_events(spark: Any, source: EventHubSourceConfig, start: datetime, end: datetime) -> Any:
    """The events of ``source``'s hub enqueued in ``[start, end)``, as a batch DataFrame."""
    from pyspark_eventhubs import DefaultSource, register_data_source

    register_data_source(spark, DefaultSource)
    options = source.spark_options()
    options.pop("maxEventsPerTrigger", None)
    options["eventhubs.startingPosition"] = _position(start)
    options["eventhubs.endingPosition"] = _position(end)
    return spark.read.format("eventhubs").options(**options).load()


def _timestamp_literal(moment: datetime) -> str:
    return "TIMESTAMP " + sql_string(moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f+00:00"))


def enqueued_in(start: datetime, end: datetime) -> str:
    """The SQL predicate of the bronze rows of ``[start, end)``: by the events' enqueued time."""
    return f"enqueuedTime >= {_timestamp_literal(start)} AND enqueuedTime < {_timestamp_literal(end)}"


def refuse_if_events_gone(table_rows: Any, predicate: str, ids: Any, subject: str) -> None:
    """Refuse when ``table_rows`` hold events of the interval (``predicate``) that the backfill did not
    read (``ids``: its ``partition``, ``sequenceNumber``): replacing would delete them."""
    missing = (
        table_rows.where(predicate)
        .select("partition", "sequenceNumber")
        .join(ids, ["partition", "sequenceNumber"], "left_anti")
    )
    lost = missing.count()
    if lost:
        sample = [(r["partition"], r["sequenceNumber"]) for r in missing.limit(5).collect()]
        raise BackfillRefused(
            f"{subject}: the table holds {lost} events of this interval that the hub no longer "
            f"returns (e.g. partition, sequence number {sample}; purged by the hub's retention?); "
            "replacing the interval would delete them, so nothing was changed"
        )


def interval_folders(config: FilesToLakeConfig, start: datetime, end: datetime) -> list[str]:
    """The landing folders (relative) of ``[start, end)``; WindowError when the job or window cannot say."""
    return folders_of_window(config.source.interval_folder, "source.interval_folder", config.name, start, end)


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


def backfill_files(spark: Any, config: FilesToLakeConfig, start: datetime, end: datetime) -> dict[str, int]:
    """Process the files of ``[start, end)`` and overwrite that window's partitions; return the counts.

    With no file at all for the interval, nothing is overwritten: the files may have been purged
    by archive retention, and an earlier backfill's rows are all that is left of them. A file
    archived while it is read makes the interval be listed and read again
    (:func:`~hubflow_jobs.landing_area.retry_when_files_move`); nothing is written before the read
    succeeded.
    """
    return retry_when_files_move(_backfill_files_once, f"job {config.name} backfill")(
        spark, config, start, end
    )


def _backfill_files_once(
    spark: Any, config: FilesToLakeConfig, start: datetime, end: datetime
) -> dict[str, int]:
    from pyspark.sql import functions as F

    source = config.source
    paths, where = interval_files(source.path, archive_root(source), interval_folders(config, start, end))
    label = window_label(start)
    if not paths:
        log.warning(
            "job %s backfill [%s, %s): no files in the interval's folders, neither in %s nor in %s; "
            "nothing written, an existing %s=%s partition is left as it is",
            config.name,
            start.isoformat(),
            end.isoformat(),
            source.path,
            archive_root(source),
            WINDOW_COLUMN,
            label,
        )
        return {"files": 0, "read": 0, "written": 0, "quarantined": 0}
    frame = spark.read.format(source.format).schema(reader_schema(source)).options(**parse_options(source))
    records = with_source_file(frame.load(paths))
    if config.sink.format == "delta":
        return _replace_files_interval(spark, config, records, paths, where, start, end)
    classified = classify(records, source).withColumn(WINDOW_COLUMN, F.lit(label)).persist()
    try:
        good, bad = split_records(classified, source, WINDOW_COLUMN)
        read, written, quarantined = reconciled_counts(classified, good, bad, f"interval {label}")
        overwrite_window_partition(bad, backfill_path(config.sink.quarantine_path), label)
        overwrite_window_partition(good, backfill_path(config.sink.output_path), label)
    finally:
        classified.unpersist()
    counts = {"files": len(paths), "read": read, "written": written, "quarantined": quarantined}
    log.info(
        "job %s backfill [%s, %s): %s, %d records: %d written to %s, %d quarantined to %s (%s=%s)",
        config.name,
        start.isoformat(),
        end.isoformat(),
        files_read(paths, where),
        read,
        written,
        backfill_path(config.sink.output_path),
        quarantined,
        backfill_path(config.sink.quarantine_path),
        WINDOW_COLUMN,
        label,
    )
    return counts


def _replace_files_interval(
    spark: Any,
    config: FilesToLakeConfig,
    records: Any,
    paths: list[str],
    where: dict[str, int],
    start: datetime,
    end: datetime,
) -> dict[str, int]:
    """Replace the interval's rows of the output and quarantine Delta tables, after the checks."""
    from pyspark.sql import functions as F

    source, sink = config.source, config.sink
    subject = f"job {config.name} backfill [{start.isoformat()}, {end.isoformat()})"
    # The stream recorded every row under its landing path; rows read from the archive get it back.
    as_landing, from_archive = as_landing_path(spark, "_source_file", source.path, archive_root(source))
    records = records.withColumn("_read_from_archive", from_archive).withColumn("_source_file", as_landing)
    prefixes = [
        qualified_uri(spark, join_path(source.path, folder)) + "/"
        for folder in interval_folders(config, start, end)
    ]

    def under_interval(column: str) -> str:
        return "(" + " OR ".join(f"startswith({column}, {sql_string(p)})" for p in prefixes) + ")"

    classified = classify(records, source).withColumn(INGEST_DATE_COLUMN, F.to_date(NOW_COLUMN)).persist()
    try:
        good, bad = split_records(classified, source, INGEST_DATE_COLUMN)
        bad = bad.withColumn("batch_id", F.lit(None).cast("long"))
        read, written, quarantined = reconciled_counts(classified, good, bad, f"{subject}")
        read_files = {r["_source_file"] for r in classified.select("_source_file").distinct().collect()}
        from_landing = {
            r["_source_file"]
            for r in classified.where(~F.col("_read_from_archive"))
            .select("_source_file")
            .distinct()
            .collect()
        }
        in_tables: set[str] = set()
        for table, column in ((sink.output_path, "_source_file"), (sink.quarantine_path, "source_file")):
            if delta_table_exists(spark, table):
                rows = spark.read.format("delta").load(table).where(under_interval(column))
                in_tables |= {r[0] for r in rows.select(column).distinct().collect()}
        unprocessed = sorted(from_landing - in_tables)
        if unprocessed:
            raise BackfillRefused(
                f"{subject}: the job has not processed {len(unprocessed)} of the interval's landing "
                f"files yet (e.g. {unprocessed[:3]}); it will land them itself, so a backfill now would "
                "write them twice. Backfill this interval once the job has processed them."
            )
        gone = sorted(in_tables - read_files)
        if gone:
            raise BackfillRefused(
                f"{subject}: the tables hold rows of {len(gone)} files of this interval that are no "
                f"longer in the landing area or the archive (e.g. {gone[:3]}; purged by retention?); "
                "replacing the interval would delete them, so nothing was changed"
            )
        replace_rows(bad, sink.quarantine_path, under_interval("source_file"), [INGEST_DATE_COLUMN], subject)
        attempts = replace_rows(
            good, sink.output_path, under_interval("_source_file"), [INGEST_DATE_COLUMN], subject
        )
    finally:
        classified.unpersist()
    counts = {"files": len(paths), "read": read, "written": written, "quarantined": quarantined}
    log.info(
        "%s: %s, %d records replace the interval's rows: %d in %s, %d in %s (%d attempt(s))",
        subject,
        files_read(paths, where),
        read,
        written,
        sink.output_path,
        quarantined,
        sink.quarantine_path,
        attempts,
    )
    return counts


def overwrite_window_partition(frame: Any, table: str, label: str) -> None:
    """Replace the ``window_start=label`` partition of ``table`` with ``frame``'s rows.

    Dynamic overwrite replaces only partitions that receive rows, so an empty ``frame`` removes
    the partition instead: a rerun in which every record of a file turned bad (or good) must not
    leave the earlier run's rows behind.
    """
    from .azure_storage import url_to_fs

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
