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
from hubflow.operations.upgrade import (
    Upgrade,
    UpgradeRefused,
    failed_upgrade,
    materialized,
    upgrade_in_progress,
)
from hubflow.registry import RegisteredJob
from hubflow.repository import PIPELINES_DIR_ENV
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
from hubflow.supervision.upgrades import (
    UPGRADE_KEY,
    DeployedVersion,
    deployed_file,
    on_probation,
    plan_of,
    stale_deployed_files,
)
from hubflow.supervision.versions import SHORT


@dataclass(frozen=True)
class LaunchOverrides:
    """What one launch changes: an earlier version's config file (its deployed copy, written locally;
    None: the deployed one) and variables for the driver's environment (that copy's pipelines folder,
    a ``fresh`` upgrade's starting position)."""

    config: Path | None = None
    environment: dict[str, str] = field(default_factory=dict)


#: Launch the job's driver detached, its output to the log path (and, when not None, copied to
#: that status folder URL), with the :class:`LaunchOverrides`; returns the spark-submit process.
Launcher = Callable[[Path, str | None, LaunchOverrides], subprocess.Popen]
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
    #: ``ensure_running`` only, after an upgrade failed (refused or rolled back): the Airflow operator
    #: judges its alerts again here, so on-call is paged in this run.
    after_failed_upgrade: Callable[[], None] | None = None
    control: JobControl = field(init=False)
    #: Set when the supervisor found nothing to do after all (a version whose upgrade failed keeps
    #: running): its run is not an audit entry.
    _nothing_done: bool = field(default=False, init=False)

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
        pending = upgrade_in_progress(self.control.supervisor_state(), fingerprint["digest"])
        if pending is not None and not self.request.dry_run:
            audit.wanted = True
            return self._locked_supervisor(lambda again: self._resume_upgrade(pending, again, fingerprint))
        # The running version's probation, judged first even when another version is deployed since.
        probation = on_probation(self.control.supervisor_state(), self._started_digest())
        if probation is not None and live.hold is None:
            upgrade = self._upgrade_of(fingerprint)
            if self.request.dry_run:
                preview = upgrade.preview_probation(probation, alive=live.alive)
                if preview is not None:
                    job, action = self.job.name, self.request.action
                    return {"job": job, "action": action, "dry_run": True, "done": preview}
            elif not live.alive:
                audit.wanted = True
                return self._locked_supervisor(lambda again: self._probation(probation, again, fingerprint))
            else:
                upgrade.judge_probation(probation, alive=True)
                if upgrade.superseded(probation) and on_probation(
                    self.control.supervisor_state(), probation.after
                ):
                    waiting = upgrade.wait_for_probation(probation)
                    self.log("%s", waiting)
                    return {
                        "job": self.job.name,
                        "action": "ensure_running",
                        "dry_run": False,
                        "done": [waiting],
                    }
        self._forget_undeployed_failure(fingerprint)
        decision = self._decide(live, fingerprint)
        starts = Step.START in decision.steps and decision.refusal is None
        audit.wanted = starts or Step.QUARANTINE in decision.steps
        if not self.request.dry_run and self.before_supervising is not None:
            self.before_supervising(decision)
        if not starts or self.request.dry_run:
            return self._carry_out_decision(decision, live, fingerprint)

        def act(again: Liveness) -> dict[str, Any]:
            nonlocal decision
            if (again.alive, again.hold) != (live.alive, live.hold):  # changed before the lock
                decision = self._decide(again, fingerprint)
                audit.wanted = Step.START in decision.steps and decision.refusal is None
            return self._carry_out_decision(decision, again, fingerprint)

        result = self._locked_supervisor(act)
        if result.get("left_to") or self._nothing_done:
            audit.wanted = False
        return result

    def _locked_supervisor(self, act: Callable[[Liveness], dict[str, Any]]) -> dict[str, Any]:
        """Run the supervisor's ``act`` holding the action lock, or leave the job to its holder."""
        lock = ActionLock(self.control.folder, self.job.name, "supervisor start", self.request.who, "airflow")
        try:
            lock.acquire()
        except ActionInProgress as exc:  # an on-call action began since it was read
            return {**self._leave_to(exc.holder), "left_to": True}
        with lock.renewing():
            return act(self.control.liveness())

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

    def _started_digest(self) -> str | None:
        """The digest of the version last started (supervisor.json), None before the first start."""
        started = self.control.supervisor_state().get("fingerprint")
        return started.get("digest") if isinstance(started, dict) else None

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
            fingerprint_failed_upgrade=failed_upgrade(state, fingerprint["digest"]) is not None,
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
        # A start of another version is an upgrade; so is a live job's ensure_running whose deployed
        # version failed its upgrade (``_upgrade`` says the job keeps the version last started).
        kept = Step.ALREADY_RUNNING in decision.steps and request.action == "ensure_running"
        if (Step.START in decision.steps or kept) and self._changed_version(fingerprint):
            return {**base, "done": done + self._upgrade(decision, live, fingerprint)}
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

    # Upgrades (hubflow.operations.upgrade) --------------------------------------------------------

    def _changed_version(self, fingerprint: dict) -> bool:
        """Whether a start now would start another version than the one last started."""
        started = self.control.supervisor_state().get("fingerprint")
        return isinstance(started, dict) and started.get("digest") not in (None, fingerprint["digest"])

    def _upgrade_of(self, fingerprint: dict) -> Upgrade:
        return Upgrade(
            self.job,
            self.control,
            fingerprint,
            start=lambda deployed, version, environment: self.start(False, version, deployed, environment),
            who=self.request.who,
            stop_wait=self.request.stop_wait,
            log=self.log,
            warn=self.warn,
        )

    def _upgrade(self, decision: Decision, live: Liveness, fingerprint: dict) -> list[str]:
        """A start of a changed version: the supervisor leaves a version that failed its upgrade to
        the previous one; otherwise the upgrade runs whole (or, in a dry run, says what it would do)."""
        request = self.request
        upgrade = self._upgrade_of(fingerprint)

        def release() -> list[str]:  # an on-call start's or restart's, once the check has passed
            if Step.RELEASE_HOLD not in decision.steps:
                return []
            return [self._carry_out(Step.RELEASE_HOLD, live, False, fingerprint)]

        failed = failed_upgrade(self.control.supervisor_state(), fingerprint["digest"])
        if failed is not None and request.action == "ensure_running":
            if request.dry_run:
                return [f"would keep the version last started: {failed.text}"]
            return self._keep_previous(failed.text, live, decision)
        try:
            if request.dry_run:
                try:
                    return [f"would {line}" for line in upgrade.check(dry_run=True)] + release()
                except UpgradeRefused as exc:
                    return [f"would refuse: {exc}"]
            return upgrade.run(alive=live.alive, after_check=release)
        except UpgradeRefused as exc:
            self._told_failed_upgrade()
            if request.action == "ensure_running" and not live.alive:
                return self._keep_previous(str(exc), live, decision)
            raise OnCallRefused(str(exc)) from None
        except Exception:
            self._told_failed_upgrade()
            raise

    def _keep_previous(self, why: str, live: Liveness, decision: Decision) -> list[str]:
        """The deployed version failed its upgrade: keep the version last started running (start its
        deployed copy when it died)."""
        state = self.control.supervisor_state()
        started = state.get("fingerprint") or {}
        digest = str(started.get("digest"))
        line = f"{why} (the version deployed now is not started again by the supervisor)"
        self.warn("%s", line)
        if live.alive:
            self._nothing_done = True
            return [line, f"job {self.job.name} keeps running version {digest[:SHORT]}"]
        copy = DeployedVersion.from_dict(self.control.folder.read_json(deployed_file(digest)))
        if copy is None:
            raise OnCallRefused(
                f"{line}; version {digest[:SHORT]}, which ran before, has no deployed copy to start from: "
                "deploy a version that upgrades, or set upgrade_mode"
            )
        return [line, self.start(decision.count_restart, started, copy)]

    def _resume_upgrade(self, record: Any, live: Liveness, fingerprint: dict) -> dict[str, Any]:
        base = {"job": self.job.name, "action": self.request.action, "dry_run": False}
        try:
            return {**base, "done": self._upgrade_of(fingerprint).resume(record, alive=live.alive)}
        except Exception:
            self._told_failed_upgrade()
            raise

    def _probation(self, record: Any, live: Liveness, fingerprint: dict) -> dict[str, Any]:
        """The new version, ready while idle, found dead: if it died before its first batch
        committed, the upgrade is judged again (started again, or rolled back); else the usual rules."""
        base = {"job": self.job.name, "action": self.request.action, "dry_run": False}
        if live.hold is None:
            try:
                done = self._upgrade_of(fingerprint).judge_probation(record, alive=live.alive)
            except Exception:
                self._told_failed_upgrade()
                raise
            if done is not None:
                return {**base, "done": done}
        return self._carry_out_decision(self._decide(live, fingerprint), live, fingerprint)

    def _forget_undeployed_failure(self, fingerprint: dict) -> None:
        """A failed upgrade to a version no longer deployed is over (its alert resolves)."""
        state = self.control.supervisor_state()
        record = state.get(UPGRADE_KEY)
        if (
            not self.request.dry_run
            and isinstance(record, dict)
            and record.get("after") != fingerprint["digest"]
            and record.get("outcome") not in ("ready", "in-progress")
        ):
            state[UPGRADE_KEY] = {
                **record,
                "outcome": "ready",
                "text": "superseded by another deployed version",
            }
            self.control.write_supervisor_state(state)

    def _told_failed_upgrade(self) -> None:
        if self.request.action == "ensure_running" and self.after_failed_upgrade is not None:
            try:
                self.after_failed_upgrade()
            except Exception as exc:  # never hides the upgrade's own outcome
                self.warn("could not page on-call about the upgrade: %s", exc)

    def _plan(self, config: Path | None) -> dict | None:
        """What the version started reads and writes (None when its config does not read)."""
        try:
            return plan_of(config or self.job.config_path(), self.job.application).to_dict()
        except Exception:  # the driver reports a broken config itself
            return None

    def _keep_deployed_copy(self, fingerprint: dict) -> None:
        """The version's files, kept in the status folder so that a rollback can start it again."""
        name = deployed_file(fingerprint["digest"])
        if self.control.folder.exists(name):
            return
        copy = DeployedVersion.of(fingerprint, self.job.config_path())
        if copy is not None:
            self.control.folder.write_json(name, copy.to_dict())
        self._drop_stale_deployed_copies()

    def _drop_stale_deployed_copies(self) -> None:
        """Remove the deployed copies of versions no rollback can go back to (each start keeps one,
        so without this a job changed daily gathers a file a day). Never fails the start."""
        folder = self.control.folder
        try:
            for stale in stale_deployed_files(folder.store.names(), self.control.supervisor_state()):
                folder.remove(stale)
        except Exception as exc:
            self.warn("could not remove old deployed copies from %s: %s", folder.url, exc)

    def start(
        self,
        count_restart: bool = True,
        fingerprint: dict | None = None,
        deployed: DeployedVersion | None = None,
        environment: dict[str, str] | None = None,
    ) -> str:
        """Launch the driver detached and wait for it to report running.

        Records what it starts (the fingerprint and its plan) and counts the start (a supervisor's
        restart of a dead job) or resets the backoff (any other start) before the launch; keeps a
        deployed copy of the version for a rollback. ``deployed``: start that earlier version
        instead of the files deployed now; ``environment``: more variables for the driver. Raises
        :class:`~hubflow.operations.job_control.JobStartError` when the driver does not come up.
        """
        job, control = self.job, self.control
        fingerprint = fingerprint if fingerprint is not None else self._fingerprint()
        overrides = LaunchOverrides(environment=dict(environment or {}))
        if deployed is not None:
            config, pipelines = materialized(deployed)
            env = {**overrides.environment, **({PIPELINES_DIR_ENV: str(pipelines)} if pipelines else {})}
            overrides = LaunchOverrides(config, env)
        log_path, ship_to = control.driver_log_target()
        control.prepare_start(count_restart, fingerprint, self._plan(overrides.config))
        if deployed is None:
            self._keep_deployed_copy(fingerprint)
        process = self.launch(log_path, ship_to, overrides)
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
    "LaunchOverrides",
    "Launcher",
    "OnCall",
    "OnCallRefused",
    "OnCallRequest",
    "keep_held",
]
