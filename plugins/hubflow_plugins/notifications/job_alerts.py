"""One alerting cycle for a job, from the task that looked at it: the streaming supervisor after its
judgment, a scheduled job's ``run_job`` after its run (the registry's ``alerts:``).

The findings come from the job's status folder and the health judgment
(``hubflow.alerts.read_findings``; the backlog, ``max_lag_events`` / ``max_lag_seconds``, is what the
job's sources report in its last progress), the control plane decides what to say
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


def with_status_page(policy: Any) -> Any:
    """The policy with the status page under Airflow's ``[api] base_url`` when the registry names none."""
    if policy.status_page_url:
        return policy
    from airflow.sdk.configuration import conf

    base = conf.get("api", "base_url", fallback=None)
    return replace(policy, status_page_url=f"{base.rstrip('/')}/hubflow/") if base else policy
