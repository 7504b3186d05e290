"""Where the first send or read on a new partition spends its time (#30 item 4).

    .venv/bin/python bench/attach_latency.py [--per-side 8] [--reps 3]

Against one emulator process (its own GIL), each measurement on a partition nobody used before:

* ``sdk send``: the first send to a partition through the unmodified SDK's producer (its own
  connection, SASL, ``$cbs`` put-token, attach, credit), then ``sdk 2nd send`` on the same link;
* ``sdk send, no poll pause``: the same first send with the pause the SDK takes between two reads
  while a link opens (``time.sleep(0.05)`` in azure-eventhub's ``_client_base`` — a producer's
  ``_open``, a management request — and in pyamqp's ``AMQPClient``) made zero: what is left is
  the emulator's and the wire's share;
* ``connector fast`` / ``connector sdk``: a connector receiver (the fast path, the SDK path)
  from construction to its first event.

Sides alternate within each repetition; prints medians (min-max) in ms and the ratios.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import spread, start_emulator

SIDES = ("sdk send", "sdk send, no poll pause", "connector fast", "connector sdk")


def first_send(connection_string: str, partition: str, pause: bool) -> tuple[float, float]:
    """Seconds of the first and of the second send of one event to ``partition``."""
    import azure.eventhub._client_base as client_base
    import azure.eventhub._pyamqp.client as amqp_client
    from azure.eventhub import EventData, EventHubProducerClient

    real_time = time
    if not pause:
        no_pause = SimpleNamespace(**{**vars(real_time), "sleep": lambda seconds: None})
        client_base.time = amqp_client.time = no_pause
    producer = EventHubProducerClient.from_connection_string(connection_string)
    try:
        times = []
        for _ in range(2):
            started = time.perf_counter()
            batch = producer.create_batch(partition_id=partition)
            batch.add(EventData(b"x"))
            producer.send_batch(batch)
            times.append(time.perf_counter() - started)
        return times[0], times[1]
    finally:
        producer.close()
        client_base.time = amqp_client.time = real_time


def first_event(connection_string: str, partition: str, fast: bool) -> float:
    """Seconds from constructing a connector receiver at the partition's start to its first event."""
    from pyspark_eventhubs.fast_receiver import FastPartitionReceiver
    from pyspark_eventhubs.options import parse_options
    from pyspark_eventhubs.receiver_cache import PartitionReceiver

    options = parse_options({"eventhubs.connectionString": connection_string})
    started = time.perf_counter()
    receiver: Any = (FastPartitionReceiver if fast else PartitionReceiver)(options, partition, 0, 100)
    try:
        got = receiver.receive(1, 30.0)
        elapsed = time.perf_counter() - started
        if not got:
            raise RuntimeError(f"partition {partition}: no event within 30 s")
        return elapsed
    finally:
        receiver.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-side", type=int, default=8, help="new partitions per side and repetition")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    partitions = args.per_side * len(SIDES) * args.reps
    with tempfile.TemporaryDirectory() as workdir:
        emulator = start_emulator(Path(workdir), {"hub1": partitions})
        try:
            connection_string = emulator.connection_strings["hub1"]
            free = iter(str(p) for p in range(partitions))
            results: dict[str, list[float]] = {side: [] for side in (*SIDES, "sdk 2nd send")}
            for rep in range(args.reps):
                order = SIDES if rep % 2 == 0 else tuple(reversed(SIDES))
                for side in order:
                    for _ in range(args.per_side):
                        partition = next(free)
                        if side.startswith("sdk send"):
                            first, second = first_send(connection_string, partition, pause=side == "sdk send")
                            results[side].append(first)
                            if side == "sdk send":
                                results["sdk 2nd send"].append(second)
                        else:
                            # the event the receiver waits for, sent without timing
                            first_send(connection_string, partition, pause=False)
                            results[side].append(
                                first_event(connection_string, partition, side == "connector fast")
                            )
        finally:
            emulator.stop()
    ms = {side: [v * 1000 for v in values] for side, values in results.items()}
    for side, values in ms.items():
        print(f"{side:>26}: {spread(values, '{:,.1f}')} ms  (n={len(values)})")

    def median(side: str) -> float:
        return sorted(ms[side])[len(ms[side]) // 2]

    paused, unpaused, fast = median("sdk send"), median("sdk send, no poll pause"), median("connector fast")
    print(f"SDK first send with / without its poll pause: {paused / unpaused:.1f}x")
    print(f"SDK first send / connector fast receiver's first event: {paused / fast:.1f}x")


if __name__ == "__main__":
    main()
