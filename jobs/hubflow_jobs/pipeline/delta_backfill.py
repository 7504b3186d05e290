"""Backfill of one data interval of a pipeline reading a Delta table (one ``kind: delta`` source).

The interval's rows are the table's rows whose time column (``sources.<name>.interval_column``)
lies in ``[start, end)``, read as one batch from the table's latest version and passed to the
user's function. Each Delta sink's frame keeps that column: the sink's rows of the interval are
those whose value lies in it too (:func:`~.interval_writes.interval_predicate`), replaced in one
transaction.

Refused before anything is written: a function whose queries keep state across batches (their
checkpoint has ``state/``: an interval's rows then depend on rows outside it), and, for every Delta
sink, a query that has not yet read every commit adding rows of the interval (it would land them
itself; read from its checkpoint's Delta offset and the commits after it, by their files' statistics
of the column). Failed after writing, to be run again, when the table got rows of the interval
meanwhile (a sink's query may have landed them before the replacement removed them). An interval
without rows in the table changes nothing (they may have been deleted by the table's retention; the
sinks' rows are then all that is left of them). Runs on the driver.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from hubflow.checkpoints.delta_source_log import AddedFile, appended_files, committed_delta_position
from hubflow.checkpoints.spark_logs import join
from hubflow.storage.azure import url_to_fs
from hubflow.utc_times import utc_time
from hubflow_jobs.backfill_window import BackfillRefused
from hubflow_jobs.pipeline.binding import Binding, PipelineError
from hubflow_jobs.pipeline.declarations import DeltaSource, PipelineConfig
from hubflow_jobs.pipeline.table_backfill import Interval, interval_of, replace_interval

#: The column types an interval column may have.
INTERVAL_TYPES = ("timestamp", "timestamp_ntz", "date")
#: Delta keeps a timestamp's statistics to the millisecond.
_STATS_PRECISION = timedelta(milliseconds=1)


def stateful_sinks(config: PipelineConfig) -> list[str]:
    """The checkpoints of the sinks' queries that keep state across batches (a ``state/`` folder with
    content: an aggregation, ``dropDuplicates``, a stream-stream join); checked before Spark starts."""
    stateful = []
    for name in config.sinks:
        fs, root = url_to_fs(config.sink_checkpoint(name))
        state = join(root, "state")
        if fs.isdir(state) and fs.ls(state, detail=False):
            stateful.append(state)
    return stateful


def may_hold(added: AddedFile, column: str, start: datetime, end: datetime) -> bool:
    """Whether the file ``added`` may hold rows whose ``column`` lies in ``[start, end)``, by its partition
    value or its statistics (True when it has neither)."""
    if column in added.partition_values:
        value = added.partition_values[column]
        moment = utc_time(value) if value else None
        return value is not None and (moment is None or start <= moment < end)
    low, high = utc_time(added.min_values.get(column)), utc_time(added.max_values.get(column))
    if low is None or high is None:
        return True
    return low < end and high + _STATS_PRECISION > start


@dataclass(frozen=True)
class DeltaRead:
    """A backfill's read of ``source``'s table at ``version`` (a :class:`~.table_backfill.TableRead`)."""

    spark: Any
    source: DeltaSource
    interval: Interval
    version: int

    def describe(self) -> str:
        return f"{self.source.path} (version {self.version})"

    def versions_adding_rows(self, first: int, last: int) -> list[int]:
        """The table versions from ``first`` to ``last`` whose added files may hold rows of the
        interval (by their partition values or statistics of the column)."""
        i = self.interval
        added_files = appended_files(self.source.path, first, last)
        return sorted({a.version for a in added_files if may_hold(a, i.column, i.start, i.end)})

    def refuse_if_rows_came(self) -> None:
        """Fail when commits after the version read added rows of the interval: a sink's query may
        have landed some before the replacement committed, which then removed them. Rerunning the
        backfill once the job has read them replaces the interval with all its rows."""
        i = self.interval
        came = self.versions_adding_rows(self.version + 1, _latest_version(self.spark, self.source.path))
        if came:
            raise BackfillRefused(
                f"{i.subject}: versions {came} of {self.source.path} added rows of this interval (by "
                f"{i.key}: {i.column}) while the backfill wrote what it had read of version "
                f"{self.version}; a sink's query may have landed some of them before the replacement, which "
                "removed them. Run the backfill of this interval again once the job has read them (a retry "
                "does)."
            )

    def refuse_unless_read(self, config: PipelineConfig, sink: str) -> None:
        """Refuse unless the query of ``sink`` has read every commit up to the version read that adds
        rows of the interval (those after its last committed batch, by their files' statistics)."""
        checkpoint = config.sink_checkpoint(sink)
        position = committed_delta_position(checkpoint)
        source, i = self.source, self.interval
        where = f"{i.subject}: sink {sink!r}"
        if position is None:
            raise BackfillRefused(
                f"{where}: its query has not committed a batch yet ({checkpoint}); its first run reads "
                "this interval itself. Backfill once the job has run past it."
            )
        if position.initial_snapshot:
            raise BackfillRefused(
                f"{where}: its query is still reading the snapshot of {source.path} at version "
                f"{position.version}; it will land this interval's rows itself, so a backfill now would "
                "write them twice. Backfill this interval once the job has caught up."
            )
        try:
            pending = self.versions_adding_rows(position.first_unread_version, self.version)
        except FileNotFoundError as exc:
            raise BackfillRefused(
                f"{where}: a commit its query has not read is gone from the table's log ({exc}); the job "
                "cannot resume there either: see docs/delta.md"
            ) from None
        if pending:
            raise BackfillRefused(
                f"{where}: its query has not yet read versions {pending} of {source.path}, which add rows "
                f"of this interval (by {i.key}: {i.column}); it will land them itself, so a backfill now "
                "would write them twice. Backfill this interval once the job has read them."
            )


def _latest_version(spark: Any, path: str) -> int:
    from delta.tables import DeltaTable

    return int(DeltaTable.forPath(spark, path).history(1).first()["version"])


def backfill_delta_interval(
    spark: Any, config: PipelineConfig, binding: Binding, start: datetime, end: datetime
) -> dict[str, int]:
    """The backfill of a pipeline reading one Delta table: its rows of ``[start, end)``, read at the
    table's latest version (pinned by number)."""
    interval = interval_of(config, start, end)
    source = config.sources[interval.name]
    assert isinstance(source, DeltaSource)
    version = _latest_version(spark, source.path)
    table = spark.read.format("delta").option("versionAsOf", version).load(source.path)
    check_interval_column(table, interval.column, interval.key, config.name, source.path)
    return replace_interval(
        spark, config, binding, interval, table, DeltaRead(spark, source, interval, version)
    )


def check_interval_column(
    table: Any, column: str, key: str, job: str, path: str, kind: str = "Delta"
) -> None:
    """PipelineError naming ``key`` unless ``column`` is a timestamp or date column of ``table`` (the
    ``kind`` table at ``path``: ``Delta`` or ``parquet``)."""
    field = next((f for f in table.schema.fields if f.name == column), None)
    if field is None:
        raise PipelineError(
            f"job {job}: {key}: {column!r} is not a column of the {kind} table {path}; its columns are "
            f"{', '.join(table.columns)}. Name its time column (timestamp or date)"
        )
    if field.dataType.typeName() not in INTERVAL_TYPES:
        raise PipelineError(
            f"job {job}: {key}: the column {column!r} of {path} is {field.dataType.simpleString()}; a "
            "backfill selects an interval's rows by a timestamp or date column: name one"
        )
