"""Operators that run, supervise and clean up after registered jobs.

Thin on purpose: the registry says what a job is, ``spark_submit`` builds the command through the
provider's SparkSubmitHook, ``job_control`` stops a running job and ``hubflow_jobs.status_folder``
(the job↔supervisor contract) says whether it runs or is held, ``archive`` moves processed files.
Heavy imports (fsspec backends, the Azure SDK) happen inside ``execute``.
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from hubflow_jobs.applications import BACKFILL_APPLICATIONS
from hubflow_jobs.durations import parse_duration
from hubflow_plugins.core.registry import RegisteredJob, load_registry

STREAMING_ACTIONS = ("ensure_running", "start", "stop", "restart", "rewind")


def _job(job_name: str) -> RegisteredJob:
    return load_registry().job(job_name)


def _secrets(job: RegisteredJob) -> dict[str, str]:
    """The secret environment for the job's driver: the Event Hubs connection string, if any."""
    if not job.eventhubs_conn_id:
        return {}
    from hubflow_plugins.hooks.eventhubs import EventHubsHook
    from hubflow_plugins.hooks.spark_submit import EVENTHUBS_CONNECTION_STRING_ENV

    return {EVENTHUBS_CONNECTION_STRING_ENV: EventHubsHook(job.eventhubs_conn_id).connection_string()}


