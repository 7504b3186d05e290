"""Steering a running job from outside: stop it gracefully, then for sure, from any host; and the
checkpoint backups a rewind leaves.

Every file it reads or writes belongs to the job↔supervisor contract,
:mod:`hubflow.status` (status.json, lease, the STOP/KILL/HOLD markers, restarts.json),
which the jobs runtime shares: this module adds only the supervisor's procedure. No Airflow import.
"""

from __future__ import annotations

import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hubflow.registry import MIN_HEARTBEAT_TIMEOUT
from hubflow.status import (
    DRIVER_LOG_FILE,
    KILL_MARKER,
    LEASE_FILE,
    RESTARTS_FILE,
    STOP_MARKER,
    JobState,
    JobStatus,
    Liveness,
    StatusFolder,
)
from hubflow.status.exit_codes import EXIT_HELD, EXIT_LOCKED
from hubflow.status.names import SUPERVISOR_FILE
from hubflow.status.process_identity import (
    is_running,
    process_fields,
    signal_process,
    why_cannot_judge,
    why_not_running,
)
from hubflow.supervision.upgrades import PLAN_KEY
from hubflow.supervision.versions import advance, versions
from hubflow.utc_times import utc_time

Log = Callable[[str], None]
#: How long the job's watchdog gets to obey a KILL request before local signals (or an error).
KILL_WAIT = timedelta(seconds=60)
#: Why a starting driver exited, by its exit code.
_EXIT_REASONS = {EXIT_LOCKED: " (another instance holds its lease)", EXIT_HELD: " (held by on-call)"}


class JobStartError(RuntimeError):
    """A started job exited, or did not report running in time; the message says which and why."""


