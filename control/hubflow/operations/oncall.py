"""An action on a streaming job - the supervisor's ``ensure_running``, on-call ``start``, ``stop``,
``restart``, ``rewind`` - carried out whole: the one core the Airflow operator and ``hubflow oncall``
share. No Airflow import.

:func:`~hubflow.supervision.supervisor.decide` says what an action does; this module takes the
job's action lock (:mod:`hubflow.status.action_lock`: one action at a time; ``stop`` never waits
for it), reads the job, carries out the steps with
:class:`~hubflow.operations.job_control.JobControl`, runs a rewind with
:func:`~hubflow.operations.rewind.rewind_job`, and records every on-call action and every start
the supervisor makes in the audit trail (:mod:`hubflow.operations.audit`). What differs between
Airflow and the command line is passed in: how a driver is launched (:data:`Launcher`), how the
hub's positions are read for a rewind (:data:`HubReader`) and where lines are logged.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hubflow.operations.audit import AuditEntry, Source, append_audit, outcome
from hubflow.operations.job_control import JobControl, JobStartError, parse_time
from hubflow.registry import RegisteredJob
from hubflow.status.action_lock import ActionInProgress, ActionLock, action_in_progress, in_progress_text
from hubflow.status.holds import (
    HoldKeptError,
    HoldKind,
    held_text,
    kept_text,
    kind_of,
    may_release,
    takeover_text,
)
from hubflow.status.liveness import Liveness
from hubflow.supervision.supervisor import STREAMING_ACTIONS, Decision, Step, decide, job_fingerprint

#: Launch the job's driver detached, its output to the log path (and, when not None, copied to
#: that status folder URL); returns the spark-submit process.
Launcher = Callable[[Path, str | None], subprocess.Popen]
#: For a rewind: the hub's name, its next sequence number per partition and a connection string.
HubReader = Callable[[], tuple[str, dict[str, int], str]]
Log = Callable[..., None]
#: Holds a stop leaves in place (it replaces a ``stop`` or ``rewind`` hold with its own).
KEPT_BY_STOP = (HoldKind.UPGRADE, HoldKind.QUARANTINE)


class OnCallRefused(RuntimeError):
    """The action is refused before it changed anything, or cannot go on; the message says why and
    what to do. Running it again unchanged would be refused again."""


class ActionBusy(OnCallRefused):
    """Refused because another action holds the job's lock (:mod:`hubflow.status.action_lock`)."""


@dataclass(frozen=True)
class OnCallRequest:
    """One action on one job: what, by whom (``who``: for holds and markers; ``audit_by``: for the
    audit trail, when it differs), from where, and its options."""

    action: str
    who: str
    source: Source
    dry_run: bool = False
    reason: str | None = None
    force: bool = False
    rewind_to_enqueued_time: str | None = None
    rewind_to_sequence_numbers: str | None = None
    stop_wait: timedelta = timedelta(minutes=5)
    start_timeout: timedelta = timedelta(minutes=5)
    audit_by: str | None = None

    def __post_init__(self) -> None:
        if self.action not in STREAMING_ACTIONS:
            raise OnCallRefused(f"unknown action {self.action!r}; expected one of {STREAMING_ACTIONS}")
        if self.force and not (self.reason or "").strip():
            raise OnCallRefused(
                "force takes over a hold another action placed: give a reason too (it is recorded "
                "with the takeover)"
            )


