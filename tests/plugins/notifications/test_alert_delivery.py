"""Alerts through the real notifiers to real receivers on loopback: the SMTP provider's SmtpNotifier to
an aiosmtpd server, the Slack provider's SlackWebhookNotifier to an HTTP server standing in for the
webhook. The streaming supervisor's alerting path runs on real status folders (no scheduler, no Spark):
each change is one message per receiver, its resolution one more, a repeated check none, no secret."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from hubflow.alerts import AlertMessage, AlertPolicy, Findings, decide_alerts
from hubflow.registry import AlertNotifier
from hubflow.status import JobState, JobStatus, StatusFolder
from hubflow_plugins.notifications.alert_notifiers import send_alerts
from hubflow_plugins.operators.streaming_job import StreamingJobOperator
from tests.dags.helpers import landing_job, write_registry
from tests.plugins.notifications.receivers import SmtpServer, WebhookServer

SECRET_KEY = "c2VjcmV0LWtleS1kby1ub3Qtc2hvdw=="
CONNECTION_STRING = (
    f"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=send;SharedAccessKey={SECRET_KEY}"
)
NOTIFIERS = [
    {"smtp": {"to": ["oncall@example.com"], "smtp_conn_id": "alerts_smtp"}},
    {"slack_webhook": {"slack_webhook_conn_id": "alerts_slack"}},
]


@pytest.fixture
def receivers(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[SmtpServer, WebhookServer]]:
    with SmtpServer() as smtp, WebhookServer() as webhook:
        monkeypatch.setenv("AIRFLOW_CONN_ALERTS_SMTP", smtp.connection)
        monkeypatch.setenv("AIRFLOW_CONN_ALERTS_SLACK", webhook.connection)
        yield smtp, webhook


def _everything_received(smtp: SmtpServer, webhook: WebhookServer) -> str:
    return "\n".join([*(m["raw"] for m in smtp.inbox.mails), *(str(p["body"]) for p in webhook.posts)])


def test_one_message_per_receiver_for_each_change_and_its_resolution(receivers: Any) -> None:
    smtp, webhook = receivers
    notifiers = [AlertNotifier.model_validate(n) for n in NOTIFIERS]
    policy = AlertPolicy(status_page_url="https://airflow.example.com/hubflow/")
    bad = Findings(
        "clicks",
        verdict="failed-batch",
        verdict_failed=True,
        batch_id=12,
        exception=f"boom {CONNECTION_STRING}",
    )
    messages, state = decide_alerts(None, bad, policy)
    deliveries = send_alerts(messages, notifiers, context={})
    assert [d.error for d in deliveries] == [None, None]
    assert len(smtp.inbox.mails) == 1 and len(webhook.posts) == 1
    mail, post = smtp.inbox.mails[0], webhook.posts[0]
    assert mail["to"] == ["oncall@example.com"] and mail["subject"] == "[hubflow] ALERT clicks: batch failed"
    assert "Batch: 12" in mail["body"] and "https://airflow.example.com/hubflow/#job-clicks" in mail["body"]
    assert post["path"] == "/services/T000/B000/XXXX"
    assert "*[hubflow] ALERT clicks: batch failed*" in post["body"]["text"]
    assert "<https://airflow.example.com/hubflow/#job-clicks|status page>" in post["body"]["text"]

    messages, state = decide_alerts(state, bad, policy)
    assert messages == []
    messages, state = decide_alerts(state, Findings("clicks", verdict="healthy"), policy)
    send_alerts(messages, notifiers, context={})
    assert len(smtp.inbox.mails) == 2 and len(webhook.posts) == 2
    assert smtp.inbox.mails[1]["subject"] == "[hubflow] RESOLVED clicks: batch failed"
    received = _everything_received(smtp, webhook)
    assert SECRET_KEY not in received and "SharedAccessKey=***" in received


def test_a_receiver_that_is_down_does_not_stop_the_others(
    receivers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    smtp, _webhook = receivers
    monkeypatch.setenv(
        "AIRFLOW_CONN_ALERTS_SLACK", '{"conn_type": "slackwebhook", "password": "http://127.0.0.1:9/x"}'
    )
    notifiers = [AlertNotifier.model_validate(n) for n in reversed(NOTIFIERS)]
    message = AlertMessage(
        "clicks", "corrupt", "firing", "[hubflow] ALERT clicks: checkpoint corrupt", "text"
    )
    slack, mail = send_alerts([message], notifiers, context={})
    assert slack.error is not None and mail.error is None and len(smtp.inbox.mails) == 1


def _operator_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **registry: Any) -> StatusFolder:
    alerts = registry.pop("alerts", None) or _alerts()
    entry = landing_job(tmp_path, "clicks", streaming=True, alerts=alerts, **registry)
    path = write_registry(tmp_path, [entry])
    monkeypatch.setenv("HUBFLOW_REGISTRY", str(path))
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    return StatusFolder(str(tmp_path / "clicks" / "status" / "clicks"))


def _supervise() -> dict[str, Any]:
    context = {
        "dag_run": SimpleNamespace(run_type="scheduled", run_id="scheduled__1", triggering_user_name=None)
    }
    return StreamingJobOperator(task_id="ensure_running", job_name="clicks").execute(context)


def test_the_supervisor_pages_a_restart_loop_once_and_its_end_once(
    receivers: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    smtp, webhook = receivers
    folder = _operator_registry(tmp_path, monkeypatch, max_restarts_per_hour=3)  # the optional hard limit
    JobStatus(folder, "clicks").update(
        state=JobState.FAILED, exception=f"EventHubError: {CONNECTION_STRING}\n\tat x"
    )
    for _ in range(3):
        folder.record_restart()
    for _ in range(3):  # three supervisor runs refuse: one page
        with pytest.raises(AirflowFailException, match="restart-looping"):
            _supervise()
    assert [m["subject"] for m in smtp.inbox.mails] == ["[hubflow] ALERT clicks: restart loop"]
    assert len(webhook.posts) == 1
    assert "Exception: EventHubError: Endpoint=sb://" in smtp.inbox.mails[0]["body"]
    assert folder.read_json("alerts.json")["active"]["restart-loop"]["kind"] == "restart-loop"

    JobStatus(folder, "clicks").update(
        state=JobState.RUNNING, pid=os.getpid(), exception=None
    )  # on-call started it
    for _ in range(2):
        assert _supervise()["done"] == ["already running; nothing to do"]
    assert [m["subject"] for m in smtp.inbox.mails][1:] == ["[hubflow] RESOLVED clicks: restart loop"]
    assert len(webhook.posts) == 2
    assert SECRET_KEY not in _everything_received(smtp, webhook)


def test_the_supervisor_pages_a_hold_past_its_limit(
    receivers: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    smtp, webhook = receivers
    folder = _operator_registry(tmp_path, monkeypatch)
    JobStatus(folder, "clicks").update(state=JobState.STOPPED)
    folder.place_hold(f"sink full; {CONNECTION_STRING}", by="alice")
    _supervise()
    assert smtp.inbox.mails == [], "held a moment: nothing to say"
    hold = folder.read_json("HOLD")
    hold["at"] = "2020-01-01T00:00:00+00:00"
    folder.write_json("HOLD", hold)
    _supervise()
    _supervise()
    assert [m["subject"] for m in smtp.inbox.mails] == ["[hubflow] ALERT clicks: held too long"]
    assert "by alice: sink full" in smtp.inbox.mails[0]["body"] and len(webhook.posts) == 1
    assert SECRET_KEY not in _everything_received(smtp, webhook)


def test_the_supervisor_pages_a_backlog_older_than_its_limit_as_the_job_reports_it(
    receivers: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``max_lag_seconds`` (issue #27 item 3, judged since #51 item 3 on the backlog the job's source
    reports in its last progress: the newest event's enqueued time minus the last read one's, the
    largest over partitions); paged once, resolved once when the reported backlog is within it."""
    from pyspark_eventhubs.backlog import PartitionBacklog, backlog_report

    def report(batch_id: int, partitions: dict[str, PartitionBacklog]) -> None:
        source = {"description": "EventHubsStreamReader", "backlog": backlog_report(partitions)}
        progress = {"batch_id": batch_id, "num_input_rows": 10, "sources": [source]}
        JobStatus(folder, "clicks").update(state=JobState.RUNNING, pid=os.getpid(), last_progress=progress)

    smtp, webhook = receivers
    folder = _operator_registry(tmp_path, monkeypatch, alerts=_alerts(max_lag_seconds=1))
    report(7, {"0": PartitionBacklog(2, 4.0), "1": PartitionBacklog(1, 6.4), "2": PartitionBacklog(0, 0.0)})
    _supervise()
    _supervise()
    assert [m["subject"] for m in smtp.inbox.mails] == ["[hubflow] ALERT clicks: backlog over the limit"]
    body = smtp.inbox.mails[0]["body"]
    assert re.search(r"Lag: 3 events, 6 s \(limit 1 s\)", body), body

    report(8, {"0": PartitionBacklog(1, 0.5), "1": PartitionBacklog(0, 0.0), "2": PartitionBacklog(0, 0.0)})
    _supervise()
    resolved = "[hubflow] RESOLVED clicks: backlog over the limit"
    assert [m["subject"] for m in smtp.inbox.mails][1:] == [resolved]
    assert len(webhook.posts) == 2


