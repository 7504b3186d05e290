"""The single-instance lease of a job (``<status folder>/lease``): one running driver per checkpoint.

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

import logging
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from hubflow.status.documents import age_seconds, dump_document, load_document, utc_now
from hubflow.status.folder import StatusFolder
from hubflow.status.names import LEASE_FILE, STOP_MARKER
from hubflow.status.process_identity import is_running, this_process, why_cannot_judge, why_not_running
from hubflow.storage.document_store import DocumentStore

log = logging.getLogger(__name__)


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
            holder = load_document(current.data)
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
            version = self.store.replace(LEASE_FILE, dump_document(document), self._version)
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
        return dump_document(self._document)

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


def lease_in_use(holder: dict[str, Any], now: datetime | None = None) -> bool:
    """Whether the lease document ``holder`` may belong to a driver that still runs (and so may be
    writing the checkpoint).

    Not in use: its holder ran in this process space and no longer runs, or it was not renewed for
    longer than its ``lease_duration_seconds`` (wall clocks of two hosts compared: good enough to
    *refuse*; :func:`wait_until_lease_free` also waits a lease out on its own monotonic clock, as
    :meth:`Lease.acquire` does). Anything else is in use, a holder that cannot be judged included.
    """
    running = is_running(holder)
    if running is not None:
        return running
    age, duration = age_seconds(holder.get("renewed_at"), now), holder.get("lease_duration_seconds")
    return age is None or not isinstance(duration, int | float) or age <= duration


def live_lease_holder(folder: StatusFolder, now: datetime | None = None) -> dict[str, Any] | None:
    """The job's lease document while it is in use (:func:`lease_in_use`), else None."""
    holder = folder.read_json(LEASE_FILE)
    return holder if holder is not None and lease_in_use(holder, now) else None


def lease_holder_text(folder: StatusFolder, holder: dict[str, Any]) -> str:
    """``pid P on host H (since S, last renewed R) holds <lease>``: the holder, for messages."""
    return (
        f"pid {holder.get('pid')} on host {holder.get('host')} (since {holder.get('started_at')}, last "
        f"renewed {holder.get('renewed_at')}) holds {folder.path(LEASE_FILE)}"
    )


def wait_until_lease_free(folder: StatusFolder, timeout: float, poll_seconds: float = 0.2) -> None:
    """Wait up to ``timeout`` seconds until no driver holds the job's lease; raise
    :class:`LeaseHeldError` naming the holder when one still does.

    Free: no lease, a lease not in use (:func:`lease_in_use`), or a lease that stayed unchanged (same
    version) for its ``lease_duration_seconds`` on this process's monotonic clock: its holder no
    longer renews it, and by the lease's rules has fenced itself.
    """
    deadline = time.monotonic() + timeout
    watched, since = None, 0.0
    while True:
        current = folder.store.read(LEASE_FILE)
        if current is None:
            return
        holder = load_document(current.data)
        if not lease_in_use(holder):
            return
        duration = holder.get("lease_duration_seconds")
        duration = duration if isinstance(duration, int | float) else LeaseTiming().duration
        if current.version != watched:
            watched, since = current.version, time.monotonic()
        elif time.monotonic() - since >= duration:
            return
        if time.monotonic() >= deadline:
            raise LeaseHeldError(
                f"{lease_holder_text(folder, holder)} after a wait of {timeout:.0f} s: a driver of "
                f"job {holder.get('job')} may still be writing its checkpoint"
            )
        time.sleep(poll_seconds)
