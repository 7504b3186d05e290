"""What a pipeline backfill writes: each sink table's rows of the interval, replacing the earlier ones.

Shared by the backfills of both source kinds that can backfill (:mod:`.backfill` for an Event Hub,
:mod:`.files_backfill` for landing files); they differ in how an interval's rows are read, found
and checked, not in how they are written. Runs on the driver.

* **delta** sinks: the table's rows the interval's predicate selects are replaced in one Delta
  transaction (``replaceWhere``, retried on a conflicting commit), the quarantine like the output.
* **parquet** sinks: the rows go to the side table ``<output_path>_backfill`` (and the
  quarantine's), in the partition ``window_start=<start>``, which is overwritten; Spark's file sink
  log would hide rows written into the streaming table's own folder by a batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from hubflow_jobs.backfill_window import (
    WINDOW_COLUMN,
    backfill_path,
    overwrite_window_partition,
    window_label,
)
from hubflow_jobs.lake.tables import replace_rows, sql_string
from hubflow_jobs.pipeline.binding import Binding, PipelineError
from hubflow_jobs.pipeline.declarations import PipelineConfig
from hubflow_jobs.pipeline.streams import check_columns, marks_quarantine, output_rows, quarantine_rows


@dataclass(frozen=True)
class TableWrite:
    """The rows of the interval for one table of a sink (its output or its quarantine)."""

    sink: str  # the sink's name
    kind: str  # delta | parquet
    table: str
    rows: Any
    partition_by: list[str]
    role: str = "output"  # output | quarantine
    #: An identity column the table keeps under another name (a quarantine's ``source_file``).
    renamed: dict[str, str] = field(default_factory=dict)

    def column(self, identity: str) -> str:
        """The table's name of the identity column ``identity``."""
        return self.renamed.get(identity, identity)


def timestamp_literal(moment: datetime) -> str:
    """``moment`` as a Spark SQL timestamp literal, in UTC."""
    return "TIMESTAMP " + sql_string(moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f+00:00"))


def interval_predicate(column: str, start: datetime, end: datetime) -> str:
    """The SQL predicate of a table's rows of ``[start, end)`` by its time column ``column``: the
    ``replaceWhere`` of a backfill whose rows are found by their time."""
    quoted = "`" + column.replace("`", "``") + "`"
    return f"{quoted} >= {timestamp_literal(start)} AND {quoted} < {timestamp_literal(end)}"


def sink_writes(
    config: PipelineConfig,
    binding: Binding,
    frames: dict[str, Any],
    identity: tuple[str, ...],
    what: str,
    quarantine_names: dict[str, str] | None = None,
) -> list[TableWrite]:
    """What to write to every table of every sink. A Delta table without the ``identity`` columns (by
    which the interval's rows are found and checked; ``what`` names them for the message), or a sink
    with a quarantine column but no quarantine table, is refused by name (PipelineError). A
    quarantine may keep an identity column under the name ``quarantine_names`` gives it."""
    writes = []
    for name, frame in frames.items():
        sink = config.sinks[name]
        check_columns(frame, sink, name, binding.reference)
        tables = [("output", sink.output_path, output_rows(frame, sink))]
        if marks_quarantine(frame, config, name, binding.reference):
            tables.append(("quarantine", sink.quarantine_path or "", quarantine_rows(frame, sink)))
        for role, table, rows in tables:
            renamed = {
                column: other
                for column, other in (quarantine_names or {}).items()
                if role == "quarantine" and column not in rows.columns and other in rows.columns
            }
            missing = [column for column in identity if column not in rows.columns and column not in renamed]
            if missing and sink.kind == "delta":
                where = f"sink {name!r}" if role == "output" else f"the quarantine of sink {name!r}"
                raise PipelineError(
                    f"pipeline {binding.reference!r}: {where} has no column {', '.join(missing)}; a "
                    f"backfill finds and checks an interval's rows by {what} ({', '.join(identity)}), so "
                    "keep them in the DataFrame the function returns for it"
                )
            writes.append(TableWrite(name, sink.kind, table, rows, sink.partition_by, role, renamed))
    return writes


def write_interval(
    writes: list[TableWrite], predicate: str | Callable[[TableWrite], str], start: datetime, subject: str
) -> dict[str, int]:
    """Replace the interval's rows (``predicate``, or each table's) of every table with ``writes``; the
    rows per table, and in all: ``written`` to outputs, ``quarantined`` to quarantines."""
    from pyspark.sql import functions as F

    counts = {"written": 0, "quarantined": 0}
    for write in writes:
        rows = write.rows.persist()
        try:
            counts[write.table] = rows.count()
            counts["written" if write.role == "output" else "quarantined"] += counts[write.table]
            if write.kind == "delta":
                where = predicate if isinstance(predicate, str) else predicate(write)
                replace_rows(rows, write.table, where, write.partition_by, subject)
            else:
                label = window_label(start)
                side = backfill_path(write.table)
                overwrite_window_partition(rows.withColumn(WINDOW_COLUMN, F.lit(label)), side, label)
        finally:
            rows.unpersist()
    return counts
