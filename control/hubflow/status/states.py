"""The states of a job: every value of ``state`` in status.json, and which of them are live."""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class JobState(StrEnum):
    """Every value of ``state``: the job writes the first six in status.json; ``held`` is derived."""

    STARTING = "starting"
    RUNNING = "running"
    IDLE = "idle"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"
    #: Stopped by on-call and kept stopped by the ``HOLD`` marker; shown by supervisors, never
    #: written by the job.
    HELD = "held"

    @property
    def live(self) -> bool:
        """Whether the job's process is (or should be) running in this state."""
        return self in LIVE_STATES

    @property
    def rank(self) -> int:
        """States only move forward: running/idle (0) -> stopping (1) -> stopped/failed (2)."""
        return _RANK[self]


LIVE_STATES = frozenset({JobState.STARTING, JobState.RUNNING, JobState.IDLE, JobState.STOPPING})
#: Live states in which a quiet checkpoint means "no input", not "stuck".
WORKING_STATES = frozenset({JobState.STARTING, JobState.RUNNING, JobState.IDLE})
_RANK = {
    JobState.STARTING: 0,
    JobState.RUNNING: 0,
    JobState.IDLE: 0,
    JobState.STOPPING: 1,
    JobState.STOPPED: 2,
    JobState.FAILED: 2,
    JobState.HELD: 2,
}


def parse_state(value: Any) -> JobState | None:
    """The :class:`JobState` named ``value``, or None for anything else."""
    try:
        return JobState(str(value))
    except ValueError:
        return None
