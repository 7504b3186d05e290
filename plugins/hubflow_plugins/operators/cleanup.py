"""Operators that clean up after registered jobs: archive processed files, purge checkpoint backups,
maintain Delta tables. Each asks the control plane (``hubflow.operations.archive``,
``hubflow.checkpoints.backups``) or the job's own spark-submit path (``jobs/lake_maintenance.py``)
to do the work.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from hubflow.durations import parse_duration
from hubflow.invocation import JobInvocation
from hubflow.registry import load_registry
from hubflow_plugins.hooks.spark_submit import build_submit_hook, driver_secrets
from hubflow_plugins.run_context import is_backfill_run, is_true


class ArchiveOperator(BaseOperator):
    """Move the landing files that committed batches consumed into the archive (same relative path).

    Safe to kill and rerun; never touches files of an uncommitted batch or outside the landing root.

    :param job_name: the job's name in the registry; its config names the landing and archive folders.
    :param dry_run: list what would be moved, move nothing.
    :param purge_older_than: also delete archived files older than this (e.g. ``"30 days"``).
    :param max_workers: files moved in parallel.
    """

    template_fields = ("job_name", "dry_run")
    ui_color = "#d8bfd8"

    def __init__(
        self,
        *,
        job_name: str,
        dry_run: bool | str = False,
        purge_older_than: str | None = None,
        max_workers: int = 8,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_name = job_name
        self.dry_run = dry_run
        self.purge_older_than = purge_older_than
        self.max_workers = max_workers

    def execute(self, context: Any) -> dict[str, Any]:
        from hubflow.operations.archive import archive_processed_files, purge_archive

        if is_backfill_run(context):
            raise AirflowSkipException(
                "backfill run: it reads its interval as a batch and consumes nothing from the landing "
                "folder, so there is nothing to archive"
            )
        dry_run = is_true(self.dry_run)
        from hubflow_plugins.hooks.azure_storage import use_job_storage

        job = use_job_storage(load_registry().job(self.job_name))
        paths = job.paths
        if not paths.landing_root or not paths.archive_root:
            raise AirflowFailException(
                f"job {job.name} has no source.path / source.archive_dir in {job.config_path()}: "
                "only file-landing jobs can be archived"
            )
        result = archive_processed_files(
            paths.checkpoint_location,
            paths.landing_root,
            paths.archive_root,
            dry_run=dry_run,
            max_workers=self.max_workers,
            log=self.log.info,
        )
        summary: dict[str, Any] = {"job": job.name, "archive": result.summary()}
        if self.purge_older_than:
            purged = purge_archive(paths.archive_root, parse_duration(self.purge_older_than), dry_run=dry_run)
            summary["purge"] = str(purged)
        return summary


class CheckpointBackupRetentionOperator(BaseOperator):
    """Delete a job's checkpoint backups (left by rewinds) older than ``older_than``.

    :param job_name: the job's name in the registry.
    :param older_than: e.g. ``"30 days"`` (default: the registry's ``checkpoint_backup_retention``).
    """

    template_fields = ("job_name",)

    def __init__(self, *, job_name: str, older_than: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job_name = job_name
        self.older_than = older_than

    def execute(self, context: Any) -> list[str]:
        from hubflow.checkpoints.backups import checkpoint_backups_root, purge_checkpoint_backups
        from hubflow_plugins.hooks.azure_storage import use_job_storage

        job = use_job_storage(load_registry().job(self.job_name))
        older_than = parse_duration(self.older_than or job.checkpoint_backup_retention)
        deleted = purge_checkpoint_backups(job.paths.checkpoint_location, older_than)
        root = checkpoint_backups_root(job.paths.checkpoint_location)
        self.log.info(
            "deleted %d checkpoint backup(s) older than %s under %s", len(deleted), older_than, root
        )
        for path in deleted:
            self.log.info("deleted %s", path)
        return deleted


class DeltaMaintenanceOperator(BaseOperator):
    """Compact, vacuum and checkpoint the Delta tables a registered job writes.

    Runs ``jobs/lake_maintenance.py`` with spark-submit through the same hook as the job itself
    (its Spark connection, conf and storage access), never Spark in the Airflow worker. Per table:
    ``OPTIMIZE`` (a ``dataChange=false`` commit, so streaming readers never see rows twice),
    ``VACUUM`` past ``vacuum_retention``, and a Delta log checkpoint when more than
    ``delta_checkpoint_after_commits`` commits follow the last one; sizes before and after are in
    the task log. A job that writes no Delta table is skipped without starting Spark.

    :param job_name: the job's name in the registry.
    :param dry_run: say what each step would do, change nothing.
    :param vacuum_retention: e.g. ``"7 days"`` (default: the registry's ``vacuum_retention``).
    """

    template_fields = ("job_name", "dry_run")
    ui_color = "#b0e0e6"

    def __init__(
        self,
        *,
        job_name: str,
        dry_run: bool | str = False,
        vacuum_retention: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_name = job_name
        self.dry_run = dry_run
        self.vacuum_retention = vacuum_retention
        self._hook: Any = None

    def execute(self, context: Any) -> dict[str, Any]:

        dry_run = is_true(self.dry_run)
        from hubflow_plugins.hooks.azure_storage import use_job_storage

        job = use_job_storage(load_registry().job(self.job_name))
        tables = job.paths.delta_tables
        if not tables:
            raise AirflowSkipException(f"job {job.name} writes no Delta table: nothing to maintain")
        retention = parse_duration(self.vacuum_retention or job.vacuum_retention)
        invocation = JobInvocation.maintenance(
            job,
            vacuum_retention_hours=retention.total_seconds() / 3600,
            checkpoint_after_commits=job.delta_checkpoint_after_commits,
            dry_run=dry_run,
            secrets=driver_secrets(job),
        )
        self.log.info(
            "maintaining the Delta tables of job %s%s: %s", job.name, " (dry run)" if dry_run else "", tables
        )
        self._hook = build_submit_hook(job, invocation)
        self._hook.submit()
        return {"job": job.name, "tables": tables, "dry_run": dry_run}

    def on_kill(self) -> None:
        if self._hook is not None:
            self._hook.on_kill()
