"""A job's backlog as lines of text: what the status page and ``hubflow status`` print.

One line per source that reports its backlog (``hubflow.progress.history.progress_backlogs``): its
count (events, files or versions behind, by the metric it reports) and seconds behind, then the
partitions that are behind, most behind first.
"""

from __future__ import annotations

from typing import Any

from pyspark_eventhubs.backlog import COUNT_METRICS, BacklogMetric

#: Partitions named per line (the most behind); the rest are counted.
PARTITIONS_SHOWN = 8
#: What each count metric counts, for the text.
UNITS = {BacklogMetric.EVENTS: "events", BacklogMetric.FILES: "files", BacklogMetric.VERSIONS: "versions"}


def amount_text(report: dict[str, Any]) -> str:
    """``"30 events, 1.2 s behind"`` (``"? s"`` when the seconds are not known)."""
    parts = []
    for metric in COUNT_METRICS:
        if isinstance(report.get(metric.value), int):
            parts.append(f"{report[metric.value]} {UNITS[metric]}")
            break
    seconds = report.get(BacklogMetric.SECONDS.value)
    parts.append(f"{seconds:.1f} s behind" if isinstance(seconds, int | float) else "? s behind")
    return ", ".join(parts)


def backlog_lines(backlogs: list[dict[str, Any]]) -> list[str]:
    """One line per source: ``"<source>: 30 events, 1.2 s behind (partition 0: 20 events, ...)"``."""
    lines = []
    for report in backlogs:
        line = f"{report.get('source')}: {amount_text(report)}"
        partitions = report.get(BacklogMetric.PARTITIONS.value) or {}
        behind = [
            (pid, part)
            for pid, part in partitions.items()
            if isinstance(part, dict) and (part.get(BacklogMetric.EVENTS.value) or 0) > 0
        ]
        behind.sort(key=lambda item: -(item[1].get(BacklogMetric.EVENTS.value) or 0))
        if behind:
            named = behind[:PARTITIONS_SHOWN]
            shown = "; ".join(f"partition {pid}: {amount_text(part)}" for pid, part in named)
            more = len(behind) - PARTITIONS_SHOWN
            line += f" ({shown}{f'; {more} more partitions behind' if more > 0 else ''})"
        lines.append(line)
    return lines
