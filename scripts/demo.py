"""The embedded hubflow stack on one machine: `make demo` (run) and `make demo-stop` (stop).

``run`` shows what hubflow is for, on local Spark with Delta tables: the Event Hubs emulator and
Airflow standalone (SQLite metadata, LocalExecutor) start together; sample events go to the hub and
landing files to a folder. ``telemetry_bronze`` is a supervised streaming job: its supervisor DAG
starts it, the demo kills its driver (SIGKILL), the supervisor finds it dead, waits out its restart
backoff (the run's note says when the next start is due) and starts it again, and the restart loop
alert reaches the demo's own webhook receiver (a Slack stand-in, printed as it arrives).
``telemetry_silver`` runs by its Asset when the supervisor announces bronze's commits;
``landing_orders`` runs once on its schedule. The stream is then stopped and a summary read back
with delta-rs: every table, the restarts, the alerts received, the status page's address. Each step
says how many seconds into the demo it happened; a step that does not happen by its deadline ends
the demo with a non-zero exit naming the step and the logs.

Everything lives under ``.hubflow/demo/`` at the repository root. Without ``--keep-running`` the
stack is stopped at the end; with it, ``make demo-stop`` stops it later. A default port that is
taken (5672 is also RabbitMQ's, 8080 is common) is replaced by a free one, and the demo says so.
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
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from eventhubs_emulator import EmulatorConfig
from hubflow_jobs.runtime.detached_process import start_detached

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "plugins"))
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
BRONZE, SILVER, ORDERS = "telemetry_bronze", "telemetry_silver", "landing_orders"
SUPERVISOR = f"{BRONZE}__supervisor"
SILVER_DAG, ORDERS_DAG = f"{SILVER}__available_now", f"{ORDERS}__available_now"
#: The Airflow connection the supervisor's Slack notifier posts alerts through (to the demo's receiver).
ALERTS_CONN = "demo_alerts"
#: The bronze job's supervision: a tight policy, for the demo only (the defaults are 5 minutes,
#: 30 s, 30 min, 10 min). The demo kills the driver once, within ``healthy_after`` of its first
#: start, so the next start is ``restart_backoff`` after the first; the pause after that second
#: start is ``max_restart_backoff``, its ceiling: a restart loop, alerted at the next run.
SUPERVISION = {
    "supervise_every": "15 seconds",
    "restart_backoff": "1 minute",
    "max_restart_backoff": "2 minutes",
    "healthy_after": "3 minutes",
}
#: How long each step may take before the demo gives up, in seconds (a busy 2-core machine needs
#: most of these only when something is wrong).
DEADLINES = {
    "airflow": 300,
    "dags": 120,
    "bronze started": 180,
    "bronze landed": 240,
    "supervisor saw the kill": 120,
    "restart": 180,
    "alert": 120,
    "silver": 300,
    "orders": 300,
}
console = Console(highlight=False, width=None if sys.stdout.isatty() else 120)
T0 = time.monotonic()


def say(message: str, style: str | None = None) -> None:
    """One step of the demo, with the seconds since it began."""
    text = f"[{time.monotonic() - T0:5.0f} s] {escape(message)}"
    console.print(f"[{style}]{text}[/]" if style else text)


class DemoFailed(SystemExit):
    """A step did not happen; the message says which and where to look."""

    def __init__(self, message: str) -> None:
        super().__init__(f"demo: {message}; logs in {DEMO / 'logs'} and {DEMO / 'data' / 'airflow' / 'logs'}")


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
    """Stop every process the demo started: Airflow first (so no supervisor starts a job again),
    then the streaming jobs' drivers (gracefully, then for sure), then the emulator."""
    CONNECTION_FILE.unlink(missing_ok=True)
    pids = json.loads(PIDS.read_text()) if PIDS.exists() else {}
    if not pids and not quiet:
        console.print("no demo stack is running")
    order = sorted(pids, key=lambda name: name != "airflow")  # Airflow, then the emulator
    for name in order:
        if name == "emulator":
            stop_streaming_jobs(quiet)
        _stop_group(name, pids[name], quiet)
    if "emulator" not in pids:
        stop_streaming_jobs(quiet)
    PIDS.unlink(missing_ok=True)


