"""A scheduled job's ``finish_within`` as an Airflow deadline alert that pages its notifiers.

:func:`finish_within_alert` is the ``DeadlineAlert`` the DAG factory puts on the job's
``__available_now`` DAG: the deadline is the run's queued time plus ``finish_within``. Airflow makes
one deadline per run; a run that succeeds before it has it deleted, and the scheduler marks one
that passes as missed and queues this module's :func:`page_deadline_missed` as a ``SyncCallback``
on the executor (a LocalExecutor process, a Celery worker), once per run. There it reads the
registry as tasks do, builds the ``deadline-missed`` message (``hubflow.alerts``) and sends it to
every notifier of the job's ``alerts:``, as the job's other alerts are sent.

Why a ``SyncCallback``: the notifiers are synchronous (SMTP, Slack webhook, custom classes), and
the executor runs callbacks in a supervised process with the Task SDK's connections, like a task; an
``AsyncCallback`` would run them in the triggerer's shared event loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import DeadlineAlert, DeadlineReference, SyncCallback

from hubflow.registry import RegisteredJob


def finish_within_alert(job: RegisteredJob) -> DeadlineAlert | None:
    """The deadline alert of ``job``'s scheduled runs (its ``finish_within``), or None without one.

    The reference is the run's queued time, not its logical date: a data-interval run's logical
    date is the start of the interval it processes (an hourly run queued at 11:00 has 10:00), and
    an asset-triggered or manual run may have none, so "finish within 45 minutes" would mean
    something else for each kind of run.
    """
    interval = job.finish_within_delta
    if interval is None:
        return None
    return DeadlineAlert(
        reference=DeadlineReference.DAGRUN_QUEUED_AT,
        interval=interval,
        callback=SyncCallback(
            page_deadline_missed, kwargs={"job_name": job.name, "finish_within": job.finish_within}
        ),
        name=f"{job.name} finish_within {job.finish_within}",
    )


def page_deadline_missed(job_name: str, finish_within: str, context: Mapping[str, Any] | None = None) -> str:
    """Page the job's notifiers that a run missed its deadline; run by Airflow's executor.

    ``context`` is what Airflow's scheduler gives a deadline callback: the run (``dag_run``, as the
    REST API shows it) and the deadline (``deadline.deadline_time``). A backfill run is not paged,
    as its failures are not (the person who started it watches it). Raises when no notifier took
    the page, so that Airflow records the callback as failed.
    """
    import logging

    from hubflow.alerts import AlertKind, deadline_missed_message
    from hubflow.registry import load_registry
    from hubflow.utc_times import utc_time
    from hubflow_plugins.notifications.alert_notifiers import send_alerts
    from hubflow_plugins.notifications.job_alerts import with_status_page

    log = logging.getLogger(__name__)
    context = dict(context or {})
    run = dict(context.get("dag_run") or {})
    deadline = dict(context.get("deadline") or {})
    if run.get("run_type") == "backfill":
        log.info("backfill run %s missed its deadline; backfill runs do not page", run.get("dag_run_id"))
        return "not paged: a backfill run"
    job = load_registry().job(job_name)
    if job.alerts is None or not job.alerts.enabled or AlertKind.DEADLINE_MISSED not in job.alerts.alert_on:
        log.warning("job %s missed its deadline, but its alerts no longer page for it", job_name)
        return "not paged: alerts off"
    now = datetime.now(UTC)
    message = deadline_missed_message(
        job.name,
        dag_id=str(run.get("dag_id") or job.dag_id),
        run_id=str(run.get("dag_run_id") or run.get("run_id") or "unknown"),
        finish_within=finish_within,
        deadline=utc_time(deadline.get("deadline_time")) or now,
        now=now,
        run_state=run.get("state"),
        queued_at=utc_time(run.get("queued_at")),
        link=with_status_page(job.alerts.policy()).link(job.name),
    )
    deliveries = send_alerts([message], job.alerts.notifiers, context, log=log.info)
    failed = [f"{d.notifier}: {d.error}" for d in deliveries if d.error is not None]
    if len(failed) == len(deliveries):
        raise RuntimeError(f"no notifier took the deadline page of job {job.name}: {'; '.join(failed)}")
    return f"paged {len(deliveries) - len(failed)} of {len(deliveries)} notifiers: {message.subject}"
