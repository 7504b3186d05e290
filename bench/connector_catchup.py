"""Catch-up speed (issue #12 item 7): a backlog read with ``Trigger.AvailableNow`` into parquet.

The same ``--events`` records (``--size``-byte body, 3 application properties, spread over 4
partitions) are read three ways by one Spark session on ``local[2]``, in the same run:

* ``eventhubs`` with the fast receive path (``eventhubs.useFastReceiver=true``, the default);
* ``eventhubs`` with the SDK receive path (``eventhubs.useFastReceiver=false``);
* Spark's own JSON file source on the same records written as JSON lines (one file per
  partition, the read schema given, so no inference), the reference.

Each run is a new streaming query (new checkpoint, new output folder) with
``trigger(availableNow=True)`` into the parquet sink, timed from ``start()`` to the end of
``awaitTermination()``. The event hub sources get ``maxEventsPerTrigger`` = all events (one batch,
as the file source plans its one batch of all files; the Scala default of 1000 x partitions
would make this a benchmark of 250 micro-batches). Rows are counted where they landed (the
parquet output, and for Event Hubs its distinct (partition, sequenceNumber) pairs); a wrong count
stops the benchmark. Spark and Python workers are warmed up first on a small hub and file. The
three sides rotate which goes first in each of ``--reps`` repetitions; the summary gives the
median and min-max rows/s of each and the per-repetition ratios.

Usage: ``.venv/bin/python bench/connector_catchup.py [--events 1000000] [--size 200] [--reps 3]``
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from connector_throughput import PROPERTIES, produce
from harness import connector_spark, run_until_done, spread, start_emulator

PARTITIONS = 4
SIDES = ("fast", "sdk", "json")

#: The Spark settings of the availableNow catch-up benches on local[2] (this one and
#: kafka_vs_connector.py): Python workers reused across batches, 2 shuffle partitions, and, as a loaded
#: machine starts Python workers slowly, time for their handshake once they connected (Spark's wait for
#: the connection itself is a fixed 10 s: see run_once).
CATCHUP_CONF = {
    "spark.python.worker.reuse": "true",
    "spark.sql.shuffle.partitions": "2",
    "spark.python.authenticate.socketTimeout": "120s",
}

#: The JSON records' schema: the read schema's columns, body as text (JSON has no binary).
JSON_SCHEMA = (
    "body STRING, partition STRING, offset STRING, sequenceNumber BIGINT, enqueuedTime TIMESTAMP, "
    "publisher STRING, partitionKey STRING, properties MAP<STRING,STRING>, "
    "systemProperties MAP<STRING,STRING>"
)


def fill_hub(conn: str, events: int, size: int) -> None:
    """``events`` events spread evenly over the partitions, one producer process per partition."""
    shares = [events // PARTITIONS + (1 if p < events % PARTITIONS else 0) for p in range(PARTITIONS)]
    procs = [mp.Process(target=produce, args=(conn, n, size, str(p))) for p, n in enumerate(shares)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
        if proc.exitcode != 0:
            raise RuntimeError("a producer process failed")


def write_json(folder: Path, events: int, size: int) -> None:
    """The same records as JSON lines, one file per partition."""
    folder.mkdir(parents=True)
    body = "x" * size
    shares = [events // PARTITIONS + (1 if p < events % PARTITIONS else 0) for p in range(PARTITIONS)]
    for p, n in enumerate(shares):
        with open(folder / f"part-{p}.json", "w") as out:
            for seq in range(n):
                record = {
                    "body": body,
                    "partition": str(p),
                    "offset": str(seq * (size + 100)),
                    "sequenceNumber": seq,
                    "enqueuedTime": "2026-11-22T19:00:00.000Z",
                    "publisher": None,
                    "partitionKey": None,
                    "properties": PROPERTIES,
                    "systemProperties": {},
                }
                out.write(json.dumps(record, separators=(",", ":")) + "\n")


def run(spark: Any, side: str, conn: str, json_dir: Path, events: int, workdir: Path, tag: str) -> float:
    """rows/s of one availableNow query of ``side``; checks the rows that reached parquet."""
    from pyspark_eventhubs import EventPosition

    if side == "json":
        df = spark.readStream.schema(JSON_SCHEMA).json(str(json_dir))
    else:
        df = (
            spark.readStream.format("eventhubs")
            .option("eventhubs.connectionString", conn)
            # The stream default is the end of the stream (the Scala connector's): read the backlog.
            .option("eventhubs.startingPosition", EventPosition.start_of_stream().to_json())
            .option("eventhubs.useFastReceiver", "true" if side == "fast" else "false")
            .option("maxEventsPerTrigger", str(events))
            .load()
        )
    out, checkpoint = workdir / f"{tag}-out", workdir / f"{tag}-ckpt"
    elapsed, _ = run_until_done(
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True),
        side,
    )
    landed = spark.read.parquet(str(out))
    rows = landed.count()
    distinct = landed.select("partition", "sequenceNumber").distinct().count()
    if rows != events or distinct != events:
        raise RuntimeError(f"{side}: {rows} rows ({distinct} distinct) in parquet, expected {events}")
    return rows / elapsed


def run_once(spark: Any, side: str, conn: str, json_dir: Path, events: int, workdir: Path, tag: str) -> float:
    """``run``, once more (up to 3 tries) when the query's Python runner missed Spark's connect-back.

    Spark waits a fixed 10 s (``PythonWorkerFactory.createSimpleWorker``, not configurable) for
    the new Python process of a streaming source to import pyspark and connect back; on an
    overloaded machine that start alone can take longer. Such a run measured nothing, so it is
    run again (new checkpoint and output) and said so.
    """
    for attempt in range(3):
        try:
            return run(spark, side, conn, json_dir, events, workdir, f"{tag}-try{attempt}")
        except Exception as exc:
            if "connect back" not in str(exc) or attempt == 2:
                raise
            print(f"{tag}: the Python runner missed Spark's 10 s connect-back; run again", flush=True)
    raise AssertionError("unreachable")


def workload_line(events: int, size: int, reps: str, loads: list[float]) -> str:
    """The first line of a catch-up bench's report: the workload ``fill_hub`` sent, the session
    (``CATCHUP_CONF``), how the runs were ordered and the machine's load average meanwhile."""
    return (
        f"{events:,} events, {size} B + {len(PROPERTIES)} properties, {PARTITIONS} partitions, "
        f"local[2], availableNow -> parquet, {reps}; load average {min(loads):.1f}-{max(loads):.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="events in all (4 partitions)")
    parser.add_argument("--size", type=int, default=200, help="event body size in bytes")
    parser.add_argument("--reps", type=int, default=3, help="interleaved repetitions")
    args = parser.parse_args()
    rates: dict[str, list[float]] = {side: [] for side in SIDES}
    ratios: dict[str, list[float]] = {"fast/sdk": [], "json/fast": []}
    loads: list[float] = []

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        emulator = start_emulator(workdir, {"bench": PARTITIONS, "sink": PARTITIONS})
        conns = emulator.connection_strings
        try:
            started = time.perf_counter()
            fill_hub(conns["bench"], args.events, args.size)
            fill_hub(conns["sink"], 4000, args.size)  # the warm-up hub
            write_json(workdir / "json", args.events, args.size)
            write_json(workdir / "json-warm", 4000, args.size)
            print(
                f"prepared {args.events:,} events and JSON in {time.perf_counter() - started:.0f} s",
                flush=True,
            )

            spark = connector_spark("local[2]", CATCHUP_CONF)
            for side in SIDES:  # warm-up, not timed
                run_once(spark, side, conns["sink"], workdir / "json-warm", 4000, workdir, f"warm-{side}")
            for rep in range(args.reps):
                order = SIDES[rep % 3 :] + SIDES[: rep % 3]
                got = {}
                for side in order:
                    got[side] = run_once(
                        spark, side, conns["bench"], workdir / "json", args.events, workdir, f"{rep}-{side}"
                    )
                    rates[side].append(got[side])
                    loads.append(os.getloadavg()[0])
                ratios["fast/sdk"].append(got["fast"] / got["sdk"])
                ratios["json/fast"].append(got["json"] / got["fast"])
                print(
                    f"rep {rep + 1} ({' -> '.join(order)}): "
                    + ", ".join(f"{side} {got[side]:,.0f} rows/s" for side in SIDES)
                    + f"; fast/sdk {ratios['fast/sdk'][-1]:.2f}, json/fast {ratios['json/fast'][-1]:.2f}",
                    flush=True,
                )
            spark.stop()
        finally:
            emulator.stop()

    print("\n" + workload_line(args.events, args.size, f"{args.reps} reps interleaved", loads))
    print("| Source | rows/s, median (min-max) |")
    print("|---|---|")
    names = {"fast": "eventhubs, fast path", "sdk": "eventhubs, SDK path", "json": "JSON file source"}
    for side in SIDES:
        print(f"| {names[side]} | {spread(rates[side])} |")
    print(f"| fast / SDK path | **{spread(ratios['fast/sdk'], '{:.2f}')}** |")
    print(f"| JSON / fast path | **{spread(ratios['json/fast'], '{:.2f}')}** |")


if __name__ == "__main__":
    main()
