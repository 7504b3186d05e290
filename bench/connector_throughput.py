"""Connector vs the raw azure-eventhub SDK: read and write throughput, equal processes, same run.

One emulator process (``python -m eventhubs_emulator``); every event has a ``--size``-byte body
and 3 application properties (``PROPERTIES``), on both sides.

* **read**: ``--events`` events in each of 2 partitions. Raw = one ``EventHubConsumerClient
  .receive_batch`` process per partition read (prefetch = the connector's), counting the events it
  got; connector = ``spark.read.format("eventhubs")`` (1 task per partition) on ``local[2]`` into
  the ``noop`` sink, rows counted at the sink by an ``Observation``. Spark and Python-worker
  start-up are excluded by a warm-up read; planning (management calls) is included. Measured for
  1 partition (1 process vs 1 task) and 2 partitions (2 processes vs 2 tasks).
* **write**: ``2 x --events`` events with the 3 properties. Raw = 2 producer processes, each
  sending its half in full ``EventDataBatch``es round-robin; connector =
  ``df.write.format("eventhubs")`` with a ``properties`` column from 2 tasks (after a warm-up
  write). Events are counted at the hub: the partitions' last sequence numbers before and after.

Each case runs ``--reps`` times, the two sides alternating which goes first; the summary gives the
median and min-max events/s of each side and of the per-repetition ratio connector / raw.

Usage: ``.venv/bin/python bench/connector_throughput.py [--events 50000] [--size 200] [--reps 3]``
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from harness import connector_spark, run_in_processes, spread, start_emulator

PARTITIONS = 2
PREFETCH = 500
#: The 3 application properties of every event, on both sides.
PROPERTIES = {"source": "bench", "kind": "reading", "schema": "v1"}


def produce(conn: str, count: int, size: int, partition: str | None) -> float:
    """Send ``count`` events in full batches (to one partition, or round-robin); seconds taken."""
    from azure.eventhub import EventData, EventHubProducerClient

    body = b"x" * size
    kwargs = {"partition_id": partition} if partition is not None else {}
    with EventHubProducerClient.from_connection_string(conn) as producer:
        producer.get_partition_ids()
        started = time.perf_counter()
        sent = 0
        while sent < count:
            batch = producer.create_batch(**kwargs)
            while sent < count:
                event = EventData(body)
                event.properties = dict(PROPERTIES)
                try:
                    batch.add(event)
                except ValueError:
                    break
                sent += 1
            producer.send_batch(batch)
        return time.perf_counter() - started


def produce_timed(conn: str, count: int, size: int, results: mp.Queue) -> None:
    """One raw producer process: ``count`` events round-robin; reports its (start, end) wall times."""
    started = time.time()
    seconds = produce(conn, count, size, None)
    results.put((started, started + seconds))


def raw_write_parallel(conn: str, total: int, size: int, processes: int) -> float:
    """Aggregate events/s of ``processes`` producer processes sending ``total`` events between them.

    Each process times itself from its first send (after connecting); the aggregate spans the
    earliest start to the latest end.
    """
    shares = [total // processes + (1 if i < total % processes else 0) for i in range(processes)]
    spans = run_in_processes(produce_timed, [(conn, n, size) for n in shares])
    return total / (max(end for _, end in spans) - min(start for start, _ in spans))


def hub_event_count(conn: str) -> int:
    """Events the hub holds (sum over partitions of last sequence number + 1): counted at the sink."""
    from azure.eventhub import EventHubProducerClient

    with EventHubProducerClient.from_connection_string(conn) as client:
        total = 0
        for pid in client.get_partition_ids():
            props = client.get_partition_properties(pid)
            if not props["is_empty"]:
                total += props["last_enqueued_sequence_number"] + 1
        return total


def raw_read(conn: str, partition: str, count: int, results: mp.Queue) -> None:
    """Read ``count`` events of one partition with the public SDK; report the seconds taken."""
    from azure.eventhub import EventHubConsumerClient

    from pyspark_eventhubs import DEFAULT_CONSUMER_GROUP

    started = time.perf_counter()
    client = EventHubConsumerClient.from_connection_string(
        conn, consumer_group=DEFAULT_CONSUMER_GROUP, prefetch=PREFETCH
    )
    seen = {"n": 0}
    done = threading.Event()

    def on_batch(_ctx: object, events: list) -> None:
        seen["n"] += len(events)
        if seen["n"] >= count:
            done.set()

    worker = threading.Thread(
        target=client.receive_batch,
        kwargs={
            "on_event_batch": on_batch,
            "partition_id": partition,
            "starting_position": "-1",
            "max_batch_size": PREFETCH,
            "prefetch": PREFETCH,
        },
        daemon=True,
    )
    worker.start()
    done.wait(300)
    elapsed = time.perf_counter() - started
    client.close()
    results.put((seen["n"], elapsed))


def raw_read_parallel(conn: str, partitions: list[str], count: int) -> float:
    """Aggregate events/s of one reader process per partition."""
    outcomes = run_in_processes(raw_read, [(conn, p, count) for p in partitions])
    total = sum(n for n, _ in outcomes)
    return total / max(t for _, t in outcomes)


def connector_read(spark: Any, conn: str, partitions: list[str], count: int) -> float:
    """events/s of a batch read of ``partitions`` (others start at the end: empty) into noop.

    The rows are counted where they reach the sink (an ``Observation`` on the written DataFrame);
    a count other than expected stops the benchmark.
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from pyspark_eventhubs import EventPosition, position_key

    latest = json.loads(EventPosition.end_of_stream().to_json())
    earliest = json.loads(EventPosition.start_of_stream().to_json())
    starts = {
        position_key("bench", p): (earliest if str(p) in partitions else latest) for p in range(PARTITIONS)
    }
    observed = Observation("sink")
    started = time.perf_counter()
    df = (
        spark.read.format("eventhubs")
        .option("eventhubs.connectionString", conn)
        .option("eventhubs.prefetchCount", str(PREFETCH))
        .option("eventhubs.startingPositions", json.dumps(starts))
        .load()
    )
    rows_with_props = F.sum(F.when(F.size("properties") == len(PROPERTIES), 1).otherwise(0))
    df.observe(observed, F.count(F.lit(1)).alias("rows"), rows_with_props.alias("with_props")).write.format(
        "noop"
    ).mode("overwrite").save()
    elapsed = time.perf_counter() - started
    got = observed.get
    expected = count * len(partitions)
    if got["rows"] != expected or got["with_props"] != expected:
        raise RuntimeError(f"the sink got {got} rows, expected {expected} with {len(PROPERTIES)} properties")
    return got["rows"] / elapsed


