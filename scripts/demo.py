"""The embedded hubflow stack on one machine: `make demo` (run) and `make demo-stop` (stop).

``run`` starts the Event Hubs emulator and Airflow standalone (SQLite metadata, LocalExecutor),
loads sample events and landing files, unpauses and triggers the DAGs of the demo registry (which
run the jobs on local Spark, writing Delta tables), waits until their data lands and prints a
summary read back with delta-rs. Everything lives
under ``.hubflow/demo/`` at the repository root. Without ``--keep-running`` the stack is stopped at
the end; with it, ``make demo-stop`` stops it later. A default port that is taken (5672 is also
RabbitMQ's, 8080 is common) is replaced by a free one, and the summary says so.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from eventhubs_emulator import EmulatorConfig
from hubflow_jobs.runtime.detached_process import start_detached

REPO = Path(__file__).resolve().parent.parent
#: Where the demo keeps everything (HUBFLOW_DEMO_HOME overrides it, e.g. for the demo's own test).
DEMO = Path(os.environ.get("HUBFLOW_DEMO_HOME", REPO / ".hubflow" / "demo"))
PIDS = DEMO / "pids.json"
BIN = Path(sys.executable).parent
HUB = "telemetry"
PARTITIONS = 4
EVENTS = 2_000
#: The demo emulator's connection string to hub ``telemetry``, for pipelines of one's own that read it
#: (docs/pipelines.md); readable by its owner only, removed when the demo stops.
CONNECTION_FILE = DEMO / "eventhubs_connection"
LANDING_FILES = 5
ORDERS_PER_FILE = 40
BAD_PER_FILE = 2
console = Console()


# ----------------------------------------------------------------------------------------- ports
def port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def pick_port(wanted: int, what: str, notes: list[str]) -> int:
    """``wanted`` when free, else a free port (and a note saying so)."""
    if port_free(wanted):
        return wanted
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    notes.append(f"port {wanted} ({what}) is taken on this machine; using {port} instead")
    return port


# ------------------------------------------------------------------------------------- processes
def start(name: str, command: list[str], env: dict[str, str]) -> subprocess.Popen:
    process = start_detached(command, DEMO / "logs" / f"{name}.log", env)
    pids = json.loads(PIDS.read_text()) if PIDS.exists() else {}
    pids[name] = process.pid
    PIDS.write_text(json.dumps(pids))
    return process


def write_connection_file(conn: str) -> None:
    """Keep the emulator's connection string where a pipeline's run can read it (owner only)."""
    CONNECTION_FILE.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(CONNECTION_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(conn)


def stop_stack(quiet: bool = False) -> None:
    """Stop every process the demo started (each in its own process group)."""
    CONNECTION_FILE.unlink(missing_ok=True)
    if not PIDS.exists():
        if not quiet:
            console.print("no demo stack is running")
        return
    pids = json.loads(PIDS.read_text())
    for name, pid in pids.items():
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.3)
        if _alive(pid):
            os.killpg(pid, signal.SIGKILL)
        if not quiet:
            console.print(f"stopped {name} (pid {pid})")
    PIDS.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(check: Any, seconds: float, what: str, process: subprocess.Popen | None = None) -> None:
    """Poll ``check`` until it holds. ``seconds`` bounds a hang, not a start-up: on a busy machine a
    process can take minutes to come up, so a waited-for ``process`` that exits fails at once
    instead, and the bound is generous."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        if process is not None and process.poll() is not None:
            code, logs = process.returncode, DEMO / "logs"
            raise SystemExit(f"demo: {what} exited with code {code} before it was ready; logs in {logs}")
        time.sleep(1)
    raise SystemExit(f"demo: timed out after {seconds:.0f}s waiting for {what}; logs in {DEMO / 'logs'}")


# ------------------------------------------------------------------------------------ the stack
def emulator_config() -> EmulatorConfig:
    """The demo's hub in the emulator's config model (written as Config.json for its CLI)."""
    return EmulatorConfig.single_hub(HUB, partition_count=PARTITIONS)


