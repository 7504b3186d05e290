"""Steering a running job from outside: stop it gracefully, then for sure, from any host; and the
checkpoint backups a rewind leaves.

Every file it reads or writes belongs to the job↔supervisor contract,
:mod:`hubflow_jobs.status_folder` (status.json, lease, the STOP/KILL/HOLD markers, restarts.json),
which the jobs runtime shares: this module adds only the supervisor's procedure. No Airflow import.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from hubflow_jobs.status_folder import (
    KILL_MARKER,
    LEASE_FILE,
    STOP_MARKER,
    JobState,
    Liveness,
    StatusFolder,
    pid_alive,
    this_host,
)

Log = Callable[[str], None]
#: How long the job's watchdog gets to obey a KILL request before local signals (or an error).
KILL_WAIT = timedelta(seconds=60)


class JobControl:
    """One job's status folder, seen by its supervisor."""

    def __init__(
        self, job: str, status_dir: str, heartbeat_timeout: timedelta = timedelta(minutes=2)
    ) -> None:
        self.job = job
        self.status_dir = status_dir.rstrip("/")
        self.heartbeat_timeout = heartbeat_timeout
        self.folder = StatusFolder(self.status_dir)

    def liveness(self, now: datetime | None = None) -> Liveness:
        """Whether the job runs now (see :meth:`StatusFolder.liveness`), with its hold if any."""
        return self.folder.liveness(self.heartbeat_timeout.total_seconds(), now)

    def stop(
        self,
        wait: timedelta,
        log: Log,
        *,
        requested_by: str | None = None,
        kill_wait: timedelta = KILL_WAIT,
        poll_seconds: float = 1.0,
    ) -> str:
        """Stop the job gracefully, then for sure; returns how it stopped.

        1. The STOP marker: the job finishes its running batch and exits 0; up to ``wait``.
        2. A KILL request (meant for the current lease holder): the job's watchdog halts the driver
           JVM and exits hard; up to ``kill_wait``. When the driver runs on this host, SIGTERM too.
        3. On this host only: SIGKILL to the driver JVM and the Python driver.
        A kill loses nothing: Spark replays the unfinished batch from the checkpoint. Raises
        ``TimeoutError`` when a driver on another host outlives all of it.
        """
        live = self.liveness()
        if not live.alive:
            self.folder.clear_requests()
            return f"not running ({live.reason})"
        log(f"asking job {self.job} to stop: STOP marker {self.folder.path(STOP_MARKER)}")
        self.folder.request_stop("stop requested by the supervisor", by=requested_by)
        if self._wait_dead(wait.total_seconds(), poll_seconds):
            return "stopped gracefully (STOP marker)"

        holder = (self.folder.read_json(LEASE_FILE) or {}).get("holder")
        log(
            f"job {self.job} still running after {wait}: KILL request {self.folder.path(KILL_MARKER)} "
            f"for lease holder {holder} (pid {live.pid} on host {live.host}); its watchdog exits hard"
        )
        self.folder.request_kill(f"did not stop within {wait}", by=requested_by, target=holder)
        status = self.folder.status() or {}
        pids = [p for p in (status.get("jvm_pid"), live.pid) if isinstance(p, int)]
        if live.on_this_host:
            log(f"the driver runs on this host: SIGTERM to pid {live.pid} as well")
            _signal(live.pid, signal.SIGTERM)
        if self._wait_dead(kill_wait.total_seconds(), poll_seconds):
            return (
                "killed on request (KILL marker); the unfinished batch will be replayed from the checkpoint"
            )
        if not live.on_this_host:
            raise TimeoutError(
                f"job {self.job} did not stop within {wait + kill_wait}: its driver (pid {live.pid} on "
                f"host {live.host}) neither stopped on the STOP marker nor obeyed the KILL request, and "
                "this worker cannot signal it. Kill it on that host or kill its Spark application; if "
                "that host is gone, the job's lease expires by itself and the next start takes over."
            )
        log(f"job {self.job} ignored the KILL request; sending SIGKILL to pids {pids}")
        for pid in pids:
            _signal(pid, signal.SIGKILL)
        self._wait_dead(30.0, poll_seconds)
        return "killed (SIGKILL); the unfinished batch will be replayed from the checkpoint"

    def _wait_dead(self, seconds: float, poll_seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            status = self.folder.status() or {}
            pid = status.get("pid")
            same_host = status.get("host") == this_host() and isinstance(pid, int)
            if same_host and not pid_alive(pid):
                return True
            if not same_host and status.get("state") in (JobState.STOPPED, JobState.FAILED):
                return True
            time.sleep(poll_seconds)
        return False


def _signal(pid: int | None, sig: signal.Signals) -> None:
    if not isinstance(pid, int):
        return
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
