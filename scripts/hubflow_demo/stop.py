"""Stopping what the demo started: Airflow, the streaming jobs' drivers, the emulator."""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import timedelta

from hubflow_demo.processes import alive, group_of
from hubflow_demo.progress import console
from hubflow_demo.settings import CONNECTION_FILE, DEMO, PIDS


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
    while time.monotonic() < deadline and alive(pid):
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
    from hubflow.operations.job_control import JobControl

    done = []
    for status in sorted((DEMO / "data" / "status").glob("*/status.json")):
        control = JobControl(status.parent.name, str(status.parent))
        live = control.liveness()
        if not live.alive or live.pid is None:
            continue
        group = group_of(live.pid)
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