class SparkJobOperator(BaseOperator):
    """Run a registered job to completion (an ``availableNow`` run) with spark-submit.

    A backfill run (``airflow backfill create`` or the UI's Backfill) processes exactly its data
    interval instead: ``jobs/backfill.py`` reads the interval as a batch (Event Hubs: the
    enqueued-time window; files: the interval's landing or archive folders) and replaces the
    interval's rows - in the job's own Delta table (one ``replaceWhere`` transaction), or in the
    parquet side table's partition - so reruns never duplicate.

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
        from hubflow_jobs.status_folder import StatusFolder
        from hubflow_plugins.hooks.spark_submit import build_submit_hook

        job = _job(self.job_name)
        window = _backfill_window(context)
        if window is not None:
            return self._backfill(job, *window)
        self._hook = build_submit_hook(job, secrets=_secrets(job))
        self.log.info("running job %s: %s --config %s", job.name, job.application_path(), job.config_path())
        self._hook.submit(str(job.application_path()))
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
        from hubflow_plugins.hooks.spark_submit import build_submit_hook

        if job.application not in BACKFILL_APPLICATIONS:
            raise AirflowFailException(
                f"job {job.name}: backfill runs are supported for {', '.join(sorted(BACKFILL_APPLICATIONS))} "
                f"jobs, not {job.application}; trigger a normal run instead (see docs/operations.md)"
            )
        self.log.info("backfill run: job %s processes exactly the interval [%s, %s)", job.name, start, end)
        window = ["--window-start", start, "--window-end", end]
        self._hook = build_submit_hook(
            job, secrets=_secrets(job), extra_args=["--application", job.application, *window]
        )
        self._hook.submit(str(job.application_path().with_name("backfill.py")))
        return {"job": job.name, "backfill": {"window_start": start, "window_end": end}}

    def on_kill(self) -> None:
        from hubflow_jobs.status_folder import StatusFolder

        try:
            job = _job(self.job_name)
            StatusFolder(job.paths.status_dir).request_stop("Airflow task killed", by=f"task {self.task_id}")
            time.sleep(self.stop_grace)
        finally:
            if self._hook is not None:
                self._hook.on_kill()


class StreamingJobOperator(BaseOperator):
    """Supervise a long-running streaming job: ensure it runs, start, stop or restart it.

    ``ensure_running`` does nothing when the job is alive (fresh heartbeat) or held by on-call (it
    reports the hold and succeeds), and starts it from its checkpoint when it is dead - unless it
    was restarted ``max_restarts_per_hour`` times in the last hour already: then the task fails (a
    restart loop needs a person, not another restart).
    ``stop`` holds the job (the ``HOLD`` marker: who, when, why; supervisors leave it stopped until
    ``start`` or ``restart``), then stops it: STOP marker (the batch finishes), after ``stop_wait`` a
    KILL request the job's own watchdog obeys from any host, and on the driver's own host signals.
    ``rewind`` (Event Hubs jobs) stops the job, moves its checkpoint whole into the backups folder
    and starts it on a new checkpoint from ``rewind_to_enqueued_time`` (every partition) or
    ``rewind_to_sequence_numbers`` (JSON, partition -> sequence number; other partitions resume
    where the old checkpoint committed). A job writing Delta tables only rewinds forward: replayed
    events would land twice (``rewind.check_delta_rewind``; a backfill repairs an interval instead).

    :param job_name: the job's name in the registry.
    :param action: one of ``ensure_running``, ``start``, ``stop``, ``restart``, ``rewind``.
    :param rewind_to_enqueued_time: ISO-8601 time, for ``rewind``.
    :param rewind_to_sequence_numbers: JSON object partition -> sequence number, for ``rewind``.
    :param reason: why (``stop``: shown with the hold on the status page).
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

    def execute(self, context: Any) -> dict[str, Any]:
        from hubflow_plugins.core.job_control import JobControl

        if self.action not in STREAMING_ACTIONS:
            raise AirflowFailException(f"unknown action {self.action!r}; expected one of {STREAMING_ACTIONS}")
        dry_run = str(self.dry_run).lower() in ("true", "1", "yes")
        job = _job(self.job_name)
        who = requested_by(context)
        control = JobControl(job.name, job.paths.status_dir, heartbeat_timeout=heartbeat_timeout(job))
        live = control.liveness()
        self.log.info("found: %s", live.reason)
        done: list[str] = []
        if self.action == "rewind":
            return self._rewind(job, control, live, dry_run, who)
        if self.action == "ensure_running" and live.hold is not None:
            return self._report_hold(job, live, dry_run)

        if self.action == "stop":
            reason = self.reason or "on-call stop"
            if dry_run:
                done.append(f"would hold job {job.name} ({who}: {reason}) and stop it")
            else:
                hold = control.folder.place_hold(reason, by=who)
                done.append(
                    f"held job {job.name} {hold.describe()}; supervisors leave it stopped until start"
                )
                self.log.info("%s", done[-1])
        if self.action in ("start", "restart") and live.hold is not None:
            if dry_run:
                done.append(f"would release the hold {live.hold.describe()}")
            else:
                control.folder.release_hold()
                done.append(f"released the hold {live.hold.describe()}")
                self.log.info("%s", done[-1])

        if self.action in ("stop", "restart") and live.alive:
            if dry_run:
                done.append(f"would stop job {job.name} (pid {live.pid} on {live.host})")
            else:
                done.append(control.stop(self.stop_wait, log=self.log.info, requested_by=who))
            live = control.liveness()
        elif self.action == "stop":
            done.append("nothing to stop")

        if self.action in ("ensure_running", "start", "restart"):
            if live.alive:
                done.append("already running; nothing to do")
            else:
                recent = control.folder.restarts_within(3600)
                if self.action == "ensure_running" and recent >= job.max_restarts_per_hour:
                    raise AirflowFailException(
                        f"job {job.name} is restart-looping: restarted {recent} times in the last hour "
                        f"(limit {job.max_restarts_per_hour}); last state: {live.reason}. Read its driver "
                        f"log in {job.paths.status_dir}/driver.log, fix the cause, then start it from the "
                        "on-call DAG."
                    )
                if dry_run:
                    done.append(f"would start job {job.name} from checkpoint {job.paths.checkpoint_location}")
                else:
                    # Only the supervisor's own restarts count towards its restart-loop limit: an
                    # on-call start is the deliberate action that limit's message asks for.
                    done.append(self._start(job, control, count_restart=self.action == "ensure_running"))
        for line in done:
            self.log.info("%s", line)
        return {"job": job.name, "action": self.action, "dry_run": dry_run, "done": done}

    def _report_hold(self, job: RegisteredJob, live: Any, dry_run: bool) -> dict[str, Any]:
        """``ensure_running`` of a held job: say so, start nothing, succeed."""
        hold = live.hold
        line = (
            f"job {job.name} is held {hold.describe()}; not starting it. Start it with hubflow__oncall "
            "(action start or restart), which releases the hold."
        )
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

    def _rewind(self, job: RegisteredJob, control: Any, live: Any, dry_run: bool, who: str) -> dict[str, Any]:
        """The on-call rewind: the hook asks the hub, ``rewind.rewind_job`` does the rest."""
        from hubflow_plugins.core.rewind import RewindError, rewind_job
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
                stop_wait=self.stop_wait,
                start=lambda: self._start(job, control, count_restart=False),
                log=self.log.info,
            )
        except RewindError as exc:
            raise AirflowFailException(str(exc)) from None

    def _start(self, job: RegisteredJob, control: Any, count_restart: bool = True) -> str:
        from hubflow_jobs import EXIT_HELD, EXIT_LOCKED
        from hubflow_jobs.status_folder import JobState
        from hubflow_plugins.hooks.spark_submit import build_submit_hook

        control.folder.clear_requests()
        if count_restart:
            control.folder.record_restart()
        log_path, ship_to = _driver_log(job, control.folder)
        hook = build_submit_hook(job, secrets=_secrets(job))
        process = hook.launch_detached(str(job.application_path()), log_path, ship_to=ship_to)
        # Until the driver writes its own status (a minute or more on a loaded worker), say that it
        # is starting, from this host with spark-submit's pid: a supervisor run in between sees a
        # live start (pid alive here, fresh heartbeat elsewhere) instead of the old "stopped", and
        # starts no second driver.
        _starting_status(control.folder, job.name, process.pid)
        where = control.folder.path("driver.log")
        self.log.info("started spark-submit pid %s for job %s; driver log %s", process.pid, job.name, where)
        if ship_to:
            self.log.info("the driver log is written to %s on this worker and copied there", log_path)
        deadline = time.monotonic() + self.start_timeout.total_seconds()
        while time.monotonic() < deadline:
            live = control.liveness()
            if live.alive and live.state in (JobState.RUNNING, JobState.IDLE):
                return f"started job {job.name}: {live.reason}"
            code = process.poll()
            if code is not None:
                tail = _tail(log_path)
                why = {EXIT_LOCKED: " (another instance holds its lease)", EXIT_HELD: " (held by on-call)"}
                raise AirflowException(
                    f"job {job.name} exited with code {code}{why.get(code, '')} while starting:\n{tail}"
                )
            time.sleep(1.0)
        raise AirflowException(
            f"job {job.name} did not report running within {self.start_timeout}; see {where}"
        )


