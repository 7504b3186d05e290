"""Host-wide quota of open receivers per (namespace, hub, consumer group, partition).

Event Hubs allows 5 receivers without owner level per partition and consumer group (one with an
owner level, which takes over from the others). Spark runs the connector's reads in several Python
worker processes per executor, each with its own receiver cache, and a driver may resolve start
positions with receivers on the same machine, so a per-process rule cannot keep the count down.

A receiver therefore holds a **slot**: an exclusive ``flock`` on one of :data:`MAX_RECEIVERS`
small files named after the digest of the key, in a per-user folder of the machine's temp dir.
Locks are per open file, so they count across processes and threads alike, and the kernel drops
them when a process dies (a killed worker never leaks a slot). A receiver that finds every slot
taken marks the key as *wanted* (touches ``<digest>.wanted``) and retries every 50 ms: receiver
caches close their idle receiver of a wanted key within a quarter of a second
(``receiver_cache.py``). If no slot frees up within ``eventhubs.receiverTimeout`` — every one is
held by a receiver that is reading — the read fails with an error saying why and what to do.

This bounds each machine, not the cluster: executors on other machines hold their own slots. The
service's own refusal (``amqp:resource-limit-exceeded``) is then met by the read path waiting for
the other machines' idle receivers to close (they do within the cache's idle timeout).
On platforms without ``fcntl`` (Windows) the bound is per process only.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from pathlib import Path

from .errors import EventHubsReadError
from .options import EventHubsOptions

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

#: Receivers without owner level per partition and consumer group (the service's quota).
MAX_RECEIVERS = 5
#: Receivers with an owner level (eventhubs.useExclusiveReceiver=true): a second one would steal.
MAX_EXCLUSIVE_RECEIVERS = 1
#: How often a receiver waiting for a slot tries again.
RETRY_SECONDS = 0.05
#: How recent a "wanted" mark must be for a cache to give up its idle receiver of that key.
WANTED_FRESH_SECONDS = 2.0


def slot_folder() -> Path:
    """The folder of this user's slot files on this machine."""
    folder = Path(tempfile.gettempdir()) / f"pyspark_eventhubs-{os.getuid()}" / "receivers"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def slot_key(options: EventHubsOptions, partition_id: str) -> str:
    """What the service counts receivers by, hashed (file names show no hub or group name)."""
    identity = "\0".join([options.namespace, options.eventhub_name, options.consumer_group, partition_id])
    return hashlib.sha256(identity.encode()).hexdigest()[:32]


def slot_limit(options: EventHubsOptions) -> int:
    """Receivers this machine may hold open per partition and consumer group."""
    return MAX_EXCLUSIVE_RECEIVERS if options.use_exclusive_receiver else MAX_RECEIVERS


def is_wanted(key: str, since: float) -> bool:
    """Whether a receiver of ``key`` has been waited for since ``since`` (wall-clock seconds)."""
    try:
        mtime = (slot_folder() / f"{key}.wanted").stat().st_mtime
    except FileNotFoundError:
        return False
    return mtime >= since and time.time() - mtime < WANTED_FRESH_SECONDS


class ReceiverSlot:
    """One held slot; :meth:`release` (or the process ending) gives it back."""

    def __init__(self, key: str, fd: int | None) -> None:
        self.key = key
        self._fd = fd

    @classmethod
    def acquire(cls, options: EventHubsOptions, partition_id: str, timeout: float) -> ReceiverSlot:
        """Take a free slot, waiting up to ``timeout`` seconds for one; raise EventHubsReadError."""
        key = slot_key(options, partition_id)
        if fcntl is None:  # pragma: no cover - Windows
            return cls(key, None)
        folder = slot_folder()
        limit = slot_limit(options)
        deadline = time.monotonic() + timeout
        while True:
            for index in range(limit):
                fd = os.open(folder / f"{key}.{index}", os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                return cls(key, fd)
            if time.monotonic() >= deadline:
                raise EventHubsReadError(no_slot_message(options, partition_id, limit))
            (folder / f"{key}.wanted").touch()
            time.sleep(RETRY_SECONDS)

    def release(self) -> None:
        """Give the slot back; safe to call twice."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the file drops its lock


def no_slot_message(options: EventHubsOptions, partition_id: str, limit: int | None) -> str:
    """Why a receiver could not be opened, and what to do (``limit`` None: the service refused)."""
    if limit is None:
        held = (
            "the service refused a new receiver (resource-limit-exceeded: receivers on other "
            "machines hold every place allowed per partition and consumer group)"
        )
    else:
        kind = "receiver with eventhubs.useExclusiveReceiver=true" if limit == 1 else "receivers"
        held = f"all {limit} {kind} allowed per partition and consumer group are in use"
    return (
        f"Event hub {options.description} partition {partition_id}, consumer group "
        f"'{options.consumer_group}': {held} and none was freed within eventhubs.receiverTimeout "
        f"({options.receiver_timeout:g} s). Another query or job reads this consumer group at the "
        "same time, or minPartitions splits a partition into more concurrent tasks than that: give "
        "each query its own consumer group (eventhubs.consumerGroup) or lower minPartitions."
    )
