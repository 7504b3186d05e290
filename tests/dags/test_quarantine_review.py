"""Crash-loop quarantine, reviewed in Airflow's Required Actions (issue #48 item 4), on a real
api-server, scheduler and DAG processor (PostgreSQL) with the standard provider's HITL operator.

A streaming job whose driver cannot start (its landing folder is missing: the driver checks its
local folders before Spark starts) is started once by its supervisor and dies; with
``quarantine_after: 1`` the next supervisor run holds it with a quarantine hold instead, and that
run's asset event starts ``clicks__quarantine_review``, whose ``ask_oncall`` task waits for a person
(listed by the Required Actions API, naming the job, the hold and the driver log). The cause is
fixed (the folder created); the named on-call user olga answers "Resume" through the REST API;
``carry_out_answer`` takes the quarantine over with force under olga's name (not the run's: an
asset-triggered run has no triggering user), releases the hold and starts the job, which then runs.
"""

from __future__ import annotations

import json
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from hubflow.operations.audit import read_audit
from hubflow.status.folder import StatusFolder
from tests.dags.helpers import (
    airflow_env,
    job_status,
    kill_job,
    landing_job,
    pid_alive,
    run_airflow,
    run_snapshot,
    start_airflow_services,
    write_registry,
)
from tests.deploy.airflow_api import AirflowApi
from tests.support.airflow_db import postgres_reachable
from tests.support.processes import stop_processes, wait_until

pytestmark = pytest.mark.integration

USER = "olga"
JOB = "clicks"
REVIEW = f"{JOB}__quarantine_review"


def _failed_tails(home: Any, dag_id: str) -> str:
    logs = Path(home.path) / "logs" / f"dag_id={dag_id}"
    return "\n".join(path.read_text(errors="replace")[-3000:] for path in sorted(logs.rglob("*.log")))


@pytest.mark.timeout(900)
def test_a_crash_looping_job_is_quarantined_and_resumed_by_the_oncall_user_who_answers(
    airflow_home, tmp_path: Path
) -> None:
    if not postgres_reachable():
        pytest.skip("the scheduler's LocalExecutor needs the PostgreSQL of the tests (scripts/postgres.sh)")
    started = time.monotonic()
    entry = landing_job(
        tmp_path, JOB, streaming=True, supervise_every="20 seconds", restart_backoff="1 s", quarantine_after=1
    )
    registry = write_registry(tmp_path, [entry])
    landing = tmp_path / JOB / "landing"
    shutil.rmtree(landing, ignore_errors=True)  # the driver refuses to start without it
    env = airflow_env(airflow_home, registry)
    password = secrets.token_urlsafe(12)
    passwords = tmp_path / "passwords.json"
    passwords.write_text(json.dumps({USER: password}), encoding="utf-8")
    env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] = f"{USER}:admin"
    env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"] = str(passwords)
    assert run_airflow(env, "dags", "reserialize").returncode == 0
    folder = StatusFolder(str(tmp_path / JOB / "status" / JOB))
    processes: list = []
    try:
        processes, env = start_airflow_services(env, tmp_path / "airflow-logs")
        api = AirflowApi(env["AIRFLOW__API__BASE_URL"], USER, password)
        api.unpause(REVIEW)
        api.unpause(f"{JOB}__supervisor")

        def quarantined() -> Any:
            hold = folder.hold()
            return hold if hold is not None and hold.kind == "quarantine" else None

        hold = wait_until(quarantined, 300, f"{JOB} quarantined by its supervisor", interval=1)
        assert hold.by.startswith("run scheduled__"), hold
        assert hold.reason.startswith("crash-looping: restarted 1 times"), hold.reason

        def asked() -> Any:
            details = api._call("GET", "/api/v2/dags/~/dagRuns/~/hitlDetails", params={"dag_id": REVIEW})
            waiting = [d for d in details["hitl_details"] if not d.get("response_received")]
            if not waiting:
                failed = [run for run in run_snapshot(airflow_home, REVIEW) if run.state == "failed"]
                assert not failed, f"{failed}\n{_failed_tails(airflow_home, REVIEW)}"
            return waiting

        (question,) = wait_until(asked, 300, f"{REVIEW}'s question in Required Actions", interval=1)
        assert question["options"] == ["Resume", "Rewind", "Keep held"]
        assert question["subject"] == f"Job {JOB} is quarantined: resume, rewind or keep it held?"
        body = question["body"]
        assert hold.by in body and hold.at in body and "crash-looping" in body, body
        assert str(folder.path("driver.log")) in body, body
        task = question["task_instance"]
        run_id = task["dag_run_id"]
        assert task["task_id"] == "ask_oncall" and task["dag_id"] == REVIEW

        driver_log = (tmp_path / JOB / "status" / JOB / "driver.log").read_text(errors="replace")
        assert f"{landing} does not exist" in driver_log, driver_log[-3000:]
        landing.mkdir(parents=True)  # the cause fixed before on-call answers
        reason = "the landing folder is back"
        api._call(
            "PATCH",
            f"/api/v2/dags/{REVIEW}/dagRuns/{run_id}/taskInstances/ask_oncall/-1/hitlDetails",
            json={
                "chosen_options": ["Resume"],
                "params_input": {"reason": reason, "rewind_to_enqueued_time": None},
            },
        )

        def reviewed() -> bool:
            (run,) = [run for run in run_snapshot(airflow_home, REVIEW) if run.run_id == run_id]
            assert run.state != "failed", f"{run}\n{_failed_tails(airflow_home, REVIEW)}"
            return run.state == "success"

        wait_until(reviewed, 400, f"{REVIEW} run {run_id} to carry out the answer", interval=1)
        assert folder.hold() is None, "the quarantine hold is released"
        entry = read_audit(folder)[-1]
        assert (entry.by, entry.action, entry.reason, entry.source) == (
            f"{USER} (run {run_id})",
            "start",
            reason,
            "airflow",
        ), entry
        assert entry.hold_before == hold.describe() and entry.hold_after is None, entry
        assert entry.outcome.startswith(f"done: {USER} (run {run_id}) took over the hold of "), entry.outcome
        status = job_status(tmp_path, JOB)
        assert status.get("state") in ("running", "idle") and pid_alive(status.get("pid")), status
        print(f"quarantined, asked, answered and resumed in {time.monotonic() - started:.0f} s")
    finally:
        stop_processes(processes)
        kill_job(tmp_path, JOB)
