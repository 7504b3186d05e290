"""``finish_within`` (issue #51 item 4): a scheduled run that misses it pages the job's notifiers
once, through Airflow's deadline alerts, on a real api-server, scheduler and DAG processor
(LocalExecutor, PostgreSQL) and a real SMTP server on loopback; a run that finishes in time pages
nothing.

Nothing here judges a moment:

* ``prompt`` (finish_within 30 minutes) is unpaused, so the scheduler creates its scheduled run for
  the last day; the test waits for the run to succeed (a Spark run on an empty landing), then finds
  that its deadline is gone: Airflow deletes a run's deadline when the run succeeds, so no later
  check can page it. (Waiting for the deadline itself would make the test as long as the deadline,
  and a deadline short enough to wait for would judge how fast a loaded machine runs Spark.)
* ``late`` (finish_within 5 seconds) is triggered while paused: its run is queued, with its deadline
  5 seconds later, and cannot start, let alone finish, until the test unpauses the DAG after the
  page arrived.
* The mails are counted after ``late``'s run finished too: a run that ends after its deadline is
  paged once, not again at its end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.dags.helpers import (
    airflow_env,
    landing_job,
    query_db,
    run_airflow,
    run_snapshot,
    start_airflow_services,
    write_registry,
)
from tests.plugins.notifications.receivers import SmtpServer
from tests.support.airflow_db import postgres_reachable
from tests.support.processes import stop_processes, wait_until

pytestmark = pytest.mark.integration

ALERTS = {"notifiers": [{"smtp": {"to": ["oncall@example.com"], "smtp_conn_id": "alerts_smtp"}}]}


def _finished_run(home: Any, dag_id: str, logs: Path) -> Any:
    def finished() -> Any:
        runs = [run for run in run_snapshot(home, dag_id) if run.state in {"success", "failed"}]
        return runs[0] if runs else None

    run = wait_until(finished, timeout=600, what=f"a finished run of {dag_id}", interval=1)
    assert run.state == "success", f"{run}\n{_tails(logs)}"
    return run


def _tails(logs: Path) -> str:
    return "\n".join(
        f"--- {path}\n{path.read_text(errors='replace')[-2000:]}" for path in sorted(logs.rglob("*.log"))
    )


def _deadlines(home: Any, dag_id: str) -> list[tuple]:
    """The deadlines Airflow keeps for the runs of ``dag_id`` (a run's own, made with the run)."""
    rows = query_db(
        home,
        "SELECT r.run_id, d.deadline_time FROM deadline d JOIN dag_run r ON r.id = d.dagrun_id "
        "WHERE r.dag_id = :dag",
        dag=dag_id,
    )
    return [tuple(row) for row in rows]


def _deadline_mails(smtp: SmtpServer) -> list[dict[str, Any]]:
    return [mail for mail in smtp.inbox.mails if "missed its deadline" in mail["subject"]]


@pytest.mark.timeout(900)
def test_a_run_past_finish_within_pages_once_and_a_run_in_time_pages_nothing(
    airflow_home, tmp_path: Path
) -> None:
    if not postgres_reachable():
        pytest.skip("the scheduler's LocalExecutor needs the PostgreSQL of the tests (scripts/postgres.sh)")
    registry = write_registry(
        tmp_path,
        [
            landing_job(tmp_path, "prompt", schedule="@daily", finish_within="30 minutes", alerts=ALERTS),
            # yearly: unpausing it creates no scheduled run (this year's interval has not ended)
            landing_job(tmp_path, "late", schedule="@yearly", finish_within="5 seconds", alerts=ALERTS),
        ],
    )
    env = airflow_env(airflow_home, registry)
    processes: list = []
    with SmtpServer() as smtp:
        env["AIRFLOW_CONN_ALERTS_SMTP"] = smtp.connection
        assert run_airflow(env, "dags", "reserialize").returncode == 0
        try:
            processes, env = start_airflow_services(env, tmp_path / "airflow-logs")
            logs = Path(airflow_home.path) / "logs"

            assert run_airflow(env, "dags", "unpause", "prompt__available_now").returncode == 0
            prompt = _finished_run(airflow_home, "prompt__available_now", logs)
            assert prompt.run_type == "scheduled", prompt
            assert _deadlines(airflow_home, "prompt__available_now") == [], (
                "a run in time has no deadline left"
            )

            triggered = run_airflow(env, "dags", "trigger", "late__available_now")
            assert triggered.returncode == 0, triggered.stderr[-3000:]
            (late,) = wait_until(
                lambda: run_snapshot(airflow_home, "late__available_now"), timeout=60, what="late's run"
            )
            (page,) = wait_until(
                lambda: _deadline_mails(smtp),
                timeout=300,
                what=f"the deadline page of {late.run_id}",
                interval=1,
            )
            assert page["subject"] == (
                f"[hubflow] ALERT late: run missed its deadline (finish_within): run {late.run_id}"
            ), page
            body = page["body"]
            assert f"Run: {late.run_id} of DAG late__available_now, queued when the deadline passed" in body
            assert "+ finish_within 5 seconds)" in body and "Job late:" in body, body
            assert page["to"] == ["oncall@example.com"], page

            assert run_airflow(env, "dags", "unpause", "late__available_now").returncode == 0
            finished = _finished_run(airflow_home, "late__available_now", logs)
            assert finished.run_id == late.run_id
            missed = query_db(
                airflow_home,
                "SELECT r.run_id, d.missed, c.state FROM deadline d JOIN dag_run r ON r.id = d.dagrun_id "
                "JOIN callback c ON c.id = d.callback_id "
                "WHERE r.dag_id IN (:late, :prompt) ORDER BY r.run_id",
                late="late__available_now",
                prompt="prompt__available_now",
            )
            assert [tuple(row) for row in missed] == [(late.run_id, True, "success")], missed
            assert len(_deadline_mails(smtp)) == 1, [m["subject"] for m in smtp.inbox.mails]
            assert not [m for m in smtp.inbox.mails if "prompt" in m["subject"]], smtp.inbox.mails
            print(f"the page:\n{page['subject']}\n{body}")
        finally:
            stop_processes(processes)
