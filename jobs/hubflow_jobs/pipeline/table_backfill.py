"""The interval replacement shared by the backfills of pipelines reading one lake table (Delta:
:mod:`.delta_backfill`, parquet: :mod:`.parquet_backfill`).

The table's rows whose interval column lies in ``[start, end)`` go through the user's function; each
sink's rows of the interval are replaced (:mod:`.interval_writes`). Before anything is written every
Delta sink's query must have read what the table holds of the interval; after writing, rows of the
interval that came meanwhile fail the backfill, to be run again. How each kind of table tells what
was read and what came is its :class:`TableRead`. Runs on the driver.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from hubflow_jobs.pipeline.binding import Binding, sink_frames
from hubflow_jobs.pipeline.declarations import PipelineConfig
from hubflow_jobs.pipeline.interval_writes import interval_predicate, sink_writes, write_interval

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Interval:
    """The interval ``[start, end)`` of the source ``name``'s ``column`` (written in the config as
    ``key``); ``subject`` names the backfill in messages."""

    name: str
    column: str
    key: str
    start: datetime
    end: datetime
    subject: str


def interval_of(config: PipelineConfig, start: datetime, end: datetime) -> Interval:
    """The interval of the pipeline's one table source, by its ``interval_column``."""
    ((name, source),) = config.sources.items()
    column = source.interval_column
    assert column, "backfill_problem refuses a table source without interval_column"
    key = config.key_as_written("sources", name, "interval_column")
    subject = f"job {config.name} backfill [{start.isoformat()}, {end.isoformat()})"
    return Interval(name, column, key, start, end, subject)


class TableRead(Protocol):
    """What one backfill read of the table: said in the log, and its two checks."""

    def describe(self) -> str:
        """What was read, e.g. ``version 7`` or ``12 files up to batch 4``."""
        ...

    def refuse_unless_read(self, config: PipelineConfig, sink: str) -> None:
        """``BackfillRefused`` unless the Delta sink ``sink``'s query has read the interval's rows."""
        ...

    def refuse_if_rows_came(self) -> None:
        """``BackfillRefused`` when rows of the interval reached the table after the read."""
        ...


def replace_interval(
    spark: Any, config: PipelineConfig, binding: Binding, interval: Interval, table: Any, read: TableRead
) -> dict[str, int]:
    """Replace each sink's rows of ``interval`` with the function's output for ``table``'s rows of it
    (``table``: the DataFrame ``read`` describes, its interval column already checked)."""
    predicate = interval_predicate(interval.column, interval.start, interval.end)
    rows = table.where(predicate).persist()
    try:
        count = rows.count()
        if not count:
            log.warning(
                "%s: %s has no rows with %s in the interval; nothing changed",
                interval.subject,
                read.describe(),
                interval.column,
            )
            return {"read": 0, "written": 0, "quarantined": 0}
        frames = sink_frames(
            binding.call({interval.name: rows}, config.params, spark), binding.reference, list(config.sinks)
        )
        why = f"the source's interval column ({interval.key})"
        writes = sink_writes(config, binding, frames, (interval.column,), why)
        deltas = [name for name, sink in config.sinks.items() if sink.kind == "delta"]
        for sink_name in deltas:
            read.refuse_unless_read(config, sink_name)
        counts = {"read": count, **write_interval(writes, predicate, interval.start, interval.subject)}
        if deltas:
            read.refuse_if_rows_came()
    finally:
        rows.unpersist()
    log.info(
        "%s: %s; %s", interval.subject, read.describe(), ", ".join(f"{k} {n}" for k, n in counts.items())
    )
    return counts
