"""One alerting cycle for a job, from the task that looked at it: the streaming supervisor after its
judgment, a scheduled job's ``run_job`` after its run (the registry's ``alerts:``).

The findings come from the job's status folder and the health judgment
(``hubflow.alerts.read_findings``), the control plane decides what to say
(``hubflow.alerts.alert_cycle``, state in the status folder's alerts.json, so a message is sent once
whoever runs the cycle), and the registry's notifiers send it. It never raises: a problem with
alerting is logged and the task goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from hubflow.registry import RegisteredJob


def run_alert_cycle(
    job: RegisteredJob,
    context: Any,
    log: Callable[..., None],
    warn: Callable[..., None],
    *,
    restart_refusal: str | None = None,
    run_failure: str | None = None,
) -> list[Any]:
    """Judge, decide and notify for ``job``; return the messages sent.

    The checkpoint is judged as the job's ``check_health`` does (:func:`judge_job`), unless
    ``run_failure`` says why a scheduled run failed for good (its last try): the checkpoint slot
    then says ``failed-batch`` with that reason, whatever the checkpoint shows (a run can fail
    before its first batch).
    """
    if job.alerts is None or not job.alerts.enabled:
        return []
    from hubflow.alerts import AlertKind, alert_cycle, first_line, read_findings
    from hubflow.status import StatusFolder
    from hubflow_plugins.notifications.alert_notifiers import send_alerts

    try:
        health = judge_job(job) if run_failure is None else None
        folder = StatusFolder(job.paths.status_dir)
        findings = read_findings(job.name, folder, health=health, restart_refusal=restart_refusal)
        measurable = health is not None and job.eventhubs_conn_id and findings.held_seconds is None
        if measurable and job.alerts.max_lag_seconds is not None:  # a held job's backlog is not news
            events, seconds = measure_backlog(job, health)
            findings = replace(findings, lag_events=events, lag_seconds=seconds)
        if run_failure is not None:
            findings = replace(
                findings,
                verdict=str(AlertKind.FAILED_BATCH),
                verdict_failed=True,
                reason=first_line(run_failure),
            )
        policy = with_status_page(job.alerts.policy())

        def send(messages: Any) -> list[Any]:
            deliveries = send_alerts(messages, job.alerts.notifiers, context, log=log)
            delivered = {id(d.message) for d in deliveries if d.error is None}
            return [m for m in messages if id(m) not in delivered]

        sent = alert_cycle(folder, findings, policy, send)
    except Exception as exc:  # alerting must not stop the task
        from hubflow.redaction import redact

        warn("alerts of job %s not evaluated: %s", job.name, redact(f"{type(exc).__name__}: {exc}"))
        return []
    for message in sent:
        log("alert %s %s: %s", message.status, message.kind, message.subject)
    return sent


def judge_job(job: RegisteredJob) -> Any:
    """The checkpoint's judgment as the job's ``check_health`` makes it: a streaming job's batch in
    flight is fine and a held job is not judged; idle is not stalled (``core.health.judge``)."""
    from hubflow.supervision.health import HEALTHY, HEALTHY_STREAMING, HealthCheck, judge

    streaming = job.mode == "streaming"
    return judge(
        HealthCheck(
            checkpoint=job.paths.checkpoint_location,
            stalled_after_seconds=job.stalled_after_delta.total_seconds(),
            accept=tuple(str(v) for v in (HEALTHY_STREAMING if streaming else HEALTHY)),
            status_dir=job.paths.status_dir,
            heartbeat_timeout_seconds=job.heartbeat_timeout.total_seconds(),
            streaming=streaming,
            allow_idle=True,
            skip_when_held=streaming,
        )
    )


def measure_backlog(job: RegisteredJob, health: Any) -> tuple[int, float]:
    """The job's backlog on its hub: events its checkpoint has not committed, and seconds since the
    oldest of them was enqueued (one event read per partition that lags)."""
    from datetime import UTC, datetime

    from hubflow.alerts import hub_backlog, unread_from
    from hubflow.supervision.health import committed_sequence_numbers
    from hubflow_plugins.hooks.eventhubs import EventHubsHook

    hook = EventHubsHook(job.eventhubs_conn_id or "")
    hub, latest = hook.latest_sequence_numbers()
    committed = committed_sequence_numbers(health.report or {}, hub)
    oldest = hook.oldest_unread_enqueued_ms(unread_from(latest, committed))
    return hub_backlog(latest, committed, oldest, datetime.now(UTC))


def with_status_page(policy: Any) -> Any:
    """The policy with the status page under Airflow's ``[api] base_url`` when the registry names none."""
    if policy.status_page_url:
        return policy
    from airflow.sdk.configuration import conf

    base = conf.get("api", "base_url", fallback=None)
    return replace(policy, status_page_url=f"{base.rstrip('/')}/hubflow/") if base else policy
