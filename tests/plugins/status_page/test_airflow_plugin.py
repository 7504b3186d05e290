"""The plugin in Airflow itself: the plugin manager loads it, the API server mounts the page."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.plugins.status_page.conftest import StatusWorld
from tests.support.processes import run_json_check

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[3]
AIRFLOW = str(Path(sys.executable).parent / "airflow")


def plugin_env(airflow_home: Any, registry: Path) -> dict[str, str]:
    env = dict(airflow_home.env)
    env.update(
        {
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO_ROOT / "plugins"),
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            "HUBFLOW_REGISTRY": str(registry),
            "PYTHONPATH": f"{REPO_ROOT / 'plugins'}:{REPO_ROOT / 'jobs'}:{REPO_ROOT}",
        }
    )
    env.pop("HUBFLOW_STATUS_PAGE_PUBLIC", None)
    return env


def run_check(module: str, env: dict[str, str], *args: str) -> Any:
    """Run ``tests.plugins.status_page.<module>`` in a child with ``env``; its last line as JSON."""
    return run_json_check(f"tests.plugins.status_page.{module}", env, *args)[0]


def test_airflow_plugins_command_lists_the_status_page(airflow_home: Any, status_world: StatusWorld) -> None:
    result = subprocess.run(
        [AIRFLOW, "plugins", "-o", "json"],
        env=plugin_env(airflow_home, status_world.registry),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    plugins = {p["name"]: p for p in json.loads(result.stdout[result.stdout.index("[") :])}
    plugin = plugins["hubflow_status"]
    assert plugin["fastapi_apps"][0]["url_prefix"] == "/hubflow"
    assert plugin["external_views"][0]["href"] == "/hubflow/"
    assert plugin["source"].endswith("hubflow_status_plugin.py")


def test_api_server_serves_the_page_to_logged_in_users_only(
    airflow_home: Any, status_world: StatusWorld
) -> None:
    checks = run_check("airflow_app_check", plugin_env(airflow_home, status_world.registry))
    assert checks["anonymous"] == 401
    assert checks["bearer"]["status"] == 200
    jobs = {job["name"]: job for job in checks["bearer"]["body"]["jobs"]}
    assert jobs["events_history"]["verdict"] == "healthy"
    assert checks["cookie_page"] == {"status": 200, "has_charts": True}
    views = [v for p in checks["plugins"]["plugins"] for v in p["external_views"]]
    assert {"name": "Streaming status", "href": "/hubflow/"}.items() <= views[0].items()


def test_a_user_sees_only_the_jobs_of_dags_they_may_read_and_their_logs_only_with_log_access(
    airflow_home: Any, tmp_path: Path
) -> None:
    """The page asks Airflow's auth manager: a job's row and snapshot follow read access to its DAG,
    its driver log follows read access to that DAG's task logs; an admin sees everything."""
    from tests.plugins.status_page.streams import job_config, write_registry

    entries = []
    for name, mode in (("clicks", "streaming"), ("orders", "scheduled"), ("payroll", "streaming")):
        entry = {
            "name": name,
            "application": "files_to_lake",
            "config": str(job_config(tmp_path, name, {"path": str(tmp_path / "landing" / name)})),
            "mode": mode,
        }
        if mode == "scheduled":
            entry["schedule"] = "@hourly"
        entries.append(entry)
        log = tmp_path / "status" / name / "driver.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"the driver of {name}\n")
    env = plugin_env(airflow_home, write_registry(tmp_path, entries))
    env.update(
        {
            "AIRFLOW__CORE__AUTH_MANAGER": "tests.plugins.status_page.dag_scoped_auth.DagScopedAuthManager",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,scoped:viewer",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(tmp_path / "passwords.json"),
            "HUBFLOW_TEST_DAG_GRANTS": json.dumps(
                {
                    "scoped": {
                        "read": ["clicks__supervisor", "orders__available_now"],
                        "logs": ["clicks__supervisor"],
                    }
                }
            ),
        }
    )
    paths = [
        "/hubflow/api/jobs",
        "/hubflow/",
        *(f"/hubflow/api/jobs/{name}" for name in ("clicks", "orders", "payroll")),
        *(f"/hubflow/api/jobs/{name}/driver-log" for name in ("clicks", "orders", "payroll")),
    ]
    seen = run_check("airflow_access_check", env, json.dumps(paths))
    scoped, admin = seen["scoped"], seen["admin"]

    listed = [job["name"] for job in json.loads(scoped["/hubflow/api/jobs"][1])["jobs"]]
    assert listed == ["clicks", "orders"]
    page = scoped["/hubflow/"][1]
    assert scoped["/hubflow/"][0] == 200 and 'id="job-clicks"' in page and "payroll" not in page
    assert scoped["/hubflow/api/jobs/clicks"][0] == 200
    assert scoped["/hubflow/api/jobs/payroll"][0] == 403
    assert "may not read DAG 'payroll__supervisor' (job payroll)" in scoped["/hubflow/api/jobs/payroll"][1]
    assert scoped["/hubflow/api/jobs/clicks/driver-log"] == [200, "the driver of clicks\n"]
    status, text = scoped["/hubflow/api/jobs/orders/driver-log"]
    assert status == 403 and "may not read the task logs of DAG 'orders__available_now'" in text
    assert scoped["/hubflow/api/jobs/payroll/driver-log"][0] == 403

    assert [job["name"] for job in json.loads(admin["/hubflow/api/jobs"][1])["jobs"]] == [
        "clicks",
        "orders",
        "payroll",
    ]
    assert admin["/hubflow/api/jobs/payroll/driver-log"] == [200, "the driver of payroll\n"]