def _starting_status(folder: Any, job: str, pid: int) -> None:
    """status.json of a driver just launched: starting, on this host, as spark-submit's ``pid``."""
    from hubflow_jobs.status_folder import JobState, JobStatus

    JobStatus(folder, job).update(state=JobState.STARTING, pid=pid)


def requested_by(context: Any) -> str:
    """Who asked, for holds and markers: the DAG run's triggering user when Airflow says, and the run."""
    dag_run = context.get("dag_run")
    run_id = context.get("run_id") or getattr(dag_run, "run_id", None)
    user = getattr(dag_run, "triggering_user_name", None)
    return f"{user} (run {run_id})" if user else f"run {run_id}"


def is_backfill_run(context: Any) -> bool:
    """Whether the task runs in a backfill run (``airflow backfill create`` or the UI's Backfill)."""
    run_type = getattr(context.get("dag_run"), "run_type", None)
    return str(getattr(run_type, "value", run_type) or "").lower() in ("backfill", "backfill_job")


def _backfill_window(context: Any) -> tuple[str, str] | None:
    """``(start, end)`` ISO times of a backfill run's data interval, or None for other runs."""
    if not is_backfill_run(context):
        return None
    start, end = context.get("data_interval_start"), context.get("data_interval_end")
    if start is None or end is None or start >= end:
        raise AirflowFailException(
            f"backfill run without a data interval ({start} .. {end}): the DAG's schedule must be a "
            "cron data-interval timetable"
        )
    return start.isoformat(), end.isoformat()


def heartbeat_timeout(job: RegisteredJob) -> timedelta:
    """Silence after which a supervisor counts a job in a live state as dead."""
    return max(timedelta(minutes=2), parse_duration(job.supervise_every) / 2)


def _driver_log(job: RegisteredJob, folder: Any) -> tuple[Path, str | None]:
    """Where a detached driver's output goes, and the status folder to copy it to (None: no copy).

    A local status folder gets the log directly; a remote one gets a copy from a file on this
    worker, refreshed while the driver runs (``hubflow_jobs.driver_log``).
    """
    from hubflow_jobs.status_folder import DRIVER_LOG_FILE

    if folder.is_local:
        return Path(folder.path(DRIVER_LOG_FILE)), None
    import tempfile

    return Path(tempfile.gettempdir()) / "hubflow" / job.name / DRIVER_LOG_FILE, folder.url


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no driver log)"


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
        from hubflow_plugins.core.archive import archive_processed_files, purge_archive

        if is_backfill_run(context):
            raise AirflowSkipException(
                "backfill run: it reads its interval as a batch and consumes nothing from the landing "
                "folder, so there is nothing to archive"
            )
        dry_run = str(self.dry_run).lower() in ("true", "1", "yes")
        job = _job(self.job_name)
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
        from hubflow_plugins.core.checkpoint_backups import checkpoint_backups_root, purge_checkpoint_backups

        job = _job(self.job_name)
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
        from airflow.sdk.exceptions import AirflowSkipException

        from hubflow_plugins.hooks.spark_submit import build_submit_hook

        dry_run = str(self.dry_run).lower() in ("true", "1", "yes")
        job = _job(self.job_name)
        tables = job.paths.delta_tables
        if not tables:
            raise AirflowSkipException(f"job {job.name} writes no Delta table: nothing to maintain")
        retention = parse_duration(self.vacuum_retention or job.vacuum_retention)
        args = [
            "--application",
            job.application,
            "--vacuum-retention-hours",
            f"{retention.total_seconds() / 3600:g}",
            "--checkpoint-after-commits",
            str(job.delta_checkpoint_after_commits),
            *(["--dry-run"] if dry_run else []),
        ]
        self.log.info(
            "maintaining the Delta tables of job %s%s: %s", job.name, " (dry run)" if dry_run else "", tables
        )
        self._hook = build_submit_hook(job, secrets=_secrets(job), extra_args=args)
        self._hook.submit(str(job.application_path().with_name("lake_maintenance.py")))
        return {"job": job.name, "tables": tables, "dry_run": dry_run}

    def on_kill(self) -> None:
        if self._hook is not None:
            self._hook.on_kill()