@dataclass
class OnCall:
    """Carry out ``request`` on ``job``: :meth:`run`."""

    job: RegisteredJob
    request: OnCallRequest
    launch: Launcher
    log: Log
    warn: Log
    #: Reads the hub for a rewind (None: the job cannot rewind from here).
    hub: HubReader | None = None
    #: ``ensure_running`` only, before its steps (not in a dry run): the Airflow operator announces
    #: commits and judges alerts here; it gets the decision.
    before_supervising: Callable[[Decision], None] | None = None
    control: JobControl = field(init=False)

    def __post_init__(self) -> None:
        self.control = JobControl(
            self.job.name, self.job.paths.status_dir, heartbeat_timeout=self.job.heartbeat_timeout
        )

    # The whole action ------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Do the action (or, in a dry run, say what it would do); returns ``{"job", "action",
        "dry_run", "done": [lines]}``. Raises :class:`OnCallRefused` for a refusal, and anything
        else for a failure; either way the audit trail records it."""
        request = self.request
        live = self.control.liveness()
        self.log("found: %s", live.reason)
        audit = _AuditRecord(self, live)
        try:
            if request.action == "ensure_running":
                result = self._supervise(live, audit)
            elif request.action == "stop" or request.dry_run:
                result = self._act(live)
            else:
                result = self._locked(lambda fresh: self._act(fresh))
        except OnCallRefused as exc:
            audit.record("refused", str(exc))
            raise
        except Exception as exc:
            audit.record("failed", f"{type(exc).__name__}: {exc}")
            raise
        audit.record("done", "; ".join(str(line) for line in result.get("done") or []))
        return result

    def refuse(self, message: str) -> None:
        """Refuse the action before anything is read or done (a cleared Airflow run): recorded in
        the audit trail, then :class:`OnCallRefused`."""
        _AuditRecord(self, self.control.liveness()).record("refused", message)
        raise OnCallRefused(message)

    def _locked(self, act: Callable[[Liveness], dict[str, Any]]) -> dict[str, Any]:
        """Run ``act`` holding the job's action lock, on the job as found once the lock is ours."""
        request = self.request
        lock = ActionLock(self.control.folder, self.job.name, request.action, request.who, request.source)
        try:
            lock.acquire()
        except ActionInProgress as exc:
            raise ActionBusy(str(exc)) from None
        with lock.renewing():
            return act(self.control.liveness())

    def _act(self, live: Liveness) -> dict[str, Any]:
        request = self.request
        lines = []
        if request.action == "stop" or request.dry_run:  # the lock is not taken: say what holds it
            holder = action_in_progress(self.control.folder)
            if holder is not None:
                lines.append(
                    f"{in_progress_text(self.job.name, holder)}: "
                    + (
                        "a stop does not wait for it"
                        if request.action == "stop"
                        else "this action would be refused now"
                    )
                )
                self.warn("%s", lines[-1])
        if request.action == "rewind":
            result = self._rewind(live)
        else:
            fingerprint = self._fingerprint()
            result = self._carry_out_decision(self._decide(live, fingerprint), live, fingerprint)
        result["done"] = lines + list(result["done"])
        return result

    def _supervise(self, live: Liveness, audit: _AuditRecord) -> dict[str, Any]:
        """``ensure_running``: leave the job to an action in progress; else decide, and hold the
        lock while starting or restarting it."""
        holder = action_in_progress(self.control.folder)
        if holder is not None:
            return self._leave_to(holder)
        fingerprint = self._fingerprint()
        decision = self._decide(live, fingerprint)
        starts = Step.START in decision.steps and decision.refusal is None
        audit.wanted = starts or Step.QUARANTINE in decision.steps
        if not self.request.dry_run and self.before_supervising is not None:
            self.before_supervising(decision)
        if not starts or self.request.dry_run:
            return self._carry_out_decision(decision, live, fingerprint)
        lock = ActionLock(self.control.folder, self.job.name, "supervisor start", self.request.who, "airflow")
        try:
            lock.acquire()
        except ActionInProgress as exc:  # an on-call action began since it was read
            audit.wanted = False
            return self._leave_to(exc.holder)
        with lock.renewing():
            again = self.control.liveness()
            if (again.alive, again.hold) != (live.alive, live.hold):  # changed before the lock
                decision = self._decide(again, fingerprint)
                audit.wanted = Step.START in decision.steps and decision.refusal is None
            return self._carry_out_decision(decision, again, fingerprint)

    def _leave_to(self, holder: dict[str, Any]) -> dict[str, Any]:
        line = f"{in_progress_text(self.job.name, holder)}; the supervisor leaves the job to it this run"
        self.log("%s", line)
        return {
            "job": self.job.name,
            "action": self.request.action,
            "dry_run": self.request.dry_run,
            "done": [line],
        }

    # Deciding and carrying out ---------------------------------------------------------------

    def _fingerprint(self) -> dict:
        """What the job runs now: its config file and, for a pipeline, its module's source."""
        return job_fingerprint(self.job.config_path(), self.job.application)

    def _decide(self, live: Liveness, fingerprint: dict) -> Decision:
        """Read what ``decide`` needs from the status folder and call it."""
        action, control = self.request.action, self.control
        state = control.supervisor_state() if action == "ensure_running" else {}
        status = control.folder.status() or {}
        started = state.get("fingerprint")
        return decide(
            action,
            alive=live.alive,
            held=live.hold is not None,
            now=datetime.now(UTC),
            restarts=control.restart_times() if action == "ensure_running" else (),
            policy=self.job.restart_policy,
            backoff_reset_at=parse_time(state.get("backoff_reset_at")),
            last_alive_at=parse_time(status.get("heartbeat")),
            started_fingerprint=started.get("digest") if isinstance(started, dict) else None,
            fingerprint=fingerprint["digest"],
        )

    def _carry_out_decision(self, decision: Decision, live: Liveness, fingerprint: dict) -> dict[str, Any]:
        job, request, control = self.job, self.request, self.control
        base = {"job": job.name, "action": request.action, "dry_run": request.dry_run}
        if decision.refusal:
            raise OnCallRefused(
                f"job {job.name} is {decision.refusal}; last state: {live.reason}. Read its driver "
                f"log in {job.paths.status_dir}/driver.log, fix the cause, then start it from "
                f"{job.oncall_dag_id} (or hubflow oncall {job.name} start)."
            )
        if decision.steps == (Step.REPORT_HOLD,):
            return {**base, **self._report_hold(live)}
        if decision.restart_loop:
            self.warn("job %s is %s", job.name, decision.restart_loop)
        if not request.dry_run:
            if decision.reset_backoff:
                control.reset_backoff()
                self.log("job %s ran healthy or changed: its restart backoff starts again", job.name)
            if decision.adopt_fingerprint:
                control.adopt_fingerprint(fingerprint)
                self.log("job %s runs fingerprint %s (recorded now)", job.name, fingerprint["digest"][:12])
        if decision.steps == (Step.WAIT_BACKOFF,):
            line = f"job {job.name} is not running ({live.reason}); {decision.note}"
            self.log("%s", line)
            next_start = decision.next_start_at.isoformat() if decision.next_start_at else None
            return {**base, "next_start_at": next_start, "done": [line]}
        done: list[str] = []
        if decision.note:
            self.log("%s", decision.note)
            done.append(decision.note)
        for step in decision.steps:  # each said as it is done: a stop can take minutes
            if step == Step.QUARANTINE:
                done.append(self._quarantine(decision.note or "crash-looping"))
                continue
            done.append(self._carry_out(step, live, decision.count_restart, fingerprint))
            self.log("%s", done[-1])
        return {**base, "done": done}

    def _carry_out(self, step: Step, live: Liveness, count_restart: bool, fingerprint: dict) -> str:
        """Do one step of the decision (or say what it would do); return what was done."""
        job, request, control = self.job, self.request, self.control
        dry_run, who = request.dry_run, request.who
        if step == Step.PLACE_HOLD:
            if live.hold is not None and kind_of(live.hold) in KEPT_BY_STOP:
                # A stop must not turn a quarantine into a hold any start releases: the job is held
                # already, so the stop keeps that hold and only stops the driver.
                return (
                    f"{held_text(job.name, live.hold)}: the stop keeps that hold (a start needs force "
                    "with a reason to take it over)"
                )
            reason = request.reason or "on-call stop"
            replacing = f" (replacing: {held_text(job.name, live.hold)})" if live.hold is not None else ""
            if dry_run:
                return f"would hold job {job.name} ({who}: {reason}) and stop it{replacing}"
            hold = control.folder.place_hold(reason, by=who, kind=HoldKind.STOP)
            return (
                f"held job {job.name} {hold.describe()}; supervisors leave it stopped until start{replacing}"
            )
        if step == Step.RELEASE_HOLD:
            return self._release_stop_hold(live)
        if step == Step.STOP:
            if dry_run:
                return f"would stop job {job.name} (pid {live.pid} on {live.host})"
            return control.stop(request.stop_wait, log=self.log, requested_by=who)
        if step == Step.NOTHING_TO_STOP:
            return "nothing to stop"
        if step == Step.ALREADY_RUNNING:
            return "already running; nothing to do"
        if dry_run:
            return f"would start job {job.name} from checkpoint {job.paths.checkpoint_location}"
        return self.start(count_restart=count_restart, fingerprint=fingerprint)

    def _quarantine(self, why: str) -> str:
        """Hold a crash-looping job with a ``quarantine`` hold: only a person releases it."""
        job, request = self.job, self.request
        if request.dry_run:
            return f"would hold job {job.name} for a quarantine ({why})"
        hold = self.control.folder.place_hold(why, by=request.who, kind=HoldKind.QUARANTINE)
        line = (
            f"held job {job.name} {hold.describe()} for a quarantine: it is not restarted until a person "
            f"decides: {job.oncall_dag_id} start or restart with force and a reason, or rewind with force"
        )
        self.warn("%s", line)
        return line

    def _release_stop_hold(self, live: Liveness) -> str:
        """A start or restart releases the user's stop; another kind of hold only with force."""
        request, hold = self.request, live.hold
        if not may_release(hold, HoldKind.STOP, force=request.force):
            raise OnCallRefused(kept_text(self.job.name, hold, request.action))
        taking_over = not may_release(hold, HoldKind.STOP)
        if request.dry_run:
            if taking_over:
                return "would take over: " + takeover_text(hold, request.who, request.reason)
            return f"would release the hold {hold.describe()}"
        try:
            released = self.control.folder.release_hold(
                HoldKind.STOP,
                by=request.who,
                force=request.force,
                reason=request.reason,
                action=request.action,
            )
        except HoldKeptError as exc:  # replaced since it was read: that hold is judged
            raise OnCallRefused(str(exc)) from None
        if released is None:
            return "the hold was released meanwhile"
        if taking_over or released != hold:
            text = takeover_text(released, request.who, request.reason)
            self.warn("%s", text)
            return text
        return f"released the hold {released.describe()}"

    def _report_hold(self, live: Liveness) -> dict[str, Any]:
        """``ensure_running`` of a held job: say so, start nothing, succeed."""
        job, hold = self.job, live.hold
        if kind_of(hold) == HoldKind.STOP:
            how = f"Start it with {job.oncall_dag_id} (action start or restart), which releases the hold."
        else:
            how = (
                f"The {kind_of(hold)} releases it when it ends; to take over, run {job.oncall_dag_id} with "
                "force and a reason."
            )
        line = f"job {job.name} is held {hold.describe()} ({kind_of(hold).phrase}); not starting it. {how}"
        if live.alive:
            line += f" It still runs ({live.reason}): an on-call stop did not finish; stop it again."
        self.warn("%s", line)
        return {"held": hold.to_dict(), "done": [line]}

    def _rewind(self, live: Liveness) -> dict[str, Any]:
        """The on-call rewind: the hub reader asks the hub, ``rewind.rewind_job`` does the rest."""
        from hubflow.operations.rewind import RewindError, rewind_job

        job, request = self.job, self.request
        if not job.eventhubs_conn_id or self.hub is None:
            raise OnCallRefused(f"job {job.name} has no eventhubs_conn_id: only Event Hubs jobs rewind")
        hub, latest, connection_string = self.hub()
        try:
            return rewind_job(
                job,
                self.control,
                live,
                hub=hub,
                latest=latest,
                connection_string=connection_string,
                to_enqueued_time=request.rewind_to_enqueued_time,
                to_sequence_numbers=request.rewind_to_sequence_numbers,
                dry_run=request.dry_run,
                who=request.who,
                force=request.force,
                reason=request.reason,
                stop_wait=request.stop_wait,
                start=lambda: self.start(count_restart=False),
                log=self.log,
            )
        except RewindError as exc:
            raise OnCallRefused(str(exc)) from None

    def start(self, count_restart: bool = True, fingerprint: dict | None = None) -> str:
        """Launch the driver detached and wait for it to report running.

        Records what it starts (the fingerprint) and counts the start (a supervisor's restart of a
        dead job) or resets the backoff (any other start) before the launch. Raises
        :class:`~hubflow.operations.job_control.JobStartError` when the driver does not come up.
        """
        job, control = self.job, self.control
        log_path, ship_to = control.driver_log_target()
        control.prepare_start(count_restart, fingerprint if fingerprint is not None else self._fingerprint())
        process = self.launch(log_path, ship_to)
        control.mark_starting(process.pid)
        where = control.folder.path("driver.log")
        self.log("started spark-submit pid %s for job %s; driver log %s", process.pid, job.name, where)
        if ship_to:
            self.log("the driver log is written to %s on this worker and copied there", log_path)
        return control.wait_until_running(process, self.request.start_timeout, log_path)


