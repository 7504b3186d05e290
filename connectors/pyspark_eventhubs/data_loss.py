"""Data loss decided on the driver: a planned start below a partition's earliest retained event.

As in Spark's Kafka source, the driver compares where each partition's next micro-batch starts
with the earliest event the hub still retains. Below it, the events in between expired
(retention) before the query read them:

* ``failOnDataLoss=true`` (default): planning fails with :class:`EventHubsDataLossError`, naming
  every partition and its lost range; nothing is committed, so fixing the cause (or choosing
  ``false``) and restarting resumes from the same checkpoint.
* ``failOnDataLoss=false``: a warning is logged, the start moves up to the earliest event — so a
  partition whose unread events all expired goes on at once instead of waiting for events that
  will never come — and the loss is recorded for the query's progress: Python sources have no
  custom metrics, so :meth:`DataLossLedger.report` rides along in ``reportLatestOffset`` (Spark's
  ``sources[].latestOffset``) under :data:`DATA_LOSS_KEY`, a key no event hub name can take.

Events that expire between planning and reading are caught by the executor
(``receiver_cache.read_range``) with the same rule; those are logged by the executor only.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import EventHubsDataLossError
from .options import EventHubsOptions

log = logging.getLogger(__name__)

#: Key of the data-loss report in ``reportLatestOffset``; event hub names cannot contain ``$``.
DATA_LOSS_KEY = "$dataLoss"


@dataclass
class PartitionLoss:
    """What one partition lost in this query run."""

    events: int = 0
    last_from: int = 0
    last_until: int = 0


class DataLossLedger:
    """Decides and records data loss for one query run (lives in the driver's reader)."""

    def __init__(self, options: EventHubsOptions) -> None:
        self.options = options
        self.losses: dict[str, PartitionLoss] = {}
        self._seen: set[tuple[str, int]] = set()

    def clamp(
        self, start: Mapping[str, int], earliest: Mapping[str, int], end: Mapping[str, int] | None = None
    ) -> dict[str, int]:
        """``start`` with every partition moved up to its earliest retained event.

        A move is data loss of ``[start, earliest)`` (cut at ``end`` when given: a batch planned
        earlier whose range expired since). With ``failOnDataLoss=true`` it raises instead.
        """
        lost = {
            pid: (seq, earliest[pid] if end is None else min(earliest[pid], end.get(pid, earliest[pid])))
            for pid, seq in start.items()
            if pid in earliest and seq < earliest[pid]
        }
        lost = {pid: (lo, hi) for pid, (lo, hi) in lost.items() if hi > lo}
        if lost and self.options.fail_on_data_loss:
            ranges = ", ".join(
                f"partition {pid}: events with sequence numbers [{lo}, {hi})"
                for pid, (lo, hi) in lost.items()
            )
            raise EventHubsDataLossError(
                f"Event hub {self.options.description}: {ranges} expired before they were read "
                "(retention). Set failOnDataLoss=false to skip them and continue from the earliest "
                "available event."
            )
        for pid, (lo, hi) in lost.items():
            self._record(pid, lo, hi)
        return {pid: max(seq, earliest.get(pid, seq)) for pid, seq in start.items()}

    def _record(self, pid: str, lo: int, hi: int) -> None:
        if (pid, lo) in self._seen:  # the same start seen again (latestOffset, then partitions)
            return
        self._seen.add((pid, lo))
        loss = self.losses.setdefault(pid, PartitionLoss())
        loss.events += hi - lo
        loss.last_from, loss.last_until = lo, hi
        log.warning(
            "Event hub %s partition %s: events with sequence numbers [%d, %d) expired before they "
            "were read (retention); skipped (failOnDataLoss=false).",
            self.options.description,
            pid,
            lo,
            hi,
        )

    def report(self) -> dict[str, dict[str, object]] | None:
        """``{partition: {"events": n, "lastLostRange": [from, until]}}`` for this run, or None."""
        if not self.losses:
            return None
        return {
            pid: {"events": loss.events, "lastLostRange": [loss.last_from, loss.last_until]}
            for pid, loss in sorted(self.losses.items(), key=lambda item: (len(item[0]), item[0]))
        }
