"""The alert decision (core.alerts.decide_alerts) as a pure function: each kind and threshold, one
message per change, one resolution, none for the same finding again, no secret in any message."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hubflow.alerts import (
    AlertPolicy,
    Findings,
    alert_cycle,
    decide_alerts,
    first_line,
    lag_seconds,
    read_findings,
)
from hubflow.registry import RegistryError, load_registry
from hubflow.status import JobStatus, StatusFolder

NOW = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
POLICY = AlertPolicy(
    held_longer_than_seconds=3600,
    max_lag_events=1000,
    max_lag_seconds=600,
    status_page_url="https://airflow.example.com/hubflow/",
)
SECRET = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=s3cr3tKEY="


def _run(state, findings, policy=POLICY):
    return decide_alerts(state, findings, policy, NOW)


@pytest.mark.parametrize("verdict", ["stalled", "failed-batch", "corrupt"])
def test_a_failing_verdict_alerts_once_and_resolves_once(verdict: str) -> None:
    bad = Findings("clicks", verdict=verdict, verdict_failed=True, reason="no commit", batch_id=41)
    messages, state = _run(None, bad)
    assert [(m.kind, m.status) for m in messages] == [(verdict, "firing")]
    text = messages[0].text
    assert (
        "Job clicks" in text
        and f"({verdict})" in text
        and "Batch: 41" in text
        and "Reason: no commit" in text
    )
    assert "https://airflow.example.com/hubflow/#job-clicks" in text
    assert _run(state, bad)[0] == [], "the same verdict again says nothing"
    messages, state = _run(state, Findings("clicks", verdict="healthy"))
    assert [(m.kind, m.status) for m in messages] == [(verdict, "resolved")]
    assert messages[0].subject == f"[hubflow] RESOLVED clicks: {messages[0].subject.split(': ', 1)[1]}"
    assert state["active"] == {}
    assert _run(state, Findings("clicks", verdict="healthy"))[0] == []


def test_a_verdict_that_changes_gives_one_message_naming_both() -> None:
    _, state = _run(None, Findings("clicks", verdict="stalled", verdict_failed=True))
    messages, state = _run(state, Findings("clicks", verdict="corrupt", verdict_failed=True))
    assert [(m.kind, m.status) for m in messages] == [("corrupt", "firing")]
    assert "(was stalled)" in messages[0].text


def test_an_idle_stall_or_an_unjudged_checkpoint_changes_nothing() -> None:
    assert _run(None, Findings("clicks", verdict="stalled", verdict_failed=False))[0] == []
    _, state = _run(None, Findings("clicks", verdict="failed-batch", verdict_failed=True))
    assert _run(state, Findings("clicks"))[0] == [], "not judged (held): the alert stays, no resolution"
    assert "checkpoint" in _run(state, Findings("clicks"))[1]["active"]
    assert _run(None, Findings("clicks", verdict="missing", verdict_failed=True))[0] == [], (
        "missing: no alert"
    )


def test_the_restart_loop_alerts_with_the_exception_and_resolves_when_the_supervisor_restarts() -> None:
    loop = Findings("clicks", restart_refusal="restart-looping: 3 times", exception=f"boom {SECRET}\n  at x")
    messages, state = _run(None, loop)
    assert [(m.kind, m.status) for m in messages] == [("restart-loop", "firing")]
    assert "Exception: boom Endpoint=sb://" in messages[0].text and "s3cr3t" not in messages[0].text
    assert "at x" not in messages[0].text, "only the exception's first line"
    assert _run(state, loop)[0] == []
    assert _run(state, Findings("clicks"))[0] == [], "an on-call action decides no restart"
    messages, _ = _run(state, Findings("clicks", restart_refusal=""))
    assert [(m.kind, m.status) for m in messages] == [("restart-loop", "resolved")]


def test_a_hold_alerts_only_past_its_limit() -> None:
    short = Findings("clicks", held_seconds=3000, held_by="alice", held_reason="sink full")
    assert _run(None, short)[0] == []
    long = Findings("clicks", held_seconds=7200, held_by="alice", held_reason=f"sink full; password={SECRET}")
    messages, state = _run(None, long)
    assert [(m.kind, m.status) for m in messages] == [("held-too-long", "firing")]
    assert "Held: 2.0 h (limit 1.0 h) by alice: sink full" in messages[0].text
    assert "s3cr3t" not in messages[0].text
    assert _run(state, Findings("clicks", held_seconds=9000))[0] == []
    messages, _ = _run(state, Findings("clicks"))
    assert [(m.kind, m.status) for m in messages] == [("held-too-long", "resolved")]
    assert _run(None, long, AlertPolicy(held_longer_than_seconds=None))[0] == []


@pytest.mark.parametrize(
    ("events", "seconds", "alerts"),
    [(1001, None, True), (1000, None, False), (10, 601.0, True), (10, 600.0, False), (None, None, None)],
)
def test_the_backlog_threshold_in_events_or_seconds(events, seconds, alerts) -> None:
    messages, state = _run(None, Findings("clicks", lag_events=events, lag_seconds=seconds, batch_id=7))
    assert [m.kind for m in messages] == (["backlog"] if alerts else [])
    if alerts:
        assert "Lag: " in messages[0].text and "Batch: 7" in messages[0].text
        messages, _ = _run(state, Findings("clicks", lag_events=5, lag_seconds=1.0))
        assert [(m.kind, m.status) for m in messages] == [("backlog", "resolved")]
    elif alerts is None:
        assert "backlog" not in state["active"], "an unknown lag is not judged"


def test_kinds_left_out_of_alert_on_do_not_alert() -> None:
    policy = AlertPolicy(alert_on=frozenset({"corrupt"}), max_lag_events=1)
    assert (
        _run(None, Findings("clicks", verdict="stalled", verdict_failed=True, lag_events=9), policy)[0] == []
    )


def test_without_a_status_page_url_the_message_says_where_the_page_is() -> None:
    messages, _ = _run(None, Findings("clicks", verdict="corrupt", verdict_failed=True), AlertPolicy())
    assert messages[0].link is None and "Status page: /hubflow/ on the Airflow web server" in messages[0].text


def test_first_line_and_lag_seconds() -> None:
    assert (
        first_line("\n  java.io.IOException: AccountKey=abc\n\tat Foo")
        == "java.io.IOException: AccountKey=***"
    )
    assert first_line(None) is None
    assert lag_seconds(1000, {"processed_rows_per_second": 50.0}) == 20.0
    assert lag_seconds(1000, {"processed_rows_per_second": 0}) is None
    assert lag_seconds(0, {}) is None and lag_seconds(0, {"x": 1}) == 0.0


def test_the_cycle_keeps_its_state_in_the_status_folder_and_retries_what_was_not_delivered(
    tmp_path: Path,
) -> None:
    folder = StatusFolder(str(tmp_path / "clicks"))
    bad = Findings("clicks", verdict="corrupt", verdict_failed=True)
    assert alert_cycle(folder, bad, POLICY, send=lambda messages: list(messages), now=NOW) == []
    assert folder.read_json("alerts.json")["active"] == {}, "undelivered: tried again next time"
    sent = alert_cycle(folder, bad, POLICY, send=lambda messages: [], now=NOW)
    assert [m.kind for m in sent] == ["corrupt"]
    later = NOW + timedelta(minutes=5)
    assert (
        alert_cycle(StatusFolder(str(tmp_path / "clicks")), bad, POLICY, send=lambda m: [], now=later) == []
    )


def _loss(events: int, run_id: str = "run-1") -> Findings:
    line = f"Event hub telemetry partition 0: {events} events expired before they were read"
    return Findings("clicks", lost_events=events, run_id=run_id, losses=(line + f" {SECRET}",))


def test_data_loss_alerts_for_each_new_loss_and_resolves_when_the_current_run_lost_nothing() -> None:
    messages, state = _run(None, _loss(12))
    assert [(m.kind, m.status) for m in messages] == [("data-loss", "firing")]
    text = messages[0].text
    assert "Lost: 12 events in driver run run-1" in text and "partition 0: 12 events expired" in text
    assert "s3cr3tKEY" not in text and "SharedAccessKey=***" in text
    assert _run(state, _loss(12))[0] == [], "the same loss found again says nothing"
    messages, state = _run(state, _loss(30))
    assert [(m.kind, m.status) for m in messages] == [("data-loss", "firing")], "more events lost"
    assert "Lost: 30 events" in messages[0].text and "(was" not in messages[0].text
    messages, state = _run(state, _loss(30, run_id="run-2"))
    assert [m.status for m in messages] == ["firing"], "a loss in a new driver run is a new one"
    messages, state = _run(state, Findings("clicks", lost_events=0, run_id="run-3"))
    assert [(m.kind, m.status) for m in messages] == [("data-loss", "resolved")]
    assert state["active"] == {}
    assert _run(state, Findings("clicks"))[0] == [], "no run reported: nothing changes"
    policy = AlertPolicy(alert_on=frozenset({"corrupt"}))
    assert _run(None, _loss(5), policy)[0] == [], "data-loss left out of alert_on"


def test_data_loss_findings_come_from_the_runs_status_json(tmp_path: Path) -> None:
    folder = StatusFolder(str(tmp_path / "clicks"))
    assert read_findings("clicks", folder, now=NOW).lost_events is None, "no run yet"
    status = JobStatus(folder, "clicks")
    status.update(state="running", run_id="run-7")
    assert read_findings("clicks", folder, now=NOW).lost_events == 0
    loss = {"telemetry": {"0": {"events": 4, "lastLostRange": [10, 14]}, "1": {"events": 3}}}
    status.add_input_rows(100, state="running", data_loss=loss)
    findings = read_findings("clicks", folder, now=NOW)
    assert (findings.lost_events, findings.run_id) == (7, "run-7")
    assert findings.losses[0] == (
        "telemetry partition 0: 4 events expired before they were read (last lost sequence numbers [10, 14))"
    )
    sent = alert_cycle(folder, findings, POLICY, send=lambda messages: [], now=NOW)
    assert [(m.kind, m.evidence["lost_events"]) for m in sent] == [("data-loss", 7)]
    assert alert_cycle(folder, read_findings("clicks", folder, now=NOW), POLICY, lambda m: [], NOW) == []


def test_findings_take_the_backlog_the_sources_report(tmp_path: Path) -> None:
    """The lag in events sums the sources' reports (events, files), the seconds are the largest they
    report; only when none reports seconds is the processing-rate estimate used; idle is 0, 0 s."""
    from pyspark_eventhubs.backlog import PartitionBacklog, backlog_report

    folder = StatusFolder(str(tmp_path / "status"))
    status = JobStatus(folder, "clicks")
    hub = {
        "description": "EventHubsStreamReader",
        "backlog": backlog_report({"0": PartitionBacklog(40, 12.0)}),
    }
    files = {
        "description": "FileStreamSource[x]",
        "backlog": {"filesBehindLatest": 2, "secondsBehindLatest": 700.0},
    }
    progress = {"batch_id": 3, "processed_rows_per_second": 1.0, "sources": [hub, files]}
    status.update(state="running", last_progress=progress)
    findings = read_findings("clicks", folder, now=NOW)
    assert (findings.lag_events, findings.lag_seconds) == (42, 700.0)  # not 42 / 1.0 rows/s
    messages, _ = _run(None, findings)
    assert [m.kind for m in messages] == ["backlog"] and "700 s (limit 600 s)" in messages[0].text

    plain = {"description": "KafkaV2[x]", "end_offset": {"t": {"0": 5}}, "latest_offset": {"t": {"0": 45}}}
    status.update(last_progress={**progress, "sources": [plain]})
    findings = read_findings("clicks", folder, now=NOW)
    assert (findings.lag_events, findings.lag_seconds) == (40, 40.0)  # the estimate: 40 rows at 1 row/s
    status.update(state="idle", last_progress=progress)
    findings = read_findings("clicks", folder, now=NOW)
    assert (findings.lag_events, findings.lag_seconds) == (0, 0.0)


def _registry(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "registry.yaml"
    path.write_text(text, encoding="utf-8")
    return path


JOB = "  - {name: clicks, application: files_to_lake, config: c.yaml, mode: streaming"


def test_the_registry_merges_default_alerts_key_by_key(tmp_path: Path) -> None:
    path = _registry(
        tmp_path,
        "defaults:\n  alerts:\n    notifiers: [{smtp: {to: oncall@example.com}}]\n    max_lag_events: 100\n"
        f"jobs:\n{JOB}, alerts: {{max_lag_events: 5, held_longer_than: 2 hours}}}}\n"
        f"{JOB.replace('clicks', 'views')}}}\n",
    )
    clicks, views = load_registry(path).jobs
    assert clicks.alerts.max_lag_events == 5 and clicks.alerts.notifiers[0].smtp.to == ["oncall@example.com"]
    assert clicks.alerts.policy().held_longer_than_seconds == 7200
    assert views.alerts.max_lag_events == 100


@pytest.mark.parametrize(
    ("alerts", "where", "error"),
    [
        (
            "defaults:\n  alerts: {notifiers: [{smtp: {to: a@b}}], max_lag_event: 5}\n",
            "",
            r"defaults\.alerts\.max_lag_event: unknown key",
        ),
        (
            "defaults:\n  alerts: {notifiers: [{smtp: {to: a@b}}], held_longer_than: soon}\n",
            "",
            r"defaults\.alerts\.held_longer_than",
        ),
        (
            "",
            ", alerts: {notifiers: [{slack: {}}]}",
            r"jobs\[clicks\]\.alerts\.notifiers\.0\.slack: unknown key",
        ),
        ("", ", alerts: {notifiers: []}", r"jobs\[clicks\]\.alerts: .*no notifier is listed"),
        (
            "",
            ", alerts: {notifiers: [{smtp: {to: a@b}}], alert_on: [stall]}",
            r"jobs\[clicks\]\.alerts\.alert_on: .*'stall'",
        ),
        (
            "",
            ", alerts: {notifiers: [{smtp: {to: a@b}, slack_webhook: {}}]}",
            r"exactly one of smtp, slack_webhook, custom",
        ),
        (
            "",
            ", alerts: {notifiers: [{smtp: {to: a@b}}], status_page_url: airflow/hubflow}",
            r"status_page_url: .*http",
        ),
    ],
)
def test_alert_config_mistakes_name_the_key_as_written(
    tmp_path: Path, alerts: str, where: str, error: str
) -> None:
    path = _registry(tmp_path, f"{alerts}jobs:\n{JOB}{where}}}\n")
    with pytest.raises(RegistryError, match=error):
        load_registry(path)


@pytest.mark.parametrize(
    ("late", "said"),
    [
        (timedelta(seconds=7), "7 s late"),
        (timedelta(minutes=3, seconds=5), "3 min 5 s late"),
        (timedelta(hours=2, minutes=10), "2 h 10 min late"),
    ],
)
def test_a_missed_deadline_names_the_dag_the_run_the_deadline_and_how_late(
    late: timedelta, said: str
) -> None:
    from hubflow.alerts import deadline_missed_message

    queued = NOW - timedelta(minutes=45) - late
    message = deadline_missed_message(
        "orders",
        dag_id="orders__available_now",
        run_id="scheduled__2026-11-22T09:00:00+00:00",
        finish_within="45m",
        deadline=NOW - late,
        now=NOW,
        run_state="running",
        queued_at=queued,
        link=POLICY.link("orders"),
    )
    assert (message.kind, message.status) == ("deadline-missed", "firing")
    assert message.subject == (
        "[hubflow] ALERT orders: run missed its deadline (finish_within): "
        "run scheduled__2026-11-22T09:00:00+00:00"
    )
    lines = message.text.splitlines()
    assert lines[1] == (
        "Run: scheduled__2026-11-22T09:00:00+00:00 of DAG orders__available_now, running when the "
        "deadline passed"
    )
    assert lines[2] == (
        f"Deadline: {(NOW - late).isoformat()} (queued at {queued.isoformat()} + finish_within 45m), {said}"
    )
    assert lines[3] == "Status page: https://airflow.example.com/hubflow/#job-orders"
    assert message.evidence["late_seconds"] == round(late.total_seconds())


def test_deadline_missed_is_an_alert_kind_alert_on_can_name() -> None:
    from hubflow.alerts import ALERT_KINDS

    assert "deadline-missed" in ALERT_KINDS and "deadline-missed" in AlertPolicy().alert_on


def test_the_deadline_page_of_the_runbook_is_what_the_message_says() -> None:
    """docs/operations.md "A run past its deadline": its example page, built from its own values."""
    import re

    from hubflow.alerts import deadline_missed_message
    from hubflow.repository import REPO_ROOT

    doc = (REPO_ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    section = doc.split("### A run past its deadline", 1)[1].split("\n## ", 1)[0]
    (page,) = re.findall(r"```text\n(.*?)```", section, re.S)
    subject, _, text = page.partition("\n\n")
    message = deadline_missed_message(
        "landing_orders",
        dag_id="landing_orders__available_now",
        run_id="scheduled__2026-11-22T09:00:00+00:00",
        finish_within="45m",
        deadline=datetime(2026, 11, 22, 10, 45, 1, tzinfo=UTC),
        now=datetime(2026, 11, 22, 10, 45, 3, tzinfo=UTC),
        run_state="running",
        queued_at=datetime(2026, 11, 22, 10, 0, 1, tzinfo=UTC),
        link=AlertPolicy(status_page_url="https://airflow.example.com/hubflow/").link("landing_orders"),
    )
    assert subject == f"Subject: {message.subject}"
    assert text.strip() == message.text
