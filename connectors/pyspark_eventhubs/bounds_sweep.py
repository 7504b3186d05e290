"""A background sweep of a large hub's partition ranges, so planning a trigger waits for no request.

Runs on the Spark driver, in the query's long-lived Python worker, beside :class:`~.stream_reader.
EventHubsStreamReader`. Event Hubs answers runtime information one partition per request, and the
driver paces those requests (``eventhubs.managementRequestsPerSecond``, default 50): over a
1,024-partition hub one round takes about 20 s. A hub with more partitions than one second of that
pace is therefore swept here, in chunks of one second's requests, on a daemon thread: each
``latestOffset`` asks for a new sweep when none is running and plans with the newest answer of every
partition at once. The request rate never exceeds the pace, whatever the trigger interval, and an
idle query (no trigger) makes no requests. The cost is freshness: a batch sees each partition as of
its last answer, at most one sweep old. A sweep that fails (after the session's own retries) is
re-raised by the next ``latestOffset``, so a query fails as it does when a synchronous round fails.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from .positions import PartitionBounds

log = logging.getLogger(__name__)

#: Asks the broker for the ranges of some partitions (one chunk of a sweep).
FetchChunk = Callable[[list[str]], dict[str, PartitionBounds]]


class BoundsSweep:
    """The newest known range of every partition, refreshed by one background sweep at a time."""

    def __init__(self, fetch: FetchChunk, chunk_size: int, description: str) -> None:
        self._fetch = fetch
        self._chunk_size = max(1, chunk_size)
        self._description = description
        self._lock = threading.Lock()
        self._known: dict[str, PartitionBounds] = {}
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._closed = threading.Event()
        #: Completed sweeps (tests and logs read it).
        self.sweeps = 0

    def update(self, bounds: dict[str, PartitionBounds]) -> None:
        """Merge answers got elsewhere (a synchronous round is a full sweep too)."""
        with self._lock:
            self._known.update(bounds)

    def snapshot(self, partition_ids: Iterable[str]) -> dict[str, PartitionBounds]:
        """The newest range of each of ``partition_ids`` that has one; raises a failed sweep's error."""
        with self._lock:
            error, self._error = self._error, None
            if error is not None:
                raise error
            return {pid: self._known[pid] for pid in partition_ids if pid in self._known}

    def request(self, partition_ids: list[str]) -> bool:
        """Start a sweep of ``partition_ids`` unless one is running; True when one was started."""
        with self._lock:
            if self._closed.is_set() or (self._thread is not None and self._thread.is_alive()):
                return False
            self._thread = threading.Thread(
                target=self._sweep,
                args=(list(partition_ids),),
                name=f"eventhubs-bounds-sweep {self._description}",
                daemon=True,
            )
            self._thread.start()
            return True

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the running sweep, if any; True when none is running any more."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    def close(self, timeout: float | None = None) -> None:
        """Stop after the chunk in flight; waits for it up to ``timeout`` seconds."""
        self._closed.set()
        self.wait(timeout)

    def _sweep(self, partition_ids: list[str]) -> None:
        try:
            for first in range(0, len(partition_ids), self._chunk_size):
                if self._closed.is_set():
                    return
                answers = self._fetch(partition_ids[first : first + self._chunk_size])
                with self._lock:
                    self._known.update(answers)
            with self._lock:
                self.sweeps += 1
        except BaseException as exc:  # re-raised on the planning thread by snapshot()
            if not self._closed.is_set():
                log.warning("Event hub %s: a background sweep of ranges failed: %s", self._description, exc)
                with self._lock:
                    self._error = exc
