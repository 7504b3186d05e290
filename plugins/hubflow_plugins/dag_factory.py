"""Builds every hubflow DAG from the job registry: a new job is a registry entry, not new Python.

For each job ``<name>``:
- streaming jobs: ``<name>__supervisor`` every ``supervise_every``: ensure running, then a health
  check that fails the run (alerting) when the job is stalled, failing or restart-looping; a job
  held by on-call is reported and left stopped, and the run succeeds;
- scheduled jobs: ``<name>__available_now`` on ``schedule``: run the job (availableNow), check the
  checkpoint is healthy (a run that found no input is idle, not stalled), then archive the processed
  landing files when ``archive`` is set. Backfill runs skip the health check and the archive.
  Its tasks are retried (the job's ``retries``, with a growing delay): a retry resumes from the
  checkpoint or replaces the interval again, so it never does committed work twice. With
  ``finish_within``, a run not finished that long after it was queued pages the job's notifiers
  (an Airflow deadline alert, ``hubflow_plugins.notifications.deadline_alerts``).
- jobs that can backfill, streaming or scheduled: ``<name>__backfill``, never run by the scheduler,
  whose backfill runs (UI: Trigger -> Backfill) replace one hour each and carry the hour as partition
  key, so the tables' events name the hour (``hubflow.partitions``) and downstream jobs follow; a
  scheduled job's ``__available_now`` backfills replace its own intervals, not followed;
- ``schedule: asset(...)`` jobs that can backfill: ``<name>__follow``, run only by partitioned events
  of its tables (a backfilled hour upstream), which replaces that hour of its own tables; the
  ``__available_now`` DAG keeps running on the ordinary (unpartitioned) events, incrementally.
- streaming jobs: ``<name>__oncall`` (manual, a Params form: action, dry run, reason, force), one
  per job so that Airflow's DAG-level permissions say who may act on which job; one run at a time.
- streaming jobs with ``quarantine_after``: ``<name>__quarantine_review``, run when the supervisor
  quarantines the job (the asset ``<name>__quarantined``): a human-in-the-loop task asks on-call in
  Required Actions (Resume, Rewind, Keep held), then the answer runs under the answering user's name.
Every DAG of a job carries the registry's ``access:`` as its ``access_control``
(``hubflow.dag_access``).
And once: ``hubflow__cleanup`` (daily: archive retention, checkpoint backups, and compaction, VACUUM and log
checkpoints of the Delta tables of every job that writes the lake; a Params form has a dry run).

Only the registry file is read at parse time; job configs are read when a task runs.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import (
    DAG,
    Asset,
    AssetAlias,
    AssetAll,
    AssetAny,
    AssetWatcher,
    CronDataIntervalTimetable,
    CronPartitionTimetable,
    DeltaDataIntervalTimetable,
    Param,
    PartitionedAssetTimetable,
)

from hubflow.applications import can_backfill, writes_lake_tables
from hubflow.dag_access import access_control
from hubflow.durations import parse_duration
from hubflow.event_schedule import EventsSchedule, arrivals_asset_name, arrivals_asset_uri
from hubflow.lake_assets import AssetSchedule, alias_name
from hubflow.operations.quarantine_review import (
    quarantine_alias_name,
    quarantined_asset_name,
    quarantined_asset_uri,
    review_dag_id,
)
from hubflow.partitions import (
    KEY_FORMAT,
    PARTITION_CRON,
    PARTITION_TIMEZONE,
    backfill_dag_id,
    follow_dag_id,
)
from hubflow.registry import RegisteredJob, Registry
from hubflow.supervision.health import HEALTHY, HEALTHY_STREAMING
from hubflow.supervision.supervisor import ONCALL_ACTIONS
from hubflow_plugins.notifications.deadline_alerts import finish_within_alert
from hubflow_plugins.operators.cleanup import (
    ArchiveOperator,
    CheckpointBackupRetentionOperator,
    DeltaMaintenanceOperator,
)
from hubflow_plugins.operators.quarantine_review import QuarantineAnswerOperator, QuarantineQuestionOperator
from hubflow_plugins.operators.spark_job import SparkJobOperator
from hubflow_plugins.operators.streaming_job import StreamingJobOperator
from hubflow_plugins.sensors.checkpoint_health import CheckpointHealthSensor

START_DATE = datetime(2026, 1, 1)
#: Cron presets as cron expressions, for the data-interval timetable.
PRESETS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
#: Airflow's ``retry_exponential_backoff`` for scheduled runs: each retry's delay doubles (Airflow
#: waits between 1 and 2 times ``retry_delay * 2 ** (try - 1)``, fixed per task instance), capped
#: at the job's ``max_retry_delay``.
RETRY_BACKOFF = 2.0


def build_dags(registry: Registry) -> dict[str, DAG]:
    """Every DAG of the registry, keyed by DAG id (ready for ``globals().update``)."""
    dags: dict[str, DAG] = {}
    for job in registry.jobs:
        dag = supervisor_dag(job) if job.mode == "streaming" else available_now_dag(job)
        dags[dag.dag_id] = dag
        if job.mode == "streaming":
            dags[job.oncall_dag_id] = oncall_dag(job)
            if job.quarantine_after is not None:
                review = quarantine_review_dag(job)
                dags[review.dag_id] = review
        if can_backfill(job.application):
            dags[backfill_dag_id(job.name)] = partitioned_backfill_dag(job)
        if job.asset_schedule is not None and can_backfill(job.application):
            dags[follow_dag_id(job.name)] = follow_dag(job)
    if registry.jobs:
        dags["hubflow__cleanup"] = cleanup_dag(registry)
    return dags


def _default_args() -> dict[str, Any]:
    """No retries: the supervisor's next run comes within ``supervise_every`` and a run that is
    waiting to retry would hold it back (one run at a time); on-call actions and cleanup are run
    again by a person or the next day. Scheduled runs get :func:`retry_args`."""
    return {"owner": "hubflow", "retries": 0}


def retry_args(job: RegisteredJob) -> dict[str, Any]:
    """The registry's retries of a scheduled job, as task arguments of its ``__available_now`` DAG.

    Every task of that DAG may be retried: ``run_job`` resumes from the checkpoint (a backfill run
    replaces its interval again), ``check_health`` only reads (and its bad verdicts and time-outs
    fail without retry), and archiving is safe to rerun. Failures no retry can cure fail at once.
    """
    return {
        "retries": job.retries,
        "retry_delay": parse_duration(job.retry_delay),
        "retry_exponential_backoff": RETRY_BACKOFF,
        "max_retry_delay": parse_duration(job.max_retry_delay),
    }


def _job_dag(
    job: RegisteredJob,
    description: str,
    schedule: Any,
    kind: str,
    task_args: dict[str, Any] | None = None,
    deadline: Any = None,
) -> DAG:
    """A job's own DAG (``job.dag_id``): one run at a time, no catch-up, tagged with its kind, the
    registry's ``access:`` as its ``access_control``; ``task_args`` change the default task arguments,
    ``deadline`` is its deadline alert, if any."""
    return DAG(
        dag_id=job.dag_id,
        description=description,
        schedule=schedule,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        default_args={**_default_args(), **(task_args or {})},
        tags=["hubflow", kind, *job.tags],
        access_control=access_control(job.access),
        deadline=deadline,
    )


def supervisor_dag(job: RegisteredJob) -> DAG:
    """Keep a long-running job alive and fail loudly when it is not healthy."""
    with _job_dag(
        job,
        f"Supervise the streaming job {job.name}: ensure it runs, check its checkpoint",
        schedule=parse_duration(job.supervise_every),
        kind="streaming",
    ) as dag:
        tables = AssetAlias(alias_name(job.name))  # what it announced before, and what it adds now
        # A quarantine's event goes through an alias: only the run that quarantines adds one.
        quarantine = [AssetAlias(quarantine_alias_name(job.name))] if job.quarantine_after is not None else []
        ensure = StreamingJobOperator(
            task_id="ensure_running",
            job_name=job.name,
            action="ensure_running",
            inlets=[tables],
            outlets=[tables, *quarantine],
        )
        health = CheckpointHealthSensor(
            task_id="check_health",
            job_name=job.name,
            accept=HEALTHY_STREAMING,
            allow_idle=True,
            skip_when_held=True,
            poke_interval=10,
            timeout=300,
            deferrable=job.health_check_deferred,
        )
        ensure >> health
    return dag


def available_now_dag(job: RegisteredJob) -> DAG:
    """Run a scheduled job over what has arrived, check it, archive what it processed."""
    with _job_dag(
        job,
        f"Run the job {job.name} with the availableNow trigger, then check and archive",
        schedule=job_schedule(job),
        kind="scheduled",
        task_args=retry_args(job),
        deadline=finish_within_alert(job),
    ) as dag:
        tables = AssetAlias(alias_name(job.name))  # each run adds the tables it committed to
        run = SparkJobOperator(task_id="run_job", job_name=job.name, outlets=[tables])
        health = CheckpointHealthSensor(
            task_id="check_health",
            job_name=job.name,
            accept=HEALTHY,
            allow_idle=True,
            poke_interval=5,
            timeout=300,
            deferrable=job.health_check_deferred,
        )
        run >> health
        if job.archive:
            health >> ArchiveOperator(task_id="archive_processed_files", job_name=job.name)
    return dag


def partitioned_backfill_dag(job: RegisteredJob) -> DAG:
    """``<job>__backfill``: its backfill runs replace one hour each of a job's tables.

    Hourly partitions (``CronPartitionTimetable``): a backfill run gets the hour as its partition
    key, which the tables' asset events carry, so jobs that follow them replace the same hour. Its
    ``end_date`` lies before its first hour, so the scheduler never runs it (Airflow's partitioned
    backfill ignores ``end_date``). Manual runs stay allowed, since the UI offers Backfill only
    in the Trigger dialog; a run without an hour fails, saying to backfill. One run at a time.
    """
    with DAG(
        dag_id=backfill_dag_id(job.name),
        description=f"Backfill hours of {job.name}: UI Trigger -> Backfill; followers replace the same hour",
        schedule=CronPartitionTimetable(PARTITION_CRON, timezone=PARTITION_TIMEZONE, key_format=KEY_FORMAT),
        start_date=START_DATE,
        end_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        default_args={**_default_args(), **retry_args(job)},
        tags=["hubflow", "backfill", *job.tags],
        access_control=access_control(job.access),
    ) as dag:
        tables = AssetAlias(alias_name(job.name))
        SparkJobOperator(task_id="run_job", job_name=job.name, interval_only=True, outlets=[tables])
    return dag


def follow_dag(job: RegisteredJob) -> DAG:
    """``<job>__follow``: replace the hour a partitioned event of the job's input tables names.

    Run by partitioned events only (``PartitionedAssetTimetable``, the key kept as it came): an
    upstream backfill run's hour. The job's ``__available_now`` DAG is run by the ordinary events
    and never by these, so a backfilled hour is replaced here once and not appended there.
    """
    assets = job.asset_schedule
    assert assets is not None
    with DAG(
        dag_id=follow_dag_id(job.name),
        description=f"Replace the hour of {job.name}'s tables that a backfill of its input replaced",
        schedule=PartitionedAssetTimetable(assets=asset_condition(assets)),
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        default_args={**_default_args(), **retry_args(job)},
        tags=["hubflow", "follow", *job.tags],
        access_control=access_control(job.access),
    ) as dag:
        tables = AssetAlias(alias_name(job.name))
        SparkJobOperator(task_id="run_job", job_name=job.name, interval_only=True, outlets=[tables])
    return dag


def job_schedule(job: RegisteredJob) -> Any:
    """A scheduled job's schedule: its tables' assets for ``asset(...)``, its hub's arrivals for
    ``events(...)``, else a data-interval timetable."""
    assets, events = job.asset_schedule, job.events_schedule
    if assets is not None:
        return asset_condition(assets)
    if events is not None:
        return arrivals_asset(job, events)
    return interval_timetable(job.schedule or "")


def arrivals_asset(job: RegisteredJob, events: EventsSchedule) -> Asset:
    """The asset ``<job>__events`` with a watcher over the job's hub (event-driven scheduling): the
    triggerer runs :class:`EventHubsArrivalTrigger`, and each announcement queues a run."""
    from hubflow_plugins.triggers.event_arrivals import EventHubsArrivalTrigger

    trigger = EventHubsArrivalTrigger(
        job_name=job.name,
        eventhubs_conn_id=job.eventhubs_conn_id or "",
        poll_interval=events.poll.total_seconds(),
    )
    name = arrivals_asset_name(job.name)
    return Asset(
        name=name, uri=arrivals_asset_uri(job.name), watchers=[AssetWatcher(name=name, trigger=trigger)]
    )


def asset_condition(schedule: AssetSchedule) -> Any:
    """``asset(a & b)`` as Airflow's condition on the tables named ``a`` and ``b``: by name, since a
    table's URI is known only when its job runs (core.lake_assets)."""
    refs = [Asset.ref(name=name) for name in schedule.names]
    if len(refs) == 1:
        return refs[0]
    return AssetAll(*refs) if schedule.when == "all" else AssetAny(*refs)


