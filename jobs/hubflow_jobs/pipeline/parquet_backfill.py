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

from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any
from urllib.parse import unquote

from hubflow.checkpoints.delta_source_log import AddedFile
from hubflow.checkpoints.file_sink_log import committed_files
from hubflow.checkpoints.file_source_log import files_taken
from hubflow.storage.azure import url_to_fs
from hubflow_jobs.backfill_window import BackfillRefused
from hubflow_jobs.landing_area import without_empty_authority
from hubflow_jobs.pipeline.binding import Binding
from hubflow_jobs.pipeline.declarations import ParquetSource, PipelineConfig
from hubflow_jobs.pipeline.delta_backfill import check_interval_column, may_hold
from hubflow_jobs.pipeline.table_backfill import Interval, interval_of, replace_interval

#: The directory name Spark gives a partition whose value is null.
_NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def backfill_parquet_interval(
    spark: Any, config: PipelineConfig, binding: Binding, start: datetime, end: datetime
) -> dict[str, int]:
    """The backfill of a pipeline reading one parquet lake table: its rows of ``[start, end)``, read
    from the files the table's log lists now."""
    interval = interval_of(config, start, end)
    source = config.sources[interval.name]
    assert isinstance(source, ParquetSource)
    files = committed_files(source.path)
    table = _read(spark, source, list(files))
    check_interval_column(table, interval.column, interval.key, config.name, source.path, kind="parquet")
    return replace_interval(spark, config, binding, interval, table, ParquetRead(source, interval, files))


@dataclass(frozen=True)
class ParquetRead:
    """A backfill's read of ``source``'s committed ``files`` (URI -> batch id), a
    :class:`~.table_backfill.TableRead`."""

    source: ParquetSource
    interval: Interval
    files: dict[str, int]

    def describe(self) -> str:
        return f"{self.source.path} ({len(self.files)} files, up to batch {self.last_batch})"

    @property
    def last_batch(self) -> int | None:
        return max(self.files.values(), default=None)

    def holding(self, files: dict[str, int]) -> list[int]:
        """The batches of ``files`` whose files may hold rows of the interval."""
        i = self.interval
        return sorted({b for file, b in files.items() if file_may_hold(file, i.column, i.start, i.end)})

    def refuse_unless_read(self, config: PipelineConfig, sink: str) -> None:
        """Refuse unless the query of ``sink`` has read every file the backfill read that may hold
        rows of the interval."""
        i = self.interval
        taken = {without_empty_authority(file) for file in files_taken(config.sink_checkpoint(sink))}
        unread = {f: b for f, b in self.files.items() if without_empty_authority(f) not in taken}
        pending = self.holding(unread)
        if pending:
            raise BackfillRefused(
                f"{i.subject}: sink {sink!r}: its query has not yet read batches {pending} of "
                f"{self.source.path}, which add rows of this interval (by {i.key}: {i.column}); it will "
                "land them itself, so a backfill now would write them twice. Backfill this interval once "
                "the job has read them."
            )

    def refuse_if_rows_came(self) -> None:
        """Fail when files committed after the backfill listed the table hold rows of the interval: a
        sink's query may have landed some before the replacement committed, which then removed them.
        Rerunning the backfill once the job has read them replaces the interval with all its rows."""
        i = self.interval
        now = committed_files(self.source.path)
        came = self.holding({f: b for f, b in now.items() if f not in self.files})
        if came:
            raise BackfillRefused(
                f"{i.subject}: batches {came} of {self.source.path} added rows of this interval (by "
                f"{i.key}: {i.column}) while the backfill wrote what it had read up to batch "
                f"{self.last_batch}; a sink's query may have landed some of them before the replacement, "
                "which removed them. Run the backfill of this interval again once the job has read them "
                "(a retry does)."
            )


def _read(spark: Any, source: ParquetSource, files: list[str]) -> Any:
    """The committed ``files`` of the table as one batch with the stream's columns (the declared
    schema, partition columns from the paths below the table)."""
    if not files:
        return spark.createDataFrame([], source.schema_ddl)
    reader = spark.read.format("parquet").schema(source.schema_ddl).option("basePath", source.path)
    return reader.load([unquote(file) for file in files])


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