def _stop_group(name: str, pid: int, quiet: bool) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.3)
    try:
        os.killpg(pid, signal.SIGKILL)  # what is left of the group (a task's child, say)
    except ProcessLookupError:
        pass
    if not quiet:
        console.print(f"stopped {name} (pid {pid})")


def stop_streaming_jobs(quiet: bool, wait: float = 30) -> list[str]:
    """Stop every streaming driver the demo's status folders show running here: the STOP marker
    (the running batch finishes), then SIGKILL to its process group. Returns what was done."""
    from hubflow_plugins.core.job_control import JobControl

    done = []
    for status in sorted((DEMO / "data" / "status").glob("*/status.json")):
        control = JobControl(status.parent.name, str(status.parent))
        live = control.liveness()
        if not live.alive or live.pid is None:
            continue
        group = _group_of(live.pid)
        said = control.stop(timedelta(seconds=wait), log=lambda _: None, kill_wait=timedelta(seconds=5))
        if group is not None:
            try:
                os.killpg(group, signal.SIGKILL)  # spark-submit's JVM, should it outlive its driver
            except ProcessLookupError:
                pass
        done.append(f"{status.parent.name}: {said}")
        if not quiet:
            console.print(f"stopped streaming job {status.parent.name} (driver pid {live.pid}): {said}")
    return done


def _group_of(pid: int) -> int | None:
    """The process group of ``pid`` when it is a group of its own (a detached spark-submit), else None."""
    try:
        group = os.getpgid(pid)
    except ProcessLookupError:
        return None
    return group if group not in (os.getpgid(0), 0, 1) else None


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


def wait_for(check: Callable[[], Any], step: str, interval: float = 1.0) -> Any:
    """Poll ``check`` until it returns something true, and return that; a DemoFailed naming
    ``step`` after its deadline (:data:`DEADLINES`)."""
    seconds = DEADLINES[step]
    deadline = time.monotonic() + seconds
    while True:
        try:
            found = check()
            if found:
                return found
        except (OSError, ValueError):
            pass
        if time.monotonic() >= deadline:
            raise DemoFailed(f"step {step!r} did not happen within {seconds} s")
        time.sleep(interval)


