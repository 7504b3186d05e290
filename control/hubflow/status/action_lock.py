"""One action at a time per job: the action lock (``<status folder>/action.lock``).

Whoever changes what a job runs - an on-call ``start``, ``restart`` or ``rewind`` (from Airflow or
``hubflow oncall``), the supervisor's start of a dead or changed job - takes the lock for the
length of the action; a second action finds it taken and is refused (or waits, bounded) with a
message naming the action in progress, who started it, from where and since when
(:class:`ActionInProgress`). A backfill does not take it (backfills of one job may run side by side
and beside its scheduled runs) but refuses to begin while an action holds it. ``stop`` never
waits for it: a stop is the emergency brake, it only places its hold and stops the driver, and a
rewind in progress leaves that hold in place (:mod:`hubflow.status.holds`).

The document is written create-if-absent and removed delete-if-unchanged, on local disk (the
store's compare-and-swap under ``flock``) and on Azure Blob (``If-None-Match``/``If-Match``), so
two starters never both hold it. It names its holder's process (:mod:`.process_identity`) and an
expiry: a lock whose holder ran in this process space and is gone is taken over at once, any
other at its ``expires_at`` (wall clocks of two hosts compared: the expiry is minutes, skew is
seconds). The holder renews the expiry while it works (:meth:`ActionLock.held`). No Airflow here.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from hubflow.status.documents import dump_document, load_document, utc_now
from hubflow.status.folder import StatusFolder
from hubflow.status.names import ACTION_LOCK_FILE
from hubflow.status.process_identity import is_running, this_process
from hubflow.utc_times import utc_time

#: How long a lock lasts without renewal; the holder renews it every third of that.
ACTION_LOCK_TTL = timedelta(minutes=10)
#: How often a waiting action reads the lock again.
POLL_SECONDS = 1.0


class ActionInProgress(RuntimeError):
    """Another action holds the job's lock; ``holder`` is its document (action, by, source, at)."""

    def __init__(self, message: str, holder: dict[str, Any]) -> None:
        super().__init__(message)
        self.holder = holder


def lock_expired(holder: dict[str, Any], now: datetime | None = None) -> bool:
    """Whether the lock document ``holder`` no longer counts: its holder ran in this process space
    and is gone, or its ``expires_at`` has passed (an unreadable document counts as expired)."""
    if is_running(holder) is False:
        return True
    expires = utc_time(holder.get("expires_at"))
    return expires is None or expires <= (now or datetime.now(UTC))


def action_in_progress(folder: StatusFolder, now: datetime | None = None) -> dict[str, Any] | None:
    """The lock document of the action in progress on the job, or None when no action holds it."""
    current = folder.store.read(ACTION_LOCK_FILE)
    if current is None:
        return None
    holder = load_document(current.data)
    return None if lock_expired(holder, now) else holder


def in_progress_text(job: str, holder: dict[str, Any]) -> str:
    """``job J: a rewind started by alice (airflow) at T is in progress (until T2 at the latest)``."""
    source = f" ({holder['source']})" if holder.get("source") else ""
    return (
        f"job {job}: a {holder.get('action', 'an unknown action')} started by "
        f"{holder.get('by') or 'someone'}{source} at {holder.get('at')} is in progress (its lock "
        f"expires at {holder.get('expires_at')} unless renewed)"
    )


def refuse_if_in_progress(folder: StatusFolder, job: str, action: str) -> None:
    """Raise :class:`ActionInProgress` when another action holds the job's lock (for a ``action``
    that does not take the lock itself, such as a backfill)."""
    holder = action_in_progress(folder)
    if holder is not None:
        raise ActionInProgress(
            f"{in_progress_text(job, holder)}; the {action} is refused: run it again once that "
            "action has ended (its outcome is in the job's audit trail)",
            holder,
        )


@dataclass
class ActionLock:
    """The job's action lock as ``action`` by ``by`` from ``source`` would hold it."""

    folder: StatusFolder
    job: str
    action: str
    by: str
    source: str
    ttl: timedelta = ACTION_LOCK_TTL

    def __post_init__(self) -> None:
        self.token = uuid.uuid4().hex
        self._version: str | None = None
        self._document: dict[str, Any] = {}
        self._mutex = threading.Lock()

    @property
    def is_held(self) -> bool:
        return self._version is not None

    def acquire(self, wait: timedelta = timedelta(0)) -> None:
        """Take the lock; while another action holds it, wait up to ``wait``, then raise
        :class:`ActionInProgress` naming that action."""
        deadline = time.monotonic() + wait.total_seconds()
        store = self.folder.store
        while True:
            current = store.read(ACTION_LOCK_FILE)
            if current is None:
                version = store.create(ACTION_LOCK_FILE, self._new_document())
            else:
                holder = load_document(current.data)
                if not lock_expired(holder):
                    if time.monotonic() >= deadline:
                        waited = f" after a wait of {wait}" if wait else ""
                        raise ActionInProgress(
                            f"{in_progress_text(self.job, holder)}; the {self.action} is refused"
                            f"{waited}: run it again once that action has ended (its outcome is in "
                            "the job's audit trail)",
                            holder,
                        )
                    time.sleep(POLL_SECONDS)
                    continue
                version = store.replace(ACTION_LOCK_FILE, self._new_document(), current.version)
            if version is not None:
                self._version = version
                return

    def renew(self) -> bool:
        """Push the expiry out by ``ttl``; False when the lock is no longer ours (expired and taken)."""
        with self._mutex:
            if self._version is None:
                return False
            document = {**self._document, "expires_at": self._expiry()}
            version = self.folder.store.replace(ACTION_LOCK_FILE, dump_document(document), self._version)
            if version is None:
                self._version = None
                return False
            self._version, self._document = version, document
            return True

    def release(self) -> None:
        """Remove the lock if it is still ours (a lock taken over after expiry is left alone)."""
        with self._mutex:
            if self._version is not None:
                with contextlib.suppress(Exception):  # it expires by itself
                    self.folder.store.delete(ACTION_LOCK_FILE, self._version)
                self._version = None

    @contextlib.contextmanager
    def held(self, wait: timedelta = timedelta(0)) -> Iterator[ActionLock]:
        """Take the lock (:meth:`acquire`) and hold it for a ``with`` block (:meth:`renewing`)."""
        self.acquire(wait)
        with self.renewing():
            yield self

    @contextlib.contextmanager
    def renewing(self) -> Iterator[ActionLock]:
        """Keep the acquired lock for a ``with`` block, renewing it every third of ``ttl``; released
        at the end, whatever happens inside."""
        stop = threading.Event()

        def keep_renewing() -> None:
            while not stop.wait(self.ttl.total_seconds() / 3):
                with contextlib.suppress(Exception):  # a storage hiccup: the next renewal tries again
                    if not self.renew():
                        return

        renewer = threading.Thread(target=keep_renewing, name=f"action-lock-{self.job}", daemon=True)
        renewer.start()
        try:
            yield self
        finally:
            stop.set()
            renewer.join(timeout=5)
            self.release()

    def _expiry(self) -> str:
        return (datetime.now(UTC) + self.ttl).isoformat(timespec="milliseconds")

    def _new_document(self) -> bytes:
        self._document = {
            "job": self.job,
            "action": self.action,
            "by": self.by,
            "source": self.source,
            "at": utc_now(),
            "expires_at": self._expiry(),
            "token": self.token,
            **this_process(),
        }
        return dump_document(self._document)
