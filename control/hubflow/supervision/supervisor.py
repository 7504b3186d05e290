"""What a supervisor or on-call action does to a streaming job, decided from what was found. Airflow-free.

:func:`decide` is a pure function: the action (``ensure_running``, ``start``, ``stop``, ``restart``),
whether the job is alive, whether on-call holds it, the supervisor's own restart times, the time now,
the job's :class:`RestartPolicy` and the fingerprints of what the job was started with and of what it
would run now give the steps, in order. The streaming operator reads its parameters, calls it,
carries out the steps with :class:`~hubflow.operations.job_control.JobControl` and reports;
``rewind`` has its own sequence (:mod:`hubflow.operations.rewind`). :func:`job_fingerprint` (not
pure: it reads files) says what a job runs.

The rules:

* ``ensure_running`` (the supervisor): a held job is reported and not started.
* A live job is left alone, unless what it runs changed since it was started (its config file, or
  for a ``module:function`` pipeline the module's source): then it is stopped gracefully and started
  again, once per change. A live job with no recorded fingerprint (started before fingerprints were
  kept, or by hand) is not restarted: the current fingerprint is adopted.
* A dead job is started from its checkpoint with an exponential backoff, like a continuous job:
  the supervisor's own restarts since the job last ran healthy (``healthy_after`` after a restart
  without dying) form a *streak* of ``n``; the next start is due ``restart_backoff * 2^(n-1)``
  (at most ``max_restart_backoff``) after the streak's last restart. A run before that starts
  nothing and says when the next start is due. The first death after a healthy run starts at once.
* The backoff at its ceiling is a restart loop (:attr:`Decision.restart_loop`, the alert's
  ``restart-loop``): the supervisor keeps restarting, and says so until the job runs healthy.
* ``quarantine_after`` (optional, unset by default): a dead job whose streak has that many restarts
  is not started again but held with a ``quarantine`` hold (:attr:`Step.QUARANTINE`): only a
  person releases it (on-call with force and a reason). A changed fingerprint (a fix deployed)
  is still started at once.
* ``max_restarts_per_hour`` (optional, unset by default): when set, a dead job the supervisor
  already restarted that often in the last hour is refused (:attr:`Decision.refusal`: the run
  fails, a person must start it).
* A dead job whose fingerprint changed (a fix was deployed) is started at once, backoff reset.
* Unless that fingerprint is a version whose upgrade failed (refused, or rolled back): the
  supervisor keeps the version last started, which is no change, so its deaths follow the backoff
  and count towards ``quarantine_after`` like any job's (Flink's operator: a rolled-back job is
  redeployed once, then its failures follow the normal restart strategy).
* Only the supervisor's restarts of a dead job count towards the backoff and the hourly limit;
  any other start (on-call, a restart for a changed config) resets the backoff.
* ``stop``: hold the job first (so no supervisor run starts it meanwhile), then stop it if alive.
* ``start``: release a hold, then start the job unless it runs.
* ``restart``: release a hold, stop the job if alive, start it.
* Which hold ``start`` and ``restart`` may release (a ``stop`` hold; another kind only with
  ``force``) is the rule of :mod:`hubflow.status.holds`, applied when the step is carried out.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any

#: The actions a person may ask for, in the on-call form's order (``restart`` is its default).
ONCALL_ACTIONS = ("restart", "stop", "start", "rewind")
#: The actions of the streaming operator: the supervisor's and on-call's (``rewind`` is decided by
#: :mod:`hubflow.operations.rewind`).
STREAMING_ACTIONS = ("ensure_running", "start", "stop", "restart", "rewind")
#: The window of ``max_restarts_per_hour``.
HOUR_SECONDS = 3600.0


class Step(StrEnum):
    """One thing the operator does, in a decision's order."""

    REPORT_HOLD = "report-hold"  # say the job is held and by whom; start nothing
    PLACE_HOLD = "place-hold"
    RELEASE_HOLD = "release-hold"
    STOP = "stop"
    NOTHING_TO_STOP = "nothing-to-stop"
    ALREADY_RUNNING = "already-running"
    WAIT_BACKOFF = "wait-backoff"  # a dead job's next start is not due yet; start nothing
    QUARANTINE = "quarantine"  # a crash loop: hold the job (kind quarantine) for a person to decide
    START = "start"


