"""A hub of 1,024 partitions, the most the service allows (Dedicated): read exactly once (#30 item 5).

An availableNow catch-up on a real local Spark against the emulator: every event once, within the
receiver limits. Then a processingTime query at the default management pace (50 requests/s, a
20 s round over this hub) is planned from the background sweep (``bounds_sweep.py``): it reads the
backlog and events sent while it runs, every event once; its ``latestOffset`` times are printed
(measured, not asserted: docs/benchmarks.md). Slow: seeding 1,024 new partitions through the SDK
costs its pause per link (docs/benchmarks.md, "The first send or read on a new partition"), so it is
sent from threads.
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.connector.test_stream_read import EARLIEST, read_bodies, run_available_now
from tests.support.processes import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 1024
PER_PARTITION = 2
SENDERS = 16


def _send_to(connection_string: str, partitions: list[str], prefix: str = "p") -> set[str]:
    from azure.eventhub import EventData, EventHubProducerClient

    sent: set[str] = set()
    producer = EventHubProducerClient.from_connection_string(connection_string)
    try:
        for pid in partitions:
            batch = producer.create_batch(partition_id=pid)
            for i in range(PER_PARTITION):
                body = f"{prefix}{pid}-{i}"
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

        later, planning = _processing_time_at_the_default_pace(eh_spark, conn, ids, tmp_path, len(sent))
    assert sorted(later) == sorted(sent | planning["sent"]), "every event exactly once"
    print(
        f"processingTime at the default pace: latestOffset median {planning['median_ms']:.0f} ms "
        f"(max {planning['max_ms']:.0f} ms) over {planning['batches']} batches"
    )


def _processing_time_at_the_default_pace(
    spark: Any, conn: str, ids: list[str], tmp_path: Path, backlog: int
) -> tuple[list[str], dict[str, Any]]:
    """A 1 s processingTime query from the earliest event; more events are sent once it has read
    the backlog. Returns the bodies it wrote and its planning figures."""
    options = {"eventhubs.connectionString": conn, "eventhubs.startingPosition": EARLIEST}
    out = tmp_path / "out-processing-time"
    query = (
        spark.readStream.format("eventhubs")
        .options(**options)
        .load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "ckpt-processing-time"))
        .trigger(processingTime="1 second")
        .start()
    )
    try:

        def written() -> int:
            return sum(p["numInputRows"] for p in query.recentProgress) if query.isActive else -1

        wait_until(lambda: written() >= backlog or written() < 0, 600, "the backlog read")
        assert query.isActive, query.exception()
        more = _send_to(conn, ids[::64], prefix="later")
        wait_until(lambda: written() >= backlog + len(more) or written() < 0, 600, "the later events read")
        assert query.isActive, query.exception()
        progress = list(query.recentProgress)
    finally:
        query.stop()
    times = [p["durationMs"]["latestOffset"] for p in progress if "latestOffset" in p["durationMs"]]
    planning = {
        "sent": more,
        "median_ms": statistics.median(times),
        "max_ms": max(times),
        "batches": len(progress),
    }
    return read_bodies(spark, out), planning
