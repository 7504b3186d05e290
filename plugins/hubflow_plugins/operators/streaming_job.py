"""The operator that supervises a long-running streaming job: ensure it runs, start, stop, restart, rewind.

Thin on purpose: the registry says what a job is, :mod:`hubflow.operations.oncall` carries out the
action (the same core as ``hubflow oncall``: the action lock, the decision, holds, stop, start,
rewind, the audit trail); this operator reads its parameters and passes what only Airflow has: the
driver launcher (the provider's SparkSubmitHook), the Event Hubs hook for a rewind, the run's user,
and the supervisor's asset events and alerts. Heavy imports (fsspec backends, the Azure SDK) happen
inside ``execute``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from hubflow.invocation import JobInvocation
from hubflow.registry import RegisteredJob, load_registry
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

    One action at a time (:mod:`hubflow.status.action_lock`): ``start``, ``restart`` and ``rewind``
    hold the job's action lock and are refused while another action holds it, naming that action,
    who started it and when; ``ensure_running`` leaves the job to an action in progress and holds
    the lock while it starts the job; ``stop`` never waits for it. A cleared (or re-run) on-call
    run is refused: it would act under the original triggering user's name.

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
        from hubflow.operations.oncall import JobStartError, OnCall, OnCallRefused, OnCallRequest
        from hubflow.operations.upgrade import UpgradeRolledBack
        from hubflow_plugins.hooks.azure_storage import use_job_storage

        who = self._who(context)
        try:
            request = OnCallRequest(
                action=self.action,
                who=who,
                audit_by=_audit_by(context, self.action, who),
                source="airflow",
                dry_run=is_true(self.dry_run),
                reason=self.reason or None,
                force=is_true(self.force),
                rewind_to_enqueued_time=self.rewind_to_enqueued_time or None,
                rewind_to_sequence_numbers=self.rewind_to_sequence_numbers or None,
                stop_wait=self.stop_wait,
                start_timeout=self.start_timeout,
            )
        except OnCallRefused as exc:
            raise AirflowFailException(str(exc)) from None
        job = use_job_storage(load_registry().job(self.job_name))
        oncall = OnCall(
            job,
            request,
            launch=_launcher(job),
            log=self.log.info,
            warn=self.log.warning,
            hub=_hub_reader(job) if job.eventhubs_conn_id else None,
            before_supervising=lambda decision: self._supervising(context, job, decision),
            after_failed_upgrade=lambda: self._alert(context, job, refusal=None),
        )
        try:
            cleared = _cleared_try(context, self.action)
            if cleared:
                oncall.refuse(cleared)
            return oncall.run()
        except (OnCallRefused, UpgradeRolledBack) as exc:  # a retry would not change the outcome
            raise AirflowFailException(str(exc)) from None
        except JobStartError as exc:
            raise AirflowException(str(exc)) from None

    def _who(self, context: Any) -> str:
        """Who acts, for holds, markers and the audit trail: the run's triggering user."""
        return requested_by(context)

    def _supervising(self, context: Any, job: RegisteredJob, decision: Any) -> None:
        """Before the supervisor's steps: announce the stream's commits, judge its alerts, and ask
        for a review when it quarantines the job."""
        self._announce_commits(context, job)
        self._alert(context, job, refusal=decision.refusal or decision.restart_loop or "")
        self._announce_quarantine(context, job, decision)

    def _announce_quarantine(self, context: Any, job: RegisteredJob, decision: Any) -> None:
        """A quarantine as an event of the asset ``<job>__quarantined`` (through its alias: only this
        run gets one), which schedules the job's quarantine review DAG. It counts once the task
        succeeds, i.e. once the hold is placed."""
        from airflow.sdk import Asset, AssetAlias

        from hubflow.operations.quarantine_review import (
            quarantine_alias_name,
            quarantined_asset_name,
            quarantined_asset_uri,
        )
        from hubflow.supervision.supervisor import Step

        if job.quarantine_after is None or tuple(decision.steps) != (Step.QUARANTINE,):
            return
        asset = Asset(name=quarantined_asset_name(job.name), uri=quarantined_asset_uri(job.name))
        context["outlet_events"][AssetAlias(quarantine_alias_name(job.name))].add(
            asset, extra={"job": job.name, "why": decision.note or "crash-looping"}
        )
        self.log.info("job %s: quarantine announced on %s (its review asks on-call)", job.name, asset.name)

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

    def _alert(self, context: Any, job: RegisteredJob, refusal: str | None) -> None:
        """The supervisor's alerts (registry ``alerts:``): judge, let the control plane decide, notify.

        Judged before the steps run (a restart that follows is the supervisor's answer, not news;
        the checkpoint of a job the supervisor just found dead is what on-call must hear about).
        Never fails the supervisor: an alerting problem is logged and the job is still supervised.
        """
        from hubflow_plugins.notifications.job_alerts import run_alert_cycle

        run_alert_cycle(job, context, self.log.info, self.log.warning, restart_refusal=refusal)


def _audit_by(context: Any, action: str, who: str) -> str:
    """Who acted, for the audit trail: the triggering user (``requested_by``), or the supervisor
    when its own scheduled ``ensure_running`` run has none."""
    user = getattr(context.get("dag_run"), "triggering_user_name", None)
    return f"supervisor ({who})" if action == "ensure_running" and not user else who


def _cleared_try(context: Any, action: str) -> str | None:
    """Why an on-call run must not act again, or None: a cleared (or re-run) on-call task.

    On-call tasks have no retries, so a second try is a person clearing the run, and Airflow would
    credit the hold and the audit entry to the run's original triggering user: refused instead,
    naming how to act (a new run, as the person who acts)."""
    ti = context.get("ti")
    try_number = getattr(ti, "try_number", 1) or 1
    if action == "ensure_running" or try_number <= 1:
        return None
    return (
        f"this on-call run was cleared or run again (try {try_number}); an on-call action runs once, "
        "under the user who triggered it: trigger a new run of the on-call DAG instead (a hold and "
        "the audit trail must name who acts now)"
    )


def _launcher(job: RegisteredJob) -> Any:
    """The driver launcher of :class:`~hubflow.operations.oncall.OnCall`: spark-submit through the
    provider's hook, the job's secrets in the driver's environment only."""

    def launch(log_path: Any, ship_to: str | None, files: Any) -> Any:
        invocation = JobInvocation.run(
            job, secrets=driver_secrets(job), config=files.config, env=files.environment
        )
        return build_submit_hook(job, invocation).launch_detached(log_path, ship_to=ship_to)

    return launch


def _hub_reader(job: RegisteredJob) -> Any:
    """The rewind's hub reader: the Event Hubs connection's hub, its positions, its connection string."""

    def read() -> tuple[str, dict[str, int], str]:
        from hubflow_plugins.hooks.eventhubs import EventHubsHook

        hook = EventHubsHook(job.eventhubs_conn_id or "")
        hub, latest = hook.latest_sequence_numbers()
        return hub, latest, hook.connection_string()

    return read
