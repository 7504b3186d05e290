"""End-to-end latency of ``format("eventhubs")`` against Spark's own ``rate`` source, same sink, same run.

With ``--kafka`` a third side reads the same hub with Spark's Kafka source over the emulator's Kafka
endpoint, with hubflow's client settings and the rows mapped as ``kind: eventhubs_kafka`` maps them
(issue #30 item 3: the road users would pick instead); its latency is the Kafka record's
``timestamp``, which the emulator stamps on arrival as it does ``enqueuedTime``. Each run also
reports the emulator process's CPU (share of one core) so the server is seen not to be the
bottleneck.

A steady stream of ``--rate`` events/s (round-robin over ``--partitions`` partitions of one
emulated hub, sent by one SDK producer process that runs for the whole benchmark) is read with
``trigger(processingTime="0 seconds")`` into a parquet sink on ``local[2]``. The reference is
Spark's built-in ``rate`` source at the same rows/s (same number of partitions) into the same
kind of sink in the same Spark session: the engine's own floor for a micro-batch pipeline. Both
sides write the same three columns (``timestamp``, ``value``, a ``--body``-byte ``body``).

Latency of a row = the time its micro-batch was committed (the mtime of the sink's
``_spark_metadata/<batch>`` file, written when the batch's files become visible) minus the row's
``enqueuedTime`` (Event Hubs: stamped by the broker on arrival) or ``timestamp`` (rate source:
the moment the row became due). Batches that started before ``--warmup`` seconds after the
query's first committed batch with rows are left out (start-up is not what is measured). Per-batch
durations come from Spark's own progress (``durationMs``).

The sides rotate which goes first in each of ``--reps`` repetitions; the summary gives the median
over repetitions and the min-max, and the ratios eventhubs / rate (and eventhubs / kafka).

With ``--available-now N`` it then times N ``Trigger.AvailableNow`` runs of the connector in the
same (warm) session: wall time outside any trigger (planning set-up, query start and stop) and
the first batch.

Usage: ``.venv/bin/python bench/connector_latency.py [--rate 1000] [--partitions 4] [--seconds 40]
[--reps 3] [--kafka] [--available-now 3] [--min-events-per-task N]``
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

sys.path.insert(0, str(Path(__file__).parents[1] / "jobs"))

from harness import connector_spark

from eventhubs_emulator import EmulatorConfig
from eventhubs_emulator.launcher import start_emulator_process

HUB = "latency"


def produce_steadily(conn: str, rate: int, partitions: int, body_size: int, stop: Any) -> None:
    """Send ``rate`` events/s round-robin over the partitions until ``stop`` is set (own process).

    Every 20 ms the events due by then are sent, one ``send_batch`` per partition, so the stream is
    steady rather than bursty.
    """
    from azure.eventhub import EventData, EventHubProducerClient

    body = b"x" * body_size
    parent = os.getppid()
    with EventHubProducerClient.from_connection_string(conn) as producer:
        producer.get_partition_ids()
        started = time.monotonic()
        sent = 0
        tick = started
        while not stop.is_set() and os.getppid() == parent:
            tick += 0.02
            due = int((time.monotonic() - started) * rate) - sent
            if due > 0:
                for p in range(partitions):
                    share = due // partitions + (1 if p < due % partitions else 0)
                    if share:
                        batch = producer.create_batch(partition_id=str(p))
                        for _ in range(share):
                            try:
                                batch.add(EventData(body))
                            except ValueError:  # full: a producer behind schedule sends more
                                producer.send_batch(batch)
                                batch = producer.create_batch(partition_id=str(p))
                                batch.add(EventData(body))
                        producer.send_batch(batch)
                sent += due
            time.sleep(max(0.0, tick - time.monotonic()))


def committed_latencies(out: Path, not_before_ms: float) -> list[float]:
    """Seconds from each row's timestamp to its batch's commit, for batches committed after a time."""
    import pyarrow.parquet as pq

    latencies: list[float] = []
    log_dir = out / "_spark_metadata"
    for entry in log_dir.iterdir():
        if not entry.name.isdigit():
            continue
        committed = entry.stat().st_mtime
        files = [json.loads(line)["path"] for line in entry.read_text().splitlines()[1:] if line.strip()]
        for path in files:
            table = pq.read_table(unquote(urlparse(path).path), columns=["timestamp"])
            for ts in table.column("timestamp").to_pylist():
                if ts is not None and ts.timestamp() * 1000 >= not_before_ms:
                    latencies.append(committed - ts.timestamp())
    return latencies


def emulator_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of the emulator process so far."""
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def run_side(
    spark: Any, side: str, conn: str, args: argparse.Namespace, workdir: Path, emulator: tuple[int, str]
) -> dict[str, Any]:
    """One measured query of one side; returns latency percentiles and per-batch duration medians.

    ``emulator`` is the emulator's process id and its Kafka endpoint's address."""
    emulator_pid, kafka_bootstrap = emulator
    body = f"cast(repeat('x', {args.body}) AS binary)"
    if side == "kafka":
        from hubflow_jobs.eventhubs_kafka import as_eventhubs_rows, client_options

        df = as_eventhubs_rows(
            spark.readStream.format("kafka")
            .options(**client_options(conn, kafka_bootstrap))
            .option("subscribe", HUB)
            .option("startingOffsets", "latest")
            .option("includeHeaders", "true")
            .load()
        ).selectExpr("enqueuedTime AS timestamp", "sequenceNumber AS value", "body")
    elif side == "eventhubs":
        df = (
            spark.readStream.format("eventhubs")
            .option("eventhubs.connectionString", conn)
            .options(**_task_options(args))
            .load()
            .selectExpr("enqueuedTime AS timestamp", "sequenceNumber AS value", "body")
        )
    else:
        df = (
            spark.readStream.format("rate")
            .option("rowsPerSecond", args.rate)
            .option("numPartitions", args.partitions)
            .load()
            .selectExpr("timestamp", "value", f"{body} AS body")
        )
    out, ckpt = workdir / f"{side}-out", workdir / f"{side}-ckpt"
    load_before = os.getloadavg()[0]
    cpu_before, wall_before = emulator_cpu_seconds(emulator_pid), time.monotonic()
    query = (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .trigger(processingTime="0 seconds")
        .start()
    )
    try:
        # Query start-up (Python workers, first receivers) is not what is measured: the window
        # opens --warmup seconds after the first batch with rows committed.
        first_deadline = time.monotonic() + 300
        while (
            not any(p["numInputRows"] for p in query.recentProgress)
            and query.isActive
            and time.monotonic() < first_deadline
        ):
            time.sleep(0.2)
        measured_from = time.time() * 1000 + args.warmup * 1000
        time.sleep(args.warmup + args.seconds)
        # On a loaded machine a batch can outlast the window: keep the query running until at
        # least 3 batches that started inside the window were committed (or 2 minutes more).
        extra_deadline = time.monotonic() + 120
        while (
            sum(
                1
                for p in query.recentProgress
                if p["numInputRows"] > 0 and _epoch_ms(p["timestamp"]) >= measured_from
            )
            < 3
            and query.isActive
            and time.monotonic() < extra_deadline
        ):
            time.sleep(0.5)
    finally:
        query.stop()
    load_after = os.getloadavg()[0]
    emulator_cpu = (emulator_cpu_seconds(emulator_pid) - cpu_before) / (time.monotonic() - wall_before)
    if query.exception() is not None:
        raise RuntimeError(f"{side} query failed: {query.exception()}")
    batches = [
        p
        for p in query.recentProgress
        if p["numInputRows"] > 0 and _epoch_ms(p["timestamp"]) >= measured_from
    ]
    latencies = sorted(committed_latencies(out, measured_from))
    if not latencies or not batches:
        raise RuntimeError(f"{side}: nothing was committed in the measured window")

    def median_duration(key: str) -> float:
        return statistics.median(p["durationMs"].get(key, 0) for p in batches)

    return {
        "rows": len(latencies),
        "batches": len(batches),
        "p50": _percentile(latencies, 0.50),
        "p99": _percentile(latencies, 0.99),
        "latestOffset": median_duration("latestOffset"),
        "addBatch": median_duration("addBatch"),
        "triggerExecution": median_duration("triggerExecution"),
        "emulatorCpu": 100 * emulator_cpu,
        "load": (load_before + load_after) / 2,
    }


