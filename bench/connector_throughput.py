"""Connector vs raw azure-eventhub SDK: read throughput (and sink vs the SDK's batched producer).

One run, one emulator process (``python -m eventhubs_emulator``), the same events for both sides:

* **read**: ``--events`` events of ``--size`` bytes in each of 2 partitions. The raw side is one
  ``EventHubConsumerClient.receive_batch`` process per partition (prefetch = the connector's);
  the connector side is ``spark.read.format("eventhubs")`` into the ``noop`` sink on ``local[2]``,
  after a warm-up read so Spark and Python-worker start-up are excluded (planning — the driver's
  management calls — is included). Measured for 1 partition and for 2 partitions at once.
* **sink**: the same number of events written round-robin by one SDK producer process in full
  ``EventDataBatch``es vs ``df.write.format("eventhubs")`` from 2 Spark tasks.

Usage: ``.venv/bin/python bench/connector_throughput.py [--events 50000] [--size 200]``
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

PARTITIONS = 2
PREFETCH = 500


def start_emulator(workdir: Path) -> tuple[subprocess.Popen, dict[str, str]]:
    """The emulator CLI with hubs ``bench`` and ``sink``; returns it and their connection strings."""
    entities = [
        {"Name": name, "PartitionCount": PARTITIONS, "ConsumerGroups": []} for name in ("bench", "sink")
    ]
    config = workdir / "Config.json"
    config.write_text(
        json.dumps(
            {
                "UserConfig": {
                    "NamespaceConfig": [{"Type": "EventHub", "Name": "ns", "Entities": entities}],
                    "LoggingConfig": {"Type": "Console"},
                }
            }
        )
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "eventhubs_emulator", "--config", str(config), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    conns: dict[str, str] = {}
    for line in proc.stdout:
        for name in ("bench", "sink"):
            if line.startswith(f"{name}: "):
                conns[name] = line.split(": ", 1)[1].strip()
        if len(conns) == 2:
            return proc, conns
    raise RuntimeError("the emulator did not print the connection strings")


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
                try:
                    batch.add(EventData(body))
                except ValueError:
                    break
                sent += 1
            producer.send_batch(batch)
        return time.perf_counter() - started


def raw_read(conn: str, partition: str, count: int, results: mp.Queue) -> None:
    """Read ``count`` events of one partition with the public SDK; report the seconds taken."""
    from azure.eventhub import EventHubConsumerClient

    started = time.perf_counter()
    client = EventHubConsumerClient.from_connection_string(conn, consumer_group="$Default", prefetch=PREFETCH)
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
    queue: mp.Queue = mp.Queue()
    procs = [mp.Process(target=raw_read, args=(conn, p, count, queue)) for p in partitions]
    for proc in procs:
        proc.start()
    outcomes = [queue.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join()
    total = sum(n for n, _ in outcomes)
    return total / max(t for _, t in outcomes)


def connector_read(spark: object, conn: str, partitions: list[str], count: int) -> float:
    """events/s of a batch read of ``partitions`` (others start at the end: empty) into noop."""
    from pyspark_eventhubs import EventPosition, position_key

    latest = json.loads(EventPosition.end_of_stream().to_json())
    earliest = json.loads(EventPosition.start_of_stream().to_json())
    starts = {
        position_key("bench", p): (earliest if str(p) in partitions else latest) for p in range(PARTITIONS)
    }
    started = time.perf_counter()
    (
        spark.read.format("eventhubs")  # type: ignore[attr-defined]
        .option("eventhubs.connectionString", conn)
        .option("eventhubs.prefetchCount", str(PREFETCH))
        .option("eventhubs.startingPositions", json.dumps(starts))
        .load()
        .write.format("noop")
        .mode("overwrite")
        .save()
    )
    return count * len(partitions) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=50_000, help="events per partition")
    parser.add_argument("--size", type=int, default=200, help="event body size in bytes")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    with tempfile.TemporaryDirectory() as tmp:
        emulator, conns = start_emulator(Path(tmp))
        try:
            for p in range(PARTITIONS):
                produce(conns["bench"], args.events, args.size, str(p))

            from pyspark.sql import SparkSession

            from pyspark_eventhubs import DefaultSource

            spark = (
                SparkSession.builder.master(f"local[{PARTITIONS}]")
                .config("spark.ui.enabled", "false")
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")
            spark.dataSource.register(DefaultSource)
            connector_read(spark, conns["bench"], ["0", "1"], args.events)  # warm-up, not timed

            rows = []
            for parts in (["0"], ["0", "1"]):
                raw = raw_read_parallel(conns["bench"], parts, args.events)
                ours = connector_read(spark, conns["bench"], parts, args.events)
                rows.append((f"read {len(parts)} partition(s)", raw, ours))

            total = args.events * PARTITIONS
            sdk_seconds = produce(conns["sink"], total, args.size, None)
            df = spark.range(total, numPartitions=PARTITIONS).selectExpr(f"repeat('x', {args.size}) AS body")
            df.write.format("eventhubs").option("eventhubs.connectionString", conns["sink"]).mode(
                "append"
            ).save()  # warm-up of the writer's Python workers and links: 2x the events are sent
            started = time.perf_counter()
            df.write.format("eventhubs").option("eventhubs.connectionString", conns["sink"]).mode(
                "append"
            ).save()
            rows.append(
                (
                    f"write {total} events",
                    total / sdk_seconds,
                    total / (time.perf_counter() - started),
                )
            )
            spark.stop()
        finally:
            emulator.terminate()
            emulator.wait(10)

    print(f"{args.events} events/partition, {args.size} B, load average {os.getloadavg()[0]:.1f}")
    print(f"{'case':<24}{'raw SDK ev/s':>14}{'connector ev/s':>16}{'ratio':>8}")
    for name, raw, ours in rows:
        print(f"{name:<24}{raw:>14,.0f}{ours:>16,.0f}{ours / raw:>8.2f}")


if __name__ == "__main__":
    main()