def _alerts(**limits: Any) -> dict[str, Any]:
    return {"notifiers": NOTIFIERS, "status_page_url": "https://airflow.example.com/hubflow/", **limits}


def test_the_supervisor_pages_a_refused_upgrade_in_the_run_that_refuses_it(
    receivers: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/operations.md "Upgrades": the refusal is paged at once, naming both versions, once; the
    change reverted, it resolves."""
    from hubflow.supervision.upgrades import plan_of

    smtp, webhook = receivers
    folder = _operator_registry(tmp_path, monkeypatch)
    config = tmp_path / "clicks.yaml"
    job_digest = "1" * 64  # the version running: its plan is the config's as it is now
    folder.write_json(
        "supervisor.json",
        {"fingerprint": {"digest": job_digest}, "plan": plan_of(config, "files_to_lake").to_dict()},
    )
    JobStatus(folder, "clicks").update(state=JobState.RUNNING, pid=os.getpid())
    original = config.read_text(encoding="utf-8")
    config.write_text(original.replace("format: parquet", "format: delta"), encoding="utf-8")
    with pytest.raises(AirflowFailException, match=r"the upgrade from version 111111111111 to .* is refused"):
        _supervise()
    [mail] = smtp.inbox.mails
    assert mail["subject"] == "[hubflow] ALERT clicks: upgrade failed (refused or rolled back)"
    new = folder.read_json("supervisor.json")["upgrade"]["after"]
    assert f"Upgrade: job clicks: the upgrade from version 111111111111 to {new[:12]} is refused" in (
        " ".join(mail["body"].split())
    )
    assert len(webhook.posts) == 1  # Slack's text escapes ">" as "&gt;"
    assert re.search(r"sink \w+: parquet \S+ -&gt; delta ", webhook.posts[0]["body"]["text"]), "the change"
    assert _supervise()["done"][-1] == "job clicks keeps running version 111111111111"
    assert len(smtp.inbox.mails) == 1, "the same failure again says nothing"

    config.write_text(original, encoding="utf-8")
    folder.write_json("supervisor.json", {**folder.read_json("supervisor.json"), "fingerprint": {}})
    _supervise()
    assert [m["subject"] for m in smtp.inbox.mails][1:] == [
        "[hubflow] RESOLVED clicks: upgrade failed (refused or rolled back)"
    ]


def _deadline_context(run_id: str) -> dict[str, Any]:
    """What Airflow's scheduler hands a deadline callback (``Deadline.handle_miss``): the run as the
    REST API shows it, and the deadline."""
    from datetime import UTC, datetime

    return {
        "dag_run": {
            "dag_id": "orders__available_now",
            "dag_run_id": run_id,
            "state": "running",
            "queued_at": "2026-11-22T09:00:02.125000Z",
            "run_type": "scheduled",
        },
        "deadline": {"id": "0199", "deadline_time": datetime(2026, 11, 22, 9, 45, 2, 125000, tzinfo=UTC)},
    }


def test_a_missed_deadline_pages_every_notifier_of_the_job_once(
    receivers: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hubflow_plugins.notifications.deadline_alerts import page_deadline_missed

    smtp, webhook = receivers
    alerts = {"notifiers": NOTIFIERS, "status_page_url": "https://airflow.example.com/hubflow/"}
    registry = write_registry(tmp_path, [landing_job(tmp_path, "orders", finish_within="45m", alerts=alerts)])
    monkeypatch.setenv("HUBFLOW_REGISTRY", str(registry))
    run_id = "scheduled__2026-11-22T08:00:00+00:00"

    said = page_deadline_missed("orders", "45m", context=_deadline_context(run_id))

    assert said.startswith("paged 2 of 2 notifiers"), said
    (mail,), (post,) = smtp.inbox.mails, webhook.posts
    assert mail["subject"] == f"[hubflow] ALERT orders: run missed its deadline (finish_within): run {run_id}"
    assert mail["to"] == ["oncall@example.com"]
    assert f"Run: {run_id} of DAG orders__available_now, running when the deadline passed" in mail["body"]
    assert (
        "Deadline: 2026-11-22T09:45:02+00:00 (queued at 2026-11-22T09:00:02+00:00 + finish_within 45m)"
        in mail["body"]
    )
    assert "https://airflow.example.com/hubflow/#job-orders" in mail["body"]
    assert run_id in post["body"]["text"] and "missed its deadline" in post["body"]["text"]


def test_a_deadline_page_no_notifier_took_fails_the_callback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hubflow_plugins.notifications.deadline_alerts import page_deadline_missed

    closed = SmtpServer()  # never started: nothing listens on its port
    monkeypatch.setenv("AIRFLOW_CONN_ALERTS_SMTP", closed.connection)
    alerts = {"notifiers": NOTIFIERS[:1]}
    registry = write_registry(tmp_path, [landing_job(tmp_path, "orders", finish_within="45m", alerts=alerts)])
    monkeypatch.setenv("HUBFLOW_REGISTRY", str(registry))
    with pytest.raises(
        RuntimeError, match=r"no notifier took the deadline page of job orders: notifiers\[0\]"
    ):
        page_deadline_missed("orders", "45m", context=_deadline_context("manual__1"))


def test_a_backfill_run_past_its_deadline_pages_nobody(
    receivers: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As its failures do not: the person who started the backfill watches it (docs/operations.md)."""
    from hubflow_plugins.notifications.deadline_alerts import page_deadline_missed

    smtp, webhook = receivers
    alerts = {"notifiers": NOTIFIERS}
    registry = write_registry(tmp_path, [landing_job(tmp_path, "orders", finish_within="45m", alerts=alerts)])
    monkeypatch.setenv("HUBFLOW_REGISTRY", str(registry))
    context = _deadline_context("backfill__2026-11-20T00:00:00+00:00")
    context["dag_run"]["run_type"] = "backfill"
    assert page_deadline_missed("orders", "45m", context=context) == "not paged: a backfill run"
    assert smtp.inbox.mails == [] and webhook.posts == []