def interval_timetable(schedule: str) -> CronDataIntervalTimetable | DeltaDataIntervalTimetable:
    """A timetable with data intervals, so a backfill run knows the interval it owns.

    ``schedule`` is a cron expression, a preset such as ``@hourly``, or a duration such as
    ``"15 minutes"``.
    """
    try:
        return DeltaDataIntervalTimetable(parse_duration(schedule))
    except ValueError:
        return CronDataIntervalTimetable(PRESETS.get(schedule, schedule), timezone="UTC")


def oncall_dag(job: RegisteredJob) -> DAG:
    """Manual on-call actions on the streaming job ``job``, from the Trigger form; one run at a time.
    Its ``access_control`` is the job's (``access:``), as on the job's other DAG."""
    with DAG(
        dag_id=job.oncall_dag_id,
        description=f"On-call: restart, stop (and hold), start or rewind {job.name} (dry run: say what)",
        schedule=None,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        default_args=_default_args(),
        tags=["hubflow", "oncall", *job.tags],
        access_control=access_control(job.access),
        params={
            "action": Param("restart", type="string", enum=list(ONCALL_ACTIONS), title="Action"),
            "dry_run": Param(True, type="boolean", title="Dry run", description="Say what would be done"),
            "rewind_to_enqueued_time": Param(
                None,
                type=["null", "string"],
                title="Rewind to enqueued time",
                description="rewind only: ISO-8601 time, e.g. 2026-11-22T10:00:00Z (every partition)",
            ),
            "rewind_to_sequence_numbers": Param(
                None,
                type=["null", "string"],
                title="Rewind to sequence numbers",
                description='rewind only: JSON partition -> sequence number, e.g. {"0": 120, "1": 80}',
            ),
            "reason": Param(
                None,
                type=["null", "string"],
                title="Reason",
                description=(
                    "stop: why the job is held (shown on the status page until start); "
                    "force: why the hold is taken over"
                ),
            ),
            "force": Param(
                False,
                type="boolean",
                title="Force",
                description=(
                    "start, restart, rewind: take over a hold another action placed (a rewind in "
                    "progress, an upgrade, a quarantine); needs a reason"
                ),
            ),
        },
    ) as dag:
        StreamingJobOperator(
            task_id="oncall_action",
            job_name=job.name,
            action="{{ params.action }}",
            dry_run="{{ params.dry_run }}",
            rewind_to_enqueued_time="{{ params.rewind_to_enqueued_time or '' }}",
            rewind_to_sequence_numbers="{{ params.rewind_to_sequence_numbers or '' }}",
            reason="{{ params.reason or '' }}",
            force="{{ params.force }}",
        )
    return dag


