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
import sys
import time
import urllib.request
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

# The demo's modules live in scripts/hubflow_demo/, beside this file (on sys.path when it runs as a
# script, not when a test loads it by its path).
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from hubflow_demo.airflow_api import Api
from hubflow_demo.airflow_start import airflow_env
from hubflow_demo.alert_receiver import AlertReceiver
from hubflow_demo.job_configs import write_jobs
from hubflow_demo.lake import row_count
from hubflow_demo.ports import pick_port
from hubflow_demo.processes import group_of, start
from hubflow_demo.progress import T0, DemoFailed, console, say, wait_for
from hubflow_demo.sample_data import emulator_config, send_events, write_connection_file, write_landing_files
from hubflow_demo.settings import (
    BIN,
    BRONZE,
    CONNECTION_FILE,
    DEADLINES,
    DEMO,
    HUB,
    LANDING_FILES,
    ORDERS_DAG,
    REPO,
    SILVER,
    SILVER_DAG,
    SUPERVISOR,
)
from hubflow_demo.stop import stop_stack
from hubflow_demo.summary import summarize

#: What a test or tutorial takes from the demo (its hub, events and connection file) besides ``main``.
__all__ = ["CONNECTION_FILE", "HUB", "REPO", "emulator_config", "main", "send_events"]


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
    group = group_of(live.pid) if live.pid else None
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
