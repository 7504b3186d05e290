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
the totals are the sum of the events and the largest known seconds. :class:`BacklogMeter` measures
it on the driver, trigger after trigger.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

log = logging.getLogger(__name__)


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
    """The source's report: totals (sum of events, largest known seconds) and each partition's.

    The seconds total is None only when no partition's seconds are known.
    """
    seconds = [p.seconds for p in partitions.values() if p.seconds is not None]
    known = max(seconds) if seconds else None
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


#: ``{partition: sequence number}`` -> ``{partition: enqueued time}`` of those events (some may be missing).
EnqueuedTimeLookup = Callable[[dict[str, int]], Mapping[str, datetime.datetime]]
#: Enqueued times a meter keeps per partition (the newest positions it saw).
KNOWN_TIMES_PER_PARTITION = 64
#: Events read per trigger to learn enqueued times (one receiver each; one wave of the lookup's pool).
MAX_LOOKUPS_PER_TRIGGER = 8


class BacklogMeter:
    """The Event Hubs source's backlog, trigger after trigger (one per query run, on the driver).

    ``lookup({partition: sequence number})`` answers the enqueued time of those events (the hub's
    receivers: ``HubMetadata.enqueued_times``). An event's time is known without it when the event
    was a partition's newest at an earlier trigger (the partition ranges carry the newest event's
    time), which covers a stream that keeps up. Otherwise at most :data:`MAX_LOOKUPS_PER_TRIGGER`
    partitions are looked up per trigger, those waiting longest first (then the most behind), so a
    hub of many lagging partitions costs one wave of receivers per trigger; the others' seconds
    are None until their turn.
    """

    def __init__(
        self,
        lookup: Callable[[dict[str, int]], Mapping[str, datetime.datetime]],
        max_lookups: int = MAX_LOOKUPS_PER_TRIGGER,
    ) -> None:
        self.lookup = lookup
        self.max_lookups = max_lookups
        self.known: dict[str, dict[int, datetime.datetime]] = {}
        self._turn = 0
        self._looked_up: dict[str, int] = {}

    def measure(self, end: Mapping[str, int], bounds: Mapping[str, Any]) -> dict[str, Any]:
        """The report for a batch ending at ``end`` (``bounds``: each partition's
        ``PartitionBounds``: ``earliest``, ``latest``, ``last_enqueued_time``)."""
        self._turn += 1
        for pid, b in bounds.items():
            if b.last_enqueued_time is not None and b.latest > b.earliest:
                self.known.setdefault(pid, {})[b.latest - 1] = b.last_enqueued_time
        # The last event each behind partition's batch reads (the first unread one when none was read).
        last_read = {
            pid: max(seq - 1, bounds[pid].earliest)
            for pid, seq in end.items()
            if pid in bounds and bounds[pid].latest > seq
        }
        wanted = [pid for pid, seq in last_read.items() if seq not in self.known.get(pid, {})]
        wanted.sort(key=lambda pid: (self._looked_up.get(pid, 0), end[pid] - bounds[pid].latest))
        chosen = {pid: last_read[pid] for pid in wanted[: self.max_lookups]}
        if chosen:
            for pid in chosen:
                self._looked_up[pid] = self._turn
            try:
                for pid, when in self.lookup(chosen).items():
                    self.known.setdefault(pid, {})[chosen[pid]] = when
            except Exception as exc:  # a report: planning goes on without these seconds
                log.warning("backlog seconds not measured: %s", exc)
        partitions = {}
        for pid, seq in end.items():
            if pid in bounds:
                b = bounds[pid]
                read = self.known.get(pid, {}).get(last_read[pid]) if pid in last_read else None
                partitions[pid] = partition_backlog(seq, b.latest, b.last_enqueued_time, read)
        self._forget(end, last_read)
        return backlog_report(partitions)

    def _forget(self, end: Mapping[str, int], last_read: Mapping[str, int]) -> None:
        """Drop positions before the read one (never needed again) and all but the newest few."""
        for pid, known in self.known.items():
            floor = last_read.get(pid, end.get(pid, 0) - 1)
            for seq in sorted(known)[:-KNOWN_TIMES_PER_PARTITION] + [s for s in known if s < floor]:
                known.pop(seq, None)
