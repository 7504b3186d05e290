"""Backfill of one data interval of a pipeline reading a parquet lake table (one ``kind: parquet``
source: Spark's file sink's table).

As for a Delta table (:mod:`.delta_backfill`, whose rules this shares): the interval's rows are the
table's rows whose time column (``sources.<name>.interval_column``) lies in ``[start, end)``, read
as one batch of the files the table's ``_spark_metadata`` log lists now (never a file it does not
list) and passed to the user's function; each sink's rows of the interval are replaced
(:mod:`.interval_writes`).

Refused before anything is written, for every Delta sink: a query that has not read every
committed file that may hold rows of the interval (from the file source log in its checkpoint;
whether a file may hold such rows: its partition value of the column, else the column's parquet
statistics, else its values, read with pyarrow: Spark writes timestamps as INT96, without
statistics). Failed after writing, to be run again, when files holding rows of the interval were
committed meanwhile. An interval without rows in the table changes nothing. Runs on the driver.
"""

from __future__ import annotations

import logging
from datetime import UTC, date, datetime
from typing import Any
from urllib.parse import unquote

from hubflow.checkpoints.delta_source_log import AddedFile
from hubflow.checkpoints.file_sink_log import committed_files
from hubflow.checkpoints.file_source_log import files_taken
from hubflow.storage.azure import url_to_fs
from hubflow_jobs.backfill_window import BackfillRefused
from hubflow_jobs.landing_area import without_empty_authority
from hubflow_jobs.pipeline.binding import Binding, PipelineError, sink_frames
from hubflow_jobs.pipeline.declarations import ParquetSource, PipelineConfig
from hubflow_jobs.pipeline.delta_backfill import INTERVAL_TYPES, may_hold
from hubflow_jobs.pipeline.interval_writes import interval_predicate, sink_writes, write_interval

log = logging.getLogger(__name__)

#: The directory name Spark gives a partition whose value is null.
_NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def backfill_parquet_interval(
    spark: Any, config: PipelineConfig, binding: Binding, start: datetime, end: datetime
) -> dict[str, int]:
    """The backfill of a pipeline reading one parquet lake table: its rows of ``[start, end)``."""
    ((name, source),) = config.sources.items()
    assert isinstance(source, ParquetSource) and source.interval_column
    key = config.key_as_written("sources", name, "interval_column")
    column = source.interval_column
    subject = f"job {config.name} backfill [{start.isoformat()}, {end.isoformat()})"
    files = committed_files(source.path)
    last = max(files.values(), default=None)
    table = _read(spark, source, list(files))
    _check_column(table, column, key, config.name, source.path)
    predicate = interval_predicate(column, start, end)
    rows = table.where(predicate).persist()
    try:
        read = rows.count()
        if not read:
            log.warning(
                "%s: %s (%d files, up to batch %s) has no rows with %s in the interval; nothing changed",
                subject,
                source.path,
                len(files),
                last,
                column,
            )
            return {"read": 0, "written": 0, "quarantined": 0}
        frames = sink_frames(
            binding.call({name: rows}, config.params, spark), binding.reference, list(config.sinks)
        )
        writes = sink_writes(config, binding, frames, (column,), f"the source's interval column ({key})")
        for sink_name, sink in config.sinks.items():
            if sink.kind == "delta":
                _refuse_unless_read(config, sink_name, source, files, column, key, start, end, subject)
        counts = {"read": read, **write_interval(writes, predicate, start, subject)}
        if any(sink.kind == "delta" for sink in config.sinks.values()):
            _refuse_if_rows_came(source, files, last, column, key, start, end, subject)
    finally:
        rows.unpersist()
    log.info("%s: %d files up to batch %s; %s", subject, len(files), last, _counts(counts))
    return counts


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {n}" for k, n in counts.items())


def _read(spark: Any, source: ParquetSource, files: list[str]) -> Any:
    """The committed ``files`` of the table as one batch with the stream's columns (the declared
    schema, partition columns from the paths below the table)."""
    if not files:
        return spark.createDataFrame([], source.schema_ddl)
    reader = spark.read.format("parquet").schema(source.schema_ddl).option("basePath", source.path)
    return reader.load([unquote(file) for file in files])


def _check_column(table: Any, column: str, key: str, job: str, path: str) -> None:
    """PipelineError naming ``key`` unless ``column`` is a timestamp or date column of ``table``."""
    field = next((f for f in table.schema.fields if f.name == column), None)
    if field is None:
        raise PipelineError(
            f"job {job}: {key}: {column!r} is not a column of the parquet table {path}; its columns are "
            f"{', '.join(table.columns)}. Name its time column (timestamp or date)"
        )
    if field.dataType.typeName() not in INTERVAL_TYPES:
        raise PipelineError(
            f"job {job}: {key}: the column {column!r} of {path} is {field.dataType.simpleString()}; a "
            "backfill selects an interval's rows by a timestamp or date column: name one"
        )


