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
A second job, ``views``, broken and quarantined the same way at the same time, is resumed by olga
in headless Chromium: the Required Actions page of its question, the reason filled in, "Resume".
"""

from __future__ import annotations

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
    simple_auth_user,
    start_airflow_services,
    write_registry,
)
from tests.deploy.airflow_api import AirflowApi
from tests.support.airflow_db import postgres_reachable
from tests.support.airflow_ui import browser
from tests.support.processes import stop_processes, wait_until

pytestmark = pytest.mark.integration

USER = "olga"
#: clicks is answered through the REST API, views in the browser.
JOBS = ("clicks", "views")


def _failed_tails(home: Any, dag_id: str) -> str:
    logs = Path(home.path) / "logs" / f"dag_id={dag_id}"
    return "\n".join(path.read_text(errors="replace")[-3000:] for path in sorted(logs.rglob("*.log")))


def _review(job: str) -> str:
    return f"{job}__quarantine_review"


def _folder(base: Path, job: str) -> StatusFolder:
    return StatusFolder(str(base / job / "status" / job))


@pytest.mark.timeout(900)
def test_a_crash_looping_job_is_quarantined_and_resumed_by_the_oncall_user_who_answers(
    airflow_home, tmp_path: Path
) -> None:
    if not postgres_reachable():
        pytest.skip("the scheduler's LocalExecutor needs the PostgreSQL of the tests (scripts/postgres.sh)")
    started = time.monotonic()
    entries = [
        landing_job(
            tmp_path,
            job,
            streaming=True,
            supervise_every="20 seconds",
            restart_backoff="1 s",
            quarantine_after=1,
        )
        for job in JOBS
    ]
    registry = write_registry(tmp_path, entries)
    for job in JOBS:  # the driver refuses to start without its landing folder
        shutil.rmtree(tmp_path / job / "landing", ignore_errors=True)
    env = airflow_env(airflow_home, registry)
    password = simple_auth_user(env, tmp_path, USER)
    assert run_airflow(env, "dags", "reserialize").returncode == 0
    processes: list = []
    try:
        processes, env = start_airflow_services(env, tmp_path / "airflow-logs")
        url = env["AIRFLOW__API__BASE_URL"]
        api = AirflowApi(url, USER, password)
        for job in JOBS:
            api.unpause(_review(job))
            api.unpause(f"{job}__supervisor")

        holds, questions = {}, {}
        for job in JOBS:
            holds[job] = _quarantined(tmp_path, job)
            questions[job] = _question(api, airflow_home, tmp_path, job, holds[job])
            _parked(tmp_path / "airflow-logs" / "scheduler.log", job)
            landing = tmp_path / job / "landing"
            driver_log = (tmp_path / job / "status" / job / "driver.log").read_text(errors="replace")
            assert f"{landing} does not exist" in driver_log, driver_log[-3000:]
            landing.mkdir(parents=True)  # the cause fixed before on-call answers

        reasons = {"clicks": "the landing folder is back", "views": "landing folder restored"}
        run_id = questions["clicks"]["task_instance"]["dag_run_id"]
        api._call(
            "PATCH",
            f"/api/v2/dags/{_review('clicks')}/dagRuns/{run_id}/taskInstances/ask_oncall/-1/hitlDetails",
            json={
                "chosen_options": ["Resume"],
                "params_input": {"reason": reasons["clicks"], "rewind_to_enqueued_time": None},
            },
        )
        with browser(url, tmp_path / "ui-artifacts") as ui:
            ui.log_in(USER, password)
            views_run = questions["views"]["task_instance"]["dag_run_id"]
            page = f"/dags/{_review('views')}/runs/{views_run}/tasks/ask_oncall/required_actions"
            shown = ui.text(page, "Job views is quarantined")
            assert "Resume" in shown and "Keep held" in shown and holds["views"].by in shown, shown
            ui.find("//*[@id='element_reason']", "the Reason field").send_keys(reasons["views"])
            ui.click(ui.find("//button[normalize-space()='Resume']", "the Resume button"))

        for job in JOBS:
            run_id = questions[job]["task_instance"]["dag_run_id"]
            _resumed(airflow_home, tmp_path, job, run_id, holds[job], reasons[job])
        print(f"quarantined, asked, answered and resumed in {time.monotonic() - started:.0f} s")
    finally:
        stop_processes(processes)
        for job in JOBS:
            kill_job(tmp_path, job)


def _quarantined(base: Path, job: str) -> Any:
    """The job's quarantine hold, once its supervisor placed it."""
    folder = _folder(base, job)

    def held() -> Any:
        hold = folder.hold()
        return hold if hold is not None and hold.kind == "quarantine" else None

    hold = wait_until(held, 300, f"{job} quarantined by its supervisor", interval=1)
    assert hold.by.startswith("run scheduled__"), hold
    assert hold.reason.startswith("crash-looping: restarted 1 times"), hold.reason
    return hold


