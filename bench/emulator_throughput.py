"""Benchmark: the Event Hubs emulator with the real azure-eventhub SDK on both ends (one run).

What it measures, for 200-byte and 2 KB events:

- produce: events/s sent with ``send_batch`` (full batches) from one producer process;
- consume 1: events/s read from one partition by one consumer process;
- consume 4: aggregate events/s of four consumer processes reading four partitions at once;
- ratio: aggregate / single. Near the number of usable cores means the consumers (the SDK) are the
  limit, not the emulator; the emulator's own CPU use during the run is printed too.

The emulator runs as its own process (``python -m eventhubs_emulator``), like in the local stack.

Usage: ``.venv/bin/python bench/emulator_throughput.py [--events 20000] [--sizes 200,2048]``
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from harness import start_emulator

HUB = "bench"
PARTITIONS = 4


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used by a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def produce(conn: str, partition: str, count: int, size: int) -> float:
    """Send ``count`` events of ``size`` bytes to one partition in full batches; return seconds taken."""
    from azure.eventhub import EventData, EventHubProducerClient

    body = b"x" * size
    with EventHubProducerClient.from_connection_string(conn) as producer:
        warm_up = producer.create_batch(partition_id=partition)  # the first send opens the link: not timed
        warm_up.add(EventData(body))
        producer.send_batch(warm_up)
        started = time.perf_counter()
        sent = 1
        while sent < count:
            batch = producer.create_batch(partition_id=partition)
            while sent < count:
                try:
                    batch.add(EventData(body))
                except ValueError:
                    break
                sent += 1
            producer.send_batch(batch)
        return time.perf_counter() - started


def consume(conn: str, partition: str, count: int, results: mp.Queue) -> None:
    """Read ``count`` events from one partition; report (count, first event time, last event time)."""
    from azure.eventhub import EventHubConsumerClient

    client = EventHubConsumerClient.from_connection_string(conn, consumer_group="$Default")
    state = {"n": 0, "first": 0.0, "last": 0.0}
    done = threading.Event()

    def on_batch(_ctx, events) -> None:
        if not events:
            return
        now = time.perf_counter()
        if state["n"] == 0:
            state["first"] = now
        state["n"] += len(events)
        state["last"] = now
        if state["n"] >= count:
            done.set()

    thread = threading.Thread(
        target=lambda: client.receive_batch(
            on_batch, partition_id=partition, starting_position="-1", max_batch_size=300, max_wait_time=1
        ),
        daemon=True,
    )
    thread.start()
    done.wait(timeout=600)
    client.close()
    results.put((partition, state["n"], state["first"], state["last"]))


def run_consumers(conn: str, partitions: list[str], count: int) -> tuple[int, float]:
    """Run one consumer process per partition; return (events, seconds from first to last event)."""
    ctx = mp.get_context("spawn")
    results: mp.Queue = ctx.Queue()
    procs = [ctx.Process(target=consume, args=(conn, p, count, results)) for p in partitions]
    for p in procs:
        p.start()
    rows = [results.get(timeout=900) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    total = sum(r[1] for r in rows)
    # The first batch arrives as one burst of `prefetch` events, so time from the earliest first batch.
    elapsed = max(r[3] for r in rows) - min(r[2] for r in rows)
    return total, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20000, help="events per partition (default 20000)")
    parser.add_argument("--sizes", default="200,2048", help="event sizes in bytes (default 200,2048)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"# Event Hubs emulator throughput, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"# {os.cpu_count()} CPUs, python {sys.version.split()[0]}, {args.events} events per partition\n")
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            emulator = start_emulator(Path(tmp), {HUB: PARTITIONS})
            proc, conn = emulator.process, emulator.connection_strings[HUB]
            try:
                ids = [str(i) for i in range(PARTITIONS)]
                cpu0 = cpu_seconds(proc.pid)
                seconds = sum(produce(conn, p, args.events, size) for p in ids)
                produced = PARTITIONS * args.events
                cpu1 = cpu_seconds(proc.pid)
                one_n, one_s = run_consumers(conn, ["0"], args.events)
                cpu2 = cpu_seconds(proc.pid)
                wall = time.perf_counter()
                four_n, four_s = run_consumers(conn, ids, args.events)
                wall = time.perf_counter() - wall
                cpu3 = cpu_seconds(proc.pid)
            finally:
                emulator.stop()
            single = one_n / one_s
            aggregate = four_n / four_s
            print(f"## {size}-byte events")
            print(
                f"produce (1 producer, batched):   {produced / seconds:10,.0f} events/s "
                f"(emulator CPU {cpu1 - cpu0:.1f}s of {seconds:.1f}s)"
            )
            print(
                f"consume 1 partition, 1 process:  {single:10,.0f} events/s ({one_n} events, "
                f"emulator CPU {cpu2 - cpu1:.1f}s)"
            )
            print(
                f"consume 4 partitions, 4 procs:   {aggregate:10,.0f} events/s aggregate ({four_n} events, "
                f"emulator CPU {cpu3 - cpu2:.1f}s of {wall:.1f}s wall)"
            )
            print(f"aggregate / single ratio:        {aggregate / single:10.2f}\n", flush=True)


if __name__ == "__main__":
    main()