def keep_held(
    job: RegisteredJob, *, who: str, reason: str | None, source: Source, log: Log, warn: Log
) -> str:
    """A person decided to keep a quarantined job held: nothing is done, and the decision goes in the
    audit trail (action ``keep held``), so the trail says who looked and what they chose."""
    control = JobControl(job.name, job.paths.status_dir, heartbeat_timeout=job.heartbeat_timeout)
    hold = control.folder.hold()
    said = hold.describe() if hold is not None else None
    line = (
        f"{held_text(job.name, hold)}: kept held, nothing done"
        if hold is not None
        else f"job {job.name} is not held: nothing done"
    )
    log("%s", line)
    entry = AuditEntry.now(
        by=who,
        action="keep held",
        dry_run=False,
        reason=reason,
        outcome=outcome("done", line),
        hold_before=said,
        hold_after=said,
        source=source,
        version=control.version(),
    )
    try:
        stored = append_audit(control.folder, entry)
    except Exception as exc:  # the decision stands; the trail misses it, and the log says so
        warn("could not record the decision in the audit trail: %s", exc)
        return line
    log("audit trail: %s", stored.line())
    return line


class _AuditRecord:
    """The audit-trail entry of one action: who, what, dry run, why, the hold found before;
    :meth:`record` adds the outcome and the hold after. Recording never fails the action (what
    was done is done): a storage problem is logged."""

    def __init__(self, oncall: OnCall, live: Liveness) -> None:
        self.oncall = oncall
        self.hold_before = live.hold.describe() if live.hold is not None else None
        #: Whether the action goes in the trail: every on-call action; ``ensure_running`` once it
        #: decides to start (or restart) the job.
        self.wanted = oncall.request.action != "ensure_running"

    def record(self, kind: str, message: str) -> None:
        if not self.wanted:
            return
        request, folder = self.oncall.request, self.oncall.control.folder
        try:
            hold = folder.hold()
            entry = AuditEntry.now(
                by=request.audit_by or request.who,
                action=request.action,
                dry_run=request.dry_run,
                reason=request.reason,
                outcome=outcome(kind, message),
                hold_before=self.hold_before,
                hold_after=hold.describe() if hold is not None else None,
                source=request.source,
                version=self.oncall.control.version(),
            )
            stored = append_audit(folder, entry)
        except Exception as exc:  # the action stands; the trail misses it, and the log says so
            self.oncall.warn("could not record %s in the audit trail: %s", request.action, exc)
            return
        self.oncall.log("audit trail: %s", stored.line())


__all__ = [
    "ActionBusy",
    "HubReader",
    "JobStartError",
    "Launcher",
    "OnCall",
    "OnCallRefused",
    "OnCallRequest",
    "keep_held",
]
