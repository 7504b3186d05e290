"""The contract between a job and its supervisors: the job's status folder ``<status_root>/<name>/``.

The job (``hubflow_jobs.runner``) and everything that watches or steers it from outside (the Airflow
operators and sensor, the status page, on-call by hand) meet only here, so this module owns every
name and rule they share. It imports neither Spark nor Airflow: the Airflow side imports it as
``hubflow_jobs.status_folder``.

Files (all through :mod:`hubflow_jobs.storage`, so the folder may be local or ``abfss://``):

=====================  ===========  =============================================================
``status.json``        the job      :class:`JobStatus`: state, heartbeat, its process, last progress
``progress_history.jsonl``  the job  one line per batch (the status page's charts)
``lease``              the job      :class:`Lease`: one running instance per checkpoint
``STOP``               supervisor   please stop: the running batch finishes, exit 0
``KILL``               supervisor   stop now: the job's watchdog exits hard (after ``stop_wait``)
``HOLD``               on-call      keep the job stopped: supervisors must not start it
``restarts.json``      supervisor   when the supervisor restarted the job (restart-loop detection)
``driver.log``         supervisor   the driver's output (written or copied here by the launcher)
=====================  ===========  =============================================================

status.json and the lease name the process that wrote them: ``pid`` and ``host`` (for people) and
``pid_start_ticks``, ``pid_namespace``, ``boot_id`` (:mod:`hubflow_jobs.process_identity`, which
alone judges whether that process still runs: only from its own process space).

Markers (``STOP``, ``KILL``, ``HOLD``) hold ``{"at", "by", "reason", "target"}`` (``target`` = the
lease holder a KILL is meant for, or null); an empty marker file counts too.

The lease, and why no two drivers ever write one checkpoint (clock skew included):

* A starter *creates* ``lease`` (create-if-absent). If it exists, the starter takes it over only
  (a) when the holder ran in this process space (host, pid namespace, boot) and no process with
  its pid and start time runs any more, or (b) when it has watched the document stay unchanged
  (same version) for ``lease_duration`` on its **own monotonic clock**. No wall clock of another
  host is trusted, so clock skew between hosts does not matter; only clock *rates* do (ppm). A
  holder in another process space (or of an older hubflow) is never probed here. The takeover
  is a replace-if-unchanged on the version it watched.
* The holder renews every ``lease_refresh_interval`` (replace-if-unchanged on its last version).
  If a renewal finds the document changed, the lease was taken: the job exits hard at once. If
  renewals fail (storage unreachable), the job asks itself to stop at half ``lease_fence_after``
  and exits hard at ``lease_fence_after``, counted from the *start* of its last successful
  renewal. Any watcher first saw that version after it was written, so it cannot take over before
  ``lease_duration`` > ``lease_fence_after`` has passed since then: the holder is gone by then.
* A clean exit deletes the lease (delete-if-unchanged); the next start needs no wait.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from .process_identity import (
    SPACE_KEYS,
    START_SUFFIX,
    is_running,
    this_process,
    why_cannot_judge,
    why_not_running,
)
from .process_identity import this_host as this_host  # re-exported: the contract's host name
from .storage import DocumentStore, store_for
from .utc_times import utc_time

log = logging.getLogger(__name__)

STATUS_FILE = "status.json"
#: One JSON line per micro-batch (status.json's ``last_progress``): the status page's charts.
PROGRESS_HISTORY_FILE = "progress_history.jsonl"
#: The history is rotated (to ``.1``, replacing the older one) when it grows past this size.
PROGRESS_HISTORY_MAX_BYTES = 4 * 1024 * 1024
LEASE_FILE = "lease"
STOP_MARKER = "STOP"
KILL_MARKER = "KILL"
HOLD_MARKER = "HOLD"
RESTARTS_FILE = "restarts.json"
DRIVER_LOG_FILE = "driver.log"
#: The driver log kept in a remote status folder is at most this long (its tail).
DRIVER_LOG_MAX_BYTES = 16 * 1024 * 1024
#: Restart times kept in restarts.json.
RESTARTS_KEPT = 50


class JobState(StrEnum):
    """Every value of ``state``: the job writes the first six in status.json; ``held`` is derived."""

    STARTING = "starting"
    RUNNING = "running"
    IDLE = "idle"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"
    #: Stopped by on-call and kept stopped by the ``HOLD`` marker; shown by supervisors, never
    #: written by the job.
    HELD = "held"

    @property
    def live(self) -> bool:
        """Whether the job's process is (or should be) running in this state."""
        return self in LIVE_STATES

    @property
    def rank(self) -> int:
        """States only move forward: running/idle (0) -> stopping (1) -> stopped/failed (2)."""
        return _RANK[self]


