"""What a failed run's exit code means for Airflow: worth a retry or not, and what to tell the user.

A job's entry script exits with one of the codes of :mod:`hubflow.status.exit_codes` (spark-submit
in client mode exits with the Python driver's code). A retry resumes an availableNow run from its
checkpoint, or replaces a backfill's interval again, so it never does committed work twice; it is
worth it when the cause may be gone by then (a failed batch, a lease not yet free, a killed
process), and not when it will certainly come back: an invalid config, an on-call hold, a kill
request. Operators turn the verdict into ``AirflowFailException`` (never retried) or an ordinary
exception (retried). No Airflow import here.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Any

from hubflow.status.exit_codes import (
    EXIT_CONFIG_ERROR,
    EXIT_FAILED,
    EXIT_HELD,
    EXIT_KILLED,
    EXIT_LEASE_LOST,
    EXIT_LOCKED,
    EXIT_OK,
)


@dataclass(frozen=True)
class FailedRun:
    """The verdict on a failed run: retry it or not, and the message for the task's log."""

    retry: bool
    message: str


def run_outcome(status: dict[str, Any] | None, started_before: Any) -> str | None:
    """The one-line reason a run wrote to status.json (``outcome``), or None when ``status`` is
    still the document of an earlier run (its ``started_at`` is ``started_before``, read before
    this run was submitted) or the run ended before writing one (a refused config, a held job)."""
    if not status or status.get("started_at") == started_before:
        return None
    outcome = status.get("outcome")
    return outcome if isinstance(outcome, str) and outcome else None


def judge_failed_run(
    job: str, returncode: int | None, *, backfill: bool = False, reason: str | None = None
) -> FailedRun:
    """The verdict on a run of ``job`` that failed with spark-submit's ``returncode``.

    ``returncode`` is ``None`` when no process exit is known, negative when spark-submit was ended
    by that signal (as :mod:`subprocess` reports it), ``128 + n`` when a shell or the JVM reports a
    signal. ``backfill`` says the run replaces a data interval instead of resuming a checkpoint.
    ``reason`` is the run's own one-line reason (:func:`run_outcome`), told when known.
    """
    run = f"backfill run of job {job}" if backfill else f"run of job {job}"
    again = (
        "a retry replaces the interval's rows again, never adding to them"
        if backfill
        else "a retry resumes from the checkpoint: committed batches are not run again"
    )
    if returncode == EXIT_CONFIG_ERROR:
        what = "config or backfill window" if backfill else "config"
        return FailedRun(
            False,
            f"the {run} refused its {what} (exit {returncode}), so nothing ran and a retry would fail the "
            f"same way: fix what the driver log above names (the job's YAML config, see docs/jobs.md), "
            "then clear this task",
        )
    if returncode == EXIT_HELD:
        return FailedRun(
            False,
            f"job {job} is held by on-call (exit {returncode}), so nothing ran and a retry would be refused "
            f"too: release it with its on-call DAG {job}__oncall (action start) when it may run again, "
            "then clear this task; the driver log above says who held it and why",
        )
    if returncode == EXIT_KILLED:
        return FailedRun(
            False,
            f"the {run} was killed on request (a KILL marker, exit {returncode}): someone wanted it stopped, "
            "so it is not retried; clear this task to run it again",
        )
    if returncode == EXIT_LOCKED:
        cause = (
            f"another instance of job {job} holds its lease (exit {returncode}), e.g. the driver of an "
            "earlier attempt that has not exited yet"
        )
        then = "if it keeps failing, see which instance holds the lease on the status page"
    elif returncode == EXIT_LEASE_LOST:
        cause = (
            f"the {run} lost its lease (exit {returncode}): another instance took it over, or the status "
            "folder could not be written for longer than lease_fence_after"
        )
        then = "if it keeps failing, check the status folder's storage"
    elif returncode == EXIT_FAILED:
        cause = f"the {run} failed (exit {returncode})"
        if reason:
            cause = f"{cause}: {reason}"
            then = "the driver log above has the details"
        else:
            then = "the reason is the last line the job logged (hubflow_jobs) in the driver log above"
    elif returncode is None:
        cause = f"spark-submit of the {run} did not report an exit code"
        then = "see the log above"
    elif returncode == EXIT_OK:
        cause = f"spark-submit of the {run} exited 0 but the Spark provider reported a failure"
        then = "see the log above"
    elif returncode < 0 or returncode > 128:
        number = -returncode if returncode < 0 else returncode - 128
        cause = f"spark-submit of the {run} was ended by signal {_signal_name(number)} (exit {returncode})"
        then = "a killed task, a lost machine or the kernel's out-of-memory killer end a run this way"
    else:
        cause = f"spark-submit of the {run} failed with exit {returncode} (not one of the job's own codes)"
        then = "Spark itself failed before or after the job's code; see the log above"
    return FailedRun(True, f"{cause}; {again}; {then}")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)
