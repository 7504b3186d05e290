"""Volume: every event exactly once, in order per partition, across partitions (small and slow runs)."""

from __future__ import annotations

from collections import defaultdict

import pytest
from azure.eventhub import EventData, EventHubProducerClient

from .conftest import receive_all


def _send_and_check(conn: str, partitions: int, per_partition: int, size: int) -> None:
    pad = "x" * max(0, size - 20)
    with EventHubProducerClient.from_connection_string(conn) as producer:
        for pid in range(partitions):
            sent = 0
            while sent < per_partition:
                batch = producer.create_batch(partition_id=str(pid))
                while sent < per_partition:
                    try:
                        batch.add(EventData(f"{pid}:{sent}:{pad}"))
                    except ValueError:
                        break
                    sent += 1
                producer.send_batch(batch)
    total = partitions * per_partition
    received = receive_all(conn, expected=total, timeout=120, settle=0.5)
    by_partition: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for pid, event in received:
        body_pid, index, _ = event.body_as_str().split(":", 2)
        assert body_pid == pid
        by_partition[pid].append((event.sequence_number, int(index)))
    assert len(received) == total
    for pid in range(partitions):
        rows = by_partition[str(pid)]
        assert rows == [(i, i) for i in range(per_partition)]  # exactly once, in order, seq = index


@pytest.mark.integration
def test_volume_small(emulator):
    _send_and_check(emulator.connection_string("hub4"), 4, 1500, 200)


@pytest.mark.slow
def test_volume_large(emulator):
    _send_and_check(emulator.connection_string("hub4"), 4, 50_000, 1024)