class JobControl:
    """One job's status folder, seen by its supervisor."""

    def __init__(
        self, job: str, status_dir: str, heartbeat_timeout: timedelta = MIN_HEARTBEAT_TIMEOUT
    ) -> None:
        self.job = job
        self.status_dir = status_dir.rstrip("/")
        self.heartbeat_timeout = heartbeat_timeout
        self.folder = StatusFolder(self.status_dir)

    def liveness(self, now: datetime | None = None) -> Liveness:
        """Whether the job runs now (see :meth:`StatusFolder.liveness`), with its hold if any."""
        return self.folder.liveness(self.heartbeat_timeout.total_seconds(), now)

    def driver_log_target(self) -> tuple[Path, str | None]:
        """Where a detached driver's output goes, and the status folder to copy it to (None: no copy).

        A local status folder gets the log directly; a remote one gets a copy from a file on this
        worker, refreshed while the driver runs (``hubflow_jobs.runtime.driver_log``).
        """
        if self.folder.is_local:
            return Path(self.folder.path(DRIVER_LOG_FILE)), None
        return Path(tempfile.gettempdir()) / "hubflow" / self.job / DRIVER_LOG_FILE, self.folder.url

    def prepare_start(
        self, count_restart: bool, fingerprint: dict | None = None, plan: dict | None = None
    ) -> None:
        """Clear the last run's STOP/KILL requests; count the start towards the backoff and the
        restart-loop limit (``count_restart``: the supervisor's restart of a dead job) or reset the
        backoff (any other start); record ``fingerprint`` as what the job is started with.

        Recorded before the launch: a start that fails is still the start of that fingerprint, so a
        changed config restarts a job once, not at every run.
        """
        self.folder.clear_requests()
        now = datetime.now(UTC)
        state = self.supervisor_state()
        if fingerprint is not None:
            state = advance(state, fingerprint["digest"], now.isoformat())
            state["fingerprint"] = fingerprint
            state["started_at"] = now.isoformat()
        if plan is not None:
            state[PLAN_KEY] = plan
        if not count_restart:
            state["backoff_reset_at"] = now.isoformat()
        if fingerprint is not None or not count_restart:
            self.write_supervisor_state(state)
        if count_restart:
            self.folder.record_restart()

    # The supervisor's memory (supervisor.json) and restarts.json, read for ``supervision.decide`` ---

    def supervisor_state(self) -> dict:
        """supervisor.json: ``{"job", "fingerprint", "started_at", "backoff_reset_at", "version",
        "previous_version"}`` (``{}``: none; the versions: :mod:`hubflow.supervision.versions`)."""
        return dict(self.folder.read_json(SUPERVISOR_FILE) or {})

    def write_supervisor_state(self, state: dict) -> None:
        """Write supervisor.json whole (``state``, with the job's name)."""
        self.folder.write_json(SUPERVISOR_FILE, {**state, "job": self.job})

    def reset_backoff(self, now: datetime | None = None) -> None:
        """The job ran healthy (or a changed job is started at once): earlier restarts stop counting."""
        state = self.supervisor_state()
        state["backoff_reset_at"] = (now or datetime.now(UTC)).isoformat()
        self.write_supervisor_state(state)

    def adopt_fingerprint(self, fingerprint: dict) -> None:
        """Record ``fingerprint`` for a live job started without one (no restart): its version
        counts from now."""
        state = advance(self.supervisor_state(), fingerprint["digest"], datetime.now(UTC).isoformat())
        state["fingerprint"] = fingerprint
        self.write_supervisor_state(state)

    def version(self) -> str | None:
        """The short digest of the version the job was last started with, None before any."""
        current, _ = versions(self.supervisor_state())
        return current.short if current is not None else None

    def restart_times(self) -> list[datetime]:
        """The supervisor's restarts (restarts.json), unreadable entries left out."""
        times = []
        for text in (self.folder.read_json(RESTARTS_FILE) or {}).get("restarts", []):
            moment = parse_time(text)
            if moment is not None:
                times.append(moment)
        return times

    def mark_starting(self, pid: int) -> None:
        """status.json of a driver just launched: starting, here, as spark-submit's ``pid`` (and its
        start time).

        Until the driver writes its own status (a minute or more on a loaded worker), a supervisor
        run in between sees a live start (pid alive here, fresh heartbeat elsewhere) instead of the
        old "stopped", and starts no second driver.
        """
        JobStatus(self.folder, self.job).update(state=JobState.STARTING, **process_fields(pid))

    def wait_until_running(
        self, process: subprocess.Popen, timeout: timedelta, log_path: Path, poll_seconds: float = 1.0
    ) -> str:
        """Wait for the started driver to report running or idle; raise :class:`JobStartError` when
        spark-submit exits first (with its log's tail) or ``timeout`` passes."""
        deadline = time.monotonic() + timeout.total_seconds()
        while time.monotonic() < deadline:
            live = self.liveness()
            if live.alive and live.state in (JobState.RUNNING, JobState.IDLE):
                return f"started job {self.job}: {live.reason}"
            code = process.poll()
            if code is not None:
                raise JobStartError(
                    f"job {self.job} exited with code {code}{_EXIT_REASONS.get(code, '')} while starting:\n"
                    f"{_tail(log_path)}"
                )
            time.sleep(poll_seconds)
        raise JobStartError(
            f"job {self.job} did not report running within {timeout}; see {self.folder.path(DRIVER_LOG_FILE)}"
        )

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
           JVM and exits hard; up to ``kill_wait``. When the driver runs here, SIGTERM too.
        3. Here only: SIGKILL to the driver JVM and the Python driver.
        "Here" means verified by :func:`hubflow.status.process_identity.signal_process`: this process
        space, that pid, that start time; no other process is ever signalled. A kill loses nothing:
        Spark replays the unfinished batch from the checkpoint. Raises ``TimeoutError`` when a
        driver that cannot be signalled from here outlives all of it.
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
        if signal_process(status, signal.SIGTERM):
            log(f"the driver runs here (pid {status.get('pid')}, its start time verified): sent SIGTERM too")
        if self._wait_dead(kill_wait.total_seconds(), poll_seconds):
            return (
                "killed on request (KILL marker); the unfinished batch will be replayed from the checkpoint"
            )
        status = self.folder.status() or status
        running = is_running(status)
        if running is False:  # exited since the wait ended
            return "killed on request (KILL marker): " + why_not_running(status)
        if running is None:
            why = why_cannot_judge(status)
            raise TimeoutError(
                f"job {self.job} did not stop within {wait + kill_wait}: its driver (pid "
                f"{status.get('pid')} on host {status.get('host')}) neither stopped on the STOP marker "
                f"nor obeyed the KILL request, and this worker cannot signal it: {why}. Kill it on "
                "that host (or container) or kill its Spark application; if that host is gone, the "
                "job's lease expires by itself and the next start takes over."
            )
        log(f"job {self.job} ignored the KILL request; sending SIGKILL to its verified processes")
        for key in ("jvm_pid", "pid"):
            if signal_process(status, signal.SIGKILL, key):
                log(f"SIGKILL sent to {key} {status.get(key)}")
        self._wait_dead(30.0, poll_seconds)
        return "killed (SIGKILL); the unfinished batch will be replayed from the checkpoint"

    def _wait_dead(self, seconds: float, poll_seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            status = self.folder.status() or {}
            running = is_running(status)
            if running is False:
                return True
            if running is None and status.get("state") in (JobState.STOPPED, JobState.FAILED):
                return True
            time.sleep(poll_seconds)
        return False


def parse_time(value: object) -> datetime | None:
    """An ISO-8601 time of a status document (naive taken as UTC), or None: ``utc_times``' rule."""
    return utc_time(value) if isinstance(value, str) else None


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no driver log)"
