"""The plugin in Airflow itself: the plugin manager loads it, the API server mounts the page."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.plugins.status_page.conftest import StatusWorld

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
    result = subprocess.run(
        [sys.executable, "-m", "tests.plugins.status_page.airflow_app_check"],
        env=plugin_env(airflow_home, status_world.registry),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    checks = json.loads(result.stdout.strip().splitlines()[-1])
    assert checks["anonymous"] == 401
    assert checks["bearer"]["status"] == 200
    jobs = {job["name"]: job for job in checks["bearer"]["body"]["jobs"]}
    assert jobs["events_history"]["verdict"] == "healthy"
    assert checks["cookie_page"] == {"status": 200, "has_charts": True}
    views = [v for p in checks["plugins"]["plugins"] for v in p["external_views"]]
    assert {"name": "Streaming status", "href": "/hubflow/"}.items() <= views[0].items()
