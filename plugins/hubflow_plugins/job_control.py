"""Supervising a running job from outside: is it alive, ask it to stop, stop it for sure.

Reads and writes the job's status folder (``<status_root>/<name>/``), the same files the job's
runtime (``jobs/hubflow_jobs``) writes: ``status.json`` (state, heartbeat, pid, host), ``lock``
(the single-instance lock) and the ``STOP`` marker that asks the job to finish its running batch and
stop. Also keeps ``restarts.json``, the times the supervisor restarted the job, to tell a job that
keeps dying (restart loop) from one that died once. No Airflow import here.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import fsspec

STATUS_FILE = "status.json"
STOP_MARKER = "STOP"
LOCK_FILE = "lock"
RESTARTS_FILE = "restarts.json"
#: States in which the job's process is (or should be) alive.
LIVE_STATES = ("starting", "running", "idle", "stopping")

Log = Callable[[str], None]


@dataclass(frozen=True)
class Liveness:
    """What the status folder says about the job's process right now."""

    alive: bool
    reason: str
    state: str | None = None
    pid: int | None = None
    host: str | None = None
    heartbeat_age_seconds: float | None = None


class JobControl:
    """The status folder of one job, seen by its supervisor."""

    def __init__(
        self, job: str, status_dir: str, heartbeat_timeout: timedelta = timedelta(minutes=2)
    ) -> None:
        self.job = job
        self.status_dir = status_dir.rstrip("/")
        self.heartbeat_timeout = heartbeat_timeout
        self.fs, self.root = fsspec.core.url_to_fs(self.status_dir)

    def _path(self, name: str) -> str:
        return f"{self.root.rstrip('/')}/{name}"

    def read(self, name: str) -> dict[str, Any] | None:
        """A JSON file of the folder, or None when absent or half-written."""
        try:
            with self.fs.open(self._path(name), "r") as handle:
                return json.load(handle)
        except (FileNotFoundError, ValueError):
            return None

    def _write(self, name: str, document: Any) -> None:
        self.fs.makedirs(self.root, exist_ok=True)
        temp = self._path(f".{name}.{uuid.uuid4().hex}.tmp")
        with self.fs.open(temp, "w") as handle:
            handle.write(json.dumps(document, indent=2, default=str))
        self.fs.mv(temp, self._path(name))

    def status(self) -> dict[str, Any] | None:
        return self.read(STATUS_FILE)

    def liveness(self, now: datetime | None = None) -> Liveness:
        """Whether the job runs now, judged by its status, its heartbeat and (same host) its pid."""
        now = now or datetime.now(UTC)
        status = self.status()
        if status is None:
            return Liveness(False, f"job {self.job} has never reported a status in {self.status_dir}")
        state, pid, host = status.get("state"), status.get("pid"), status.get("host")
        age = _age(status.get("heartbeat"), now)
        common = {"state": state, "pid": pid, "host": host, "heartbeat_age_seconds": age}
        if state not in LIVE_STATES:
            detail = f": {status.get('exception')}" if state == "failed" and status.get("exception") else ""
            return Liveness(False, f"job {self.job} is {state}{detail}", **common)
        if host == socket.gethostname() and isinstance(pid, int) and not _pid_alive(pid):
            return Liveness(False, f"job {self.job} says {state} but its driver pid {pid} is gone", **common)
        if age is None or age > self.heartbeat_timeout.total_seconds():
            shown = "no heartbeat" if age is None else f"last heartbeat {age:.0f} s ago"
            return Liveness(False, f"job {self.job} says {state} but is silent ({shown})", **common)
        return Liveness(True, f"job {self.job} is {state}, heartbeat {age:.0f} s ago", **common)

    def request_stop(self, reason: str) -> None:
        """Create the STOP marker: the job finishes its running batch, then stops (exit 0)."""
        self.fs.makedirs(self.root, exist_ok=True)
        with self.fs.open(self._path(STOP_MARKER), "w") as handle:
            handle.write(json.dumps({"requested_at": datetime.now(UTC).isoformat(), "reason": reason}))

    def clear_stop(self) -> None:
        try:
            self.fs.rm(self._path(STOP_MARKER))
        except FileNotFoundError:
            pass

    def stop(self, wait: timedelta, log: Log, poll_seconds: float = 1.0) -> str:
        """Stop the job gracefully, then for sure; returns how it stopped.

        First the STOP marker, waiting up to ``wait`` for the job to finish its batch. If the job
        is still alive and runs on this host, SIGTERM (the runtime treats it as a graceful stop
        too), another short wait, then SIGKILL: the checkpoint replays an unfinished batch, so a
        kill loses nothing, it only costs a batch.
        """
        live = self.liveness()
        if not live.alive:
            self.clear_stop()
            return f"not running ({live.reason})"
        log(f"asking job {self.job} to stop: STOP marker in {self.status_dir}")
        self.request_stop("stop requested by the supervisor")
        if self._wait_dead(wait.total_seconds(), poll_seconds):
            return "stopped gracefully (STOP marker)"
        pid = live.pid
        if live.host != socket.gethostname() or not isinstance(pid, int):
            raise TimeoutError(
                f"job {self.job} did not stop within {wait} and runs on host {live.host}, which this "
                "worker cannot signal; stop it there (SIGTERM to the driver) or kill its Spark application"
            )
        log(f"job {self.job} still running after {wait}; sending SIGTERM to driver pid {pid}")
        _signal(pid, signal.SIGTERM)
        if self._wait_dead(min(60.0, wait.total_seconds()), poll_seconds):
            return "stopped gracefully (SIGTERM)"
        log(f"job {self.job} ignored SIGTERM; sending SIGKILL to driver pid {pid}")
        _signal(pid, signal.SIGKILL)
        self._wait_dead(30.0, poll_seconds)
        return "killed (SIGKILL); the unfinished batch will be replayed from the checkpoint"

    def _wait_dead(self, seconds: float, poll_seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            status = self.status() or {}
            pid = status.get("pid")
            same_host = status.get("host") == socket.gethostname()
            if status.get("state") in ("stopped", "failed") and not (
                same_host and isinstance(pid, int) and _pid_alive(pid)
            ):
                return True
            if same_host and isinstance(pid, int) and not _pid_alive(pid):
                return True
            time.sleep(poll_seconds)
        return False

    def record_restart(self, now: datetime | None = None) -> list[str]:
        """Append a restart time to restarts.json (last 50 kept) and return the list."""
        now = now or datetime.now(UTC)
        restarts = [str(t) for t in (self.read(RESTARTS_FILE) or {}).get("restarts", [])][-49:]
        restarts.append(now.isoformat())
        self._write(RESTARTS_FILE, {"job": self.job, "restarts": restarts})
        return restarts

    def restarts_within(self, window: timedelta, now: datetime | None = None) -> int:
        """How many restarts the supervisor made in the last ``window``."""
        now = now or datetime.now(UTC)
        count = 0
        for text in (self.read(RESTARTS_FILE) or {}).get("restarts", []):
            age = _age(text, now)
            if age is not None and age <= window.total_seconds():
                count += 1
        return count


def _age(iso_time: Any, now: datetime) -> float | None:
    if not iso_time:
        return None
    try:
        moment = datetime.fromisoformat(str(iso_time))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (now - moment).total_seconds()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) is not alive for us.
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
