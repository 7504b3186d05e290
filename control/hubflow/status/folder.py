"""One job's status folder, for the job and for its supervisors alike: its documents, markers,
liveness, restarts, progress history and driver log (file names in :mod:`hubflow.status.names`).

Everything goes through :mod:`hubflow.storage`, so the folder may be local or ``abfss://``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hubflow.status.documents import age_seconds, dump_document, text_or_none, utc_now
from hubflow.status.holds import HoldKeptError, HoldKind, hold_kind, kept_text, may_release
from hubflow.status.liveness import Liveness, Marker
from hubflow.status.names import (
    DRIVER_LOG_FILE,
    DRIVER_LOG_MAX_BYTES,
    HOLD_MARKER,
    KILL_MARKER,
    LEASE_FILE,
    PROGRESS_HISTORY_FILE,
    PROGRESS_HISTORY_MAX_BYTES,
    RESTARTS_FILE,
    RESTARTS_KEPT,
    STATUS_FILE,
    STOP_MARKER,
)
from hubflow.status.process_identity import is_running, same_writer, why_not_running
from hubflow.status.states import JobState, parse_state
from hubflow.storage.document_stores import DocumentStore, store_for


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
        self.store.write(name, dump_document(document))

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
        return None if current is None else self._parse_marker(name, current.data)

    @staticmethod
    def _parse_marker(name: str, data: bytes) -> Marker:
        try:
            fields = json.loads(data.decode("utf-8") or "{}")
        except (ValueError, UnicodeDecodeError):
            fields = {}
        if not isinstance(fields, dict):
            fields = {}
        return Marker(
            at=text_or_none(fields.get("at") or fields.get("requested_at")),
            by=text_or_none(fields.get("by")),
            reason=text_or_none(fields.get("reason")),
            target=text_or_none(fields.get("target")),
            # A HOLD written before holds had kinds is an on-call stop.
            kind=str(hold_kind(fields.get("kind"))) if name == HOLD_MARKER else None,
        )

    def put_marker(self, name: str, *, by: str | None, reason: str, target: str | None = None) -> Marker:
        """Write the marker ``name`` (now, by ``by``, because ``reason``) and return it."""
        marker = Marker(at=utc_now(), by=by, reason=reason, target=target)
        self.store.write(name, dump_document(marker.to_dict()))
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

    def place_hold(self, reason: str, by: str | None = None, kind: HoldKind = HoldKind.STOP) -> Marker:
        """Keep the job stopped until the hold is released (supervisors will not restart it).

        Replaces a hold already there (whether that is allowed is the caller's rule: see
        :mod:`hubflow.status.holds`); written create-if-absent or replace-if-unchanged, so a
        concurrent :meth:`release_hold` removes either the old hold or none, never this one.
        """
        hold = Marker(at=utc_now(), by=by, reason=reason, kind=str(HoldKind(kind)))
        data = dump_document(hold.to_dict())
        while True:
            current = self.store.read(HOLD_MARKER)
            if current is None:
                if self.store.create(HOLD_MARKER, data) is not None:
                    return hold
            elif self.store.replace(HOLD_MARKER, data, current.version) is not None:
                return hold

    def hold(self) -> Marker | None:
        """The hold (its kind, who placed it, when, why), or None."""
        return self.marker(HOLD_MARKER)

    def release_hold(
        self,
        kind: HoldKind | None = None,
        *,
        by: str | None = None,
        force: bool = False,
        reason: str | None = None,
        placed: Marker | None = None,
        action: str | None = None,
    ) -> Marker | None:
        """Remove the hold if it is of ``kind`` (None: any kind); returns the hold released, if any.

        ``placed``: the very hold the caller placed; another hold of the same kind is kept too.
        A hold that may not be released raises :class:`~hubflow.status.holds.HoldKeptError` naming
        it and how to take over (``action`` names the caller in that message); ``force`` (with a
        ``reason``, said by :func:`~hubflow.status.holds.takeover_text`) releases any hold.
        The removal is delete-if-unchanged on the version read: a hold replaced in between (a stop
        placed during a rewind) is judged again, not deleted unseen.
        """
        if force and not reason:
            raise ValueError("taking over a hold (force) needs a reason, recorded with the takeover")
        job = self.url.rsplit("/", 1)[-1]
        while True:
            current = self.store.read(HOLD_MARKER)
            if current is None:
                return None
            hold = self._parse_marker(HOLD_MARKER, current.data)
            mine = placed is None or hold == placed
            if not force and not (may_release(hold, kind) and mine):
                raise HoldKeptError(kept_text(job, hold, action or f"a {kind or 'release'}"), hold)
            if self.store.delete(HOLD_MARKER, current.version):
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
        if not lease or not same_writer(lease, status):
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