LIVE_STATES = frozenset({JobState.STARTING, JobState.RUNNING, JobState.IDLE, JobState.STOPPING})
#: Live states in which a quiet checkpoint means "no input", not "stuck".
WORKING_STATES = frozenset({JobState.STARTING, JobState.RUNNING, JobState.IDLE})
_RANK = {
    JobState.STARTING: 0,
    JobState.RUNNING: 0,
    JobState.IDLE: 0,
    JobState.STOPPING: 1,
    JobState.STOPPED: 2,
    JobState.FAILED: 2,
    JobState.HELD: 2,
}


def parse_state(value: Any) -> JobState | None:
    """The :class:`JobState` named ``value``, or None for anything else."""
    try:
        return JobState(str(value))
    except ValueError:
        return None


def utc_now() -> str:
    """The current time as an ISO 8601 UTC string, e.g. ``2026-01-02T03:04:05.678+00:00``."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def age_seconds(iso_time: Any, now: datetime | None = None) -> float | None:
    """Seconds since the ISO time ``iso_time`` (naive = UTC), or None when it is not a time."""
    moment = utc_time(iso_time)
    if moment is None:
        return None
    return ((now or datetime.now(UTC)) - moment).total_seconds()


def pid_alive(pid: int) -> bool:
    """Whether a process with ``pid`` runs on this host (a zombie, exited but not reaped, does not).

    Only for a pid this process knows itself (its child, its parent); a pid read from a document
    is judged by :func:`hubflow_jobs.process_identity.is_running` (pid reuse, other containers).
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc (not Linux): existence is all we can tell


@dataclass(frozen=True)
class Marker:
    """A ``STOP``, ``KILL`` or ``HOLD`` request: who asked, when, why, and for which lease holder."""

    at: str | None = None
    by: str | None = None
    reason: str | None = None
    target: str | None = None

    def describe(self) -> str:
        """``by <who> at <when>: <why>`` with the parts that are known."""
        parts = []
        if self.by:
            parts.append(f"by {self.by}")
        if self.at:
            parts.append(f"at {self.at}")
        text = " ".join(parts) or "(no details)"
        return f"{text}: {self.reason}" if self.reason else text

    def to_dict(self) -> dict[str, Any]:
        return {"at": self.at, "by": self.by, "reason": self.reason, "target": self.target}


@dataclass(frozen=True)
class Liveness:
    """What the status folder says about the job's process right now."""

    alive: bool
    reason: str
    state: JobState | None = None
    pid: int | None = None
    host: str | None = None
    heartbeat_age_seconds: float | None = None
    hold: Marker | None = None
    #: Whether the driver runs here, verified by pid and start time (so it may be signalled);
    #: False: it ran in this process space and has exited; None: it cannot be judged from here.
    running_here: bool | None = None

    @property
    def shown_state(self) -> JobState | None:
        """The state to show: ``held`` for a job kept stopped by on-call, else status.json's."""
        if self.hold is not None and not self.alive:
            return JobState.HELD
        return self.state


