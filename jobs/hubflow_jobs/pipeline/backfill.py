"""Backfill of one data interval of a pipeline: the interval's events through the user's function
again, replacing that interval's rows in each of its lake sinks.

A pipeline can backfill (:func:`backfill_problem`, checked before Spark starts) when it reads one
source, of kind ``eventhubs``, and writes lake sinks; its function runs on the batch of events
enqueued in ``[start, end)`` (a pipeline function works on batch DataFrames as on streams).

* **delta** sinks: each sink's frame keeps the events' identity, :data:`IDENTITY_COLUMNS`, by which
  the interval's rows are found (``enqueuedTime``) and checked (``partition``, ``sequenceNumber``).
  Before anything is written, for every Delta sink: its query has committed past the interval (read
  from its checkpoint, so a function that filters rows out is judged right), and its tables hold no
  event of the interval that the hub no longer returns. Then each table's rows of the interval are
  replaced in one Delta transaction (``replaceWhere``), the quarantine like the output.
* **parquet** sinks: the rows go to the side table ``<output_path>_backfill`` (and the quarantine's),
  in the partition ``window_start=<start>``, which is overwritten; Spark's file sink log would hide
  rows written into the streaming table's own folder by a batch (:mod:`hubflow_jobs.backfill`).

A rerun replaces the interval's rows again, never adds to them. Runs on the driver.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..backfill import (
    WINDOW_COLUMN,
    BackfillRefused,
    backfill_path,
    enqueued_in,
    interval_events,
    overwrite_window_partition,
    refuse_if_events_gone,
    window_label,
)
from ..lake_tables import delta_table_exists, replace_rows
from .binding import Binding, PipelineError, sink_frames
from .declarations import EventHubsSource, PipelineConfig
from .streams import check_columns, marks_quarantine, output_rows, quarantine_rows

log = logging.getLogger(__name__)

#: The columns of the events every sink of a backfilled pipeline keeps.
IDENTITY_COLUMNS = ("enqueuedTime", "partition", "sequenceNumber")


def backfill_problem(config: PipelineConfig, binding: Binding) -> str | None:
    """Why the pipeline cannot backfill an interval (one message naming the keys), or None."""
    if binding.takes_context:
        return (
            f"pipeline {binding.reference!r} starts its own queries (it takes 'context'), so hubflow cannot "
            "run it on an interval; backfill is for functions that return DataFrames"
        )
    kinds = {name: source.kind for name, source in config.sources.items()}
    if len(kinds) != 1 or not isinstance(next(iter(config.sources.values())), EventHubsSource):
        declared = ", ".join(f"{name} ({kind})" for name, kind in kinds.items())
        return (
            f"job {config.name}: a pipeline backfills an interval of one source of kind eventhubs; its "
            f"sources are {declared}"
        )
    not_lake = [f"sinks.{name}.kind: {s.kind}" for name, s in config.sinks.items() if s.kind == "eventhubs"]
    if not_lake:
        return (
            f"job {config.name}: a backfill replaces the interval's rows in lake sinks (delta, parquet); an "
            f"Event Hub cannot take events back: {', '.join(not_lake)}"
        )
    return None


def committed_positions(checkpoint: str, eventhub: str) -> dict[str, int] | None:
    """Per partition, the first sequence number the query of ``checkpoint`` has not committed (the
    end offset of its last committed batch); None before its first commit."""
    from pyspark_eventhubs.offsets import offset_seqs

    from ..azure_storage import url_to_fs
    from ..checkpoint_logs import join, list_batch_ids, read_offsets

    fs, root = url_to_fs(checkpoint)
    committed = list_batch_ids(fs, join(root, "commits"))
    if not committed:
        return None
    source = read_offsets(fs, root, committed[-1]).sources[0]
    return offset_seqs(json.loads(source.raw) if source.raw else None, eventhub)


def backfill_pipeline(
    spark: Any, config: PipelineConfig, binding: Binding, start: datetime, end: datetime
) -> dict[str, int]:
    """Replace the rows of ``[start, end)`` in every sink with the function's rows of that interval's
    events; the rows read and written per table. Refused (:class:`BackfillRefused`) with the reason
    when that would double or lose rows."""
    from pyspark.sql import functions as F

    from pyspark_eventhubs import parse_options

    subject = f"job {config.name} backfill [{start.isoformat()}, {end.isoformat()})"
    (source_name, source), *_ = config.sources.items()
    hub = parse_options(source.spark_options()).eventhub_name
    events = interval_events(spark, source, start, end).persist()
    try:
        ids = events.select("partition", "sequenceNumber")
        last = {
            r["partition"]: r["last"]
            for r in ids.groupBy("partition").agg(F.max("sequenceNumber").alias("last")).collect()
        }
        frames = sink_frames(
            binding.call({source_name: events}, config.params, spark), binding.reference, list(config.sinks)
        )
        writes = _sink_writes(config, binding, frames)
        for name, sink in config.sinks.items():
            if sink.kind == "delta":
                _refuse_unless_past(config.sink_checkpoint(name), hub, last, f"{subject}: sink {name!r}")
        predicate = enqueued_in(start, end)
        for write in writes:
            if write.kind == "delta" and delta_table_exists(spark, write.table):
                refuse_if_events_gone(spark.read.format("delta").load(write.table), predicate, ids, subject)
        counts = {"read": events.count()}
        for write in writes:
            rows = write.rows.persist()
            try:
                counts[write.table] = rows.count()
                if write.kind == "delta":
                    replace_rows(rows, write.table, predicate, write.partition_by, subject)
                else:
                    label = window_label(start)
                    side = backfill_path(write.table)
                    overwrite_window_partition(rows.withColumn(WINDOW_COLUMN, F.lit(label)), side, label)
            finally:
                rows.unpersist()
    finally:
        events.unpersist()
    log.info("%s: %s", subject, ", ".join(f"{where} {n}" for where, n in counts.items()))
    return counts


def _refuse_unless_past(checkpoint: str, hub: str, last: dict[str, int], subject: str) -> None:
    """Refuse unless the sink's query committed every partition past its last event of the interval."""
    committed = committed_positions(checkpoint, hub)
    if committed is None:
        if last:
            raise BackfillRefused(
                f"{subject}: its query has not committed a batch yet ({checkpoint}); its first run reads "
                "this interval itself. Backfill once the job has run past it."
            )
        return
    behind = {p: n for p, n in sorted(last.items()) if committed.get(p, 0) <= n}
    if behind:
        raise BackfillRefused(
            f"{subject}: its query has not yet read partitions {sorted(behind)} past this interval (the "
            f"interval ends at sequence numbers {behind}, the query's next are "
            f"{ {p: committed.get(p, 0) for p in behind} }); it will land these events itself, so a "
            "backfill now would write them twice. Backfill this interval once the job has caught up."
        )


