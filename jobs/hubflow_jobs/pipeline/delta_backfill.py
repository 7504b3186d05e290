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

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from hubflow.checkpoints.delta_source_log import AddedFile, appended_files, committed_delta_position
from hubflow.checkpoints.spark_logs import join
from hubflow.storage.azure import url_to_fs
from hubflow.utc_times import utc_time
from hubflow_jobs.backfill_window import BackfillRefused
from hubflow_jobs.pipeline.binding import Binding, PipelineError, sink_frames
from hubflow_jobs.pipeline.declarations import DeltaSource, PipelineConfig
from hubflow_jobs.pipeline.interval_writes import interval_predicate, sink_writes, write_interval

log = logging.getLogger(__name__)

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
class _IntervalRead:
    """What a backfill read: the interval ``[start, end)`` of ``source``'s ``column`` (written in the
    config as ``key``) at table version ``version``; ``subject`` names the backfill in messages."""

    source: DeltaSource
    column: str
    key: str
    version: int
    start: datetime
    end: datetime
    subject: str

    def versions_adding_rows(self, first: int, last: int) -> list[int]:
        """The table versions from ``first`` to ``last`` whose added files may hold rows of the
        interval (by their partition values or statistics of the column)."""
        added_files = appended_files(self.source.path, first, last)
        return sorted({a.version for a in added_files if may_hold(a, self.column, self.start, self.end)})


def backfill_delta_interval(
    spark: Any, config: PipelineConfig, binding: Binding, start: datetime, end: datetime
) -> dict[str, int]:
    """The backfill of a pipeline reading one Delta table: its rows of ``[start, end)``."""
    from delta.tables import DeltaTable

    ((name, source),) = config.sources.items()
    assert isinstance(source, DeltaSource) and source.interval_column
    key = config.key_as_written("sources", name, "interval_column")
    column = source.interval_column
    subject = f"job {config.name} backfill [{start.isoformat()}, {end.isoformat()})"
    version = int(DeltaTable.forPath(spark, source.path).history(1).first()["version"])
    table = spark.read.format("delta").option("versionAsOf", version).load(source.path)
    _check_column(table, column, key, config.name, source.path)
    predicate = interval_predicate(column, start, end)
    rows = table.where(predicate).persist()
    try:
        read = rows.count()
        if not read:
            log.warning(
                "%s: %s (version %d) has no rows with %s in the interval; nothing changed",
                subject,
                source.path,
                version,
                column,
            )
            return {"read": 0, "written": 0, "quarantined": 0}
        frames = sink_frames(
            binding.call({name: rows}, config.params, spark), binding.reference, list(config.sinks)
        )
        writes = sink_writes(config, binding, frames, (column,), f"the source's interval column ({key})")
        interval = _IntervalRead(source, column, key, version, start, end, subject)
        for sink_name, sink in config.sinks.items():
            if sink.kind == "delta":
                _refuse_unless_read(config, sink_name, interval)
        counts = {"read": read, **write_interval(writes, predicate, start, subject)}
        if any(sink.kind == "delta" for sink in config.sinks.values()):
            _refuse_if_rows_came(spark, interval)
    finally:
        rows.unpersist()
    log.info("%s: version %d; %s", subject, version, ", ".join(f"{k} {n}" for k, n in counts.items()))
    return counts


def _refuse_if_rows_came(spark: Any, interval: _IntervalRead) -> None:
    """Fail when commits after the version read added rows of the interval: a sink's query may have
    landed some before the replacement committed, which then removed them. Rerunning the backfill
    once the job has read them replaces the interval with all its rows."""
    from delta.tables import DeltaTable

    source, version = interval.source, interval.version
    latest = int(DeltaTable.forPath(spark, source.path).history(1).first()["version"])
    came = interval.versions_adding_rows(version + 1, latest)
    if came:
        raise BackfillRefused(
            f"{interval.subject}: versions {came} of {source.path} added rows of this interval (by "
            f"{interval.key}: {interval.column}) while the backfill wrote what it had read of version "
            f"{version}; a sink's query may have landed some of them before the replacement, which removed "
            "them. Run the backfill of this interval again once the job has read them (a retry does)."
        )


def _check_column(table: Any, column: str, key: str, job: str, path: str) -> None:
    """PipelineError naming ``key`` unless ``column`` is a timestamp or date column of ``table``."""
    field = next((f for f in table.schema.fields if f.name == column), None)
    if field is None:
        raise PipelineError(
            f"job {job}: {key}: {column!r} is not a column of the Delta table {path}; its columns are "
            f"{', '.join(table.columns)}. Name its time column (timestamp or date)"
        )
    if field.dataType.typeName() not in INTERVAL_TYPES:
        raise PipelineError(
            f"job {job}: {key}: the column {column!r} of {path} is {field.dataType.simpleString()}; a "
            "backfill selects an interval's rows by a timestamp or date column: name one"
        )


def _refuse_unless_read(config: PipelineConfig, sink: str, interval: _IntervalRead) -> None:
    """Refuse unless the query of ``sink`` has read every commit up to the version read that adds rows
    of the interval (those after its last committed batch, by their files' statistics of the column)."""
    checkpoint = config.sink_checkpoint(sink)
    position = committed_delta_position(checkpoint)
    source = interval.source
    where = f"{interval.subject}: sink {sink!r}"
    if position is None:
        raise BackfillRefused(
            f"{where}: its query has not committed a batch yet ({checkpoint}); its first run reads this "
            "interval itself. Backfill once the job has run past it."
        )
    if position.initial_snapshot:
        raise BackfillRefused(
            f"{where}: its query is still reading the snapshot of {source.path} at version "
            f"{position.version}; it will land this interval's rows itself, so a backfill now would write "
            "them twice. Backfill this interval once the job has caught up."
        )
    try:
        pending = interval.versions_adding_rows(position.first_unread_version, interval.version)
    except FileNotFoundError as exc:
        raise BackfillRefused(
            f"{where}: a commit its query has not read is gone from the table's log ({exc}); the job "
            "cannot resume there either: see docs/delta.md"
        ) from None
    if pending:
        raise BackfillRefused(
            f"{where}: its query has not yet read versions {pending} of {source.path}, which add rows "
            f"of this interval (by {interval.key}: {interval.column}); it will land them itself, so a "
            "backfill now would write them twice. Backfill this interval once the job has read them."
        )
