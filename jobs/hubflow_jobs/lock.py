"""One running instance per checkpoint: the ``lock`` file in the job's status folder.

The lock holds the owner's pid, host, start time and a heartbeat the owner refreshes. A second
start finds a live lock and refuses (:class:`LockHeldError`). A lock is *stale*, and is taken over
with a warning, when its pid is dead on this host or its heartbeat is older than
``runtime.stale_lock_after`` (a driver on another host that was killed cannot be probed).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import uuid
from datetime import UTC, datetime
from typing import Any

from .status import LOCK_FILE, StatusFolder, utc_now

log = logging.getLogger(__name__)


class LockHeldError(Exception):
    """Another live instance of the job holds the lock; the message says who and what to do."""


def pid_alive(pid: int) -> bool:
    """Whether a process with ``pid`` runs on this host (a zombie, exited but not reaped, does not)."""
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


def _age_seconds(iso_time: str | None) -> float | None:
    if not iso_time:
        return None
    try:
        moment = datetime.fromisoformat(iso_time)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (datetime.now(UTC) - moment).total_seconds()


class JobLock:
    """The single-instance lock of job ``job`` in ``folder``."""

    def __init__(self, folder: StatusFolder, job: str, stale_after_seconds: float) -> None:
        self.folder = folder
        self.job = job
        self.stale_after_seconds = stale_after_seconds
        self.token = uuid.uuid4().hex
        self.held = False
        self._document: dict[str, Any] = {}

    def acquire(self) -> None:
        """Take the lock, taking over a stale one; raise :class:`LockHeldError` if it is live."""
        for _ in range(3):
            current = self.folder.read_json(LOCK_FILE)
            if current is None and self.folder.exists(LOCK_FILE):
                # Being written by another starter right now, or damaged: judge it by its age below.
                current = {}
            if current is not None:
                reason = self.stale_reason(current)
                if reason is None:
                    raise LockHeldError(self._held_message(current))
                log.warning(
                    "taking over stale lock of job %s (pid %s on host %s since %s): %s",
                    self.job,
                    current.get("pid"),
                    current.get("host"),
                    current.get("started_at"),
                    reason,
                )
                self.folder.remove(LOCK_FILE)
            if self._create():
                self.held = True
                return
        raise LockHeldError(
            f"job {self.job}: could not take the lock {self.folder.path(LOCK_FILE)}; another instance "
            "is starting at the same time. Try again in a minute."
        )

    def stale_reason(self, document: dict[str, Any]) -> str | None:
        """Why the lock described by ``document`` is stale, or None when its owner may be alive."""
        pid, host = document.get("pid"), document.get("host")
        if host == socket.gethostname() and isinstance(pid, int) and not pid_alive(pid):
            return f"pid {pid} is not running on this host"
        age = _age_seconds(document.get("heartbeat"))
        if age is None:
            if document:
                return "the lock file has no readable heartbeat"
            return "the lock file is empty or unreadable"
        if age > self.stale_after_seconds:
            return f"its heartbeat is {age:.0f} s old (stale after {self.stale_after_seconds:.0f} s)"
        return None

    def refresh(self) -> bool:
        """Renew the heartbeat, proving the owner is alive; call it at least every few seconds.

        Returns False when this instance no longer owns the lock: another instance took it over
        (this one looked dead, e.g. its storage was unreachable for longer than the stale limit).
        """
        if not self.held:
            return False
        current = self.folder.read_json(LOCK_FILE)
        if current is not None and current.get("token") != self.token:
            log.error(
                "job %s: the lock was taken over by pid %s on host %s; this instance no longer owns it",
                self.job,
                current.get("pid"),
                current.get("host"),
            )
            self.held = False
            return False
        self._document["heartbeat"] = utc_now()
        self.folder.write_json_atomically(LOCK_FILE, self._document)
        return True

    def release(self) -> None:
        """Remove the lock if this instance still owns it."""
        if not self.held:
            return
        current = self.folder.read_json(LOCK_FILE)
        if current is None or current.get("token") == self.token:
            self.folder.remove(LOCK_FILE)
        self.held = False

    def _create(self) -> bool:
        """Create the lock file exclusively; False when someone else created it first."""
        now = utc_now()
        self._document = {
            "job": self.job,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started_at": now,
            "heartbeat": now,
            "token": self.token,
        }
        text = json.dumps(self._document, indent=2)
        try:
            with self.folder.fs.open(self.folder.path(LOCK_FILE), "x") as handle:
                handle.write(text)
        except FileExistsError:
            return False
        except (ValueError, NotImplementedError):
            # Filesystems without exclusive create: write, then read back to see who won.
            if self.folder.exists(LOCK_FILE):
                return False
            self.folder.write_json_atomically(LOCK_FILE, self._document)
        winner = self.folder.read_json(LOCK_FILE) or {}
        return winner.get("token") == self.token

    def _held_message(self, document: dict[str, Any]) -> str:
        return (
            f"job {self.job} is already running: pid {document.get('pid')} on host {document.get('host')} "
            f"since {document.get('started_at')} (heartbeat {document.get('heartbeat')}) holds "
            f"{self.folder.path(LOCK_FILE)}. Only one instance may use a checkpoint: stop it first "
            f"(create {self.folder.path('STOP')} or send it SIGTERM). If it was killed on another host, "
            f"the lock is taken over automatically once its heartbeat is older than "
            f"{self.stale_after_seconds:.0f} s."
        )