# ------------------------------------------------------------------------------ the alert receiver
class AlertReceiver:
    """The demo's stand-in for a Slack incoming webhook: an HTTP server in a thread of the demo that
    prints each message as it arrives and keeps them for the summary."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        messages = self.messages

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                try:
                    text = str(json.loads(body).get("text", ""))
                except ValueError:
                    text = body.decode("utf-8", "replace")
                messages.append(text)
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(b"ok")
                say("alert received by the demo's webhook receiver:", "magenta")
                for line in text.splitlines():
                    console.print(f"           [magenta]| {escape(line)}[/]")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/services/T000/B000/hubflow-demo"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# ----------------------------------------------------------------------------- the Airflow REST API
class Api:
    """Airflow 3's REST API, as the demo's only user (every user is admin: GET /auth/token)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.token = json.loads(self._request("GET", "/auth/token", auth=False))["access_token"]

    def _request(self, method: str, path: str, body: Any = None, auth: bool = True) -> bytes:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base_url + path, data=data, method=method, headers=headers)
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.read()

    def call(self, method: str, path: str, body: Any = None) -> Any:
        return json.loads(self._request(method, path, body) or b"null")

    def dag_known(self, dag_id: str) -> bool:
        try:
            self.call("GET", f"/api/v2/dags/{dag_id}")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return False
            raise
        return True

    def unpause(self, dag_id: str) -> None:
        self.call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})

    def trigger(self, dag_id: str) -> None:
        self.call("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None})

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        """The DAG's runs, newest first."""
        path = f"/api/v2/dags/{dag_id}/dagRuns?order_by=-run_after&limit=100"
        return self.call("GET", path)["dag_runs"]


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


def write_jobs(data: Path) -> Path:
    """The demo's job configs and registry (the shipped ones point at docker-compose volumes)."""
    configs = data / "configs"
    configs.mkdir(parents=True, exist_ok=True)
    common = {
        "checkpoint_root": str(data / "checkpoints"),
        "status_root": str(data / "status"),
        "spark_conf": {"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"},
    }
    once = {"trigger": {"availableNow": True}, **common}
    orders = {
        "name": ORDERS,
        **once,
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
    bronze = {
        "name": BRONZE,
        "trigger": {"processingTime": "2 seconds"},
        **common,
        "sources": {
            "events": {
                "kind": "eventhubs",
                "connection_string_env": "HUBFLOW_EVENTHUBS_CONNECTION_STRING",
                "starting_position": "earliest",
                "max_events_per_trigger": EVENTS,
            }
        },
        "sinks": {
            "bronze": {
                "kind": "delta",
                "output_path": str(data / "lake" / BRONZE),
                "partition_by": ["ingest_date"],
            }
        },
    }
    silver = {
        "name": SILVER,
        **once,
        "sources": {"bronze": {"kind": "delta", "path": str(data / "lake" / BRONZE)}},
        "params": {
            "body_schema": "device STRING, reading BIGINT, celsius DOUBLE",
            "required_fields": ["device"],
        },
        "sinks": {
            "silver": {
                "kind": "delta",
                "output_path": str(data / "lake" / SILVER),
                "quarantine_path": str(data / "quarantine_silver"),
            }
        },
    }
    for config in (orders, bronze, silver):
        (configs / f"{config['name']}.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    jobs = [
        {
            "name": ORDERS,
            "application": "files_to_lake",
            "config": str(configs / f"{ORDERS}.yaml"),
            "mode": "scheduled",
            "schedule": "@hourly",
            "archive": True,
            "archive_retention": "30 days",
        },
        {
            "name": BRONZE,
            "application": "eventhubs_to_lake",
            "config": str(configs / f"{BRONZE}.yaml"),
            "mode": "streaming",
            **SUPERVISION,
            "health_check": "poke",  # a healthy stream answers at the first poke: no triggerer round trip
            "eventhubs_conn_id": "eventhubs_default",
            "alerts": {"notifiers": [{"slack_webhook": {"slack_webhook_conn_id": ALERTS_CONN}}]},
        },
        {
            "name": SILVER,
            "application": "bronze_to_silver",
            "config": str(configs / f"{SILVER}.yaml"),
            "mode": "scheduled",
            "schedule": f"asset({BRONZE})",
        },
    ]
    registry = data / "registry.yaml"
    header = (
        "# The demo's registry (scripts/demo.py). telemetry_bronze's supervision is tight on purpose:\n"
        "# one kill within healthy_after shows the restart backoff and a restart-loop alert.\n"
    )
    registry.write_text(header + yaml.safe_dump({"jobs": jobs}, sort_keys=False))
    return registry


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


# ------------------------------------------------------------------------------ what is going on
def table_rows(path: Path, *columns: str) -> list[tuple]:
    """The rows of a Delta table (only ``columns``), read with delta-rs; none before its first commit."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(str(path)).to_pyarrow_dataset().to_table(columns=list(columns))
    except TableNotFoundError:
        return []
    return list(zip(*(table.column(name).to_pylist() for name in columns), strict=True))


def row_count(path: Path) -> int:
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(str(path)).to_pyarrow_dataset().count_rows()
    except TableNotFoundError:  # nothing committed yet reads as zero rows
        return 0


def task_log_lines(data: Path, dag_id: str, task_id: str) -> list[tuple[str, int, str]]:
    """Every (run id, line number, message) the task logged, from Airflow's log files (JSON lines)."""
    lines = []
    for log in sorted(
        (data / "airflow" / "logs" / f"dag_id={dag_id}").glob(f"run_id=*/task_id={task_id}/*.log")
    ):
        run_id = log.parent.parent.name.removeprefix("run_id=")
        for number, raw in enumerate(log.read_text(errors="replace").splitlines()):
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get("event"):
                lines.append((f"{run_id}/{log.name}", number, str(entry["event"])))
    return lines


# ---------------------------------------------------------------------------------- the summary
def summarize(data: Path, registry: Path, facts: dict[str, Any]) -> Table:
    """The summary table; the lake's Delta tables are read with delta-rs, as any non-Spark reader would."""
    from hubflow_plugins.core.checkpoint_inspector import inspect_checkpoint
    from hubflow_plugins.core.registry import load_registry

    good, bad, sent = facts["good"], facts["bad"], facts["sent"]
    table = Table(title="hubflow demo", show_lines=False)
    table.add_column("what")
    table.add_column("value", overflow="fold")
    table.add_row("landing records in", f"{good + bad} ({good} good, {bad} broken on purpose)")
    table.add_row("orders rows out", str(row_count(data / "lake" / "orders")))
    table.add_row("orders rows quarantined", str(row_count(data / "quarantine")))
    archived = list((data / "archive").rglob("*.json")) if (data / "archive").exists() else []
    table.add_row("landing files archived", f"{len(archived)} of {LANDING_FILES}")
    table.add_row("Event Hubs events in", str(sent))
    bronze = table_rows(data / "lake" / BRONZE, "partition", "sequenceNumber")
    table.add_row("telemetry rows out", f"{len(bronze)} ({len(set(bronze))} distinct events)")
    silver = table_rows(data / "lake" / SILVER, "reading")
    table.add_row("silver rows out", f"{len(silver)} ({len(set(silver))} distinct readings)")
    table.add_row("silver rows quarantined", str(row_count(data / "quarantine_silver")))
    table.add_row("bronze starts by its supervisor", facts["restarts"])
    table.add_row("alerts received", str(len(facts["alerts"])))
    for text in facts["alerts"]:
        table.add_row("  alert", escape(text.splitlines()[0] if text else "(empty)"))
    table.add_row("silver runs by its Asset", facts["silver_runs"])
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
    (data / "airflow").mkdir(parents=True)
    notes: list[str] = []
    amqp_port = pick_port(5672, "Event Hubs AMQP", notes)
    admin_port = pick_port(5300, "Event Hubs admin", notes)
    api_port = pick_port(8080, "Airflow API/UI", notes)
    for note in notes:
        say(note, "yellow")
    receiver = AlertReceiver()
    try:
        return _run(data, amqp_port, admin_port, api_port, receiver, keep_running)
    finally:
        receiver.close()


def _run(
    data: Path, amqp_port: int, admin_port: int, api_port: int, receiver: AlertReceiver, keep_running: bool
) -> int:
    from hubflow_jobs.status.states import JobState
    from hubflow_plugins.core.airflow_readiness import RUNS_DAGS, AirflowNotReady, wait_until_ready
    from hubflow_plugins.core.job_control import JobControl
    from hubflow_plugins.core.registry import load_registry
    from hubflow_plugins.core.supervision import backoff_view

    config = emulator_config()
    conn = config.connection_string("127.0.0.1", amqp_port, HUB)
    registry = write_jobs(data)
    env = airflow_env(data, registry, api_port, conn, receiver.url)
    ui = f"http://127.0.0.1:{api_port}"
    status_page = f"{ui}/hubflow/"

    # The emulator and Airflow start together (standalone migrates its SQLite DB itself).
    say(f"starting the Event Hubs emulator (127.0.0.1:{amqp_port}) and `airflow standalone` ({ui})")
    config.write(DEMO / "Config.json")
    command = [sys.executable, "-m", "eventhubs_emulator", "--config", str(DEMO / "Config.json")]
    emulator = start(
        "emulator", [*command, "--port", str(amqp_port), "--admin-port", str(admin_port)], dict(os.environ)
    )
    started = datetime.now(UTC)
    standalone = start("airflow", [str(BIN / "airflow"), "standalone"], env)

    def emulator_up() -> bool:
        if emulator.poll() is not None:
            raise DemoFailed(f"the emulator exited with code {emulator.returncode}")
        return urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/health", timeout=2).status == 200

    wait_for(emulator_up, "airflow", interval=0.3)
    write_connection_file(conn)
    sent = send_events(conn)
    good, bad = write_landing_files(data / "landing" / "orders")
    say(f"sent {sent} events to hub {HUB!r}; wrote {LANDING_FILES} landing files")

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

    job = load_registry(registry).job(BRONZE)
    control = JobControl(BRONZE, job.paths.status_dir, heartbeat_timeout=job.heartbeat_timeout)

    def running() -> Any:
        live = control.liveness()
        return live.alive and live.state in (JobState.RUNNING, JobState.IDLE) and live

    first = wait_for(running, "bronze started")
    say(f"{SUPERVISOR} started {BRONZE}: a supervised streaming job, driver pid {first.pid}, {first.state}")
    # A scheduled DAG runs its last interval once unpaused; trigger it only if it did not.
    deadline = time.monotonic() + 15
    while not api.runs(ORDERS_DAG) and time.monotonic() < deadline:
        time.sleep(1)
    if not api.runs(ORDERS_DAG):
        api.trigger(ORDERS_DAG)
        say(f"triggered {ORDERS_DAG}")

    bronze_table = data / "lake" / BRONZE
    wait_for(lambda: row_count(bronze_table) >= sent, "bronze landed")
    say(f"{BRONZE} landed all {sent} events in {bronze_table}")

    # The kill: SIGKILL to the driver's process group (spark-submit's JVM and the Python driver),
    # as a crash would leave it.
    live = control.liveness()
    group = _group_of(live.pid) if live.pid else None
    if group is None:
        raise DemoFailed(f"the driver of {BRONZE} (pid {live.pid}) runs in no process group of its own")
    seen = {(where, number) for where, number, _ in task_log_lines(data, SUPERVISOR, "ensure_running")}
    os.killpg(group, signal.SIGKILL)
    killed_at = datetime.now(UTC)
    say(f"killed the driver of {BRONZE} (SIGKILL to pid {live.pid} and its process group)", "red")

    def supervisor_said(before: set[tuple[str, int]], *needles: str) -> str | None:
        for where, number, line in task_log_lines(data, SUPERVISOR, "ensure_running"):
            if (where, number) in before:
                continue
            if any(needle in line for needle in needles):
                return line
        return None

    decision = wait_for(
        lambda: supervisor_said(seen, "the next start is due", "starting it again", "started job"),
        "supervisor saw the kill",
    )
    say(f"{SUPERVISOR} found it dead: {decision}", "yellow")
    state = control.supervisor_state()
    view = backoff_view(
        control.restart_times(),
        now=datetime.now(UTC),
        policy=job.restart_policy,
        alive=control.liveness().alive,
        backoff_reset_at=_time(state.get("backoff_reset_at")),
        last_alive_at=_time((control.folder.status() or {}).get("heartbeat")),
    )
    if view:
        say(f"the status page's backoff view: {view['text']}", "yellow")

    def restarted() -> Any:
        now = running()
        return now and now.pid != live.pid and now

    second = wait_for(restarted, "restart")
    restart_times = control.restart_times()
    pause = (restart_times[-1] - restart_times[-2]).total_seconds() if len(restart_times) > 1 else 0
    say(
        f"{SUPERVISOR} restarted {BRONZE} from its checkpoint (driver pid {second.pid}), "
        f"{(restart_times[-1] - killed_at).total_seconds():.0f} s after the kill, "
        f"{pause:.0f} s after its previous start",
        "green",
    )

    wait_for(
        lambda: any(BRONZE in text and "restart-loop" in text for text in receiver.messages),
        "alert",
        interval=0.5,
    )

    def silver_done() -> list[dict[str, Any]] | None:
        runs = [run for run in api.runs(SILVER_DAG) if run.get("run_type") == "asset_triggered"]
        failed = [run["dag_run_id"] for run in runs if run.get("state") == "failed"]
        if failed:
            raise DemoFailed(f"{SILVER_DAG} run(s) {failed} failed")
        succeeded = [run for run in runs if run.get("state") == "success"]
        if succeeded and row_count(data / "lake" / SILVER) >= sent:
            return runs
        return None

    silver_runs = wait_for(silver_done, "silver", interval=2)
    say(
        f"{SILVER_DAG} ran by the Asset {BRONZE} ({len(silver_runs)} asset-triggered run(s), "
        f"last {silver_runs[0]['state']}); the silver table has every event"
    )

    def orders_done() -> list[str] | None:
        states = [run["state"] for run in api.runs(ORDERS_DAG)]
        return states if states and states[0] in ("success", "failed") else None

    orders_states = wait_for(orders_done, "orders", interval=2)
    supervisor_states = Counter(run["state"] for run in api.runs(SUPERVISOR))

    if keep_running:
        say(f"the stream keeps running under its supervisor; status page: {status_page}")
        say(
            "the demo's alert receiver ends with this process: later alerts fail to deliver "
            "(the supervisor's task log says so)"
        )
    else:
        # Held (as on-call's stop holds it), so no supervisor run starts it again, then stopped.
        control.folder.place_hold("the demo is over", by="scripts/demo.py")
        said = control.stop(timedelta(seconds=60), log=lambda _: None)
        say(f"stopped {BRONZE}: {said}")

    facts = {
        "good": good,
        "bad": bad,
        "sent": sent,
        "alerts": list(receiver.messages),
        "restarts": f"{len(restart_times)} (the first start, then the restart after the kill): "
        + ", ".join(t.isoformat(timespec="seconds") for t in restart_times),
        "silver_runs": ", ".join(f"{run['dag_run_id']} {run['state']}" for run in silver_runs),
    }
    console.print(summarize(data, registry, facts))
    console.print(f"DAG {ORDERS_DAG}: {orders_states[0]}")
    console.print(f"DAG {SILVER_DAG}: {silver_runs[0]['state']} (run type asset_triggered)")
    console.print(
        f"DAG {SUPERVISOR}: {supervisor_states.total()} runs ("
        + ", ".join(f"{count} {state}" for state, count in sorted(supervisor_states.items()))
        + ")"
    )
    console.print(f"status page: {status_page}")
    console.print(f"Airflow UI: {ui} (no login: the demo runs with every user as admin)")
    console.print(f"logs: {DEMO / 'logs'}; Airflow task logs under {data / 'airflow' / 'logs'}")
    if keep_running:
        console.print(f"the Event Hub {HUB!r}: its connection string is in {CONNECTION_FILE}")
        console.print("the stack keeps running; stop it with `make demo-stop`")
    else:
        stop_stack(quiet=True)
        say("stack stopped (run `make demo DEMO_ARGS=--keep-running` to keep it up)")
    if orders_states[0] != "success":
        console.print(f"[red]demo: the last run of {ORDERS_DAG} did not succeed; see the task logs[/]")
        return 1
    return 0


def _time(text: Any) -> datetime | None:
    from hubflow_plugins.core.job_control import parse_time

    return parse_time(text)


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
    try:
        code = main()
    finally:
        console.print(f"demo took {time.monotonic() - T0:.0f} s")
    sys.exit(code)