def quarantine_review_dag(job: RegisteredJob) -> DAG:
    """Ask on-call about the quarantined job ``job`` (Required Actions), then carry out the answer.
    Run by the supervisor's quarantine event; its ``access_control`` is the job's (``access:``)."""
    with DAG(
        dag_id=review_dag_id(job.name),
        description=f"Quarantine review: resume, rewind or keep held the crash-looping job {job.name}",
        schedule=Asset(name=quarantined_asset_name(job.name), uri=quarantined_asset_uri(job.name)),
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        default_args=_default_args(),
        tags=["hubflow", "quarantine", *job.tags],
        access_control=access_control(job.access),
    ) as dag:
        question = QuarantineQuestionOperator(task_id="ask_oncall", job_name=job.name)
        question >> QuarantineAnswerOperator(
            task_id="carry_out_answer", job_name=job.name, question_task_id=question.task_id
        )
    return dag


def cleanup_dag(registry: Registry) -> DAG:
    """Daily retention of archived landing files and checkpoint backups, and Delta maintenance.

    It acts on every job, so it carries no ``access_control``: only admins (and roles given all
    DAGs) may see and trigger it.

    Which lake jobs write Delta is in their configs, read when the task runs (a parquet job's
    maintenance task skips itself), so DAG parsing reads the registry only.
    """
    with DAG(
        dag_id="hubflow__cleanup",
        description=(
            "Delete archived landing files and checkpoint backups past each job's retention; compact, "
            "vacuum and checkpoint the Delta tables"
        ),
        schedule=timedelta(days=1),
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        default_args=_default_args(),
        tags=["hubflow", "cleanup"],
        params={
            "dry_run": Param(
                False,
                type="boolean",
                title="Dry run",
                description="Delta maintenance: say what, change nothing",
            )
        },
    ) as dag:
        for job in registry.jobs:
            if job.archive and job.archive_retention:
                ArchiveOperator(
                    task_id=f"archive_{job.name}",
                    job_name=job.name,
                    purge_older_than=job.archive_retention,
                )
            CheckpointBackupRetentionOperator(task_id=f"checkpoint_backups_{job.name}", job_name=job.name)
            if writes_lake_tables(job.application):
                DeltaMaintenanceOperator(
                    task_id=f"delta_maintenance_{job.name}", job_name=job.name, dry_run="{{ params.dry_run }}"
                )
    return dag
