"""status.json's ``data_loss``: events a run skipped because they expired unread.

The driver's listener (:mod:`hubflow_jobs.runtime.listener`) writes it, per source and partition,
for the current run, from the connector's report under ``failOnDataLoss=false``:
``{source: {partition: {"events": n, "lastLostRange": [from, until]}}}``. The status page shows it
and the supervisor's alerts count it; both read it here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hubflow.redaction import redact


def data_loss_lines(data_loss: Any) -> list[str] | None:
    """status.json's ``data_loss`` (written by ``hubflow_jobs.runtime.listener``) as sentences, or None.

    One line per source and partition: how many events expired unread in this run and the last
    lost range of sequence numbers.
    """
    if not isinstance(data_loss, dict) or not data_loss:
        return None
    lines = []
    for source, partitions in data_loss.items():
        if not isinstance(partitions, dict):
            continue
        for partition, loss in partitions.items():
            loss = loss if isinstance(loss, dict) else {}
            lost_range = loss.get("lastLostRange") or ["?", "?"]
            lines.append(
                redact(
                    f"{source} partition {partition}: {loss.get('events', '?')} events expired before "
                    f"they were read (last lost sequence numbers [{lost_range[0]}, {lost_range[-1]}))"
                )
            )
    return lines or None


def lost_events(data_loss: Any) -> int:
    """How many events status.json's ``data_loss`` (``{source: {partition: {"events": n}}}``) counts."""
    if not isinstance(data_loss, Mapping):
        return 0
    total = 0
    for partitions in data_loss.values():
        for loss in (partitions or {}).values() if isinstance(partitions, Mapping) else ():
            events = loss.get("events") if isinstance(loss, Mapping) else None
            total += events if isinstance(events, int) and events > 0 else 0
    return total
