"""Event storage: one append-only log per partition, hubs that own partitions, retention.

Everything here runs on the emulator's event-loop thread (no locks). A partition keeps its retained
events in memory as tuples ``(sequence_number, offset, enqueued_ms, payload, header_len)``; with a
data directory it also appends each event to ``<data_dir>/<hub>/<partition>.log``.

Durability: each accepted delivery is written to the log file and flushed to the OS before the
producer gets its ``accepted`` disposition (it survives a crash of the emulator process); the files
are fsynced once a second while there are unsynced writes, and on a clean stop (they survive a
machine crash up to the last second). Retention writes the partition's beginning sequence number to
``<partition>.begin`` (fsynced) and drops older records from memory; the log file is compacted on
the next start.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from .config import EmulatorConfig, HubConfig
from .messages import stamp_event
from .partition_keys import partition_index

log = logging.getLogger("eventhubs_emulator")

Event = tuple[int, int, int, bytes, int]  # (sequence_number, offset, enqueued_ms, payload, header_len)

_RECORD = struct.Struct(">qqqII")  # seq, offset, enqueued_ms, header_len, payload length


def now_ms() -> int:
    """Current UTC time in epoch milliseconds."""
    return int(time.time() * 1000)


class Clock:
    """The namespace's clock for enqueued times: wall time plus an offset.

    The offset is a fault a test sets (``Faults.shift_clock``, the admin API's ``POST /faults/clock``)
    to enqueue events hours in the past, e.g. in the intervals a backfill reads, without waiting for
    them. A partition's enqueued times still never go backwards.
    """

    def __init__(self) -> None:
        self.offset_ms = 0

    def now_ms(self) -> int:
        """The namespace's time in epoch milliseconds."""
        return now_ms() + self.offset_ms


class PartitionLog:
    """The events of one partition, with sequence numbers, offsets and enqueued times."""

    def __init__(
        self, hub: str, partition_id: str, path: Path | None = None, clock: Clock | None = None
    ) -> None:
        self.hub = hub
        self.clock = clock or Clock()
        self.partition_id = partition_id
        self.events: list[Event] = []
        self.begin_seq = 0
        self.next_seq = 0
        self.next_offset = 0
        self.last_enqueued_ms = 0
        self.last_offset = -1
        self.listeners: set[Callable[[], None]] = set()
        self._path = path
        self._file: BinaryIO | None = None
        self.dirty = False
        if path is not None:
            self._load(path)

    # ----------------------------------------------------------------------------------- persistence
    def _begin_path(self) -> Path:
        assert self._path is not None
        return self._path.with_suffix(".begin")

    def _load(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        begin = 0
        if self._begin_path().exists():
            try:
                begin = int(self._begin_path().read_text().strip() or 0)
            except ValueError:
                begin = 0
        kept: list[Event] = []
        total = 0
        if path.exists():
            data = path.read_bytes()
            pos = 0
            while pos + _RECORD.size <= len(data):
                seq, offset, enq, hlen, n = _RECORD.unpack_from(data, pos)
                end = pos + _RECORD.size + n
                if end > len(data):
                    break  # a torn last record (crash mid-write): drop it
                payload = data[pos + _RECORD.size : end]
                pos = end
                total += 1
                self.next_seq = seq + 1
                self.next_offset = offset + len(payload)
                self.last_offset = offset
                self.last_enqueued_ms = enq
                if seq >= begin:
                    kept.append((seq, offset, enq, payload, hlen))
            if pos != len(data) or len(kept) != total:
                self._rewrite(path, kept)
        self.events = kept
        self.begin_seq = kept[0][0] if kept else max(begin, self.next_seq)
        self.next_seq = max(self.next_seq, self.begin_seq)
        self._file = open(path, "ab")

    @staticmethod
    def _rewrite(path: Path, events: list[Event]) -> None:
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            for seq, offset, enq, payload, hlen in events:
                f.write(_RECORD.pack(seq, offset, enq, hlen, len(payload)))
                f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def sync(self) -> None:
        """Fsync the log file if there are unsynced writes."""
        if self._file is not None and self.dirty:
            self._file.flush()
            os.fsync(self._file.fileno())
            self.dirty = False

    def close(self) -> None:
        """Fsync and close the log file."""
        if self._file is not None:
            self.sync()
            self._file.close()
            self._file = None

    # ---------------------------------------------------------------------------------------- writing
    def append(self, messages: list[bytes], partition_key: str | None) -> None:
        """Append events (encoded AMQP messages), stamping sequence number, offset and time."""
        enq = max(self.clock.now_ms(), self.last_enqueued_ms)
        records = []
        for message in messages:
            payload, hlen = stamp_event(message, self.next_seq, self.next_offset, enq, partition_key)
            event = (self.next_seq, self.next_offset, enq, payload, hlen)
            self.events.append(event)
            records.append(event)
            self.last_offset = self.next_offset
            self.next_seq += 1
            self.next_offset += len(payload)
        self.last_enqueued_ms = enq
        if self._file is not None:
            for seq, offset, e, payload, hlen in records:
                self._file.write(_RECORD.pack(seq, offset, e, hlen, len(payload)))
                self._file.write(payload)
            self._file.flush()
            self.dirty = True
        for listener in list(self.listeners):
            try:
                listener()
            except Exception:  # a broken consumer must not fail the producer's delivery
                log.exception("delivering to a consumer failed")

    def truncate_before(self, sequence_number: int) -> int:
        """Drop events with a sequence number below ``sequence_number``; return how many went."""
        target = min(sequence_number, self.next_seq)
        if target <= self.begin_seq:
            return 0
        drop = target - self.begin_seq
        del self.events[:drop]
        self.begin_seq = target
        if self._path is not None:
            begin_path = self._begin_path()
            with open(begin_path, "w") as f:
                f.write(str(target))
                f.flush()
                os.fsync(f.fileno())
        return drop

    def apply_retention(self, max_age_ms: int | None, max_count: int | None, now: int | None = None) -> int:
        """Drop events older than ``max_age_ms`` or beyond the newest ``max_count``."""
        target = self.begin_seq
        if max_count is not None and len(self.events) > max_count:
            target = self.next_seq - max_count
        if max_age_ms is not None and self.events:
            cutoff = (now_ms() if now is None else now) - max_age_ms
            idx = bisect.bisect_left(self.events, cutoff, key=lambda e: e[2])
            target = max(target, self.begin_seq + idx)
        return self.truncate_before(target)

    # ---------------------------------------------------------------------------------------- reading
    @property
    def is_empty(self) -> bool:
        """No retained events."""
        return not self.events

    def last_event(self) -> Event | None:
        """The newest event, if any is retained."""
        return self.events[-1] if self.events else None

    def last_enqueued_offset(self) -> int:
        """Offset of the newest event ever enqueued (-1 when none)."""
        return self.last_offset

    def first_seq_after_offset(self, offset: int, inclusive: bool) -> int:
        """The sequence number of the first retained event with an offset > (or >=) ``offset``."""
        fn = bisect.bisect_left if inclusive else bisect.bisect_right
        return self.begin_seq + fn(self.events, offset, key=lambda e: e[1])

    def first_seq_after_time(self, enqueued_ms: int, inclusive: bool) -> int:
        """The sequence number of the first retained event enqueued after (or at) ``enqueued_ms``."""
        fn = bisect.bisect_left if inclusive else bisect.bisect_right
        return self.begin_seq + fn(self.events, enqueued_ms, key=lambda e: e[2])


class Hub:
    """An event hub: partitions, consumer groups, and producer routing."""

    def __init__(self, config: HubConfig, data_dir: Path | None, clock: Clock | None = None) -> None:
        self.config = config
        self.clock = clock or Clock()
        self.name = config.name
        self.created_ms = now_ms()
        self.consumer_groups = {g.lower(): g for g in config.all_consumer_groups()}
        self._data_dir = data_dir / config.name if data_dir is not None else None
        count = config.partition_count
        if self._data_dir is not None:
            self._data_dir.mkdir(parents=True, exist_ok=True)
            meta = self._data_dir / "partition_count"
            if meta.exists():
                try:
                    count = max(count, int(meta.read_text().strip()))
                except ValueError:
                    pass
            created = self._data_dir / "created_ms"
            if created.exists():
                try:
                    self.created_ms = int(created.read_text().strip())
                except ValueError:
                    pass
            else:
                created.write_text(str(self.created_ms))
        self.partitions: dict[str, PartitionLog] = {}
        self._round_robin = 0
        self.grow(count)

    def grow(self, new_count: int) -> None:
        """Add partitions up to ``new_count`` (partition counts only grow)."""
        if new_count < len(self.partitions):
            raise ValueError(
                f"event hub {self.name!r} has {len(self.partitions)} partitions; the count can only grow"
            )
        for i in range(len(self.partitions), new_count):
            path = self._data_dir / f"{i}.log" if self._data_dir is not None else None
            self.partitions[str(i)] = PartitionLog(self.name, str(i), path, self.clock)
        if self._data_dir is not None:
            (self._data_dir / "partition_count").write_text(str(new_count))

    def partition_ids(self) -> list[str]:
        """Partition ids as strings, in order."""
        return list(self.partitions)

    def route(self, partition_key: str | None) -> PartitionLog:
        """The partition for an event sent to the hub: the service's hash of the key, or round robin."""
        ids = self.partition_ids()
        if partition_key is not None:
            return self.partitions[ids[partition_index(partition_key, len(ids))]]
        log = self.partitions[ids[self._round_robin % len(ids)]]
        self._round_robin += 1
        return log


class Broker:
    """All hubs of the namespace plus namespace-wide settings."""

    def __init__(self, config: EmulatorConfig, data_dir: str | Path | None) -> None:
        self.config = config
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.clock = Clock()
        self.hubs: dict[str, Hub] = {}
        for hub_config in config.hubs:
            self.hubs[hub_config.name.lower()] = Hub(hub_config, self.data_dir, self.clock)

    def hub(self, name: str) -> Hub | None:
        """The hub called ``name`` (case-insensitive), or None."""
        return self.hubs.get(name.lower())

    def max_event_size(self, hub: Hub) -> int:
        """The largest event (encoded message bytes) the hub accepts."""
        return hub.config.max_event_size or self.config.max_event_size

    def apply_retention(self) -> int:
        """Apply age/count retention to every partition; return how many events were dropped."""
        dropped = 0
        for hub in self.hubs.values():
            minutes = hub.config.retention_minutes or self.config.retention_minutes
            count = hub.config.retention_event_count or self.config.retention_event_count
            if minutes is None and count is None:
                continue
            age = int(minutes * 60_000) if minutes is not None else None
            for log in hub.partitions.values():
                dropped += log.apply_retention(age, count)
        return dropped

    def sync(self) -> None:
        """Fsync every partition with unsynced writes."""
        for hub in self.hubs.values():
            for log in hub.partitions.values():
                log.sync()

    def close(self) -> None:
        """Fsync and close every log file."""
        for hub in self.hubs.values():
            for log in hub.partitions.values():
                log.close()
