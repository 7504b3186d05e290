"""Starting and stopping a job from the supervisor's side (no Airflow): real child processes stand in
for spark-submit, and the status folder is the contract they share with the supervisor. A stop
signals only a process verified as the driver (pid and start time), never one that reuses its pid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from hubflow.operations.job_control import JobControl, JobStartError
from hubflow.status import STATUS_FILE, utc_now
from hubflow.status.exit_codes import EXIT_LOCKED
from hubflow.status.process_identity import start_ticks, this_space
from hubflow.supervision.detached_process import start_detached
from tests.support.processes import wait_until

#: A stand-in driver: once the file argv[2] exists, reports itself running in the status folder
#: argv[1], then waits to be killed.
RUNNING_DRIVER = """
import os, sys, time
from hubflow.status import JobState, JobStatus, StatusFolder
while not os.path.exists(sys.argv[2]):
    time.sleep(0.05)
JobStatus(StatusFolder(sys.argv[1]), "orders").update(state=JobState.RUNNING, pid=os.getpid())
time.sleep(120)
"""


def _control(tmp_path: Path) -> JobControl:
    return JobControl("orders", str(tmp_path / "status" / "orders"))


def test_a_started_driver_that_reports_running_is_started(tmp_path: Path) -> None:
    control = _control(tmp_path)
    log_path, ship_to = control.driver_log_target()
    assert (log_path, ship_to) == (tmp_path / "status" / "orders" / "driver.log", None), "local: no copy"
    control.prepare_start(count_restart=True)
    go = tmp_path / "go"
    process = start_detached([sys.executable, "-c", RUNNING_DRIVER, control.status_dir, str(go)], log_path)
    try:
        control.mark_starting(process.pid)
        # Held until then: a driver that reported running first would turn "starting" into "running".
        assert control.liveness().state == "starting"
        go.touch()
        started = control.wait_until_running(process, timedelta(seconds=60), log_path, poll_seconds=0.1)
        assert started.startswith("started job orders: job orders is running")
        assert control.folder.restarts_within(3600) == 1
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


def test_a_driver_that_exits_while_starting_fails_the_start_with_its_log(tmp_path: Path) -> None:
    control = _control(tmp_path)
    log_path, _ = control.driver_log_target()
    script = f"print('lease held by host-b'); raise SystemExit({EXIT_LOCKED})"
    process = start_detached([sys.executable, "-c", script], log_path)
    with pytest.raises(JobStartError) as error:
        control.wait_until_running(process, timedelta(seconds=60), log_path, poll_seconds=0.1)
    assert str(error.value) == (
        f"job orders exited with code {EXIT_LOCKED} (another instance holds its lease) while starting:\n"
        "lease held by host-b"
    )


def test_a_driver_that_never_reports_running_times_out_naming_its_log(tmp_path: Path) -> None:
    control = _control(tmp_path)
    log_path, _ = control.driver_log_target()
    process = start_detached([sys.executable, "-c", "import time; time.sleep(120)"], log_path)
    try:
        with pytest.raises(
            JobStartError, match=r"job orders did not report running within 0:00:01; see .*driver.log"
        ):
            control.wait_until_running(process, timedelta(seconds=1), log_path, poll_seconds=0.1)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


def _sleep_300() -> subprocess.Popen:
    process = subprocess.Popen(["sleep", "300"])
    wait_until(lambda: start_ticks(process.pid) is not None, 10, "the sleep to start")
    return process


def _end(*processes: subprocess.Popen) -> None:
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait(10)


def test_stop_never_signals_a_process_that_reuses_the_drivers_pid(tmp_path: Path) -> None:
    """status.json names a pid that runs here, but with another start time: the driver exited and an
    unrelated process got its pid. The job is not running, and that process is not signalled."""
    control = _control(tmp_path)
    unrelated = _sleep_300()
    try:
        reused = {"pid": unrelated.pid, "pid_start_ticks": start_ticks(unrelated.pid) - 1}
        status = {**this_space(), **reused, "job": "orders", "state": "running", "heartbeat": utc_now()}
        control.folder.write_json(STATUS_FILE, status)
        lines: list[str] = []
        how = control.stop(
            timedelta(seconds=1), lines.append, kill_wait=timedelta(seconds=1), poll_seconds=0.1
        )
        assert how.startswith("not running (job orders says running but its driver ")
        assert f"pid {unrelated.pid} on this host is another process now" in how
        time.sleep(0.2)
        assert unrelated.poll() is None, f"the unrelated process was signalled: {lines}"
    finally:
        _end(unrelated)


#: A driver that ignores SIGTERM, STOP and KILL: reports itself running (with argv[2] as its JVM's
#: pid, claimed with a wrong start time), then waits to be killed.
STUBBORN_DRIVER = """
import signal, sys, time
from hubflow.status import JobState, JobStatus, StatusFolder
signal.signal(signal.SIGTERM, signal.SIG_IGN)
JobStatus(StatusFolder(sys.argv[1]), "orders").update(
    state=JobState.RUNNING, jvm_pid=int(sys.argv[2]), jvm_pid_start_ticks=1
)
time.sleep(300)
"""


def test_stop_kills_only_the_verified_driver_not_a_process_that_reuses_its_jvm_pid(tmp_path: Path) -> None:
    control = _control(tmp_path)
    unrelated = _sleep_300()
    driver = subprocess.Popen([sys.executable, "-c", STUBBORN_DRIVER, control.status_dir, str(unrelated.pid)])
    try:
        wait_until(lambda: control.liveness().alive, 30, "the stand-in driver to report running")
        lines: list[str] = []
        how = control.stop(
            timedelta(seconds=0.5), lines.append, kill_wait=timedelta(seconds=0.5), poll_seconds=0.1
        )
        assert how.startswith("killed (SIGKILL)"), lines
        assert driver.wait(10) == -signal.SIGKILL
        assert f"SIGKILL sent to pid {driver.pid}" in lines
        assert not any("jvm_pid" in line for line in lines if "SIGKILL sent" in line), lines
        assert unrelated.poll() is None, f"the process under the JVM's old pid was signalled: {lines}"
    finally:
        _end(driver, unrelated)
