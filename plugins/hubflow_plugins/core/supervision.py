"""What a supervisor or on-call action does to a streaming job, decided from what was found. Airflow-free.

:func:`decide` is a pure function: the action (``ensure_running``, ``start``, ``stop``, ``restart``),
whether the job is alive, whether on-call holds it, and how often the supervisor restarted it in
the last hour give the steps, in order. The streaming operator reads its parameters, calls it,
carries out the steps with :class:`~hubflow_plugins.core.job_control.JobControl` and reports;
``rewind`` has its own sequence (:mod:`hubflow_plugins.core.rewind`).

The rules:

* ``ensure_running`` (the supervisor): a held job is reported and not started; a live job is left
  alone; a dead one is started from its checkpoint, unless the supervisor already restarted it
  ``max_restarts_per_hour`` times in the last hour: a restart loop needs a person, so the run
  fails (:attr:`Decision.refusal`). Only these restarts count towards that limit.
* ``stop``: hold the job first (so no supervisor run starts it meanwhile), then stop it if alive.
* ``start``: release a hold, then start the job unless it runs.
* ``restart``: release a hold, stop the job if alive, start it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

#: The actions of the streaming operator (``rewind`` is decided by :mod:`.rewind`).
STREAMING_ACTIONS = ("ensure_running", "start", "stop", "restart", "rewind")


class Step(StrEnum):
    """One thing the operator does, in a decision's order."""

    REPORT_HOLD = "report-hold"  # say the job is held and by whom; start nothing
    PLACE_HOLD = "place-hold"
    RELEASE_HOLD = "release-hold"
    STOP = "stop"
    NOTHING_TO_STOP = "nothing-to-stop"
    ALREADY_RUNNING = "already-running"
    START = "start"


@dataclass(frozen=True)
class Decision:
    """The steps for one action, or why the action must not be done (``refusal``, no steps).

    ``count_restart``: a ``START`` step counts towards the restart-loop limit (the supervisor's own
    restarts do; an on-call start is the deliberate action that limit's message asks for).
    """

    steps: tuple[Step, ...]
    count_restart: bool = False
    refusal: str | None = None


def decide(
    action: str,
    *,
    alive: bool,
    held: bool,
    recent_restarts: int,
    max_restarts_per_hour: int,
) -> Decision:
    """The steps of ``action`` for a job found ``alive`` (or not) and ``held`` (or not).

    Raises ValueError for ``rewind`` and unknown actions (the operator names the valid ones).
    """
    if action == "ensure_running":
        if held:
            return Decision((Step.REPORT_HOLD,))
        if alive:
            return Decision((Step.ALREADY_RUNNING,))
        if recent_restarts >= max_restarts_per_hour:
            return Decision(
                (),
                refusal=(
                    f"restart-looping: restarted {recent_restarts} times in the last hour "
                    f"(limit {max_restarts_per_hour})"
                ),
            )
        return Decision((Step.START,), count_restart=True)
    release = (Step.RELEASE_HOLD,) if held else ()
    if action == "stop":
        return Decision((Step.PLACE_HOLD, Step.STOP if alive else Step.NOTHING_TO_STOP))
    if action == "start":
        return Decision((*release, Step.ALREADY_RUNNING if alive else Step.START))
    if action == "restart":
        return Decision((*release, *((Step.STOP,) if alive else ()), Step.START))
    raise ValueError(f"no decision for action {action!r}: one of {STREAMING_ACTIONS[:-1]}")
