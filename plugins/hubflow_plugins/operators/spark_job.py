"""The operator that runs a registered job to completion, or a backfill run over its data interval."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from hubflow.applications import backfill_builtins, can_backfill
from hubflow.invocation import JobInvocation
from hubflow.lake_assets import (
    COMMIT_TAG_CONF,
    alias_name,
    commit_tag,
    commit_tag_prefix,
    job_tables,
    merge_versions,
    table_versions,
    versions_of_earlier_tries,
    versions_of_run,
)
from hubflow.registry import RegisteredJob, RegistryError, load_registry
from hubflow.supervision.job_exit import judge_failed_run, run_outcome
from hubflow_plugins.hooks.spark_submit import build_submit_hook, driver_secrets
from hubflow_plugins.notifications.job_alerts import run_alert_cycle
from hubflow_plugins.run_context import backfill_window


class SparkJobOperator(BaseOperator):
    """Run a registered job to completion (an ``availableNow`` run) with spark-submit.

    A backfill run (``airflow backfill create`` or the UI's Backfill) processes exactly its data
    interval instead: ``jobs/backfill.py`` reads the interval as a batch (Event Hubs: the
    enqueued-time window; files: the interval's landing or archive folders; a pipeline: its Event
    Hub's window through its function) and replaces the interval's rows - in the job's own Delta
    tables (one ``replaceWhere`` transaction each), or in the parquet side table's partition - so
    reruns never duplicate.

    Each Delta table the run committed to gets an asset event (the table's asset, through the job's
    asset alias outlet, :mod:`hubflow.lake_assets`) naming the versions it added: its
    commits carry the task try's tag, so a concurrent writer's versions are not counted. Each
    parquet output gets one naming the file sink batches the run committed (its ``_spark_metadata``
    batch ids). A retry also announces what earlier tries of the same run committed (a try that
    committed and then failed announced nothing). A run that committed nothing emits none.

    Both kinds of run are safe to retry (the DAG factory gives them the registry's ``retries``). A
    failure a retry cannot cure - an invalid config, an on-call hold, a kill request (the job's exit
    code, see :mod:`hubflow.supervision.job_exit`) - raises ``AirflowFailException``, which Airflow
    never retries; any other failure is retried.

    :param job_name: the job's name in the registry (``dags/registry.yaml``).
    :param interval_only: the task's runs replace an interval and nothing else (the
        ``<job>__backfill`` and ``<job>__follow`` DAGs): a run without a partition key or data
        interval fails instead of running the job.
    :param stop_grace: on task kill, how long the job gets to finish its batch after the STOP
        marker before spark-submit is killed (Airflow allows about 5 s before it kills the task).
    """

    template_fields = ("job_name",)
    ui_color = "#f4a460"

    def __init__(
        self, *, job_name: str, interval_only: bool = False, stop_grace: float = 4.0, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.job_name = job_name
        self.interval_only = interval_only
        self.stop_grace = stop_grace
        self._hook: Any = None

    def execute(self, context: Any) -> dict[str, Any]:
        from hubflow_plugins.hooks.azure_storage import use_job_storage

        job = use_job_storage(load_registry().job(self.job_name))
        try:
            tables = job_tables(job.paths.delta_tables, job.paths.parquet_outputs)
        except RegistryError:
            tables = []  # the run itself refuses the config, naming the mistake (exit 2)
        before = table_versions(tables)
        ti = context["ti"]
        tag = commit_tag(ti.dag_id, ti.run_id, ti.task_id, ti.try_number)
        window = backfill_window(context)
        if window is None and self.interval_only:
            raise AirflowFailException(
                f"DAG {ti.dag_id} replaces an hour of job {self.job_name} and nothing else: run it "
                "through a backfill (UI: Trigger -> Backfill) or a partitioned asset event, not alone"
            )
        try:
            result = self._run(job, tag) if window is None else self._backfill(job, *window, tag=tag)
        except Exception as exc:
            if window is None and _last_try(exc, ti):  # on-call hears of a scheduled run that failed for good
                run_alert_cycle(job, context, self.log.info, self.log.warning, run_failure=str(exc))
            raise
        if window is None:  # judged as check_health does: resolves an earlier failure, or alerts
            run_alert_cycle(job, context, self.log.info, self.log.warning)
        run = "backfill" if window is not None else "scheduled"
        changes = versions_of_run(tables, before, tag, backfill=window is not None)
        started = getattr(context.get("dag_run"), "start_date", None)
        if ti.try_number > 1 and started is not None:
            prefix = commit_tag_prefix(ti.dag_id, ti.run_id, ti.task_id)
            since_ms = int(started.timestamp() * 1000)
            earlier = versions_of_earlier_tries(
                tables, before, prefix, ti.try_number, since_ms, backfill=window is not None
            )
            changes = merge_versions(earlier, changes)
        self._announce(context, job, changes, run)
        return result

    def _announce(self, context: Any, job: RegisteredJob, changes: list, run: str) -> None:
        """One asset event per table the run committed to."""
        from airflow.sdk import Asset, AssetAlias

        events = context["outlet_events"][AssetAlias(alias_name(job.name))]
        for change in changes:
            table = change.table
            events.add(Asset(name=table.name, uri=table.uri), extra=change.extra(job.name, run))
            self.log.info(
                "table %s (%s): versions %s announced", table.name, table.uri, list(change.versions)
            )

    def _run(self, job: RegisteredJob, tag: str) -> dict[str, Any]:
        from hubflow.status import StatusFolder

        invocation = JobInvocation.run(job, secrets=driver_secrets(job), conf={COMMIT_TAG_CONF: tag})
        self._hook = build_submit_hook(job, invocation)
        self.log.info("running job %s: %s %s", job.name, invocation.script, " ".join(invocation.args))
        try:
            folder = StatusFolder(job.paths.status_dir)
            earlier = (folder.status() or {}).get("started_at")
            outcome = lambda: run_outcome(folder.status(), earlier)  # noqa: E731
        except RegistryError:
            outcome = None  # the run itself refuses the config, naming the mistake (exit 2)
        self._submit(job, outcome=outcome)
        status = StatusFolder(job.paths.status_dir).status() or {}
        progress = status.get("last_progress") or {}
        self.log.info(
            "job %s finished: state %s, %s rows read in this run; last batch %s",
            job.name,
            status.get("state"),
            status.get("input_rows"),
            progress.get("batch_id"),
        )
        return {
            "job": job.name,
            "state": status.get("state"),
            "input_rows": status.get("input_rows"),
            "last_progress": progress,
        }

    def _backfill(self, job: RegisteredJob, start: str, end: str, tag: str) -> dict[str, Any]:
        if not can_backfill(job.application):
            raise AirflowFailException(
                f"job {job.name}: backfill runs are supported for {', '.join(backfill_builtins())} "
                f"jobs and pipelines, not {job.application}; trigger a normal run instead (see "
                "docs/operations.md)"
            )
        from hubflow.status import StatusFolder
        from hubflow.status.action_lock import ActionInProgress, refuse_if_in_progress

        try:  # an on-call action (a rewind, a restart) in progress on the job: retried later
            refuse_if_in_progress(StatusFolder(job.paths.status_dir), job.name, "backfill")
        except ActionInProgress as exc:
            raise AirflowException(str(exc)) from None
        self.log.info("backfill run: job %s processes exactly the interval [%s, %s)", job.name, start, end)
        invocation = JobInvocation.backfill(
            job, start, end, secrets=driver_secrets(job), conf={COMMIT_TAG_CONF: tag}
        )
        self._hook = build_submit_hook(job, invocation)
        self._submit(job, backfill=True)
        return {"job": job.name, "backfill": {"window_start": start, "window_end": end}}

    def _submit(
        self,
        job: RegisteredJob,
        backfill: bool = False,
        outcome: Callable[[], str | None] | None = None,
    ) -> None:
        """spark-submit the hook's invocation; a failure no retry can cure becomes
        ``AirflowFailException``. ``outcome`` reads the run's own reason from its status.json after a
        failure."""
        try:
            self._hook.submit()
        except AirflowException as exc:
            reason = outcome() if outcome is not None else None
            verdict = judge_failed_run(job.name, self._hook.returncode, backfill=backfill, reason=reason)
            if not verdict.retry:
                raise AirflowFailException(verdict.message) from exc
            self.log.error("%s", verdict.message)
            raise

    def on_kill(self) -> None:
        from hubflow.status import StatusFolder

        try:
            from hubflow_plugins.hooks.azure_storage import use_job_storage

            job = use_job_storage(load_registry().job(self.job_name))
            StatusFolder(job.paths.status_dir).request_stop("Airflow task killed", by=f"task {self.task_id}")
            time.sleep(self.stop_grace)
        finally:
            if self._hook is not None:
                self._hook.on_kill()


def _last_try(exc: Exception, ti: Any) -> bool:
    """Whether Airflow gives up on the task after ``exc``: a failure no retry cures, or no retry left."""
    from airflow.sdk.exceptions import AirflowFailException

    if isinstance(exc, AirflowFailException):
        return True
    return int(ti.try_number) > int(getattr(ti, "max_tries", 0) or 0)
