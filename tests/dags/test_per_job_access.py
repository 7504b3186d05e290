"""Per-job authority through Airflow's own DAG permissions (issue #47 item 1), proven with a real
auth manager that has per-DAG roles: the FAB provider's, on a real api-server, scheduler and DAG
processor (PostgreSQL), and headless Chromium on Airflow's own UI.

Two streaming jobs, ``alpha`` and ``beta``, each name its on-call role in the registry
(``access: {act: [<job>_oncall]}``); the DAG processor syncs every DAG's ``access_control`` into
FAB's roles as it serializes the DAG. Two users, ``ann`` (``alpha_oncall``) and ``bob``
(``beta_oncall``), made with FAB's CLI: each triggers their own job's on-call DAG through the REST API
(and ann through the UI's Trigger form), gets 403 on the other's, and sees neither the other job's
DAGs nor ``hubflow__cleanup`` (admins only). ann's allowed dry run runs to success on the scheduler;
beta's status folder (its hold, audit trail and status.json) is byte for byte what it was.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from hubflow.operations.audit import AuditEntry, append_audit, read_audit
from hubflow.status.folder import StatusFolder
from tests.dags.helpers import (
    REPO_ROOT,
    airflow_env,
    landing_job,
    query_db,
    run_airflow,
    run_snapshot,
    start_airflow_services,
    write_registry,
)
from tests.support.airflow_db import create_airflow_home, postgres_reachable, remove_airflow_home
from tests.support.airflow_ui import browser
from tests.support.processes import stop_processes, wait_until

pytestmark = pytest.mark.integration

FAB = "airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager"
JOBS = ("alpha", "beta")
USERS = {"ann": "alpha", "bob": "beta"}


def team_permissions() -> list[tuple[str, str]]:
    """What each team role holds besides its jobs' DAGs: FAB's Viewer role without "can_read on
    DAGs" (which would show every DAG), as (action, resource). Read on runs, task instances and logs
    in general is not read on another team's: FAB asks for read on the DAG itself too
    (docs/operations.md, "Per-job access")."""
    from airflow.providers.fab.auth_manager.security_manager.override import (
        FabAirflowSecurityManagerOverride as Fab,
    )

    return [pair for pair in Fab.VIEWER_PERMISSIONS if pair != ("can_read", "DAGs")]


@dataclass(frozen=True)
class Teams:
    """The running deployment: its URL, environment, the users' passwords, the jobs' status folders."""

    base: Path
    env: dict[str, str]
    url: str
    passwords: dict[str, str]
    status: dict[str, Path]
    home: Any


def _role_file(path: Path) -> Path:
    """The two team roles as ``airflow roles import`` reads them (one entry per resource)."""
    entries = [
        {"name": f"{job}_oncall", "resource": resource, "action": action}
        for job in JOBS
        for action, resource in team_permissions()
    ]
    path.write_text(json.dumps(entries), encoding="utf-8")
    return path


def _checked(result: Any, what: str) -> None:
    assert result.returncode == 0, f"{what} failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"


def _beta_before(status_dir: Path) -> None:
    """beta as another team left it: status.json, held by bob with a reason, one audited action."""
    folder = StatusFolder(str(status_dir))
    folder.write_json("status.json", {"job": "beta", "state": "stopped", "pid": None})
    hold = folder.place_hold("sink storage failing over", by="bob")
    append_audit(
        folder,
        AuditEntry.now(
            by="bob",
            action="stop",
            dry_run=False,
            reason="sink storage failing over",
            outcome="done: stopped and held",
            hold_after=f"stop by bob: {hold.reason}",
        ),
    )


def _files(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in folder.rglob("*") if path.is_file()}


@pytest.fixture(scope="module")
def teams(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Teams]:
    if not postgres_reachable():
        pytest.skip("FAB's roles need the PostgreSQL of the tests (scripts/postgres.sh): none answers")
    base = tmp_path_factory.mktemp("teams")
    home = create_airflow_home(
        base / "airflow-home", REPO_ROOT / "dags", REPO_ROOT / "plugins", {"AIRFLOW__CORE__AUTH_MANAGER": FAB}
    )
    processes: list = []
    try:
        entries = [landing_job(base, job, streaming=True, access={"act": [f"{job}_oncall"]}) for job in JOBS]
        env = airflow_env(home, write_registry(base, entries))
        env["AIRFLOW__CORE__AUTH_MANAGER"] = FAB
        # The roles first: a DAG whose access_control names a missing role fails its sync.
        _checked(run_airflow(env, "roles", "import", str(_role_file(base / "roles.json"))), "roles import")
        passwords = {user: secrets.token_urlsafe(12) for user in USERS}
        for user, job in USERS.items():
            created = run_airflow(
                env,
                # --password=VALUE: token_urlsafe may begin with "-", which argparse would read
                # as an option after a separate --password (1 run in ~64 failed that way)
                *("users", "create", "--username", user, f"--password={passwords[user]}"),
                *("--role", f"{job}_oncall", "--email", f"{user}@example.com"),
                *("--firstname", user.title(), "--lastname", "Oncall"),
            )
            _checked(created, f"users create {user}")
        status = {job: base / job / "status" / job for job in JOBS}
        status["beta"].mkdir(parents=True, exist_ok=True)
        _beta_before(status["beta"])
        processes, env = start_airflow_services(env, base / "airflow-logs")
        yield Teams(base, env, env["AIRFLOW__API__BASE_URL"], passwords, status, home)
    finally:
        stop_processes(processes)
        remove_airflow_home(home)


def _synced(teams: Teams) -> None:
    """Wait until the DAG processor has serialized every job's DAGs and synced their access_control
    into the roles (FAB's ``DAG:<dag id>`` resources granted to ``<job>_oncall``)."""
    wanted = {(f"{job}_oncall", f"DAG:{job}__{kind}") for job in JOBS for kind in ("supervisor", "oncall")}

    def granted() -> bool:
        rows = query_db(
            teams.home,
            "SELECT r.name, v.name FROM ab_role r "
            "JOIN ab_permission_view_role pr ON pr.role_id = r.id "
            "JOIN ab_permission_view pv ON pv.id = pr.permission_view_id "
            "JOIN ab_permission a ON a.id = pv.permission_id "
            "JOIN ab_view_menu v ON v.id = pv.view_menu_id WHERE a.name = 'can_edit'",
        )
        return wanted <= {tuple(row) for row in rows}

    wait_until(granted, 300, "the jobs' DAG permissions synced into the team roles", interval=2)


def _token(teams: Teams, user: str) -> dict[str, str]:
    """The Authorization header of ``user``'s JWT from FAB's ``/auth/token``."""
    answer = requests.post(
        f"{teams.url}/auth/token",
        json={"username": user, "password": teams.passwords[user]},
        timeout=120,
    )
    assert answer.status_code == 201, answer.text
    return {"Authorization": f"Bearer {answer.json()['access_token']}"}


def _trigger(teams: Teams, headers: dict[str, str], dag_id: str) -> requests.Response:
    """POST one dry-run restart of the on-call DAG ``dag_id``."""
    return requests.post(
        f"{teams.url}/api/v2/dags/{dag_id}/dagRuns",
        headers=headers,
        json={"logical_date": None, "conf": {"action": "restart", "dry_run": True}},
        timeout=120,
    )


def _unpause(teams: Teams, headers: dict[str, str], dag_id: str) -> requests.Response:
    return requests.patch(
        f"{teams.url}/api/v2/dags/{dag_id}", headers=headers, json={"is_paused": False}, timeout=120
    )


@pytest.mark.timeout(900)
def test_each_team_acts_on_its_own_job_only_through_the_api_and_the_ui(teams: Teams) -> None:
    beta_files = _files(teams.status["beta"])
    assert {"HOLD", "audit.jsonl", "status.json"} <= set(beta_files), sorted(beta_files)
    _synced(teams)

    headers = {user: _token(teams, user) for user in USERS}
    for user, job in USERS.items():
        other = next(j for j in JOBS if j != job)
        listed = requests.get(f"{teams.url}/api/v2/dags", headers=headers[user], timeout=120)
        assert listed.status_code == 200, listed.text
        assert sorted(dag["dag_id"] for dag in listed.json()["dags"]) == [
            f"{job}__backfill",  # a streaming job that can backfill: its hours, from the UI
            f"{job}__oncall",
            f"{job}__supervisor",
        ], f"{user} sees their own job's DAGs only, neither {other}'s nor hubflow__cleanup"
        refused = _trigger(teams, headers[user], f"{other}__oncall")
        assert refused.status_code == 403, f"{user} on {other}__oncall: {refused.status_code} {refused.text}"
        unpause = _unpause(teams, headers[user], f"{other}__oncall")
        assert unpause.status_code == 403, f"{user} may not unpause {other}__oncall either"

    # ann runs alpha's dry run to the end: her DAG unpaused by herself, the run on the scheduler.
    assert _unpause(teams, headers["ann"], "alpha__oncall").status_code == 200
    allowed = _trigger(teams, headers["ann"], "alpha__oncall")
    assert allowed.status_code == 200, allowed.text
    bobs = _trigger(teams, headers["bob"], "beta__oncall")
    assert bobs.status_code == 200, bobs.text  # beta stays paused: bob's run waits, untouched here
    run_id = allowed.json()["dag_run_id"]
    _run_succeeded(teams, "alpha__oncall", run_id)
    (entry,) = [e for e in read_audit(StatusFolder(str(teams.status["alpha"]))) if e.dry_run]
    assert entry.by == f"ann (run {run_id})" and entry.action == "restart", entry

    with browser(teams.url, teams.base / "ui-artifacts") as ui:
        ui.log_in("ann", teams.passwords["ann"])
        ui_run = ui.trigger("alpha__oncall", {"action": "restart", "dry_run": True})
        assert ui_run in {run.run_id for run in run_snapshot(teams.home, "alpha__oncall")}
        listed = ui.text("/dags", "alpha__supervisor")
        assert "alpha__oncall" in listed and "beta__" not in listed and "hubflow__cleanup" not in listed
        trigger = {"logical_date": None, "conf": {"action": "restart", "dry_run": True}}
        assert ui.request_status("POST", "/api/v2/dags/beta__oncall/dagRuns", trigger) == 403
        status = ui.text("/hubflow/", "alpha")
        assert "beta" not in status, "ann's status page lists her job only"
        links = [a.get_attribute("href") for a in ui.driver.find_elements("css selector", "a.oncall")]
        assert links == [f"{teams.url}/dags/alpha__oncall"], links

    assert {run.run_id for run in run_snapshot(teams.home, "beta__oncall")} == {bobs.json()["dag_run_id"]}, (
        "the only run of beta__oncall is bob's"
    )
    assert _files(teams.status["beta"]) == beta_files, "ann's attempts left beta's status folder as it was"


def _run_succeeded(teams: Teams, dag_id: str, run_id: str) -> None:
    """Wait for the run to succeed; a failed run fails at once with its task logs' tails."""

    def done() -> bool:
        (run,) = [run for run in run_snapshot(teams.home, dag_id) if run.run_id == run_id]
        if run.state == "failed":
            logs = Path(teams.home.path) / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
            tails = [path.read_text(errors="replace")[-3000:] for path in sorted(logs.rglob("*.log"))]
            raise AssertionError(f"{dag_id} run {run_id} failed: {run.tasks}\n" + "\n".join(tails))
        return run.state == "success"

    wait_until(done, 600, f"{dag_id} run {run_id} to succeed", interval=2)
