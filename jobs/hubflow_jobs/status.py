"""The job's status folder ``<status_root>/<name>/``: ``status.json``, the ``STOP`` marker, the ``lock``.

``status.json`` is what supervisors (the Airflow sensor, the status page, on-call) read; it is
rewritten whole through a temporary file and a rename, so a reader never sees half a document.
All I/O goes through fsspec, so the folder can be local (tests, development) or ``abfss://``.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import uuid
from datetime import UTC, datetime
from typing import Any

import fsspec
from fsspec import AbstractFileSystem

STATUS_FILE = "status.json"
#: One JSON line per micro-batch (status.json's ``last_progress``): the status page's charts.
PROGRESS_HISTORY_FILE = "progress_history.jsonl"
#: The history is rotated (to ``.1``, replacing the older one) when it grows past this size.
PROGRESS_HISTORY_MAX_BYTES = 4 * 1024 * 1024
STOP_MARKER = "STOP"
LOCK_FILE = "lock"

#: Every value ``state`` takes in status.json.
STATES = ("starting", "running", "idle", "stopping", "stopped", "failed")
_RANK = {"starting": 0, "running": 0, "idle": 0, "stopping": 1, "stopped": 2, "failed": 2}


def utc_now() -> str:
    """The current time as an ISO 8601 UTC string, e.g. ``2026-01-02T03:04:05.678+00:00``."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class StatusFolder:
    """File operations on one job's status folder, local or remote."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.fs: AbstractFileSystem
        self.fs, self.root = fsspec.core.url_to_fs(self.url)
        self.fs.makedirs(self.root, exist_ok=True)

    def path(self, name: str) -> str:
        """The filesystem path of ``name`` inside the folder."""
        return f"{self.root.rstrip('/')}/{name}"

    def write_json_atomically(self, name: str, document: dict[str, Any]) -> None:
        """Write ``document`` to ``name`` through a temporary file and a rename."""
        temp = self.path(f".{name}.{uuid.uuid4().hex}.tmp")
        with self.fs.open(temp, "w") as handle:
            handle.write(json.dumps(document, indent=2, sort_keys=True, default=str))
        try:
            self.fs.mv(temp, self.path(name))
        except BaseException:
            self.fs.rm(temp)
            raise

    def read_json(self, name: str) -> dict[str, Any] | None:
        """The JSON document in ``name``, or None when the file is absent or unreadable."""
        try:
            with self.fs.open(self.path(name), "r") as handle:
                return json.load(handle)
        except (FileNotFoundError, ValueError):
            return None

    def append_line(self, name: str, line: str, max_bytes: int = PROGRESS_HISTORY_MAX_BYTES) -> None:
        """Append one line to ``name``; past ``max_bytes`` the file is rotated to ``name.1`` first."""
        path = self.path(name)
        try:
            if self.fs.size(path) > max_bytes:
                self.fs.mv(path, self.path(f"{name}.1"))
        except FileNotFoundError:
            pass
        with self.fs.open(path, "a") as handle:
            handle.write(line.rstrip("\n") + "\n")

    def exists(self, name: str) -> bool:
        """Whether ``name`` exists in the folder."""
        return bool(self.fs.exists(self.path(name)))

    def remove(self, name: str) -> None:
        """Remove ``name`` if it exists."""
        try:
            self.fs.rm(self.path(name))
        except FileNotFoundError:
            pass


class JobStatus:
    """The live status document of one run, shared by the listener thread and the main loop.

    Every change rewrites ``status.json`` at once; :meth:`heartbeat` rewrites it with a fresh
    ``heartbeat`` so a supervisor can tell a quiet job from a dead one.
    """

    def __init__(self, folder: StatusFolder, job: str) -> None:
        self.folder = folder
        self._lock = threading.Lock()
        self._doc: dict[str, Any] = {
            "job": job,
            "state": "starting",
            "run_id": None,
            "query_id": None,
            "heartbeat": utc_now(),
            "started_at": utc_now(),
            "last_progress": None,
            "exception": None,
            "pid": os.getpid(),
            "host": socket.gethostname(),
        }

    @property
    def state(self) -> str:
        """The current ``state`` value."""
        with self._lock:
            return self._doc["state"]

    def snapshot(self) -> dict[str, Any]:
        """A copy of the current document."""
        with self._lock:
            return json.loads(json.dumps(self._doc, default=str))

    def update(self, **fields: Any) -> None:
        """Set ``fields``, refresh the heartbeat and rewrite status.json.

        States only move forward (running/idle -> stopping -> stopped/failed): a late listener
        event cannot make a stopping or finished job look busy again.
        """
        new_state = fields.get("state")
        if new_state is not None and new_state not in STATES:
            raise ValueError(f"unknown job state {new_state!r}; expected one of {STATES}")
        with self._lock:
            if new_state is not None and _RANK[new_state] < _RANK[self._doc["state"]]:
                del fields["state"]
            self._doc.update(fields)
            self._doc["heartbeat"] = utc_now()
            self.folder.write_json_atomically(STATUS_FILE, self._doc)

    def heartbeat(self) -> None:
        """Rewrite status.json with a fresh heartbeat and nothing else changed."""
        self.update()