@dataclass(frozen=True)
class RestartPolicy:
    """How the supervisor restarts a dead job (the registry's keys, in seconds)."""

    backoff_seconds: float = 30.0
    max_backoff_seconds: float = 1800.0
    healthy_after_seconds: float = 600.0
    max_restarts_per_hour: int | None = None
    #: Hold a dead job with a quarantine hold once its streak has this many restarts (None: never).
    quarantine_after: int | None = None

    def pause_after(self, restarts: int) -> float:
        """The pause after the ``restarts``-th restart of a streak (0 before the first)."""
        if restarts <= 0:
            return 0.0
        return min(self.backoff_seconds * 2.0 ** min(restarts - 1, 64), self.max_backoff_seconds)

    def at_ceiling(self, restarts: int) -> bool:
        """Whether the pause after ``restarts`` restarts has reached ``max_backoff_seconds``."""
        return (
            restarts > 0 and self.backoff_seconds * 2.0 ** min(restarts - 1, 64) >= self.max_backoff_seconds
        )


@dataclass(frozen=True)
class Decision:
    """The steps for one action, or why the action must not be done (``refusal``, no steps).

    ``count_restart``: a ``START`` step is the supervisor's restart of a dead job (restarts.json:
    the backoff and the hourly limit count it; any other start resets the backoff).
    ``reset_backoff``: record now as the backoff's reset (the job ran healthy, or a changed
    fingerprint is started at once). ``adopt_fingerprint``: record the current fingerprint without a
    restart. ``next_start_at``: with ``WAIT_BACKOFF``, when the next start is due.
    ``restart_loop``: the restart loop the findings report (``""``: none; None: not judged).
    ``note``: what the run says besides its steps.
    """

    steps: tuple[Step, ...]
    count_restart: bool = False
    refusal: str | None = None
    reset_backoff: bool = False
    adopt_fingerprint: bool = False
    next_start_at: datetime | None = None
    restart_loop: str | None = None
    note: str | None = None


def human_duration(seconds: float) -> str:
    """``90`` -> ``"1 min 30 s"``, for messages."""
    total = round(seconds)
    if total < 60:
        return f"{max(total, 0)} s"
    parts = []
    for unit, size in (("h", 3600), ("min", 60), ("s", 1)):
        amount, total = divmod(total, size)
        if amount:
            parts.append(f"{amount} {unit}")
    return " ".join(parts)


def backoff_streak(
    restarts: Sequence[datetime],
    *,
    now: datetime,
    policy: RestartPolicy,
    alive: bool,
    backoff_reset_at: datetime | None = None,
    last_alive_at: datetime | None = None,
) -> tuple[list[datetime], bool]:
    """The restarts of the current streak (oldest first), and whether the job ran healthy since its
    last one (then the streak is over: ``[]``, ``True``).

    The streak is the supervisor's restarts after ``backoff_reset_at``. The job ran healthy when it
    lived ``healthy_after`` past the streak's last restart: until ``now`` when alive, until its last
    heartbeat (``last_alive_at``) when dead.
    """
    streak = sorted(t for t in restarts if backoff_reset_at is None or t > backoff_reset_at)
    if not streak:
        return [], False
    lived_until = now if alive else last_alive_at
    if lived_until is not None and (lived_until - streak[-1]).total_seconds() >= policy.healthy_after_seconds:
        return [], True
    return streak, False


