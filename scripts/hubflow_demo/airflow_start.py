"""Airflow standalone for the demo: its environment (SQLite, LocalExecutor, the demo's registry and
connections), then waiting until it runs DAGs and unpausing the demo's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from hubflow_demo.airflow_api import Api
from hubflow_demo.progress import DemoFailed, say, wait_for
from hubflow_demo.settings import ALERTS_CONN, BIN, DEADLINES, ORDERS_DAG, REPO, SILVER_DAG, SUPERVISOR


def airflow_env(data: Path, registry: Path, api_port: int, conn: str, alerts_url: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "AIRFLOW_HOME": str(data / "airflow"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{data / 'airflow' / 'airflow.db'}",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__PARALLELISM": "4",
            # A table's asset becomes active (so a DAG scheduled on it by name runs) at the
            # scheduler's next asset check, every 60 s by default: its first announcement would
            # wait for it.
            "AIRFLOW__SCHEDULER__PARSING_CLEANUP_INTERVAL": "5",
            "AIRFLOW__API__PORT": str(api_port),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{api_port}",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
            "HUBFLOW_REGISTRY": str(registry),
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
            "AIRFLOW_CONN_EVENTHUBS_DEFAULT": json.dumps({"conn_type": "generic", "password": conn}),
            f"AIRFLOW_CONN_{ALERTS_CONN.upper()}": json.dumps(
                {"conn_type": "slackwebhook", "password": alerts_url}
            ),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        }
    )
    return env


def wait_for_airflow(ui: str, standalone: subprocess.Popen, started: datetime, status_page: str) -> Api:
    """Wait until Airflow runs DAGs and knows the demo's, unpause them; its REST API."""
    from hubflow.supervision.airflow_readiness import RUNS_DAGS, AirflowNotReady, wait_until_ready

    # Triggered only once the API server, scheduler and DAG processor are all up: a task queued
    # before the API server listens fails ("Connection refused").
    try:
        wait_until_ready(
            ui,
            RUNS_DAGS,
            since=started,
            timeout=DEADLINES["airflow"],
            interval=0.5,
            still_starting=lambda: (
                None
                if standalone.poll() is None
                else f"`airflow standalone` exited with code {standalone.returncode}"
            ),
        )
    except AirflowNotReady as exc:
        raise DemoFailed(str(exc)) from None
    api = Api(ui)
    dag_ids = [SUPERVISOR, SILVER_DAG, ORDERS_DAG]
    wait_for(lambda: all(api.dag_known(dag_id) for dag_id in dag_ids), "dags", interval=0.5)
    for dag_id in dag_ids:
        api.unpause(dag_id)
    say(f"Airflow is up; unpaused {', '.join(dag_ids)} (status page: {status_page})")
    return api