def send_events(conn: str) -> int:
    """Send the sample telemetry events in batches; return how many were sent."""
    from azure.eventhub import EventData, EventHubProducerClient

    producer = EventHubProducerClient.from_connection_string(conn)
    sent = 0
    with producer:
        batch = producer.create_batch()
        for index in range(EVENTS):
            body = json.dumps({"device": f"dev-{index % 25}", "reading": index, "celsius": 20 + index % 15})
            try:
                batch.add(EventData(body))
            except ValueError:
                producer.send_batch(batch)
                sent += len(batch)
                batch = producer.create_batch()
                batch.add(EventData(body))
        if len(batch):
            producer.send_batch(batch)
            sent += len(batch)
    return sent


def write_landing_files(landing: Path) -> tuple[int, int]:
    """Order files as JSON lines, a few records broken on purpose; return (good, bad)."""
    landing.mkdir(parents=True, exist_ok=True)
    good = bad = 0
    for number in range(LANDING_FILES):
        lines = []
        for item in range(ORDERS_PER_FILE):
            order_id = number * 1000 + item
            lines.append(
                json.dumps(
                    {
                        "order_id": order_id,
                        "customer": f"c{item % 7}",
                        "amount": round(item * 1.5, 2),
                        "created_at": "2026-11-22T10:00:00Z",
                    }
                )
            )
            good += 1
        lines += ["this is not json", json.dumps({"customer": "no order id"})][:BAD_PER_FILE]
        bad += BAD_PER_FILE
        temp = landing / f".orders-{number}.tmp"
        temp.write_text("\n".join(lines) + "\n")
        temp.rename(landing / f"orders-{number}.json")
    return good, bad


def write_jobs(data: Path, with_eventhubs: bool) -> Path:
    """The demo's job configs and registry (the shipped ones point at docker-compose volumes)."""
    configs = data / "configs"
    configs.mkdir(parents=True, exist_ok=True)
    common = {
        "trigger": {"availableNow": True},
        "checkpoint_root": str(data / "checkpoints"),
        "status_root": str(data / "status"),
        "spark_conf": {"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"},
    }
    orders = {
        "name": "landing_orders",
        **common,
        "sources": {
            "landing": {
                "kind": "files",
                "path": str(data / "landing" / "orders"),
                "format": "json",
                "schema": "order_id BIGINT, customer STRING, amount DOUBLE, created_at TIMESTAMP",
                "max_files_per_trigger": 2,
                "archive_dir": str(data / "archive"),
            }
        },
        "params": {"required_columns": ["order_id"]},
        "sinks": {
            "lake": {
                "kind": "delta",
                "output_path": str(data / "lake" / "orders"),
                "quarantine_path": str(data / "quarantine"),
            }
        },
    }
    (configs / "landing_orders.yaml").write_text(yaml.safe_dump(orders, sort_keys=False))
    jobs = [
        {
            "name": "landing_orders",
            "application": "files_to_lake",
            "config": str(configs / "landing_orders.yaml"),
            "mode": "scheduled",
            "schedule": "@hourly",
            "archive": True,
            "archive_retention": "30 days",
        },
    ]
    if with_eventhubs:
        telemetry = {
            "name": "telemetry_bronze",
            **common,
            "sources": {
                "events": {
                    "kind": "eventhubs",
                    "connection_string_env": "HUBFLOW_EVENTHUBS_CONNECTION_STRING",
                    "starting_position": "earliest",
                    "max_events_per_trigger": 500,
                }
            },
            "sinks": {
                "bronze": {
                    "kind": "delta",
                    "output_path": str(data / "lake" / "telemetry_bronze"),
                    "partition_by": ["ingest_date"],
                }
            },
        }
        (configs / "telemetry_bronze.yaml").write_text(yaml.safe_dump(telemetry, sort_keys=False))
        jobs.append(
            {
                "name": "telemetry_bronze",
                "application": "eventhubs_to_lake",
                "config": str(configs / "telemetry_bronze.yaml"),
                "mode": "scheduled",
                "schedule": "@hourly",
                "eventhubs_conn_id": "eventhubs_default",
            }
        )
    registry = data / "registry.yaml"
    registry.write_text(yaml.safe_dump({"jobs": jobs}, sort_keys=False))
    return registry


