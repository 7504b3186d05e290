"""The connector on a real local Spark while the emulator injects the service's failures.

A processingTime query keeps running through each fault in turn (every connection dropped, a
partition offline and back, every response slowed, deliveries held back), and an availableNow run
finishes through them: every event lands in the output exactly once, by identity (issue #28 item 1).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.connector.test_stream_read import EARLIEST, read_bodies, run_available_now

pytestmark = pytest.mark.integration

COUNTS = {"0": 12, "1": 12, "2": 12, "3": 12}


def test_a_running_stream_survives_each_fault_with_every_event_once(
    eh_spark: Any, hub: Any, tmp_path: Path
) -> None:
    faults = hub.emulator.faults
    options = hub.options(**{"eventhubs.startingPosition": EARLIEST, "maxEventsPerTrigger": "20"})
    out = tmp_path / "out"
    sent = hub.send_per_partition(COUNTS, prefix="before")
    query = (
        eh_spark.readStream.format("eventhubs")
        .options(**options)
        .load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )

    def back_online(partition: str) -> None:
        while faults.partition_offline("hub1", partition):  # the next step sends to it again
            time.sleep(0.1)

    # Each fault is injected while the query has events to read, and lifted after it caught up.
    steps = [
        ("dropped", faults.drop_connections, lambda: None),
        ("offline", lambda: faults.take_partition_offline("hub1", "1", 3), lambda: back_online("1")),
        ("slow", lambda: faults.slow_responses(150), lambda: faults.slow_responses(0)),
        ("delayed", lambda: faults.delay_deliveries(0.5), lambda: faults.delay_deliveries(0)),
    ]
    try:
        query.processAllAvailable()
        for name, inject, lift in steps:
            sent |= hub.send_per_partition(COUNTS, prefix=name)
            inject()
            try:
                query.processAllAvailable()
            finally:
                lift()
            assert query.exception() is None, f"after the fault {name}: {query.exception()}"
    finally:
        query.stop()
    bodies = read_bodies(eh_spark, out)
    assert len(bodies) == len(sent) == 5 * 48
    assert set(bodies) == sent


def test_an_available_now_run_finishes_through_faults_with_every_event_once(
    eh_spark: Any, hub: Any, tmp_path: Path
) -> None:
    faults = hub.emulator.faults
    sent = hub.send_per_partition({"0": 60, "1": 60, "2": 60, "3": 60})
    options = hub.options(**{"eventhubs.startingPosition": EARLIEST, "maxEventsPerTrigger": "40"})
    stop = threading.Event()

    def keep_failing() -> None:
        """Drop every connection, then take a partition away, over and over while the run lasts."""
        partition = 0
        while not stop.wait(1.5):
            faults.drop_connections()
            if stop.wait(1.5):
                break
            faults.take_partition_offline("hub1", str(partition % 4), 1)
            partition += 1

    faults.slow_responses(50)
    chaos = threading.Thread(target=keep_failing, daemon=True)
    chaos.start()
    try:
        progress = run_available_now(eh_spark, options, tmp_path / "ckpt", tmp_path / "out")
    finally:
        stop.set()
        chaos.join()
        faults.slow_responses(0)
    assert sum(p["numInputRows"] for p in progress) == 240
    bodies = read_bodies(eh_spark, tmp_path / "out")
    assert len(bodies) == 240 and set(bodies) == sent
