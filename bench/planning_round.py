"""One planning round over a hub with many partitions, at two paces of management requests (#30 item 4).

    .venv/bin/python bench/planning_round.py [--partitions 1024] [--fast 5000] [--reps 3]

A planning round is what the driver does before every micro-batch: the hub's properties and one
runtime-information request per partition (``HubMetadata.bounds``, over the kept-open management
session). Requests are paced by ``eventhubs.managementRequestsPerSecond``; this times a round at
the default pace (50) and at ``--fast``, sides alternating on one emulator process, each round on
a fresh process-wide bucket (as a new driver would start). Prints medians (min-max) and the ratio.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import spread, start_emulator


def one_round(connection_string: str, pace: int) -> float:
    from pyspark_eventhubs import management
    from pyspark_eventhubs.hub_metadata import HubMetadata
    from pyspark_eventhubs.options import parse_options

    management._LIMITERS.clear()  # a full bucket, as for a driver that just started
    options = parse_options(
        {"eventhubs.connectionString": connection_string, "eventhubs.managementRequestsPerSecond": str(pace)}
    )
    metadata = HubMetadata(options)
    try:
        metadata.partition_ids()  # the connection and its token, outside the timing
        started = time.perf_counter()
        bounds = metadata.bounds()
        elapsed = time.perf_counter() - started
    finally:
        metadata.close()
    assert len(bounds) == len(metadata.partition_ids())
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1024)
    parser.add_argument("--fast", type=int, default=5000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        emulator = start_emulator(Path(workdir), {"big": args.partitions})
        try:
            connection = emulator.connection_strings["big"]
            times: dict[int, list[float]] = {50: [], args.fast: []}
            for _ in range(args.reps):
                for pace in times:
                    times[pace].append(one_round(connection, pace))
        finally:
            emulator.stop()
    for pace, values in times.items():
        print(f"{args.partitions} partitions at {pace} requests/s: {spread(values, '{:.2f}')} s per round")
    ratio = min(times[50]) / min(times[args.fast])
    print(f"default pace / pace {args.fast}: {ratio:.0f}x longer rounds")


if __name__ == "__main__":
    main()