def _question(api: AirflowApi, home: Any, base: Path, job: str, hold: Any) -> dict[str, Any]:
    """The review's question as Required Actions lists it (the hitlDetails API), once it waits."""
    review = _review(job)

    def asked() -> Any:
        details = api._call("GET", "/api/v2/dags/~/dagRuns/~/hitlDetails")["hitl_details"]
        mine = [d for d in details if d["task_instance"]["dag_id"] == review]
        waiting = [d for d in mine if not d.get("response_received")]
        if not waiting:
            failed = [run for run in run_snapshot(home, review) if run.state == "failed"]
            assert not failed, f"{failed}\n{_failed_tails(home, review)}"
        return waiting

    (question,) = wait_until(asked, 300, f"{review}'s question in Required Actions", interval=1)
    assert question["options"] == ["Resume", "Rewind", "Keep held"]
    assert question["subject"] == f"Job {job} is quarantined: resume, rewind or keep it held?"
    body = question["body"]
    assert hold.by in body and hold.at in body and "crash-looping" in body, body
    assert str(_folder(base, job).path("driver.log")) in body, body
    task = question["task_instance"]
    assert task["task_id"] == "ask_oncall" and task["dag_id"] == review
    return question


def _parked(scheduler_log: Path, job: str) -> None:
    """Wait until the scheduler has seen the question's worker exit after parking the task.

    Airflow 3.3.2 races an answer given before that: the answer moves the task to scheduled, the
    scheduler queues it, and the exit event of the parked try, processed only then, finds the task
    queued and fails it ("finished with state success, but the task instance's state attribute is
    queued"). A person never answers within that second or two; a test script does."""
    wanted = f"TaskInstance Finished: dag_id={_review(job)}, task_id=ask_oncall,"

    def seen() -> bool:
        lines = scheduler_log.read_text(errors="replace").splitlines()
        return any(wanted in line and "state=awaiting_input" in line for line in lines)

    wait_until(seen, 120, f"the scheduler to see {_review(job)}'s question parked", interval=0.5)


def _resumed(home: Any, base: Path, job: str, run_id: str, hold: Any, reason: str) -> None:
    """The review run carried the answer out under olga's name: hold taken over, job running."""
    review = _review(job)

    def reviewed() -> bool:
        (run,) = [run for run in run_snapshot(home, review) if run.run_id == run_id]
        assert run.state != "failed", f"{run}\n{_failed_tails(home, review)}"
        return run.state == "success"

    wait_until(reviewed, 400, f"{review} run {run_id} to carry out the answer", interval=1)
    folder = _folder(base, job)
    assert folder.hold() is None, f"{job}: the quarantine hold is released"
    entry = read_audit(folder)[-1]
    assert (entry.by, entry.action, entry.reason, entry.source) == (
        f"{USER} (run {run_id})",
        "start",
        reason,
        "airflow",
    ), entry
    assert entry.hold_before == hold.describe() and entry.hold_after is None, entry
    assert entry.outcome.startswith(f"done: {USER} (run {run_id}) took over the hold of "), entry.outcome
    status = job_status(base, job)
    assert status.get("state") in ("running", "idle") and pid_alive(status.get("pid")), (job, status)
