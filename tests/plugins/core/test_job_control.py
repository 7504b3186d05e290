"""Starting a job from the supervisor's side (no Airflow): real child processes stand in for
spark-submit, and the status folder is the contract they share with the supervisor."""

from __future__ import annotations

import os
import signal
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from hubflow_jobs import EXIT_LOCKED
from hubflow_jobs.detached_process import start_detached
from hubflow_plugins.core.job_control import JobControl, JobStartError

#: A stand-in driver: reports itself running in the status folder argv[1], then waits to be killed.
RUNNING_DRIVER = """
import os, sys, time
from hubflow_jobs.status_folder import JobState, JobStatus, StatusFolder
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
    process = start_detached([sys.executable, "-c", RUNNING_DRIVER, control.status_dir], log_path)
    try:
        control.mark_starting(process.pid)
        assert control.liveness().state == "starting"
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
