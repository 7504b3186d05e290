"""The operator that runs a registered job to completion, or a backfill run over its data interval."""

from __future__ import annotations

import time
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from hubflow_jobs.applications import backfill_builtins, can_backfill
from hubflow_plugins.core.job_exit import judge_failed_run
from hubflow_plugins.core.registry import RegisteredJob, load_registry
from hubflow_plugins.hooks.spark_submit import build_submit_hook, driver_secrets
from hubflow_plugins.run_context import backfill_window


class SparkJobOperator(BaseOperator):
    """Run a registered job to completion (an ``availableNow`` run) with spark-submit.

    A backfill run (``airflow backfill create`` or the UI's Backfill) processes exactly its data
    interval instead: ``jobs/backfill.py`` reads the interval as a batch (Event Hubs: the
    enqueued-time window; files: the interval's landing or archive folders; a pipeline: its Event
    Hub's window through its function) and replaces the interval's rows - in the job's own Delta
    tables (one ``replaceWhere`` transaction each), or in the parquet side table's partition - so
    reruns never duplicate.

    Both kinds of run are safe to retry (the DAG factory gives them the registry's ``retries``). A
    failure a retry cannot cure - an invalid config, an on-call hold, a kill request (the job's exit
    code, see :mod:`hubflow_plugins.core.job_exit`) - raises ``AirflowFailException``, which Airflow
    never retries; any other failure is retried.

    :param job_name: the job's name in the registry (``dags/registry.yaml``).
    :param stop_grace: on task kill, how long the job gets to finish its batch after the STOP
        marker before spark-submit is killed (Airflow allows about 5 s before it kills the task).
    """

    template_fields = ("job_name",)
    ui_color = "#f4a460"

    def __init__(self, *, job_name: str, stop_grace: float = 4.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job_name = job_name
        self.stop_grace = stop_grace
        self._hook: Any = None

    def execute(self, context: Any) -> dict[str, Any]:
        from hubflow_jobs.status import StatusFolder

        job = load_registry().job(self.job_name)
        window = backfill_window(context)
        if window is not None:
            return self._backfill(job, *window)
        self._hook = build_submit_hook(job, secrets=driver_secrets(job), extra_args=job.run_args)
        self.log.info("running job %s: %s --config %s", job.name, job.application_path(), job.config_path())
        self._submit(job, str(job.application_path()))
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

    def _backfill(self, job: RegisteredJob, start: str, end: str) -> dict[str, Any]:
        if not can_backfill(job.application):
            raise AirflowFailException(
                f"job {job.name}: backfill runs are supported for {', '.join(backfill_builtins())} "
                f"jobs and pipelines, not {job.application}; trigger a normal run instead (see "
                "docs/operations.md)"
            )
        self.log.info("backfill run: job %s processes exactly the interval [%s, %s)", job.name, start, end)
        window = ["--window-start", start, "--window-end", end]
        self._hook = build_submit_hook(
            job, secrets=driver_secrets(job), extra_args=["--application", job.application, *window]
        )
        self._submit(job, str(job.application_path().with_name("backfill.py")), backfill=True)
        return {"job": job.name, "backfill": {"window_start": start, "window_end": end}}

    def _submit(self, job: RegisteredJob, application: str, backfill: bool = False) -> None:
        """spark-submit ``application``; a failure no retry can cure becomes ``AirflowFailException``."""
        try:
            self._hook.submit(application)
        except AirflowException as exc:
            verdict = judge_failed_run(job.name, self._hook.returncode, backfill=backfill)
            if not verdict.retry:
                raise AirflowFailException(verdict.message) from exc
            self.log.error("%s", verdict.message)
            raise

    def on_kill(self) -> None:
        from hubflow_jobs.status import StatusFolder

        try:
            job = load_registry().job(self.job_name)
            StatusFolder(job.paths.status_dir).request_stop("Airflow task killed", by=f"task {self.task_id}")
            time.sleep(self.stop_grace)
        finally:
            if self._hook is not None:
                self._hook.on_kill()
