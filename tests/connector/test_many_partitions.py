"""A hub of 1,024 partitions, the most the service allows (Dedicated): read exactly once (#30 item 5).

An availableNow catch-up on a real local Spark against the emulator: every event once, within the
receiver limits. Slow: seeding 1,024 new partitions through the SDK costs its pause per link
(docs/benchmarks.md, "The first send or read on a new partition"), so it is sent from threads.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.connector.test_stream_read import EARLIEST, read_bodies, run_available_now

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 1024
PER_PARTITION = 2
SENDERS = 16


def _send_to(connection_string: str, partitions: list[str]) -> set[str]:
    from azure.eventhub import EventData, EventHubProducerClient

    sent: set[str] = set()
    producer = EventHubProducerClient.from_connection_string(connection_string)
    try:
        for pid in partitions:
            batch = producer.create_batch(partition_id=pid)
            for i in range(PER_PARTITION):
                body = f"p{pid}-{i}"
                batch.add(EventData(body))
                sent.add(body)
            producer.send_batch(batch)
    finally:
        producer.close()
    return sent


def test_an_available_now_catch_up_over_1024_partitions_reads_every_event_once(
    eh_spark: Any, tmp_path: Path
) -> None:
    from eventhubs_emulator import Emulator, EmulatorConfig

    cfg = EmulatorConfig.single_hub("big", partition_count=PARTITIONS)
    with Emulator(cfg, port=0) as emu:
        conn = emu.connection_string("big")
        ids = [str(p) for p in range(PARTITIONS)]
        started = time.monotonic()
        with ThreadPoolExecutor(SENDERS) as pool:
            parts = pool.map(lambda k: _send_to(conn, ids[k::SENDERS]), range(SENDERS))
            sent = set().union(*parts)
        seeded = time.monotonic() - started
        assert len(sent) == PARTITIONS * PER_PARTITION

        options = {
            "eventhubs.connectionString": conn,
            "eventhubs.startingPosition": EARLIEST,
            "eventhubs.managementRequestsPerSecond": "5000",
        }
        started = time.monotonic()
        progress = run_available_now(eh_spark, options, tmp_path / "ckpt", tmp_path / "out")
        caught_up = time.monotonic() - started
        bodies = read_bodies(eh_spark, tmp_path / "out")
    assert sorted(bodies) == sorted(sent), "every event exactly once"
    print(f"seeded in {seeded:.0f} s; caught up in {caught_up:.0f} s over {len(progress)} batches")