def backoff_view(
    restarts: Sequence[datetime],
    *,
    now: datetime,
    policy: RestartPolicy,
    alive: bool,
    backoff_reset_at: datetime | None = None,
    last_alive_at: datetime | None = None,
) -> dict[str, Any] | None:
    """The restart backoff as the status page shows it, or None outside a streak.

    The same streak and pause as :func:`decide` (``restarts``: the supervisor's, restarts.json):
    ``{"restarts", "since", "last_restart", "pause_seconds", "next_start_at", "at_ceiling", "text"}``;
    ``next_start_at`` only for a dead job (a live one waits out ``healthy_after`` instead).
    """
    streak, _ = backoff_streak(
        restarts,
        now=now,
        policy=policy,
        alive=alive,
        backoff_reset_at=backoff_reset_at,
        last_alive_at=last_alive_at,
    )
    if not streak:
        return None
    n, pause = len(streak), policy.pause_after(len(streak))
    due = streak[-1] + timedelta(seconds=pause)
    text = (
        f"Restarted by its supervisor {n} time{'s' if n > 1 else ''} since "
        f"{streak[0].isoformat(timespec='seconds')} without running "
        f"{human_duration(policy.healthy_after_seconds)}."
    )
    if alive:
        text += " The backoff resets once this run lasts that long."
    elif now < due:
        due_at = due.isoformat(timespec="seconds")
        text += f" Next start due at {due_at} (a pause of {human_duration(pause)})."
    else:
        text += " The next supervisor run starts it."
    if policy.at_ceiling(n):
        ceiling = human_duration(policy.max_backoff_seconds)
        text += f" The pause is at its ceiling of {ceiling}: a restart loop."
    return {
        "restarts": n,
        "since": streak[0].isoformat(),
        "last_restart": streak[-1].isoformat(),
        "pause_seconds": pause,
        "next_start_at": None if alive else due.isoformat(),
        "at_ceiling": policy.at_ceiling(n),
        "text": text,
    }


def decide(
    action: str,
    *,
    alive: bool,
    held: bool,
    now: datetime,
    restarts: Sequence[datetime] = (),
    policy: RestartPolicy = RestartPolicy(),
    backoff_reset_at: datetime | None = None,
    last_alive_at: datetime | None = None,
    started_fingerprint: str | None = None,
    fingerprint: str | None = None,
    fingerprint_failed_upgrade: bool = False,
) -> Decision:
    """The steps of ``action`` for a job found ``alive`` (or not) and ``held`` (or not).

    ``restarts``: the supervisor's restarts (restarts.json); ``started_fingerprint``: what the job
    was last started with (None: not recorded); ``fingerprint``: what it would run now (None: not
    known, no config-change rule); ``fingerprint_failed_upgrade``: that version's upgrade failed, so
    the supervisor keeps the one last started (no config-change rule either). Raises ValueError for
    ``rewind`` and unknown actions.
    """
    if action == "ensure_running":
        return _ensure_running(
            alive=alive,
            held=held,
            now=now,
            restarts=restarts,
            policy=policy,
            backoff_reset_at=backoff_reset_at,
            last_alive_at=last_alive_at,
            started_fingerprint=started_fingerprint,
            fingerprint=None if fingerprint_failed_upgrade else fingerprint,
        )
    release = (Step.RELEASE_HOLD,) if held else ()
    if action == "stop":
        return Decision((Step.PLACE_HOLD, Step.STOP if alive else Step.NOTHING_TO_STOP))
    if action == "start":
        return Decision((*release, Step.ALREADY_RUNNING if alive else Step.START))
    if action == "restart":
        return Decision((*release, *((Step.STOP,) if alive else ()), Step.START))
    raise ValueError(f"no decision for action {action!r}: one of {STREAMING_ACTIONS[:-1]}")


