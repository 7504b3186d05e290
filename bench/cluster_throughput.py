"""The connector's read throughput on a standalone cluster, one executor against two (#30 item 6).

    .venv/bin/python bench/cluster_throughput.py [--events 50000] [--size 200] [--reps 3]

A Spark standalone cluster on loopback (a master and two workers of 1 core each,
``tests/support/spark_cluster.py``) and the emulator in its own process. ``--events`` events
(``--size``-byte body, 3 application properties) in each of 4 partitions are read with
``spark.read.format("eventhubs")`` (one task per partition) into the ``noop`` sink, rows counted at
the sink, by three drivers in turn:

* ``local[2]``: the reference, everything in the driver's machine-local executor (2 cores);
* ``cluster, 1 executor``: ``spark.cores.max=1``, one executor of one core on one worker;
* ``cluster, 2 executors``: ``spark.cores.max=2``, one executor of one core on each worker.

Each side is a new SparkSession (its executors started and warmed up by a first read, not timed);
sides rotate which goes first in each repetition; medians (min-max) events/s and the ratios
2 executors / 1 executor and 2 executors / local[2]. On this 2-core machine two executors can at
most double one executor's rate, and share the cores with the emulator.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from connector_throughput import produce
from harness import connector_spark, spread, start_emulator

from tests.support.spark_cluster import start_cluster

PARTITIONS = 4
SIDES = ("local[2]", "cluster, 1 executor", "cluster, 2 executors")


def read_all(spark: Any, conn: str, count: int) -> float:
    """events/s of a batch read of every partition into noop; a wrong count stops the bench."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from pyspark_eventhubs import EventPosition

    observed = Observation("sink")
    started = time.perf_counter()
    df = (
        spark.read.format("eventhubs")
        .option("eventhubs.connectionString", conn)
        .option("eventhubs.startingPosition", EventPosition.start_of_stream().to_json())
        .load()
    )
    df.observe(observed, F.count(F.lit(1)).alias("rows")).write.format("noop").mode("overwrite").save()
    elapsed = time.perf_counter() - started
    if observed.get["rows"] != count:
        raise RuntimeError(f"the sink got {observed.get['rows']} rows, expected {count}")
    return count / elapsed


def session(side: str, master_url: str) -> Any:
    if side == "local[2]":
        return connector_spark("local[2]")
    cores = "1" if side == "cluster, 1 executor" else "2"
    conf = {
        "spark.cores.max": cores,
        "spark.executor.cores": "1",
        "spark.executor.memory": "1g",
        "spark.driver.host": "127.0.0.1",
        "spark.python.worker.reuse": "true",
    }
    return connector_spark(master_url, conf)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50_000, help="events per partition")
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    total = args.events * PARTITIONS
    results: dict[str, list[float]] = {side: [] for side in SIDES}
    loads: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        emulator = start_emulator(Path(tmp), {"bench": PARTITIONS})
        cluster = start_cluster(Path(tmp) / "cluster", worker_cores=1, worker_memory="1536m", workers=2)
        try:
            conn = emulator.connection_strings["bench"]
            for p in range(PARTITIONS):
                produce(conn, args.events, args.size, str(p))
            for rep in range(args.reps):
                order = SIDES[rep % len(SIDES) :] + SIDES[: rep % len(SIDES)]
                for side in order:
                    spark = session(side, cluster.master_url)
                    try:
                        read_all(spark, conn, total)  # executors and Python workers warmed up
                        rate = read_all(spark, conn, total)
                    finally:
                        spark.stop()
                    results[side].append(rate)
                    loads.append(os.getloadavg()[0])
                    print(f"rep {rep + 1} {side}: {rate:,.0f} events/s", flush=True)
        finally:
            cluster.stop()
            emulator.stop()
    for side in SIDES:
        print(f"{side:>22}: {spread(results[side])} events/s")
    two, one, local = (results[s] for s in ("cluster, 2 executors", "cluster, 1 executor", "local[2]"))
    print(f"2 executors / 1 executor: {spread([a / b for a, b in zip(two, one, strict=True)], '{:.2f}')}x")
    print(f"2 executors / local[2]:   {spread([a / b for a, b in zip(two, local, strict=True)], '{:.2f}')}x")
    print(f"load average during the runs: {min(loads):.1f}-{max(loads):.1f}")


if __name__ == "__main__":
    main()
