"""Helpers of the Airflow tests: a registry of real jobs in a temporary folder, and Airflow's CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
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
    base: Path,
    name: str,
    *,
    streaming: bool = False,
    source: dict[str, Any] | None = None,
    sink: dict[str, Any] | None = None,
    **registry: Any,
) -> dict[str, Any]:
    """A files_to_lake job config under ``base/name`` (``source`` and ``sink`` keys override) and its
    registry entry."""
    trigger = {"processingTime": "1 second"} if streaming else {"availableNow": True}
    sections = {key: value for key, value in (("source", source), ("sink", sink)) if value}
    config = landing_config(base / name, name=name, trigger=trigger, **sections)
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


def start_airflow_services(
    env: dict[str, str], log_dir: Path, *, triggerer: bool = False
) -> tuple[list, dict[str, str]]:
    """Start a real api-server, scheduler and dag-processor (LocalExecutor) for ``env``, and a
    triggerer when asked (deferred tasks, asset watchers), and return once the first three are ready
    (``hubflow.supervision.airflow_readiness``): only then may a test unpause or trigger a DAG, or
    its tasks meet an API server that is not listening yet.

    Returns the processes (stop them with ``tests.support.processes.stop_processes``) and the
    environment pointing the workers at this api-server.
    """
    from hubflow.supervision.airflow_readiness import RUNS_DAGS, wait_until_ready
    from tests.support.processes import free_port, start_background

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
    started = datetime.now(UTC)
    commands = {
        "api-server": [AIRFLOW, "api-server", "--port", str(port)],
        "scheduler": [AIRFLOW, "scheduler"],
        "dag-processor": [AIRFLOW, "dag-processor"],
    }
    if triggerer:
        commands["triggerer"] = [AIRFLOW, "triggerer"]
    processes = {name: start_background(cmd, log_dir / f"{name}.log", env) for name, cmd in commands.items()}

    def exited() -> str | None:
        for name, process in processes.items():
            if process.poll() is not None:
                log = (log_dir / f"{name}.log").read_text(errors="replace")[-3000:]
                return f"airflow {name} exited with code {process.returncode}:\n{log}"
        return None

    try:
        wait_until_ready(
            f"http://127.0.0.1:{port}", RUNS_DAGS, since=started, timeout=300, still_starting=exited
        )
    except BaseException:
        from tests.support.processes import stop_processes

        stop_processes(list(processes.values()))
        raise
    return list(processes.values()), env


def stop_service(processes: list, name: str) -> None:
    """Stop Airflow's ``name`` service (``scheduler``, ``triggerer``...) among ``processes`` (started
    by :func:`start_airflow_services`) as a service manager would: SIGTERM, so its job ends."""
    from tests.support.processes import stop_process

    stop_process(processes[_service_index(processes, name)])


def start_service(processes: list, name: str, env: dict[str, str], log_dir: Path) -> Path:
    """Start Airflow's ``name`` service again in its place in ``processes``; its new log's path
    (``<name>-<n>.log``)."""
    from tests.support.processes import start_background

    index = _service_index(processes, name)
    assert processes[index].poll() is not None, f"airflow {name} is still running"
    log = log_dir / f"{name}-{len(list(log_dir.glob(f'{name}*.log'))) + 1}.log"
    processes[index] = start_background([AIRFLOW, name], log, env)
    return log


def _service_index(processes: list, name: str) -> int:
    (index,) = [i for i, proc in enumerate(processes) if list(proc.args)[1:2] == [name]]
    return index


@dataclass(frozen=True)
class RunSnapshot:
    """One DAG run and the states of its tasks, as one query saw them together."""

    run_id: str
    run_type: str
    state: str
    end_date: datetime | None
    tasks: dict[str, str | None]


def query_db(airflow_home: Any, sql: str, **params: Any) -> list[Any]:
    """The rows of one SQL statement on the test's Airflow metadata DB."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(airflow_home.sql_alchemy_conn)
    try:
        with engine.connect() as connection:
            return list(connection.execute(sqlalchemy.text(sql), params).all())
    finally:
        engine.dispose()