def _task_options(args: argparse.Namespace) -> dict[str, str]:
    """``eventhubs.minEventsPerTask`` when ``--min-events-per-task`` is given (else the default)."""
    if args.min_events_per_task is None:
        return {}
    return {"eventhubs.minEventsPerTask": str(args.min_events_per_task)}


def available_now_overhead(spark: Any, conn: str, workdir: Path, runs: int) -> list[dict[str, float]]:
    """Fixed cost of ``Trigger.AvailableNow`` runs: wall time outside any trigger, first batch.

    Each run starts a new query (new checkpoint) from the end of the stream with
    ``maxEventsPerTrigger=1000``, so it reads what arrives until its planning and ends; the
    producer keeps running meanwhile.
    """
    outcomes = []
    for run in range(runs):
        df = (
            spark.readStream.format("eventhubs")
            .option("eventhubs.connectionString", conn)
            .option("maxEventsPerTrigger", "1000")
            .load()
            .selectExpr("enqueuedTime AS timestamp", "sequenceNumber AS value", "body")
        )
        started = time.monotonic()
        query = (
            df.writeStream.format("parquet")
            .option("path", str(workdir / f"an{run}-out"))
            .option("checkpointLocation", str(workdir / f"an{run}-ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        wall = time.monotonic() - started
        if query.exception() is not None:
            raise RuntimeError(f"availableNow run failed: {query.exception()}")
        triggers = [p["durationMs"].get("triggerExecution", 0) / 1000 for p in query.recentProgress]
        outcomes.append(
            {"wall": wall, "outside": wall - sum(triggers), "first": triggers[0] if triggers else 0.0}
        )
        print(
            f"availableNow run {run + 1}: {wall:.1f} s wall, {wall - sum(triggers):.1f} s outside "
            f"triggers, first batch {outcomes[-1]['first']:.1f} s, {len(triggers)} batches",
            flush=True,
        )
    return outcomes


def _epoch_ms(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000


def _percentile(sorted_values: list[float], q: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


METRICS = [
    ("p50", "latency p50 (s)", "{:.2f}"),
    ("p99", "latency p99 (s)", "{:.2f}"),
    ("latestOffset", "latestOffset median (ms)", "{:.0f}"),
    ("addBatch", "addBatch median (ms)", "{:.0f}"),
    ("triggerExecution", "triggerExecution median (ms)", "{:.0f}"),
    ("emulatorCpu", "emulator CPU (% of a core)", "{:.0f}"),
]
NAMES = {"eventhubs": "eventhubs", "rate": "rate source", "kafka": "Kafka source"}


def summarize(results: dict[str, list[dict[str, Any]]]) -> str:
    """A Markdown table: median over repetitions (min-max) per side, and the ratios of the medians."""
    sides = list(results)
    ratios = [("eventhubs", other) for other in ("rate", "kafka") if other in results]
    lines = [
        "| per repetition: median (min-max) | "
        + " | ".join(NAMES[s] for s in sides)
        + " | "
        + " | ".join(f"eventhubs / {other}" for _, other in ratios)
        + " |",
        "|---" * (1 + len(sides) + len(ratios)) + "|",
    ]
    for key, label, fmt in METRICS:
        cells = []
        medians = {}
        for side in sides:
            values = [r[key] for r in results[side]]
            medians[side] = statistics.median(values)
            cells.append(f"{fmt.format(medians[side])} ({fmt.format(min(values))}-{fmt.format(max(values))})")
        quotients = [f"{medians[a] / medians[b]:.2f}" if medians[b] else "-" for a, b in ratios]
        lines.append(f"| {label} | " + " | ".join(cells + quotients) + " |")
    for side in sides:
        rows = sum(r["rows"] for r in results[side])
        batches = sum(r["batches"] for r in results[side])
        lines.append(f"\n{side}: {rows} rows in {batches} measured batches over {len(results[side])} runs")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=int, default=1000, help="events (rows) per second")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=40, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=15, help="seconds left out at each query start")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--body", type=int, default=100, help="body bytes per event/row")
    parser.add_argument(
        "--min-events-per-task",
        type=int,
        default=None,
        help="eventhubs.minEventsPerTask of the eventhubs side (0: one task per partition)",
    )
    parser.add_argument(
        "--available-now", type=int, default=0, help="also time this many Trigger.AvailableNow runs"
    )
    parser.add_argument(
        "--kafka", action="store_true", help="a third side: Spark's Kafka source over the Kafka endpoint"
    )
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the cleanup below on kill

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        with socket.socket() as probe:  # a free port for the emulator's Kafka endpoint
            probe.bind(("127.0.0.1", 0))
            kafka_port = probe.getsockname()[1]
        config = EmulatorConfig.many_hubs({HUB: args.partitions}, kafka_port=kafka_port)
        emulator = start_emulator_process(config, workdir)
        conn = emulator.connection_strings[HUB]
        spawn = mp.get_context("spawn")
        stop = spawn.Event()
        producer = spawn.Process(
            target=produce_steadily, args=(conn, args.rate, args.partitions, args.body, stop)
        )
        sides = ("eventhubs", "rate", "kafka") if args.kafka else ("eventhubs", "rate")
        results: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
        try:
            producer.start()
            spark = connector_spark(
                "local[2]",
                {
                    "spark.sql.shuffle.partitions": "2",
                    "spark.sql.streaming.numRecentProgressUpdates": "10000",
                    # A loaded machine starts Python workers slowly; give them time to connect back.
                    "spark.python.authenticate.socketTimeout": "120s",
                },
            )
            for rep in range(args.reps):
                order = sides[rep % len(sides) :] + sides[: rep % len(sides)]
                for side in order:
                    for attempt in range(3):
                        try:
                            result = run_side(
                                spark,
                                side,
                                conn,
                                args,
                                workdir / f"rep{rep}-{attempt}",
                                (emulator.process.pid, f"127.0.0.1:{kafka_port}"),
                            )
                            break
                        except RuntimeError as exc:
                            # Spark waits a fixed 10 s for a new Python process (the streaming
                            # source's runner) to connect back; on an overloaded machine that
                            # start can take longer. Such a run measured nothing: run it again.
                            if "connect back" not in str(exc) or attempt == 2:
                                raise
                            print(f"rep {rep + 1} {side}: {exc}; run again", flush=True)
                    results[side].append(result)
                    print(
                        f"rep {rep + 1} {side:>9}: p50 {result['p50']:.2f} s, "
                        f"p99 {result['p99']:.2f} s, latestOffset {result['latestOffset']:.0f} ms, "
                        f"addBatch {result['addBatch']:.0f} ms, "
                        f"triggerExecution {result['triggerExecution']:.0f} ms, "
                        f"emulator CPU {result['emulatorCpu']:.0f}%, "
                        f"{result['batches']} batches, load {result['load']:.1f}",
                        flush=True,
                    )
            available_now = available_now_overhead(spark, conn, workdir, args.available_now)
            spark.stop()
        finally:
            stop.set()
            producer.join(30)
            emulator.stop()

    print(
        f"\n{args.rate} events/s, {args.partitions} partitions, {args.body} B bodies, local[2], "
        f"eventhubs.minEventsPerTask {_task_options(args).get('eventhubs.minEventsPerTask', 'default')}, "
        f"trigger 0 s, parquet sink, {args.reps} reps x {args.seconds:g} s measured "
        f"(+{args.warmup:g} s warm-up)\n"
    )
    if args.reps:
        print(summarize(results))
    if available_now:
        for key, label in (("outside", "outside any trigger"), ("first", "first batch")):
            values = [o[key] for o in available_now]
            print(
                f"availableNow {label}: median {statistics.median(values):.1f} s "
                f"({min(values):.1f}-{max(values):.1f}) over {len(values)} runs"
            )


if __name__ == "__main__":
    main()