class StatusFolder:
    """One job's status folder, for the job and for its supervisors alike."""

    def __init__(self, url: str, store: DocumentStore | None = None) -> None:
        self.url = url.rstrip("/")
        self.store = store or store_for(self.url)

    @property
    def is_local(self) -> bool:
        """Whether the folder is a local path (a detached driver can log straight into it)."""
        return self.store.is_local

    def path(self, name: str) -> str:
        """Where ``name`` lives (local path or URL), for messages."""
        return self.store.url_of(name)

    # JSON documents -----------------------------------------------------------------------------

    def read_json(self, name: str) -> dict[str, Any] | None:
        """The JSON object in ``name``, or None when the file is absent, empty or not an object."""
        current = self.store.read(name)
        if current is None:
            return None
        try:
            document = json.loads(current.data.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            return None
        return document if isinstance(document, dict) else None

    def write_json(self, name: str, document: dict[str, Any]) -> None:
        """Write ``document`` to ``name`` whole (a reader never sees half of it)."""
        self.store.write(name, _dump(document))

    def exists(self, name: str) -> bool:
        return self.store.exists(name)

    def remove(self, name: str) -> None:
        self.store.remove(name)

    def status(self) -> dict[str, Any] | None:
        """The job's status.json, or None before the job ever reported."""
        return self.read_json(STATUS_FILE)

    # Markers ------------------------------------------------------------------------------------

    def marker(self, name: str) -> Marker | None:
        """The marker ``name`` (``STOP``, ``KILL``, ``HOLD``), or None when absent."""
        current = self.store.read(name)
        if current is None:
            return None
        try:
            fields = json.loads(current.data.decode("utf-8") or "{}")
        except (ValueError, UnicodeDecodeError):
            fields = {}
        if not isinstance(fields, dict):
            fields = {}
        return Marker(
            at=_text(fields.get("at") or fields.get("requested_at")),
            by=_text(fields.get("by")),
            reason=_text(fields.get("reason")),
            target=_text(fields.get("target")),
        )

    def put_marker(self, name: str, *, by: str | None, reason: str, target: str | None = None) -> Marker:
        """Write the marker ``name`` (now, by ``by``, because ``reason``) and return it."""
        marker = Marker(at=utc_now(), by=by, reason=reason, target=target)
        self.store.write(name, _dump(marker.to_dict()))
        return marker

    def markers_present(self) -> set[str]:
        """Which of STOP, KILL and HOLD exist, in one listing of the folder."""
        return self.store.names() & {STOP_MARKER, KILL_MARKER, HOLD_MARKER}

    def request_stop(self, reason: str, by: str | None = None) -> Marker:
        """Ask the job to stop gracefully: it lets the running batch finish, then exits 0."""
        return self.put_marker(STOP_MARKER, by=by, reason=reason)

    def request_kill(self, reason: str, by: str | None = None, target: str | None = None) -> Marker:
        """Ask the job's watchdog to exit hard (``target``: only the lease holder with that token)."""
        return self.put_marker(KILL_MARKER, by=by, reason=reason, target=target)

    def place_hold(self, reason: str, by: str | None = None) -> Marker:
        """Keep the job stopped until on-call starts it again (supervisors will not restart it)."""
        return self.put_marker(HOLD_MARKER, by=by, reason=reason)

    def hold(self) -> Marker | None:
        """The on-call hold, or None."""
        return self.marker(HOLD_MARKER)

    def release_hold(self) -> Marker | None:
        """Remove the hold; returns the hold that was released, if any."""
        hold = self.hold()
        if hold is not None:
            self.store.remove(HOLD_MARKER)
        return hold

    def clear_requests(self) -> list[str]:
        """Remove STOP and KILL (requests meant for an earlier run); the names removed."""
        present = self.markers_present() & {STOP_MARKER, KILL_MARKER}
        for name in sorted(present):
            self.store.remove(name)
        return sorted(present)

    # Liveness -----------------------------------------------------------------------------------

    def liveness(self, heartbeat_timeout: float, now: datetime | None = None) -> Liveness:
        """Whether the job runs now: its state, its heartbeat (younger than ``heartbeat_timeout``
        seconds) and, in the driver's own process space, its pid and start time; with the on-call
        hold, if any."""
        now = now or datetime.now(UTC)
        job = self.url.rsplit("/", 1)[-1]
        status, hold = self.status(), self.hold()
        if status is None:
            return Liveness(False, f"job {job} has never reported a status in {self.url}", hold=hold)
        state, pid, host = parse_state(status.get("state")), status.get("pid"), status.get("host")
        age = age_seconds(status.get("heartbeat"), now)
        running = is_running(status)
        common: dict[str, Any] = {
            "state": state,
            "pid": pid if isinstance(pid, int) else None,
            "host": host,
            "heartbeat_age_seconds": age,
            "hold": hold,
            "running_here": running,
        }
        held = f"; held {hold.describe()}" if hold is not None else ""
        if state is None or not state.live:
            detail = (
                f": {status.get('exception')}" if state == JobState.FAILED and status.get("exception") else ""
            )
            if hold is not None:
                return Liveness(
                    False, f"job {job} is held {hold.describe()} (last state {state}{detail})", **common
                )
            return Liveness(False, f"job {job} is {status.get('state')}{detail}", **common)
        if running is False:
            gone = why_not_running(status)
            return Liveness(False, f"job {job} says {state} but its driver {gone}{held}", **common)
        expired = self._lease_expired(status, now)
        if expired is not None:
            return Liveness(False, f"job {job} says {state} but {expired}{held}", **common)
        if age is None or age > heartbeat_timeout:
            shown = "no heartbeat" if age is None else f"last heartbeat {age:.0f} s ago"
            return Liveness(False, f"job {job} says {state} but is silent ({shown}){held}", **common)
        return Liveness(True, f"job {job} is {state}, heartbeat {age:.0f} s ago{held}", **common)

    def _lease_expired(self, status: dict[str, Any], now: datetime) -> str | None:
        """Why the driver that wrote status.json is dead by its own lease, or None.

        A driver renews its lease every ``lease_refresh_interval`` and stops itself when it cannot
        (``lease_fence_after`` < ``lease_duration``), so its lease not renewed for longer than
        ``lease_duration`` means it no longer runs, wherever it ran (a killed worker container
        cannot say so): the supervisor need not wait out the longer heartbeat timeout. Only the
        lease of the driver that wrote the status counts (same process): a new driver that is
        still waiting out an old holder's lease is judged by its heartbeat. Wall clocks of two
        hosts are compared here; that only decides when a start is tried, the starter's own
        :meth:`Lease.acquire` still waits the lease out before it takes over.
        """
        lease = self.read_json(LEASE_FILE)
        if not lease or not _same_writer(lease, status):
            return None
        age, duration = age_seconds(lease.get("renewed_at"), now), lease.get("lease_duration_seconds")
        if age is None or not isinstance(duration, int | float) or age <= duration:
            return None
        return f"its lease was last renewed {age:.0f} s ago (lease_duration {duration:.0f} s)"

    # Restarts -----------------------------------------------------------------------------------

    def record_restart(self, now: datetime | None = None) -> list[str]:
        """Append a restart time to restarts.json (the last 50 are kept) and return the list."""
        now = now or datetime.now(UTC)
        document = self.read_json(RESTARTS_FILE) or {}
        restarts = [str(t) for t in document.get("restarts", [])][-(RESTARTS_KEPT - 1) :]
        restarts.append(now.isoformat())
        self.write_json(RESTARTS_FILE, {"job": self.url.rsplit("/", 1)[-1], "restarts": restarts})
        return restarts

    def restarts_within(self, window_seconds: float, now: datetime | None = None) -> int:
        """How many restarts the supervisor made in the last ``window_seconds``."""
        now = now or datetime.now(UTC)
        count = 0
        for text in (self.read_json(RESTARTS_FILE) or {}).get("restarts", []):
            age = age_seconds(text, now)
            if age is not None and age <= window_seconds:
                count += 1
        return count

    # Logs ---------------------------------------------------------------------------------------

    def append_progress(self, line: str) -> None:
        """Append one batch's progress to progress_history.jsonl (rotated past 4 MiB)."""
        self.store.append_line(PROGRESS_HISTORY_FILE, line, PROGRESS_HISTORY_MAX_BYTES)

    def upload_driver_log(self, local_path: Path) -> None:
        """Copy a driver log kept elsewhere into ``driver.log`` (its last 16 MiB)."""
        self.store.upload(local_path, DRIVER_LOG_FILE, DRIVER_LOG_MAX_BYTES)

    def driver_log_tail(self, max_bytes: int) -> bytes | None:
        """The last ``max_bytes`` of ``driver.log``, or None when there is none."""
        return self.store.read_tail(DRIVER_LOG_FILE, max_bytes)


class JobStatus:
    """The live status.json of one run, written by the job (main loop, listener and watchdog).

    Every change rewrites ``status.json`` at once; :meth:`heartbeat` rewrites it with a fresh
    ``heartbeat`` so a supervisor can tell a quiet job from a dead one.
    """

    def __init__(self, folder: StatusFolder, job: str) -> None:
        self.folder = folder
        self._lock = threading.Lock()
        self._doc: dict[str, Any] = {
            "job": job,
            "state": JobState.STARTING.value,
            "run_id": None,
            "query_id": None,
            "heartbeat": utc_now(),
            "started_at": utc_now(),
            "last_progress": None,
            "input_rows": 0,
            "exception": None,
            "jvm_pid": None,
            **this_process(),
        }

    @property
    def state(self) -> JobState:
        """The current state."""
        with self._lock:
            return JobState(self._doc["state"])

    def snapshot(self) -> dict[str, Any]:
        """A copy of the current document."""
        with self._lock:
            return json.loads(json.dumps(self._doc, default=str))

    def update(self, **fields: Any) -> None:
        """Set ``fields``, refresh the heartbeat and rewrite status.json.

        States only move forward (running/idle -> stopping -> stopped/failed): a late listener
        event cannot make a stopping or finished job look busy again.
        """
        if "state" in fields:
            new_state = parse_state(fields["state"])
            if new_state is None or new_state == JobState.HELD:
                written = [s.value for s in JobState if s != JobState.HELD]
                raise ValueError(f"unknown job state {fields['state']!r}; expected one of {written}")
            fields["state"] = new_state.value
        with self._lock:
            if "state" in fields and JobState(fields["state"]).rank < JobState(self._doc["state"]).rank:
                del fields["state"]
            self._doc.update(fields)
            self._doc["heartbeat"] = utc_now()
            self.folder.write_json(STATUS_FILE, self._doc)

    def restart_query(self, attempt: int, failure: str) -> None:
        """Another attempt of this run to start its query (:mod:`hubflow_jobs.query_start`): the
        state goes back to ``starting``, the one move backwards a run makes, with the attempt's
        number and why the last start failed (``start_attempt``, ``start_failure``)."""
        with self._lock:
            self._doc.update(
                state=JobState.STARTING.value,
                exception=None,
                query_terminated_at=None,
                start_attempt=attempt,
                start_failure=failure,
                heartbeat=utc_now(),
            )
            self.folder.write_json(STATUS_FILE, self._doc)

    def add_input_rows(self, rows: int, **fields: Any) -> None:
        """Count ``rows`` more rows read by this run and apply ``fields`` (see :meth:`update`)."""
        with self._lock:
            total = int(self._doc.get("input_rows") or 0) + int(rows or 0)
        self.update(input_rows=total, **fields)

    def heartbeat(self) -> None:
        """Rewrite status.json with a fresh heartbeat and nothing else changed."""
        self.update()


@dataclass(frozen=True)
class LeaseTiming:
    """How long a lease lasts, how often it is renewed, when a holder that cannot renew fences
    itself (seconds; ``runtime.lease_*`` in the job config)."""

    duration: float = 60.0
    refresh_interval: float = 10.0
    fence_after: float = 40.0

    def __post_init__(self) -> None:
        if not 0 < self.refresh_interval < self.fence_after < self.duration:
            raise ValueError(
                "the lease timings must satisfy lease_refresh_interval < lease_fence_after < "
                f"lease_duration; got {self.refresh_interval:g} s, {self.fence_after:g} s and "
                f"{self.duration:g} s"
            )


class LeaseHeldError(Exception):
    """Another live instance of the job holds the lease; the message says who and what to do."""


class Lease:
    """The single-instance lease of job ``job`` in ``folder`` (rules in the module docstring)."""

    def __init__(self, folder: StatusFolder, job: str, timing: LeaseTiming) -> None:
        self.folder = folder
        self.job = job
        self.timing = timing
        self.token = uuid.uuid4().hex
        self.held = False
        #: The holder that took the lease from us (its document), once we lost it.
        self.lost_to: dict[str, Any] | None = None
        #: ``time.monotonic()`` at the *start* of the last successful write of the lease: the
        #: holder's fencing deadline counts from here (the write may have landed any time after).
        self.last_success = time.monotonic()
        self._version: str | None = None
        self._document: dict[str, Any] = {}
        self._mutex = threading.Lock()

    @property
    def store(self) -> DocumentStore:
        return self.folder.store

    def acquire(self) -> None:
        """Take the lease, waiting out a silent holder that cannot be probed from here; raise
        :class:`LeaseHeldError` when the holder is alive (renews, or runs in this process space)."""
        watched, watched_since = None, 0.0
        poll = max(0.05, min(1.0, self.timing.refresh_interval / 4))
        while True:
            current = self.store.read(LEASE_FILE)
            if current is None:
                started = time.monotonic()
                version = self.store.create(LEASE_FILE, self._new_document())
                if version is not None:
                    self._take(version, started)
                    return
                continue  # another starter created it first: judge that one
            holder = _loads(current.data)
            if watched is not None and current.version != watched:
                raise LeaseHeldError(self._held_message(holder, "its lease was renewed while we watched"))
            pid, host = holder.get("pid"), holder.get("host")
            reason = None
            running = is_running(holder)
            if running is True:
                raise LeaseHeldError(self._held_message(holder, f"pid {pid} runs on this host"))
            if running is False:
                reason = why_not_running(holder)
            elif watched is None:
                watched, watched_since = current.version, time.monotonic()
                log.info(
                    "job %s: the lease is held by pid %s on host %s, which cannot be probed from here "
                    "(%s); it is taken over if it is not renewed within %.0f s (lease_duration)",
                    self.job,
                    pid,
                    host,
                    why_cannot_judge(holder),
                    self.timing.duration,
                )
            elif time.monotonic() - watched_since >= self.timing.duration:
                reason = f"it was not renewed for {self.timing.duration:.0f} s (lease_duration)"
            if reason is not None:
                started = time.monotonic()
                version = self.store.replace(LEASE_FILE, self._new_document(), current.version)
                if version is not None:
                    log.warning(
                        "taking over the lease of job %s from pid %s on host %s (since %s): %s",
                        self.job,
                        pid,
                        host,
                        holder.get("started_at"),
                        reason,
                    )
                    self._take(version, started)
                    return
                watched = None  # someone else changed it first: judge the new holder
                continue
            time.sleep(poll)

    def renew(self) -> bool:
        """Renew the lease; False when it was lost (taken over or removed): stop writing at once.

        Storage errors propagate (the caller retries); only a changed document means "lost".
        """
        with self._mutex:
            if not self.held or self._version is None:
                return False
            document = {**self._document, "renewed_at": utc_now(), "renewals": self._document["renewals"] + 1}
            started = time.monotonic()
            version = self.store.replace(LEASE_FILE, _dump(document), self._version)
            if version is None:
                self.held = False
                self.lost_to = self.folder.read_json(LEASE_FILE) or {}
                return False
            self._version, self._document, self.last_success = version, document, started
            return True

    def release(self) -> None:
        """Delete the lease if this instance still holds it (a new holder's lease is left alone)."""
        with self._mutex:
            if not self.held or self._version is None:
                return
            self.held = False
            try:
                if not self.store.delete(LEASE_FILE, self._version):
                    log.warning("job %s: the lease changed hands before release; left it alone", self.job)
            except Exception as exc:  # the lease expires by itself
                log.warning("job %s: could not release the lease (%s); it expires by itself", self.job, exc)

    def holder_description(self, document: dict[str, Any] | None) -> str:
        """``pid P on host H`` of a lease document."""
        document = document or {}
        return f"pid {document.get('pid')} on host {document.get('host')}"

    def _new_document(self) -> bytes:
        now = utc_now()
        self._document = {
            "job": self.job,
            "holder": self.token,
            **this_process(),
            "started_at": now,
            "renewed_at": now,
            "renewals": 0,
            "lease_duration_seconds": self.timing.duration,
        }
        return _dump(self._document)

    def _take(self, version: str, started: float) -> None:
        self._version = version
        self.last_success = started
        self.held = True
        self.lost_to = None

    def _held_message(self, holder: dict[str, Any], why: str) -> str:
        return (
            f"job {self.job} is already running: pid {holder.get('pid')} on host {holder.get('host')} "
            f"since {holder.get('started_at')} holds {self.folder.path(LEASE_FILE)} ({why}). Only one "
            f"instance may use a checkpoint: stop it first (on-call stop, or create "
            f"{self.folder.path(STOP_MARKER)}). If it was killed on another host, its lease is taken "
            f"over once it has not been renewed for {self.timing.duration:.0f} s."
        )


def _same_writer(first: dict[str, Any], second: dict[str, Any]) -> bool:
    """Whether two documents name the same process: same pid and host, and the same start time and
    space where both say (a document of an older hubflow has neither)."""
    if (first.get("pid"), first.get("host")) != (second.get("pid"), second.get("host")):
        return False
    for key in ("pid" + START_SUFFIX, *SPACE_KEYS):
        if None not in (first.get(key), second.get(key)) and first[key] != second[key]:
            return False
    return True


def _dump(document: dict[str, Any]) -> bytes:
    return json.dumps(document, indent=2, sort_keys=True, default=str).encode("utf-8")


def _loads(data: bytes) -> dict[str, Any]:
    with contextlib.suppress(ValueError, UnicodeDecodeError):
        document = json.loads(data.decode("utf-8"))
        if isinstance(document, dict):
            return document
    return {}


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