def airflow_env(data: Path, registry: Path, api_port: int, conn: str) -> dict[str, str]:
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
            "AIRFLOW__API__PORT": str(api_port),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{api_port}",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
            "HUBFLOW_REGISTRY": str(registry),
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
            "AIRFLOW_CONN_EVENTHUBS_DEFAULT": json.dumps({"conn_type": "generic", "password": conn}),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        }
    )
    return env


def airflow(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [str(BIN / "airflow"), *args], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    if result.returncode != 0:
        raise SystemExit(f"demo: `airflow {' '.join(args)}` failed:\n{result.stderr[-3000:]}")
    return result.stdout


def run_states(env: dict[str, str], dag_id: str) -> list[str]:
    out = airflow(env, "dags", "list-runs", dag_id, "-o", "json")
    for line in reversed(out.splitlines()):
        if line.startswith("[{") or line.strip() == "[]":
            return [run["state"] for run in json.loads(line)]
    return []


# ---------------------------------------------------------------------------------- the summary
def summarize(data: Path, registry: Path, sent: int, good: int, bad: int) -> Table:
    """The summary table; the lake's Delta tables are read with delta-rs, as any non-Spark reader would."""
    sys.path.insert(0, str(REPO / "plugins"))
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from hubflow_plugins.core.checkpoint_inspector import inspect_checkpoint
    from hubflow_plugins.core.registry import load_registry

    def rows(path: Path) -> int:
        try:
            return DeltaTable(str(path)).to_pyarrow_dataset().count_rows()
        except TableNotFoundError:  # nothing committed yet reads as zero rows
            return 0

    table = Table(title="hubflow demo", show_lines=False)
    table.add_column("what")
    table.add_column("value", overflow="fold")
    table.add_row("landing records in", f"{good + bad} ({good} good, {bad} broken on purpose)")
    table.add_row("orders rows out", str(rows(data / "lake" / "orders")))
    table.add_row("orders rows quarantined", str(rows(data / "quarantine")))
    archived = [p for p in (data / "archive").rglob("*.json")] if (data / "archive").exists() else []
    table.add_row("landing files archived", f"{len(archived)} of {LANDING_FILES}")
    if (data / "configs" / "telemetry_bronze.yaml").exists():
        table.add_row("Event Hubs events in", str(sent))
        table.add_row("telemetry rows out", str(rows(data / "lake" / "telemetry_bronze")))
    for job in load_registry(registry).jobs:
        paths = job.paths
        report = inspect_checkpoint(
            paths.checkpoint_location, stalled_after=timedelta(hours=2), delta_tables=paths.delta_tables
        )
        table.add_row(f"checkpoint {job.name}", f"{report.verdict}: {report.reason}")
        for sink in report.delta_sinks:
            name = Path(sink.table).name
            table.add_row(f"Delta table {name}", f"version {sink.version}: {sink.explanation}")
    table.add_row("lake output (Delta)", str(data / "lake"))
    return table


# ---------------------------------------------------------------------------------------- main
def run(keep_running: bool) -> int:
    stop_stack(quiet=True)
    if DEMO.exists():
        shutil.rmtree(DEMO)
    (DEMO / "logs").mkdir(parents=True)
    data = DEMO / "data"
    notes: list[str] = []
    amqp_port = pick_port(5672, "Event Hubs AMQP", notes)
    admin_port = pick_port(5300, "Event Hubs admin", notes)
    api_port = pick_port(8080, "Airflow API/UI", notes)
    for note in notes:
        console.print(f"[yellow]{note}[/]")

    console.print(f"starting the Event Hubs emulator on 127.0.0.1:{amqp_port}")
    config = emulator_config()
    config.write(DEMO / "Config.json")
    emulator = start(
        "emulator",
        [
            sys.executable,
            "-m",
            "eventhubs_emulator",
            "--config",
            str(DEMO / "Config.json"),
            "--port",
            str(amqp_port),
            "--admin-port",
            str(admin_port),
        ],
        dict(os.environ),
    )
    wait_for(
        lambda: urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/health", timeout=2).status == 200,
        300,
        "the emulator's health endpoint",
        emulator,
    )
    conn = config.connection_string("127.0.0.1", amqp_port, HUB)
    write_connection_file(conn)

    sent = send_events(conn)
    good, bad = write_landing_files(data / "landing" / "orders")
    console.print(f"sent {sent} events to hub {HUB!r}; wrote {LANDING_FILES} landing files")
    with_eventhubs = (REPO / "jobs" / "eventhubs_to_lake.py").exists()
    registry = write_jobs(data, with_eventhubs)
    env = airflow_env(data, registry, api_port, conn)

    console.print("preparing Airflow (SQLite metadata DB) and starting `airflow standalone`")
    (data / "airflow").mkdir(parents=True, exist_ok=True)
    airflow(env, "db", "migrate")
    airflow(env, "dags", "reserialize")
    sys.path.insert(0, str(REPO / "plugins"))
    from hubflow_plugins.core.airflow_readiness import RUNS_DAGS, AirflowNotReady, wait_until_ready

    started = datetime.now(UTC)
    standalone = start("airflow", [str(BIN / "airflow"), "standalone"], env)
    ui = f"http://127.0.0.1:{api_port}"
    # Triggered only once the API server, scheduler and DAG processor are all up: a task queued
    # before the API server listens fails ("Connection refused").
    try:
        wait_until_ready(
            ui,
            RUNS_DAGS,
            since=started,
            timeout=900,
            still_starting=lambda: (
                None
                if standalone.poll() is None
                else f"`airflow standalone` exited with code {standalone.returncode}"
            ),
        )
    except AirflowNotReady as exc:
        raise SystemExit(f"demo: {exc}; logs in {DEMO / 'logs'}") from None

    dag_ids = ["landing_orders__available_now"] + (
        ["telemetry_bronze__available_now"] if with_eventhubs else []
    )
    for dag_id in dag_ids:
        airflow(env, "dags", "unpause", dag_id)
        airflow(env, "dags", "trigger", dag_id)
        console.print(f"triggered {dag_id}")

    deadline = time.monotonic() + 900
    states: dict[str, list[str]] = {}
    while time.monotonic() < deadline:
        states = {dag_id: run_states(env, dag_id) for dag_id in dag_ids}
        if all(s and s[0] in ("success", "failed") for s in states.values()):
            break
        time.sleep(5)
    failed = [d for d, s in states.items() if not s or s[0] != "success"]

    console.print(summarize(data, registry, sent, good, bad))
    for dag_id, s in states.items():
        console.print(f"DAG {dag_id}: {s[0] if s else 'no run'}")
    console.print(f"Airflow UI: {ui} (no login: the demo runs with every user as admin)")
    console.print(f"logs: {DEMO / 'logs'}; Airflow task logs under {data / 'airflow' / 'logs'}")
    if keep_running:
        console.print(f"the Event Hub {HUB!r}: its connection string is in {CONNECTION_FILE}")
        console.print("the stack keeps running; stop it with `make demo-stop`")
    else:
        stop_stack(quiet=True)
        console.print("stack stopped (run `make demo DEMO_ARGS=--keep-running` to keep it up)")
    if failed:
        console.print(f"[red]demo: these DAG runs did not succeed: {failed}; see the task logs[/]")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", nargs="?", default="run", choices=["run", "stop"])
    parser.add_argument("--keep-running", action="store_true", help="leave the stack up after the summary")
    args = parser.parse_args(argv)
    if args.command == "stop":
        stop_stack()
        return 0
    try:
        return run(args.keep_running)
    except BaseException:
        stop_stack(quiet=True)
        raise


if __name__ == "__main__":
    started = datetime.now(UTC)
    code = main()
    console.print(f"demo took {(datetime.now(UTC) - started).total_seconds():.0f} s")
    sys.exit(code)
