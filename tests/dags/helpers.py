"""Helpers of the Airflow tests: a registry of real jobs in a temporary folder, and Airflow's CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.jobs.helpers import landing_config, write_config
from tests.support.spark_cluster import spark_env

REPO_ROOT = Path(__file__).resolve().parents[2]
AIRFLOW = str(Path(sys.executable).parent / "airflow")


def write_registry(base: Path, jobs: list[dict[str, Any]]) -> Path:
    """A registry file holding ``jobs`` under ``base``."""
    path = base / "registry.yaml"
    path.write_text(yaml.safe_dump({"jobs": jobs}, sort_keys=False), encoding="utf-8")
    return path


def landing_job(
    base: Path, name: str, *, streaming: bool = False, source: dict[str, Any] | None = None, **registry: Any
) -> dict[str, Any]:
    """A files_to_lake job config under ``base/name`` (``source`` keys override) and its registry entry."""
    trigger = {"processingTime": "1 second"} if streaming else {"availableNow": True}
    config = landing_config(base / name, name=name, trigger=trigger, **({"source": source} if source else {}))
    config["trigger"] = trigger
    config_path = write_config(base / f"{name}.yaml", config)
    entry = {
        "name": name,
        "application": "files_to_lake",
        "config": str(config_path),
        "mode": "streaming" if streaming else "scheduled",
    }
    if not streaming:
        entry["schedule"] = "@hourly"
    entry.update(registry)
    return entry


def airflow_env(airflow_home: Any, registry: Path) -> dict[str, str]:
    """The environment for Airflow commands: the test's metadata DB, this repo's DAGs, local Spark."""
    env = spark_env(airflow_home.env)
    env.update(
        {
            "HUBFLOW_REGISTRY": str(registry),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO_ROOT / "plugins"),
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
            "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "plugins"), str(REPO_ROOT / "jobs")]),
        }
    )
    return env


def run_airflow(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``airflow ARGS`` and return the completed process (output captured as text)."""
    return subprocess.run(
        [AIRFLOW, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def start_airflow_services(env: dict[str, str], log_dir: Path) -> tuple[list, dict[str, str]]:
    """Start a real api-server, scheduler and dag-processor (LocalExecutor) for ``env``.

    Returns the processes (stop them with ``tests.support.processes.stop_process``) and the
    environment pointing the workers at this api-server.
    """
    import urllib.request

    from tests.support.processes import free_port, start_background, wait_until

    port = free_port()
    env = dict(env)
    env.update(
        {
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            "AIRFLOW__CORE__PARALLELISM": "4",
            # A loaded 2-core machine answers slowly; the default 5 s makes workers give up.
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        }
    )
    log_dir.mkdir(parents=True, exist_ok=True)
    processes = [
        start_background([AIRFLOW, "api-server", "--port", str(port)], log_dir / "api-server.log", env),
        start_background([AIRFLOW, "scheduler"], log_dir / "scheduler.log", env),
        start_background([AIRFLOW, "dag-processor"], log_dir / "dag-processor.log", env),
    ]

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/monitor/health", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    wait_until(healthy, 180, "the Airflow api-server")
    return processes, env


def dag_runs(env: dict[str, str], dag_id: str) -> list[dict[str, Any]]:
    """The DAG's runs as ``airflow dags list-runs -o json`` lists them."""
    result = run_airflow(env, "dags", "list-runs", dag_id, "-o", "json")
    for line in reversed(result.stdout.splitlines()):
        if line.startswith("[{") or line.strip() == "[]":
            return json.loads(line)
    return []


def task_states(airflow_home: Any, dag_id: str) -> dict[str, dict[str, str]]:
    """run id -> task id -> state of the DAG's task instances, read from the metadata database."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(airflow_home.sql_alchemy_conn)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                sqlalchemy.text("SELECT run_id, task_id, state FROM task_instance WHERE dag_id = :dag"),
                {"dag": dag_id},
            ).all()
    finally:
        engine.dispose()
    states: dict[str, dict[str, str]] = {}
    for run_id, task_id, state in rows:
        states.setdefault(run_id, {})[task_id] = state
    return states
