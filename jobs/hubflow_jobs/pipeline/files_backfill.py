"""Backfill of one data interval of a pipeline reading landing files (one ``kind: files`` source).

The interval is the files of its folders (``sources.<name>.interval_folder``, e.g. ``%Y/%m/%d/%H``),
wherever they are now: still in the landing folder, or archived (``archive_dir``). They are read as
one batch with the stream's columns (a row read from the archive keeps its landing path in
``_source_file``, as the stream recorded it) and go through the user's function. Each Delta sink's
frame keeps ``_source_file`` (a quarantine may keep it as ``source_file``): the interval's rows are
those whose file lies under its folders.

Before anything is written, for every Delta sink: its query has committed every landing file of the
interval (from the file source log in its checkpoint, so a function that filters rows out is judged
right), and its tables hold no row of a file of the interval that is gone from landing and archive
(replacing would delete them). A file moved to the archive while it is read makes the interval be
listed and read again. Runs on the driver.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from hubflow.checkpoints.file_source_log import files_taken
from hubflow.config import archive_root, join_path
from hubflow_jobs.backfill_window import BackfillRefused, folders_of_window
from hubflow_jobs.lake.tables import delta_table_exists, sql_string
from hubflow_jobs.landing_area import (
    as_landing_path,
    files_read,
    interval_files,
    qualified_uri,
    retry_when_files_move,
    without_empty_authority,
)
from hubflow_jobs.pipeline.binding import Binding, sink_frames
from hubflow_jobs.pipeline.columns import QUARANTINE_SOURCE_FILE, SOURCE_FILE
from hubflow_jobs.pipeline.declarations import FilesSource, PipelineConfig
from hubflow_jobs.pipeline.interval_writes import TableWrite, sink_writes, write_interval
from hubflow_jobs.pipeline.streams import read_files

log = logging.getLogger(__name__)

#: The column every Delta sink of a backfilled files pipeline keeps: the file a row came from.
FILE_IDENTITY = (SOURCE_FILE,)
_FROM_ARCHIVE = "_hubflow_from_archive"


def backfill_files_interval(
    spark: Any, config: PipelineConfig, binding: Binding, start: datetime, end: datetime
) -> dict[str, int]:
    """Replace the rows of the files of ``[start, end)`` in every sink; the files and rows read and
    the rows written per table. With no file for the interval, nothing is changed (the files may have
    been purged by retention, and the tables' rows are all that is left of them)."""
    ((name, source),) = config.sources.items()
    assert isinstance(source, FilesSource)
    key = config.key_as_written("sources", name, "interval_folder")
    folders = folders_of_window(source.interval_folder, key, config.name, start, end)
    subject = f"job {config.name} backfill [{start.isoformat()}, {end.isoformat()})"

    def once() -> dict[str, int]:
        return _backfill_once(spark, config, binding, name, source, folders, start, subject)

    return retry_when_files_move(once, subject)()


def _backfill_once(
    spark: Any,
    config: PipelineConfig,
    binding: Binding,
    name: str,
    source: FilesSource,
    folders: list[str],
    start: datetime,
    subject: str,
) -> dict[str, int]:
    from pyspark.sql import functions as F

    archive = archive_root(source.path, source.archive_dir) if source.archive_dir else None
    paths, where = interval_files(source.path, archive, folders)
    if not paths:
        log.warning(
            "%s: no files in the interval's folders %s, neither in %s nor in %s; nothing changed",
            subject,
            folders[:3],
            source.path,
            archive or "an archive (no archive_dir)",
        )
        return {"files": 0, "read": 0, "written": 0, "quarantined": 0}
    records = read_files(spark, source, paths)
    if archive:
        landing_path, from_archive = as_landing_path(spark, SOURCE_FILE, source.path, archive)
        records = records.withColumn(_FROM_ARCHIVE, from_archive).withColumn(SOURCE_FILE, landing_path)
    else:
        records = records.withColumn(_FROM_ARCHIVE, F.lit(False))
    records = records.persist()
    try:
        files = {(r[0], r[1]) for r in records.select(SOURCE_FILE, _FROM_ARCHIVE).distinct().collect()}
        read_files_ = {path for path, _ in files}
        from_landing = {path for path, archived in files if not archived}
        batch = records.drop(_FROM_ARCHIVE)
        frames = sink_frames(
            binding.call({name: batch}, config.params, spark), binding.reference, list(config.sinks)
        )
        writes = sink_writes(
            config,
            binding,
            frames,
            FILE_IDENTITY,
            "the file each row came from",
            {SOURCE_FILE: QUARANTINE_SOURCE_FILE},
        )
        for sink_name, sink in config.sinks.items():
            if sink.kind == "delta":
                _refuse_unless_processed(config.sink_checkpoint(sink_name), from_landing, subject, sink_name)
        prefixes = [qualified_uri(spark, join_path(source.path, folder)) + "/" for folder in folders]

        def predicate(write: TableWrite) -> str:
            column = write.column(SOURCE_FILE)
            return "(" + " OR ".join(f"startswith({column}, {sql_string(p)})" for p in prefixes) + ")"

        for write in writes:
            if write.kind == "delta" and delta_table_exists(spark, write.table):
                _refuse_if_files_gone(spark, write, predicate(write), read_files_, subject)
        counts = {
            "files": len(paths),
            "read": batch.count(),
            **write_interval(writes, predicate, start, subject),
        }
    finally:
        records.unpersist()
    log.info(
        "%s: %s; %s", subject, files_read(paths, where), ", ".join(f"{k} {n}" for k, n in counts.items())
    )
    return counts


def committed_files(checkpoint: str) -> set[str]:
    """Every file the file sources of the query at ``checkpoint`` took in its committed batches, spelled
    as ``_metadata.file_path`` spells it; empty before its first commit."""
    return {without_empty_authority(path) for path in files_taken(checkpoint)}


def _refuse_unless_processed(checkpoint: str, landing_files: set[str], subject: str, sink: str) -> None:
    """Refuse unless the sink's query has committed every file of the interval still in landing."""
    unprocessed = sorted(landing_files - committed_files(checkpoint))
    if unprocessed:
        raise BackfillRefused(
            f"{subject}: sink {sink!r}: its query has not processed {len(unprocessed)} of the interval's "
            f"landing files yet (e.g. {unprocessed[:3]}); it will land them itself, so a backfill now "
            "would write them twice. Backfill this interval once the job has processed them."
        )


def _refuse_if_files_gone(spark: Any, write: TableWrite, predicate: str, read: set[str], what: str) -> None:
    """Refuse when the table of ``write`` holds rows of files of the interval the backfill did not read."""
    table = write.table
    rows = spark.read.format("delta").load(table).where(predicate)
    held = {r[0] for r in rows.select(write.column(SOURCE_FILE)).distinct().collect()}
    gone = sorted(held - read)
    if gone:
        raise BackfillRefused(
            f"{what}: {table} holds rows of {len(gone)} files of this interval that are no longer in "
            f"the landing folder or the archive (e.g. {gone[:3]}; purged by retention?); replacing the "
            "interval would delete them, so nothing was changed"
        )