def file_may_hold(file: str, column: str, start: datetime, end: datetime) -> bool:
    """Whether the committed ``file`` (a URI as the table's log spells it) may hold rows whose
    ``column`` lies in ``[start, end)``: by its partition value of ``column`` in its path, else by
    the column's range in the file (footer statistics, else its values; a file without the column
    may)."""
    partitions = _partition_values(file)
    if column in partitions:
        return may_hold(AddedFile(0, file, partitions), column, start, end)
    bounds = _column_range(unquote(file), column)
    if bounds is None:
        return True
    if not bounds:
        return False  # every value null: no row of any interval
    low, high = bounds
    return may_hold(AddedFile(0, file, {}, {column: low}, {column: high}), column, start, end)


def _partition_values(file: str) -> dict[str, str | None]:
    """The ``column=value`` folders right above ``file`` (Spark's partition folders), unescaped as
    Spark escapes them (the URI's encoding, then the value's own)."""
    values: dict[str, str | None] = {}
    for folder in reversed(unquote(file).split("/")[:-1]):
        name, equals, value = folder.partition("=")
        if not (equals and name):
            break
        value = unquote(value)
        values[unquote(name)] = None if value == _NULL_PARTITION else value
    return values


def _column_range(path: str, column: str) -> tuple[datetime, datetime] | tuple[()] | None:
    """The least and greatest ``column`` value of the parquet file ``path`` as UTC datetimes (a date
    as its midnight); ``()`` when every value is null, None when the file lacks the column."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    fs, local = url_to_fs(path)
    with fs.open(local, "rb") as handle:
        parquet = pq.ParquetFile(handle)
        names = parquet.schema_arrow.names
        if column not in names:
            return None
        index = names.index(column)
        meta = parquet.metadata
        stats = [meta.row_group(i).column(index).statistics for i in range(meta.num_row_groups)]
        if stats and all(s is not None and s.has_min_max for s in stats):
            lows, highs = [_utc(s.min) for s in stats], [_utc(s.max) for s in stats]
        else:  # Spark's INT96 timestamps have no statistics: read the column
            bounds = pc.min_max(parquet.read(columns=[column]).column(0))
            lows, highs = [_utc(bounds["min"].as_py())], [_utc(bounds["max"].as_py())]
    known_lows = [value for value in lows if value is not None]
    known_highs = [value for value in highs if value is not None]
    if not known_lows or not known_highs:
        return ()
    return min(known_lows), max(known_highs)


def _utc(value: Any) -> datetime | None:
    """A timestamp or date value read from a parquet file as a UTC datetime."""
    if isinstance(value, datetime):
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    return None


def _holding(files: dict[str, int], column: str, start: datetime, end: datetime) -> list[int]:
    """The batches of ``files`` whose files may hold rows of the interval."""
    return sorted({batch for file, batch in files.items() if file_may_hold(file, column, start, end)})


def _refuse_unless_read(
    config: PipelineConfig,
    sink: str,
    source: ParquetSource,
    files: dict[str, int],
    column: str,
    key: str,
    start: datetime,
    end: datetime,
    subject: str,
) -> None:
    """Refuse unless the query of ``sink`` has read every file of ``files`` (the committed files the
    backfill read) that may hold rows of the interval."""
    taken = {without_empty_authority(file) for file in files_taken(config.sink_checkpoint(sink))}
    unread = {file: batch for file, batch in files.items() if without_empty_authority(file) not in taken}
    pending = _holding(unread, column, start, end)
    if pending:
        raise BackfillRefused(
            f"{subject}: sink {sink!r}: its query has not yet read batches {pending} of {source.path}, "
            f"which add rows of this interval (by {key}: {column}); it will land them itself, so a "
            "backfill now would write them twice. Backfill this interval once the job has read them."
        )


def _refuse_if_rows_came(
    source: ParquetSource,
    files: dict[str, int],
    last: int | None,
    column: str,
    key: str,
    start: datetime,
    end: datetime,
    subject: str,
) -> None:
    """Fail when files committed after the backfill listed the table hold rows of the interval: a
    sink's query may have landed some before the replacement committed, which then removed them.
    Rerunning the backfill once the job has read them replaces the interval with all its rows."""
    now = committed_files(source.path)
    came = _holding({f: b for f, b in now.items() if f not in files}, column, start, end)
    if came:
        raise BackfillRefused(
            f"{subject}: batches {came} of {source.path} added rows of this interval (by {key}: "
            f"{column}) while the backfill wrote what it had read up to batch {last}; a sink's query "
            "may have landed some of them before the replacement, which removed them. Run the backfill "
            "of this interval again once the job has read them (a retry does)."
        )
