"""The supervised stream: telemetry_bronze started by its supervisor DAG, its driver killed
(SIGKILL), the supervisor's finding and backoff, the restart from its checkpoint, the restart-loop
alert at the demo's receiver, and the stream held and stopped at the end."""

from __future__ import annotations

import json
import os
import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hubflow_demo.alert_receiver import AlertReceiver
from hubflow_demo.lake import row_count
from hubflow_demo.processes import group_of
from hubflow_demo.progress import DemoFailed, say, wait_for
from hubflow_demo.settings import BRONZE, SUPERVISOR

if TYPE_CHECKING:
    from hubflow.operations.job_control import JobControl
    from hubflow.registry import RegisteredJob
    from hubflow.status import Liveness


def bronze_control(registry: Path) -> tuple[RegisteredJob, JobControl]:
    """The bronze job in the demo's registry, and the control of its status folder."""
    from hubflow.operations.job_control import JobControl
    from hubflow.registry import load_registry

    job = load_registry(registry).job(BRONZE)
    control = JobControl(BRONZE, job.paths.status_dir, heartbeat_timeout=job.heartbeat_timeout)
    return job, control


def running(control: JobControl) -> Any:
    """The driver's liveness while it runs (running or idle), else something false."""
    from hubflow.status.states import JobState

    live = control.liveness()
    return live.alive and live.state in (JobState.RUNNING, JobState.IDLE) and live


def wait_for_first_start(control: JobControl) -> None:
    first = wait_for(lambda: running(control), "bronze started")
    say(f"{SUPERVISOR} started {BRONZE}: a supervised streaming job, driver pid {first.pid}, {first.state}")


def wait_until_landed(data: Path, sent: int) -> None:
    bronze_table = data / "lake" / BRONZE
    wait_for(lambda: row_count(bronze_table) >= sent, "bronze landed")
    say(f"{BRONZE} landed all {sent} events in {bronze_table}")


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


def kill_driver(data: Path, control: JobControl) -> tuple[Liveness, set[tuple[str, int]], datetime]:
    """SIGKILL to the driver's process group (spark-submit's JVM and the Python driver), as a crash
    would leave it; returns its liveness before, the supervisor's log lines until then, and when."""
    live = control.liveness()
    group = group_of(live.pid) if live.pid else None
    if group is None:
        raise DemoFailed(f"the driver of {BRONZE} (pid {live.pid}) runs in no process group of its own")
    seen = {(where, number) for where, number, _ in task_log_lines(data, SUPERVISOR, "ensure_running")}
    os.killpg(group, signal.SIGKILL)
    killed_at = datetime.now(UTC)
    say(f"killed the driver of {BRONZE} (SIGKILL to pid {live.pid} and its process group)", "red")
    return live, seen, killed_at


def _supervisor_said(data: Path, before: set[tuple[str, int]], *needles: str) -> str | None:
    for where, number, line in task_log_lines(data, SUPERVISOR, "ensure_running"):
        if (where, number) in before:
            continue
        if any(needle in line for needle in needles):
            return line
    return None


def wait_for_supervisor(
    data: Path, job: RegisteredJob, control: JobControl, seen: set[tuple[str, int]]
) -> None:
    """The supervisor's first new word after the kill, then the status page's backoff view."""
    from hubflow.supervision.supervisor import backoff_view

    decision = wait_for(
        lambda: _supervisor_said(data, seen, "the next start is due", "starting it again", "started job"),
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


def wait_for_restart(control: JobControl, killed: Liveness, killed_at: datetime) -> list[datetime]:
    """A new driver, started by the supervisor; returns the job's start times."""

    def restarted() -> Any:
        now = running(control)
        return now and now.pid != killed.pid and now

    second = wait_for(restarted, "restart")
    restart_times = control.restart_times()
    pause = (restart_times[-1] - restart_times[-2]).total_seconds() if len(restart_times) > 1 else 0
    say(
        f"{SUPERVISOR} restarted {BRONZE} from its checkpoint (driver pid {second.pid}), "
        f"{(restart_times[-1] - killed_at).total_seconds():.0f} s after the kill, "
        f"{pause:.0f} s after its previous start",
        "green",
    )
    return restart_times


def wait_for_restart_loop_alert(receiver: AlertReceiver) -> None:
    wait_for(
        lambda: any(BRONZE in text and "restart-loop" in text for text in receiver.messages),
        "alert",
        interval=0.5,
    )


def hold_and_stop(control: JobControl) -> None:
    """Held (as on-call's stop holds it), so no supervisor run starts it again, then stopped."""
    control.folder.place_hold("the demo is over", by="scripts/demo.py")
    said = control.stop(timedelta(seconds=60), log=lambda _: None)
    say(f"stopped {BRONZE}: {said}")


def _time(text: Any) -> datetime | None:
    from hubflow.operations.job_control import parse_time

    return parse_time(text)
