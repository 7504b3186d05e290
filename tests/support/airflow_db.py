"""An Airflow home with a migrated metadata database: PostgreSQL when reachable, SQLite otherwise."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

POSTGRES_HOST = "127.0.0.1"
POSTGRES_PORT = 5432


@dataclass
class AirflowHome:
    """Where Airflow keeps its config and logs, and the environment that points Airflow at it."""

    path: Path
    sql_alchemy_conn: str
    env: dict[str, str]
    drop_database: str | None = None


def postgres_reachable() -> bool:
    try:
        with socket.create_connection((POSTGRES_HOST, POSTGRES_PORT), timeout=1):
            return True
    except OSError:
        return False


def _psql_admin(sql: str) -> None:
    import psycopg2

    conn = psycopg2.connect(host=POSTGRES_HOST, port=POSTGRES_PORT, user="postgres", dbname="postgres")
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
    finally:
        conn.close()


def create_airflow_home(
    path: Path, dags_folder: Path, plugins_folder: Path, extra_env: dict[str, str] | None = None
) -> AirflowHome:
    """Create an Airflow home at ``path`` and migrate a fresh metadata database for it; ``extra_env``
    (e.g. another auth manager, whose tables the migration then creates too) joins its environment."""
    path.mkdir(parents=True, exist_ok=True)
    drop = None
    if postgres_reachable():
        db = f"hubflow_test_{uuid.uuid4().hex[:10]}"
        _psql_admin(f'CREATE DATABASE "{db}"')
        conn = f"postgresql+psycopg2://postgres@{POSTGRES_HOST}:{POSTGRES_PORT}/{db}"
        drop = db
    else:
        conn = f"sqlite:///{path / 'airflow.db'}"
    env = dict(os.environ)
    env.update(
        {
            "AIRFLOW_HOME": str(path),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": conn,
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(plugins_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            **(extra_env or {}),
        }
    )
    airflow = os.path.join(os.path.dirname(sys.executable), "airflow")
    result = subprocess.run(
        [airflow, "db", "migrate"], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    if result.returncode != 0:
        if drop:
            _psql_admin(f'DROP DATABASE IF EXISTS "{drop}"')
        raise RuntimeError(f"airflow db migrate failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return AirflowHome(path=path, sql_alchemy_conn=conn, env=env, drop_database=drop)


def remove_airflow_home(home: AirflowHome) -> None:
    if home.drop_database:
        _psql_admin(f'DROP DATABASE IF EXISTS "{home.drop_database}" WITH (FORCE)')