def _ensure_running(
    *,
    alive: bool,
    held: bool,
    now: datetime,
    restarts: Sequence[datetime],
    policy: RestartPolicy,
    backoff_reset_at: datetime | None,
    last_alive_at: datetime | None,
    started_fingerprint: str | None,
    fingerprint: str | None,
) -> Decision:
    if held:
        return Decision((Step.REPORT_HOLD,), restart_loop="")
    streak, healthy = backoff_streak(
        restarts,
        now=now,
        policy=policy,
        alive=alive,
        backoff_reset_at=backoff_reset_at,
        last_alive_at=last_alive_at,
    )
    n = len(streak)
    loop = ""
    if policy.at_ceiling(n):
        loop = (
            f"restart-looping: restarted {n} times since {streak[0].isoformat(timespec='seconds')} "
            f"without running {human_duration(policy.healthy_after_seconds)}; the pause between "
            f"restarts is at its ceiling of {human_duration(policy.max_backoff_seconds)}"
        )
    changed = (
        fingerprint is not None and started_fingerprint is not None and fingerprint != started_fingerprint
    )
    if alive:
        if changed:
            return Decision(
                (Step.STOP, Step.START),
                reset_backoff=True,
                restart_loop="",
                note=(
                    f"what the job runs changed since it was started (fingerprint {started_fingerprint[:12]} "
                    f"-> {fingerprint[:12]}): restarting it gracefully"
                ),
            )
        return Decision(
            (Step.ALREADY_RUNNING,),
            reset_backoff=healthy,
            adopt_fingerprint=started_fingerprint is None and fingerprint is not None,
            restart_loop=loop,
        )
    limit = policy.max_restarts_per_hour
    if limit is not None:
        recent = sum(1 for t in restarts if 0 <= (now - t).total_seconds() <= HOUR_SECONDS)
        if recent >= limit:
            refusal = f"restart-looping: restarted {recent} times in the last hour (limit {limit})"
            return Decision((), refusal=refusal, restart_loop=refusal)
    if changed:
        return Decision(
            (Step.START,),
            count_restart=True,
            reset_backoff=True,
            restart_loop="",
            note=(
                f"what the job runs changed since its last start (fingerprint {started_fingerprint[:12]} "
                f"-> {fingerprint[:12]}): starting it without waiting for the backoff"
            ),
        )
    quarantine = policy.quarantine_after
    if quarantine is not None and n >= quarantine:
        text = (
            f"crash-looping: restarted {n} times since {streak[0].isoformat(timespec='seconds')} "
            f"without running {human_duration(policy.healthy_after_seconds)} (quarantine_after: "
            f"{quarantine}); quarantined until a person decides"
        )
        return Decision((Step.QUARANTINE,), restart_loop=text, note=text)
    if n == 0:
        return Decision((Step.START,), count_restart=True, reset_backoff=healthy, restart_loop=loop)
    pause = policy.pause_after(n)
    due = streak[-1] + timedelta(seconds=pause)
    said = (
        f"restarted {n} time{'s' if n > 1 else ''} since {streak[0].isoformat(timespec='seconds')} "
        f"without running {human_duration(policy.healthy_after_seconds)}; the pause after the last "
        f"restart ({streak[-1].isoformat(timespec='seconds')}) is {human_duration(pause)}"
    )
    if now < due:
        return Decision(
            (Step.WAIT_BACKOFF,),
            next_start_at=due,
            restart_loop=loop,
            note=(
                f"{said}: the next start is due at {due.isoformat(timespec='seconds')} "
                f"(in {human_duration((due - now).total_seconds())})"
            ),
        )
    return Decision((Step.START,), count_restart=True, restart_loop=loop, note=f"{said}: starting it again")


# What a job runs --------------------------------------------------------------------------------


def job_fingerprint(config_path: Path, application: str, pipelines_dir: Path | None = None) -> dict[str, Any]:
    """What a job runs, as ``{"digest", "config", "module"?}``: the SHA-256 of its config file and,
    for a ``module:function`` pipeline, of the module's source (found as ``jobs/pipeline.py`` finds
    it: the pipelines folder first, then the installed packages; not imported). ``digest`` covers
    them all and the application. An unreadable file counts as ``"missing"``.
    """
    parts: dict[str, Any] = {"application": application, "config": _file_digest(config_path)}
    if ":" in application:
        module = application.split(":", 1)[0]
        source = _module_source(module, pipelines_dir)
        parts["module"] = {
            "name": module,
            "path": str(source) if source else None,
            "sha256": _file_digest(source) if source else "missing",
        }
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()
    return {"digest": digest, **parts}


def _file_digest(path: Path) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return "missing"


def _module_source(module: str, pipelines_dir: Path | None) -> Path | None:
    import importlib.util

    from hubflow.repository import pipelines_folder

    folder = pipelines_dir or pipelines_folder()
    relative = Path(*module.split("."))
    for candidate in (folder / relative.with_suffix(".py"), folder / relative / "__init__.py"):
        if candidate.is_file():
            return candidate
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    origin = getattr(spec, "origin", None)
    return Path(origin) if origin and Path(origin).is_file() else None