@dataclass(frozen=True)
class _TableWrite:
    """The rows of the interval for one table of a sink (its output or its quarantine)."""

    kind: str  # delta | parquet
    table: str
    rows: Any
    partition_by: list[str]


def _sink_writes(config: PipelineConfig, binding: Binding, frames: dict[str, Any]) -> list[_TableWrite]:
    """What to write to every table of every sink; a Delta sink without the identity columns, or a sink
    with a quarantine column but no quarantine table, is refused by name (PipelineError)."""
    writes = []
    for name, frame in frames.items():
        sink = config.sinks[name]
        check_columns(frame, sink, name, binding.reference)
        missing = [column for column in IDENTITY_COLUMNS if column not in (sink.columns or frame.columns)]
        if missing and sink.kind == "delta":
            raise PipelineError(
                f"pipeline {binding.reference!r}: sink {name!r} has no column {', '.join(missing)}; a "
                f"backfill finds and checks an interval's rows by the events' "
                f"{', '.join(IDENTITY_COLUMNS)}, so keep them in the DataFrame the function returns for it"
            )
        writes.append(_TableWrite(sink.kind, sink.output_path, output_rows(frame, sink), sink.partition_by))
        if marks_quarantine(frame, config, name, binding.reference):
            bad = quarantine_rows(frame, sink)
            writes.append(_TableWrite(sink.kind, sink.quarantine_path or "", bad, sink.partition_by))
    return writes
