"""Whether a job's process runs, as the status folder tells it: a marker of on-call or a supervisor,
and the :class:`Liveness` a supervisor judges from status.json."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from hubflow.status.states import JobState


def pid_alive(pid: int) -> bool:
    """Whether a process with ``pid`` runs on this host (a zombie, exited but not reaped, does not).

    Only for a pid this process knows itself (its child, its parent); a pid read from a document
    is judged by :func:`hubflow.status.process_identity.is_running` (pid reuse, other containers).
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc (not Linux): existence is all we can tell


@dataclass(frozen=True)
class Marker:
    """A ``STOP``, ``KILL`` or ``HOLD`` request: who asked, when, why, and for which lease holder;
    a hold also says its kind (:class:`hubflow.status.holds.HoldKind`; None: not a hold)."""

    at: str | None = None
    by: str | None = None
    reason: str | None = None
    target: str | None = None
    kind: str | None = None

    def describe(self) -> str:
        """``by <who> at <when>: <why>`` with the parts that are known."""
        parts = []
        if self.by:
            parts.append(f"by {self.by}")
        if self.at:
            parts.append(f"at {self.at}")
        text = " ".join(parts) or "(no details)"
        return f"{text}: {self.reason}" if self.reason else text

    def to_dict(self) -> dict[str, Any]:
        fields = {"at": self.at, "by": self.by, "reason": self.reason, "target": self.target}
        return fields if self.kind is None else {**fields, "kind": self.kind}


@dataclass(frozen=True)
class Liveness:
    """What the status folder says about the job's process right now."""

    alive: bool
    reason: str
    state: JobState | None = None
    pid: int | None = None
    host: str | None = None
    heartbeat_age_seconds: float | None = None
    hold: Marker | None = None
    #: Whether the driver runs here, verified by pid and start time (so it may be signalled);
    #: False: it ran in this process space and has exited; None: it cannot be judged from here.
    running_here: bool | None = None

    @property
    def shown_state(self) -> JobState | None:
        """The state to show: ``held`` for a job kept stopped by on-call, else status.json's."""
        if self.hold is not None and not self.alive:
            return JobState.HELD
        return self.state