def run_snapshot(airflow_home: Any, dag_id: str) -> list[RunSnapshot]:
    """The DAG's runs with their task states, read from the metadata DB in one statement.

    One statement sees one moment: a run and its tasks never come from two different moments (a run
    read as ``success`` beside tasks read earlier, while they were still ``running``).
    """
    rows = query_db(
        airflow_home,
        "SELECT r.run_id, r.run_type, r.state, r.end_date, t.task_id, t.state "
        "FROM dag_run r LEFT JOIN task_instance t ON t.dag_id = r.dag_id AND t.run_id = r.run_id "
        "WHERE r.dag_id = :dag ORDER BY r.run_id",
        dag=dag_id,
    )
    runs: dict[str, RunSnapshot] = {}
    for run_id, run_type, state, end_date, task_id, task_state in rows:
        run = runs.setdefault(run_id, RunSnapshot(run_id, str(run_type), str(state), end_date, {}))
        if task_id is not None:
            run.tasks[task_id] = task_state
    return list(runs.values())


def asset_events(airflow_home: Any, uri: str) -> list[dict[str, Any]]:
    """Airflow's events of the asset at ``uri``, oldest first: ``extra`` and ``consumed_by``, the
    runs (dag id, run id, state) that consumed each (read in one statement)."""
    rows = query_db(
        airflow_home,
        "SELECT e.id, e.extra, r.dag_id, r.run_id, r.state "
        "FROM asset_event e JOIN asset a ON a.id = e.asset_id "
        "LEFT JOIN dagrun_asset_event c ON c.event_id = e.id "
        "LEFT JOIN dag_run r ON r.id = c.dag_run_id WHERE a.uri = :uri ORDER BY e.id",
        uri=uri,
    )
    events: dict[int, dict[str, Any]] = {}
    for event_id, extra, dag_id, run_id, state in rows:
        extra = json.loads(extra) if isinstance(extra, str) else extra
        event = events.setdefault(event_id, {"extra": extra, "consumed_by": []})
        if dag_id is not None:
            event["consumed_by"].append((dag_id, run_id, state))
    return list(events.values())


def job_status(base: Path, job: str) -> dict[str, Any]:
    """status.json of a :func:`landing_job` under ``base`` ({} while it is missing or half written)."""
    try:
        return json.loads((base / job / "status" / job / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def lake_ids(spark: Any, base: Path, job: str, sink_format: str = "delta") -> list[int]:
    """The ids in a :func:`landing_job`'s lake table, Delta or parquet (Spark's file sink, read
    through its ``_spark_metadata``: committed batches only); [] before its first commit."""
    from pyspark.errors import AnalysisException

    try:
        frame = spark.read.format(sink_format).load(str(base / job / "lake" / "orders"))
        return [row.id for row in frame.select("id").collect()]
    except AnalysisException:  # nothing committed yet
        return []


def pid_alive(pid: Any) -> bool:
    """Whether ``pid`` is a live process (not a zombie); False for anything but an int."""
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        return False


def kill_job(base: Path, job: str) -> None:
    """SIGKILL whatever driver (spark-submit and its JVM) the job's status.json names, if alive."""
    status = job_status(base, job)
    for pid in (status.get("jvm_pid"), status.get("pid")):
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


def simple_auth_user(env: dict[str, str], folder: Path, user: str) -> str:
    """Airflow's simple auth manager with one admin, ``user``, in ``env``: the UI's login page, and
    the runs the user triggers carry the name. Returns the user's (random) password."""
    import secrets

    password = secrets.token_urlsafe(12)
    passwords = folder / "passwords.json"
    passwords.write_text(json.dumps({user: password}), encoding="utf-8")
    env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] = f"{user}:admin"
    env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"] = str(passwords)
    return password
