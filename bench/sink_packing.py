"""Packing a micro-batch's events into ``EventDataBatch`` objects: the SDK's ``add`` against the
sink's own encoding (``event_encoding.py``), without Spark or a broker (#49 item 2).

    .venv/bin/python bench/sink_packing.py [--events 2000] [--reps 15] [--rounds 3]

Each event has a 100 B body and one string property, as in ``hub_to_hub_latency.py``. The SDK way
is what the sink did before: an ``EventData`` per event and ``EventDataBatch.add``; the sink's way
is ``encode_event`` and ``add_encoded``. Each measurement is the fastest of ``--reps`` runs; the
two ways alternate for ``--rounds`` rounds in one process. Prints µs per event, median (min-max)
over the rounds, and the ratio SDK / sink.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from azure.eventhub import EventData, EventDataBatch
from harness import spread

from pyspark_eventhubs.event_encoding import add_encoded, encode_event


def with_sdk(events: list[tuple[bytes, dict[str, str]]]) -> int:
    batch = EventDataBatch(max_size_in_bytes=1 << 30)
    for body, properties in events:
        event = EventData(body)
        event.properties = properties
        batch.add(event)
    return len(batch)


def with_sink(events: list[tuple[bytes, dict[str, str]]]) -> int:
    batch = EventDataBatch(max_size_in_bytes=1 << 30)
    for body, properties in events:
        add_encoded(batch, encode_event(body, properties))
    return len(batch)


def fastest(pack: Callable[[list[tuple[bytes, dict[str, str]]]], int], events: list, reps: int) -> float:
    """µs per event of the fastest of ``reps`` runs."""
    best = float("inf")
    for _ in range(reps):
        started = time.perf_counter()
        assert pack(events) == len(events)
        best = min(best, time.perf_counter() - started)
    return best / len(events) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    events = [(f"{i:012d}".encode() + b"x" * 88, {"n": str(i)}) for i in range(args.events)]
    results: dict[str, list[float]] = {"sdk": [], "sink": []}
    for round_number in range(args.rounds):
        order = ("sdk", "sink") if round_number % 2 == 0 else ("sink", "sdk")
        for way in order:
            results[way].append(fastest(with_sdk if way == "sdk" else with_sink, events, args.reps))
    sdk, sink = statistics.median(results["sdk"]), statistics.median(results["sink"])
    print(f"{args.events} events of 100 B and one property, fastest of {args.reps}, {args.rounds} rounds")
    print("| way | µs per event |")
    print("|---|---|")
    print(f"| `EventData` + `EventDataBatch.add` (the SDK) | {spread(results['sdk'], '{:.2f}')} |")
    print(f"| `encode_event` + `add_encoded` (the sink) | {spread(results['sink'], '{:.2f}')} |")
    print(f"\nSDK / sink: {sdk / sink:.1f}x")


if __name__ == "__main__":
    main()
