"""``scripts/demo.py run``: the demo's steps in order, from a clean folder and free ports to the
summary and the stack's stop."""

from __future__ import annotations

import shutil
from pathlib import Path

from hubflow_demo.airflow_start import airflow_env, wait_for_airflow
from hubflow_demo.alert_receiver import AlertReceiver
from hubflow_demo.dag_runs import ensure_orders_run, supervisor_run_states, wait_for_orders, wait_for_silver
from hubflow_demo.job_configs import write_jobs
from hubflow_demo.ports import pick_port
from hubflow_demo.progress import console, say
from hubflow_demo.sample_data import emulator_config, feed
from hubflow_demo.settings import CONNECTION_FILE, DEMO, HUB, ORDERS_DAG
from hubflow_demo.stack_start import start_stack
from hubflow_demo.stop import stop_stack
from hubflow_demo.summary import print_summary, summary_facts
from hubflow_demo.supervised_stream import (
    bronze_control,
    hold_and_stop,
    kill_driver,
    wait_for_first_start,
    wait_for_restart,
    wait_for_restart_loop_alert,
    wait_for_supervisor,
    wait_until_landed,
)


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
    config = emulator_config()
    conn = config.connection_string("127.0.0.1", amqp_port, HUB)
    registry = write_jobs(data)
    env = airflow_env(data, registry, api_port, conn, receiver.url)
    ui = f"http://127.0.0.1:{api_port}"
    status_page = f"{ui}/hubflow/"

    standalone, started = start_stack(config, amqp_port, admin_port, env, ui)
    sent, good, bad = feed(conn, data)
    api = wait_for_airflow(ui, standalone, started, status_page)

    job, control = bronze_control(registry)
    wait_for_first_start(control)
    ensure_orders_run(api)
    wait_until_landed(data, sent)
    killed, seen, killed_at = kill_driver(data, control)
    wait_for_supervisor(data, job, control, seen)
    restart_times = wait_for_restart(control, killed, killed_at)
    wait_for_restart_loop_alert(receiver)

    silver_runs = wait_for_silver(api, data, sent)
    orders_states = wait_for_orders(api)
    supervisor_states = supervisor_run_states(api)

    if keep_running:
        say(f"the stream keeps running under its supervisor; status page: {status_page}")
        say(
            "the demo's alert receiver ends with this process: later alerts fail to deliver "
            "(the supervisor's task log says so)"
        )
    else:
        hold_and_stop(control)

    facts = summary_facts(good, bad, sent, receiver.messages, restart_times, silver_runs)
    dag_states = (orders_states[0], silver_runs[0]["state"], supervisor_states)
    print_summary(data, registry, facts, dag_states, ui, status_page)
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
