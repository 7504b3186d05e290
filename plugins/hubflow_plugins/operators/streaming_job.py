"""The operator that supervises a long-running streaming job: ensure it runs, start, stop, restart, rewind.

Thin on purpose: the registry says what a job is, ``core.supervision`` decides what an action does
(a pure function of what was found), ``hooks.spark_submit`` builds the command through the
provider's SparkSubmitHook, ``core.job_control`` stops a running job, ``core.rewind`` does a rewind
and ``hubflow.status`` (the job<->supervisor contract) says whether it runs or is held.
Heavy imports (fsspec backends, the Azure SDK) happen inside ``execute``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from hubflow.invocation import JobInvocation
from hubflow.registry import RegisteredJob, load_registry
from hubflow.supervision.supervisor import STREAMING_ACTIONS, Step
from hubflow_plugins.hooks.spark_submit import build_submit_hook, driver_secrets
from hubflow_plugins.run_context import is_true, requested_by

#: How many of the job's latest asset events the supervisor reads to find what it announced last.
ANNOUNCED_LOOKBACK = 100


class StreamingJobOperator(BaseOperator):
    """Supervise a long-running streaming job: ensure it runs, start, stop or restart it.

    ``ensure_running`` does nothing when the job is alive (fresh heartbeat) or held by on-call (it
    reports the hold and succeeds); a live job whose config (or pipeline module) changed since it
    was started is stopped gracefully and started again, once per change. A dead job is started from
    its checkpoint with an exponential backoff (registry ``restart_backoff``, ``max_restart_backoff``,
    ``healthy_after``): a run before the next start is due starts nothing and says when it is due.
    Only an optional ``max_restarts_per_hour`` fails the task (a restart loop needing a person).
    ``stop`` holds the job (the ``HOLD`` marker: who, when, why; supervisors leave it stopped until
    ``start`` or ``restart``), then stops it: STOP marker (the batch finishes), after ``stop_wait`` a
    KILL request the job's own watchdog obeys from any host, and on the driver's own host signals.
    ``rewind`` (Event Hubs jobs) stops the job, moves its checkpoint whole into the backups folder
    and starts it on a new checkpoint from ``rewind_to_enqueued_time`` (every partition) or
    ``rewind_to_sequence_numbers`` (JSON, partition -> sequence number; other partitions resume
    where the old checkpoint committed). A job writing Delta tables only rewinds forward: replayed
    events would land twice (``rewind.check_delta_rewind``; a backfill repairs an interval instead).
    Every on-call action, dry run or not, and every start or restart ``ensure_running`` makes goes
    in the job's audit trail (``hubflow.operations.audit``): who, what, why, the outcome (done,
    refused, failed) and the hold before and after.

    Holds have kinds (:mod:`hubflow.status.holds`): ``stop`` places a ``stop`` hold; ``start`` and
    ``restart`` release only a ``stop`` hold and ``rewind`` holds the job with a ``rewind`` hold of
    its own. Another kind of hold (a rewind in progress, an upgrade, a quarantine) fails the action
    naming the hold, unless ``force`` is set with a ``reason``: then the action takes the hold over
    and says who took over from whom and why.

    :param job_name: the job's name in the registry.
    :param action: one of ``ensure_running``, ``start``, ``stop``, ``restart``, ``rewind``.
    :param rewind_to_enqueued_time: ISO-8601 time, for ``rewind``.
    :param rewind_to_sequence_numbers: JSON object partition -> sequence number, for ``rewind``.
    :param reason: why (``stop``: shown with the hold on the status page; with ``force``: why the
        hold is taken over, recorded with the takeover).
    :param force: take over a hold another kind of action placed (needs ``reason``).
    :param stop_wait: how long a graceful stop may take before the kill request.
    :param start_timeout: how long a started job has to report itself running.
    :param dry_run: say what would be done, do nothing.
    """

    template_fields = (
        "job_name",
        "action",
        "dry_run",
        "rewind_to_enqueued_time",
        "rewind_to_sequence_numbers",
        "reason",
        "force",
    )
    ui_color = "#87cefa"

    def __init__(
        self,
        *,
        job_name: str,
        action: str = "ensure_running",
        stop_wait: timedelta = timedelta(minutes=5),
        start_timeout: timedelta = timedelta(minutes=5),
        dry_run: bool | str = False,
        rewind_to_enqueued_time: str | None = None,
        rewind_to_sequence_numbers: str | None = None,
        reason: str | None = None,
        force: bool | str = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_name = job_name
        self.action = action
        self.reason = reason
        self.rewind_to_enqueued_time = rewind_to_enqueued_time
        self.rewind_to_sequence_numbers = rewind_to_sequence_numbers
        self.stop_wait = stop_wait
        self.start_timeout = start_timeout
        self.dry_run = dry_run
        self.force = force

    def execute(self, context: Any) -> dict[str, Any]:
        from hubflow.operations.job_control import JobControl
        from hubflow.supervision.supervisor import decide

        if self.action not in STREAMING_ACTIONS:
            raise AirflowFailException(f"unknown action {self.action!r}; expected one of {STREAMING_ACTIONS}")
        dry_run = is_true(self.dry_run)
        force = is_true(self.force)
        if force and not (self.reason or "").strip():
            raise AirflowFailException(
                "force takes over a hold another action placed: give a reason too (it is recorded "
                "with the takeover)"
            )
        from hubflow_plugins.hooks.azure_storage import use_job_storage

        job = use_job_storage(load_registry().job(self.job_name))
        who = requested_by(context)
        control = JobControl(job.name, job.paths.status_dir, heartbeat_timeout=job.heartbeat_timeout)
        live = control.liveness()
        self.log.info("found: %s", live.reason)
        audit = _AuditRecord(
            self, control.folder, by=_audit_by(context, self.action, who), dry_run=dry_run, live=live
        )
        try:
            result = self._act(context, decide, job, control, live, dry_run, who, audit, force)
        except AirflowFailException as exc:
            audit.record("refused", str(exc))
            raise
        except Exception as exc:
            audit.record("failed", f"{type(exc).__name__}: {exc}")
            raise
        audit.record("done", "; ".join(str(line) for line in result.get("done") or []))
        return result

    def _act(
        self,
        context: Any,
        decide: Any,
        job: RegisteredJob,
        control: Any,
        live: Any,
        dry_run: bool,
        who: str,
        audit: _AuditRecord,
        force: bool,
    ) -> dict[str, Any]:
        """Decide and carry out the action; ``audit.wanted`` says whether it goes in the audit trail
        (every on-call action; of the supervisor's ``ensure_running``, only a start or restart)."""
        if self.action == "rewind":
            return self._rewind(job, control, live, dry_run, who, force)
        fingerprint = _fingerprint(job)
        decision = self._decide(decide, job, control, live, fingerprint)
        if self.action == "ensure_running":
            audit.wanted = Step.START in decision.steps and decision.refusal is None
        if self.action == "ensure_running" and not dry_run:
            self._announce_commits(context, job)
            self._alert(context, job, refusal=decision.refusal or decision.restart_loop or "")
        if decision.refusal:
            raise AirflowFailException(
                f"job {job.name} is {decision.refusal}; last state: {live.reason}. Read its driver "
                f"log in {job.paths.status_dir}/driver.log, fix the cause, then start it from the "
                "on-call DAG."
            )
        if decision.steps == (Step.REPORT_HOLD,):
            return self._report_hold(job, live, dry_run)
        if decision.restart_loop:
            self.log.warning("job %s is %s", job.name, decision.restart_loop)
        if not dry_run:
            if decision.reset_backoff:
                control.reset_backoff()
                self.log.info("job %s ran healthy or changed: its restart backoff starts again", job.name)
            if decision.adopt_fingerprint:
                control.adopt_fingerprint(fingerprint)
                self.log.info(
                    "job %s runs fingerprint %s (recorded now)", job.name, fingerprint["digest"][:12]
                )
        if decision.steps == (Step.WAIT_BACKOFF,):
            line = f"job {job.name} is not running ({live.reason}); {decision.note}"
            self.log.info("%s", line)
            return {
                "job": job.name,
                "action": self.action,
                "dry_run": dry_run,
                "next_start_at": decision.next_start_at.isoformat() if decision.next_start_at else None,
                "done": [line],
            }
        if decision.note:
            self.log.info("%s", decision.note)
        done: list[str] = []
        if decision.note:
            done.append(decision.note)
        for step in decision.steps:  # each said as it is done: a stop can take minutes
            done.append(
                self._carry_out(
                    step, job, control, live, dry_run, who, decision.count_restart, fingerprint, force
                )
            )
            self.log.info("%s", done[-1])
        return {"job": job.name, "action": self.action, "dry_run": dry_run, "done": done}

    def _decide(self, decide: Any, job: RegisteredJob, control: Any, live: Any, fingerprint: dict) -> Any:
        """Read what ``decide`` needs from the status folder and call it."""
        from datetime import UTC, datetime

        from hubflow.operations.job_control import parse_time

        state = control.supervisor_state() if self.action == "ensure_running" else {}
        status = control.folder.status() or {}
        started = state.get("fingerprint")
        return decide(
            self.action,
            alive=live.alive,
            held=live.hold is not None,
            now=datetime.now(UTC),
            restarts=control.restart_times() if self.action == "ensure_running" else (),
            policy=job.restart_policy,
            backoff_reset_at=parse_time(state.get("backoff_reset_at")),
            last_alive_at=parse_time(status.get("heartbeat")),
            started_fingerprint=started.get("digest") if isinstance(started, dict) else None,
            fingerprint=fingerprint["digest"],
        )

    def _announce_commits(self, context: Any, job: RegisteredJob) -> None:
        """The stream's commits as asset events: each Delta table's versions (a parquet output's file
        sink batch ids) since the last event of the job's asset alias (Airflow's own record, so a
        version is announced once across runs and restarts; an event counts once this task
        succeeds). Never fails the supervisor."""
        from airflow.sdk import Asset, AssetAlias

        from hubflow.lake_assets import (
            alias_name,
            job_tables,
            last_announced,
            table_versions,
            versions_added,
        )

        alias = AssetAlias(alias_name(job.name))
        try:
            tables = job_tables(job.paths.delta_tables, job.paths.parquet_outputs)
            if not tables:
                return
            earlier = context["inlet_events"][alias].ascending(False).limit(ANNOUNCED_LOOKBACK)
            last = last_announced((event.asset.uri, event.extra) for event in earlier)
            before = {table.path: last.get(table.uri) for table in tables}
            added = versions_added(tables, before, table_versions(tables))
        except Exception as exc:  # an unreadable table or log: said, and tried again next run
            self.log.warning("job %s: its tables' commits are not announced this run: %s", job.name, exc)
            return
        for change in added:
            table = change.table
            context["outlet_events"][alias].add(
                Asset(name=table.name, uri=table.uri), extra=change.extra(job.name, "streaming")
            )
            self.log.info(
                "table %s (%s): versions %d-%d announced", table.name, table.uri, change.first, change.last
            )

    def _alert(self, context: Any, job: RegisteredJob, refusal: str) -> None:
        """The supervisor's alerts (registry ``alerts:``): judge, let the control plane decide, notify.

        Judged before the steps run (a restart that follows is the supervisor's answer, not news;
        the checkpoint of a job the supervisor just found dead is what on-call must hear about).
        Never fails the supervisor: an alerting problem is logged and the job is still supervised.
        """
        from hubflow_plugins.notifications.job_alerts import run_alert_cycle

        run_alert_cycle(job, context, self.log.info, self.log.warning, restart_refusal=refusal)

    def _carry_out(
        self,
        step: Step,
        job: RegisteredJob,
        control: Any,
        live: Any,
        dry_run: bool,
        who: str,
        count_restart: bool,
        fingerprint: dict | None = None,
        force: bool = False,
    ) -> str:
        """Do one step of the decision (or say what it would do); return what was done."""
        from hubflow.status.holds import (
            HoldKeptError,
            HoldKind,
            held_text,
            kept_text,
            may_release,
            takeover_text,
        )

        if step == Step.PLACE_HOLD:
            reason = self.reason or "on-call stop"
            replacing = f" (replacing: {held_text(job.name, live.hold)})" if live.hold is not None else ""
            if dry_run:
                return f"would hold job {job.name} ({who}: {reason}) and stop it{replacing}"
            hold = control.folder.place_hold(reason, by=who, kind=HoldKind.STOP)
            return (
                f"held job {job.name} {hold.describe()}; supervisors leave it stopped until start{replacing}"
            )
        if step == Step.RELEASE_HOLD:
            # A start or restart releases the user's stop; another kind of hold only with force.
            if not may_release(live.hold, HoldKind.STOP, force=force):
                raise AirflowFailException(kept_text(job.name, live.hold, self.action))
            taking_over = not may_release(live.hold, HoldKind.STOP)
            if dry_run:
                if taking_over:
                    return "would take over: " + takeover_text(live.hold, who, self.reason)
                return f"would release the hold {live.hold.describe()}"
            try:
                released = control.folder.release_hold(
                    HoldKind.STOP, by=who, force=force, reason=self.reason, action=self.action
                )
            except HoldKeptError as exc:  # replaced since it was read: that hold is judged
                raise AirflowFailException(str(exc)) from None
            if released is None:
                return "the hold was released meanwhile"
            if taking_over or released != live.hold:
                text = takeover_text(released, who, self.reason)
                self.log.warning("%s", text)
                return text
            return f"released the hold {released.describe()}"
        if step == Step.STOP:
            if dry_run:
                return f"would stop job {job.name} (pid {live.pid} on {live.host})"
            return control.stop(self.stop_wait, log=self.log.info, requested_by=who)
        if step == Step.NOTHING_TO_STOP:
            return "nothing to stop"
        if step == Step.ALREADY_RUNNING:
            return "already running; nothing to do"
        if dry_run:
            return f"would start job {job.name} from checkpoint {job.paths.checkpoint_location}"
        return self._start(job, control, count_restart=count_restart, fingerprint=fingerprint)

    def _report_hold(self, job: RegisteredJob, live: Any, dry_run: bool) -> dict[str, Any]:
        """``ensure_running`` of a held job: say so, start nothing, succeed."""
        hold = live.hold
        from hubflow.status.holds import HoldKind, kind_of

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
        self.log.warning("%s", line)
        return {
            "job": job.name,
            "action": self.action,
            "dry_run": dry_run,
            "held": hold.to_dict(),
            "done": [line],
        }

    def _rewind(
        self, job: RegisteredJob, control: Any, live: Any, dry_run: bool, who: str, force: bool = False
    ) -> dict[str, Any]:
        """The on-call rewind: the hook asks the hub, ``rewind.rewind_job`` does the rest."""
        from hubflow.operations.rewind import RewindError, rewind_job
        from hubflow_plugins.hooks.eventhubs import EventHubsHook

        if not job.eventhubs_conn_id:
            raise AirflowFailException(
                f"job {job.name} has no eventhubs_conn_id: only Event Hubs jobs rewind"
            )
        hook = EventHubsHook(job.eventhubs_conn_id)
        hub, latest = hook.latest_sequence_numbers()
        try:
            return rewind_job(
                job,
                control,
                live,
                hub=hub,
                latest=latest,
                connection_string=hook.connection_string(),
                to_enqueued_time=self.rewind_to_enqueued_time,
                to_sequence_numbers=self.rewind_to_sequence_numbers,
                dry_run=dry_run,
                who=who,
                force=force,
                reason=self.reason,
                stop_wait=self.stop_wait,
                start=lambda: self._start(job, control, count_restart=False),
                log=self.log.info,
            )
        except RewindError as exc:
            raise AirflowFailException(str(exc)) from None

    def _start(
        self, job: RegisteredJob, control: Any, count_restart: bool = True, fingerprint: dict | None = None
    ) -> str:
        """Launch the driver detached through the spark-submit hook; the control plane waits for it to run.

        Records what it starts (the fingerprint) and counts the start (a supervisor's restart of a
        dead job) or resets the backoff (any other start) before the launch.
        """
        from hubflow.operations.job_control import JobStartError

        log_path, ship_to = control.driver_log_target()
        control.prepare_start(count_restart, fingerprint if fingerprint is not None else _fingerprint(job))
        hook = build_submit_hook(job, JobInvocation.run(job, secrets=driver_secrets(job)))
        process = hook.launch_detached(log_path, ship_to=ship_to)
        control.mark_starting(process.pid)
        where = control.folder.path("driver.log")
        self.log.info("started spark-submit pid %s for job %s; driver log %s", process.pid, job.name, where)
        if ship_to:
            self.log.info("the driver log is written to %s on this worker and copied there", log_path)
        try:
            return control.wait_until_running(process, self.start_timeout, log_path)
        except JobStartError as exc:
            raise AirflowException(str(exc)) from None


class _AuditRecord:
    """The audit-trail entry of one run of the operator (``hubflow.operations.audit``): who, what,
    dry run, why, the hold found before; :meth:`record` adds the outcome and the hold after.
    Recording never fails the task (what was done is done): a storage problem is logged."""

    def __init__(
        self, operator: StreamingJobOperator, folder: Any, *, by: str, dry_run: bool, live: Any
    ) -> None:
        self.operator = operator
        self.folder = folder
        self.by = by
        self.dry_run = dry_run
        self.hold_before = live.hold.describe() if live.hold is not None else None
        #: Whether the run goes in the trail: every on-call action; ``ensure_running`` once it decides
        #: to start (or restart) the job.
        self.wanted = operator.action != "ensure_running"

    def record(self, kind: str, message: str) -> None:
        from hubflow.operations.audit import AuditEntry, append_audit, outcome

        if not self.wanted:
            return
        log = self.operator.log
        try:
            hold = self.folder.hold()
            entry = AuditEntry.now(
                by=self.by,
                action=self.operator.action,
                dry_run=self.dry_run,
                reason=self.operator.reason,
                outcome=outcome(kind, message),
                hold_before=self.hold_before,
                hold_after=hold.describe() if hold is not None else None,
                source="airflow",
            )
            stored = append_audit(self.folder, entry)
        except Exception as exc:  # the action stands; the trail misses it, and the log says so
            log.warning("could not record %s in the audit trail: %s", self.operator.action, exc)
            return
        log.info("audit trail: %s", stored.line())


def _audit_by(context: Any, action: str, who: str) -> str:
    """Who acted, for the audit trail: the triggering user (``requested_by``), or the supervisor
    when its own scheduled ``ensure_running`` run has none."""
    user = getattr(context.get("dag_run"), "triggering_user_name", None)
    return f"supervisor ({who})" if action == "ensure_running" and not user else who


def _fingerprint(job: RegisteredJob) -> dict:
    """What the job runs now: its config file and, for a pipeline, its module's source."""
    from hubflow.supervision.supervisor import job_fingerprint

    return job_fingerprint(job.config_path(), job.application)