def connector_write(spark: Any, conn: str, total: int, size: int) -> float:
    """events/s of ``df.write.format("eventhubs")`` of ``total`` events with 3 properties, 2 tasks.

    Counted at the hub: a count other than ``total`` stops the benchmark.
    """
    props = ", ".join(f"'{k}', '{v}'" for k, v in PROPERTIES.items())
    df = spark.range(total, numPartitions=PARTITIONS).selectExpr(
        f"repeat('x', {size}) AS body", f"map({props}) AS properties"
    )
    before = hub_event_count(conn)
    started = time.perf_counter()
    df.write.format("eventhubs").option("eventhubs.connectionString", conn).mode("append").save()
    elapsed = time.perf_counter() - started
    arrived = hub_event_count(conn) - before
    if arrived != total:
        raise RuntimeError(f"{arrived} events reached the hub, expected {total}")
    return arrived / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=50_000, help="events per partition")
    parser.add_argument("--size", type=int, default=200, help="event body size in bytes")
    parser.add_argument("--reps", type=int, default=3, help="interleaved repetitions per case")
    args = parser.parse_args()
    results: dict[str, dict[str, list[float]]] = {}
    loads: list[float] = []

    with tempfile.TemporaryDirectory() as tmp:
        emulator = start_emulator(Path(tmp), {"bench": PARTITIONS, "sink": PARTITIONS})
        conns = emulator.connection_strings
        try:
            for p in range(PARTITIONS):
                produce(conns["bench"], args.events, args.size, str(p))

            spark = connector_spark(f"local[{PARTITIONS}]", {"spark.python.worker.reuse": "true"})
            total = args.events * PARTITIONS
            connector_read(spark, conns["bench"], ["0", "1"], args.events)  # warm-up, not timed
            connector_write(spark, conns["sink"], total, args.size)  # warm-up, not timed

            cases = {
                "read 1 partition (1 process / 1 task)": (
                    lambda: raw_read_parallel(conns["bench"], ["0"], args.events),
                    lambda: connector_read(spark, conns["bench"], ["0"], args.events),
                ),
                "read 2 partitions (2 processes / 2 tasks)": (
                    lambda: raw_read_parallel(conns["bench"], ["0", "1"], args.events),
                    lambda: connector_read(spark, conns["bench"], ["0", "1"], args.events),
                ),
                f"write {total} events (2 processes / 2 tasks)": (
                    lambda: raw_write_parallel(conns["sink"], total, args.size, PARTITIONS),
                    lambda: connector_write(spark, conns["sink"], total, args.size),
                ),
            }
            for rep in range(args.reps):
                for name, (raw, ours) in cases.items():
                    sides = results.setdefault(name, {"raw": [], "connector": [], "ratio": []})
                    if rep % 2 == 0:
                        raw_rate, our_rate = raw(), ours()
                    else:
                        our_rate, raw_rate = ours(), raw()
                    sides["raw"].append(raw_rate)
                    sides["connector"].append(our_rate)
                    sides["ratio"].append(our_rate / raw_rate)
                    loads.append(os.getloadavg()[0])
                    print(f"rep {rep + 1} {name}: raw {raw_rate:,.0f} ev/s, connector {our_rate:,.0f} ev/s")
            spark.stop()
        finally:
            emulator.stop()

    print(
        f"\n{args.events} events/partition, {args.size} B + {len(PROPERTIES)} properties, {args.reps} reps "
        f"interleaved; load average {min(loads):.1f}-{max(loads):.1f}"
    )
    print("| Case | Raw SDK events/s, median (min-max) | Connector events/s | Connector / raw |")
    print("|---|---|---|---|")
    for name, sides in results.items():
        ratio = sides["ratio"]
        print(
            f"| {name} | {spread(sides['raw'])} | {spread(sides['connector'])} | "
            f"**{statistics.median(ratio):.2f}** ({min(ratio):.2f}-{max(ratio):.2f}) |"
        )


if __name__ == "__main__":
    main()
