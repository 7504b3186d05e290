"""A source's backlog, in events (files, versions) and seconds: the metric names and the arithmetic.

The one owner of the backlog's names: the Event Hubs source reports them, and hubflow's runtime
(the files and Delta sources), history, status page, ``hubflow status`` and alerts read them. It
lives in the connector, the bottom layer, so that every layer can import it; it imports nothing but
the standard library.

Python data sources have no custom metrics in Spark 4.2 (Kafka's ``sourceProgress.metrics``,
``ReportsSourceMetrics``, is for JVM sources only), so the Event Hubs source puts its report in
``reportLatestOffset`` under :data:`BACKLOG_KEY` (Spark's ``sources[].latestOffset``), as it does
for data loss; hubflow's listener moves it to the source's ``backlog`` in the progress it keeps.

A report is ``{"eventsBehindLatest": n, "secondsBehindLatest": s, "partitions": {"0": {...}}}``:
per partition the events after the batch's end and the seconds between the enqueued time of the
newest event and that of the last event the batch reads (0 when caught up; None when unknown);
the totals are the sum of the events and the largest of the seconds.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class BacklogMetric(StrEnum):
    """The names of a source's backlog in the progress hubflow keeps (and in ``hubflow status --json``)."""

    EVENTS = "eventsBehindLatest"
    SECONDS = "secondsBehindLatest"
    FILES = "filesBehindLatest"
    VERSIONS = "versionsBehindLatest"
    PARTITIONS = "partitions"


#: Key of the backlog report in the Event Hubs source's ``reportLatestOffset``; hub names have no ``$``.
BACKLOG_KEY = "$backlog"
#: Key of a source's backlog in a progress summary (``last_progress.sources[]``, the history file).
SOURCE_BACKLOG = "backlog"
#: The counts a backlog can have, one per kind of source (a report has one of them).
COUNT_METRICS = (BacklogMetric.EVENTS, BacklogMetric.FILES, BacklogMetric.VERSIONS)


@dataclass(frozen=True)
class PartitionBacklog:
    """One partition's backlog: events after the read position and the seconds they span."""

    events: int
    seconds: float | None

    def to_dict(self) -> dict[str, Any]:
        return {BacklogMetric.EVENTS.value: self.events, BacklogMetric.SECONDS.value: self.seconds}


def partition_backlog(
    read_end: int,
    latest: int,
    newest_enqueued: datetime.datetime | None,
    last_read_enqueued: datetime.datetime | None,
) -> PartitionBacklog:
    """The backlog of a partition read up to ``read_end`` (exclusive) that holds up to ``latest``.

    Seconds: the newest event's enqueued time minus the last read event's; 0 when nothing is behind,
    None when a time is not known.
    """
    events = max(0, latest - read_end)
    if events == 0:
        return PartitionBacklog(0, 0.0)
    if newest_enqueued is None or last_read_enqueued is None:
        return PartitionBacklog(events, None)
    return PartitionBacklog(events, max(0.0, (newest_enqueued - last_read_enqueued).total_seconds()))


def backlog_report(partitions: Mapping[str, PartitionBacklog]) -> dict[str, Any]:
    """The source's report: totals (sum of events, largest seconds) and each partition's backlog.

    The seconds total is None when a partition that is behind has unknown seconds.
    """
    seconds = [p.seconds for p in partitions.values()]
    known = None if any(s is None for s in seconds) else max(seconds, default=0.0)
    return {
        BacklogMetric.EVENTS.value: sum(p.events for p in partitions.values()),
        BacklogMetric.SECONDS.value: known,
        BacklogMetric.PARTITIONS.value: {pid: p.to_dict() for pid, p in partitions.items()},
    }


def backlog_count(report: Mapping[str, Any] | None) -> int | None:
    """The report's count, whatever it counts (events, files or versions); None when it has none."""
    if not report:
        return None
    for metric in COUNT_METRICS:
        value = report.get(metric.value)
        if isinstance(value, int):
            return value
    return None


def backlog_seconds(report: Mapping[str, Any] | None) -> float | None:
    """The report's seconds behind, or None."""
    value = (report or {}).get(BacklogMetric.SECONDS.value)
    return float(value) if isinstance(value, int | float) else None
