"""Send -> output hub: how late an event sent to one hub is enqueued in the next, four ways, one run.

Issue #49 item 5. One emulator process (AMQP and its Kafka endpoint) and one SDK producer process
that sends ``--rate`` events/s round-robin over ``--partitions`` partitions of hub ``send-in`` for
the whole run, each event's body carrying its send time (µs, stamped as its ``EventDataBatch`` is
built, just before ``send_batch``). Latency of an event = its ``enqueuedTime`` in the output hub
minus its send time; for the floor, its ``enqueuedTime`` in ``send-in`` itself. The ways, each in
a window of its own (``--warmup`` s after the output's first event, then ``--seconds`` s measured;
events *sent* in the window count), the order rotating each repetition:

* ``floor``: no Spark, send then enqueued (what any pipeline adds to);
* ``real-time``: Spark's Kafka source and sink over the emulator's Kafka endpoint in real-time mode
  (``trigger(realTime=--real-time-interval)``, update mode), rows mapped as a hubflow
  ``kind: eventhubs_kafka`` pipeline maps them (``as_eventhubs_rows`` then ``kafka_rows``);
* ``kafka``: the same query in micro-batches (``processingTime="0 seconds"``);
* ``eventhubs``: hubflow's connector source and sink (``format("eventhubs")`` both ways, AMQP),
  ``processingTime="0 seconds"``.

Two more ways, chosen with ``--sides``, split the connector's cost between its two halves:
``eh-to-kafka`` (the connector's source, Spark's Kafka sink on the Kafka endpoint) and
``kafka-to-eh`` (Spark's Kafka source, the connector's sink).

Every side selects ``body`` and ``properties`` and writes to an output hub of its own. Each event sent
in a window is checked at the output (missing and duplicated are counted). ``local[2]``; real-time
mode runs one task per source partition for the whole checkpoint interval, so it needs a core per
partition: the default ``--partitions`` is 2.

Usage: ``.venv/bin/python bench/hub_to_hub_latency.py [--rate 1000] [--partitions 2] [--seconds 40]
[--warmup 10] [--reps 1] [--real-time-interval "30 seconds"]``
"""

from __future__ import annotations

import argparse
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

sys.path.insert(0, str(Path(__file__).parents[1] / "jobs"))

from harness import add_conf_argument, conf_from, connector_spark
from streaming_measures import DURATIONS, measured_batches, median_durations, percentile, process_cpu_seconds

from eventhubs_emulator import EmulatorConfig
from eventhubs_emulator.launcher import start_emulator_process

SIDES = ("floor", "real-time", "kafka", "eventhubs", "eh-to-kafka", "kafka-to-eh")
ISSUE_SIDES = SIDES[:4]
HUB_IN = "send-in"
HEAD = 12 + 16  # an event's number, then its send time in µs, as digits


def out_hub(side: str) -> str:
    """The output hub of a side (the floor has none: it reads ``send-in``)."""
    return HUB_IN if side == "floor" else f"send-out-{side}"


def stamped_body(number: int, sent_us: int, size: int) -> bytes:
    """A body of ``size`` bytes (at least 28) that starts with its number and its send time in µs."""
    head = f"{number:012d}{sent_us:016d}".encode()
    return head + b"x" * max(0, size - len(head))


def produce_stamped(conn: str, rate: int, partitions: int, body_size: int, stop: Any) -> None:
    """Send ``rate`` events/s round-robin over the partitions until ``stop`` is set (own process):
    every 20 ms the events due, one ``send_batch`` per partition, each body stamped with the time
    its batch is built."""
    from azure.eventhub import EventData, EventHubProducerClient

    parent = os.getppid()
    with EventHubProducerClient.from_connection_string(conn) as producer:
        producer.get_partition_ids()
        started = time.monotonic()
        sent = 0
        tick = started
        while not stop.is_set() and os.getppid() == parent:
            tick += 0.02
            due = int((time.monotonic() - started) * rate) - sent
            for p in range(partitions):
                share = due // partitions + (1 if p < due % partitions else 0)
                if share <= 0:
                    continue
                batch = producer.create_batch(partition_id=str(p))
                now_us = time.time_ns() // 1000
                for _ in range(share):
                    batch.add(EventData(stamped_body(sent, now_us, body_size)))
                    sent += 1
                producer.send_batch(batch)
            time.sleep(max(0.0, tick - time.monotonic()))


def hub_events(conn: str) -> list[tuple[bytes, float]]:
    """Every event of a hub as (body head, enqueued time in epoch seconds), read by the connector."""
    from pyspark_eventhubs.batch_reader import EventHubsBatchReader
    from pyspark_eventhubs.options import parse_options
    from pyspark_eventhubs.receiver_cache import read_range

    options = parse_options({"eventhubs.connectionString": conn})
    start, end = EventHubsBatchReader(options).resolve_ranges()
    events = []
    for pid in start:
        for batch in read_range(options, pid, start[pid], end[pid]):
            for body, enqueued in zip(
                batch.column("body").to_pylist(), batch.column("enqueuedTime").to_pylist(), strict=True
            ):
                events.append((bytes(body[:HEAD]), enqueued.timestamp()))
    return events


def has_events(conn: str) -> bool:
    """Whether a hub holds any event (its partitions' ranges, from the management link)."""
    from pyspark_eventhubs.batch_reader import EventHubsBatchReader
    from pyspark_eventhubs.options import parse_options

    start, end = EventHubsBatchReader(parse_options({"eventhubs.connectionString": conn})).resolve_ranges()
    return any(end[pid] > start[pid] for pid in start)


CONNECTOR_SOURCE = ("eventhubs", "eh-to-kafka")
CONNECTOR_SINK = ("eventhubs", "kafka-to-eh")


def start_query(
    spark: Any, side: str, servers: dict[str, Any], args: argparse.Namespace, workdir: Path
) -> Any:
    """Start one Spark side: ``send-in`` -> select body, properties -> the side's output hub."""
    from hubflow_jobs.eventhubs_kafka import as_eventhubs_rows, client_options
    from hubflow_jobs.eventhubs_kafka_sink import kafka_rows

    checkpoint = str(workdir / f"{side}-ckpt")
    if side in CONNECTOR_SOURCE:
        rows = spark.readStream.format("eventhubs").option("eventhubs.connectionString", servers[HUB_IN])
        rows = rows.options(**dict(args.eh_option)).load()
    else:
        rows = as_eventhubs_rows(
            spark.readStream.format("kafka")
            .options(**client_options(servers[HUB_IN], servers["bootstrap"]))
            .option("subscribe", HUB_IN)
            .option("startingOffsets", "latest")
            .option("includeHeaders", "true")
            .load()
        )
    rows = rows.select("body", "properties")
    if side in CONNECTOR_SINK:
        writer = rows.writeStream.format("eventhubs").option(
            "eventhubs.connectionString", servers[out_hub(side)]
        )
        writer = writer.options(**dict(args.eh_option))
    else:
        writer = (
            kafka_rows(rows)
            .writeStream.format("kafka")
            .options(**client_options(servers[out_hub(side)], servers["bootstrap"]))
            .option("topic", out_hub(side))
        )
    writer = writer.option("checkpointLocation", checkpoint)
    if side == "real-time":
        return writer.outputMode("update").trigger(realTime=args.real_time_interval).start()
    return writer.trigger(processingTime="0 seconds").start()


def run_side(
    spark: Any, side: str, servers: dict[str, Any], args: argparse.Namespace, workdir: Path
) -> dict[str, Any]:
    """One window of one side: start (Spark sides), wait for the output's first event, warm up,
    measure; returns the window (epoch s), per-batch durations and the emulator's CPU share."""
    load_before = os.getloadavg()[0]
    cpu_before, wall_before = process_cpu_seconds(servers["emulator_pid"]), time.monotonic()
    query = None if side == "floor" else start_query(spark, side, servers, args, workdir)
    try:
        deadline = time.monotonic() + 300
        while not has_events(servers[out_hub(side)]):
            if query is not None and not query.isActive:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{side}: no event reached {out_hub(side)} in 300 s")
            time.sleep(0.5)
        measured_from = time.time() + args.warmup
        time.sleep(args.warmup + args.seconds)
        measured_to = time.time()
        time.sleep(5)  # the window's last events reach the output before the query stops
    finally:
        if query is not None:
            query.stop()
    if query is not None and query.exception() is not None:
        raise RuntimeError(f"{side} query failed: {query.exception()}")
    batches = measured_batches(query.recentProgress if query is not None else [], measured_from * 1000)
    return {
        "window": (measured_from, measured_to),
        "batches": len(batches),
        **(median_durations(batches) if batches else dict.fromkeys(DURATIONS)),
        "emulatorCpu": 100
        * (process_cpu_seconds(servers["emulator_pid"]) - cpu_before)
        / (time.monotonic() - wall_before),
        "loads": (load_before, os.getloadavg()[0]),
    }


def latencies(
    side: str, window: tuple[float, float], sent: dict[bytes, float], outputs: list[tuple[bytes, float]]
) -> dict[str, Any]:
    """Latency percentiles of the events sent in ``window`` and the delivery check at the output."""
    start, end = window
    in_window = {head for head, sent_s in sent.items() if start <= sent_s < end}
    values, seen = [], {}
    for head, enqueued in outputs:
        if head in in_window:
            values.append(enqueued - sent[head])
            seen[head] = seen.get(head, 0) + 1
    values.sort()
    if not values:
        raise RuntimeError(f"{side}: no event sent in the window reached {out_hub(side)}")
    return {
        "rows": len(values),
        **{f"p{q}": 1000 * percentile(values, q / 100) for q in (50, 90, 99)},
        "inWindow": len(in_window),
        "missing": len(in_window - set(seen)),
        "duplicates": sum(n - 1 for n in seen.values()),
    }


def summarize(results: dict[str, list[dict[str, Any]]]) -> str:
    """A Markdown table: per side the median over repetitions (min-max) of each measure."""
    names = {
        "floor": "floor: send -> enqueued, no Spark",
        "real-time": "Spark Kafka source+sink, real-time mode",
        "kafka": "Spark Kafka source+sink, micro-batch 0 s",
        "eventhubs": "hubflow connector source+sink, micro-batch 0 s",
        "eh-to-kafka": "connector source, Kafka sink",
        "kafka-to-eh": "Kafka source, connector sink",
    }
    lines = [
        "| way | p50 (ms) | p90 (ms) | p99 (ms) | events | missing | duplicated | "
        + " | ".join(f"{key} (ms)" for key in DURATIONS)
        + " | emulator CPU (% of a core) | load |",
        "|---" * (9 + len(DURATIONS)) + "|",
    ]

    def cell(side: str, key: str, fmt: str = "{:.0f}") -> str:
        values = [r[key] for r in results[side] if r.get(key) is not None]
        if not values:
            return "-"
        if len(values) == 1:
            return fmt.format(values[0])
        return (
            f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"
        )

    for side in SIDES:
        if not results.get(side):
            continue
        runs = results[side]
        loads = ", ".join(f"{r['loads'][0]:.1f}->{r['loads'][1]:.1f}" for r in runs)
        lines.append(
            f"| {names[side]} | {cell(side, 'p50', '{:.1f}')} | {cell(side, 'p90', '{:.1f}')} | "
            f"{cell(side, 'p99', '{:.1f}')} | {sum(r['rows'] for r in runs)} | "
            f"{sum(r['missing'] for r in runs)} | {sum(r['duplicates'] for r in runs)} | "
            + "".join(f"{cell(side, key)} | " for key in DURATIONS)
            + f"{cell(side, 'emulatorCpu')} | "
            f"{loads} |"
        )
    if results.get("eventhubs") and results.get("kafka"):
        eh = statistics.median(r["p50"] for r in results["eventhubs"])
        kafka = statistics.median(r["p50"] for r in results["kafka"])
        lines.append(f"\nconnector p50 / Kafka micro-batch p50: {eh / kafka:.2f}x")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=int, default=1000, help="events per second")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=40, help="measured seconds per window")
    parser.add_argument("--warmup", type=float, default=10, help="seconds after the output's first event")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--body", type=int, default=100, help="body bytes per event (at least 28)")
    parser.add_argument(
        "--eh-option",
        action="append",
        default=[],
        type=lambda text: tuple(text.split("=", 1)),
        help="an option key=value of the connector's source and sink (repeatable)",
    )
    parser.add_argument(
        "--real-time-interval", default="30 seconds", help="real-time mode's checkpoint interval"
    )
    parser.add_argument(
        "--sides", default=",".join(ISSUE_SIDES), help="comma-separated subset of " + ",".join(SIDES)
    )
    add_conf_argument(parser)
    args = parser.parse_args()
    sides = tuple(s for s in args.sides.split(",") if s)
    if unknown := set(sides) - set(SIDES):
        parser.error(f"--sides: unknown {sorted(unknown)}; choose from {', '.join(SIDES)}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            kafka_port = probe.getsockname()[1]
        hubs = {out_hub(side): args.partitions for side in SIDES}
        emulator = start_emulator_process(EmulatorConfig.many_hubs(hubs, kafka_port=kafka_port), workdir)
        servers: dict[str, Any] = {**emulator.connection_strings}
        servers["bootstrap"] = f"127.0.0.1:{kafka_port}"
        servers["emulator_pid"] = emulator.process.pid
        spawn = mp.get_context("spawn")
        stop = spawn.Event()
        producer = spawn.Process(
            target=produce_stamped, args=(servers[HUB_IN], args.rate, args.partitions, args.body, stop)
        )
        results: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
        spark = None
        try:
            producer.start()
            spark = connector_spark(
                "local[2]",
                {
                    "spark.sql.shuffle.partitions": "2",
                    "spark.sql.streaming.numRecentProgressUpdates": "10000",
                    "spark.python.authenticate.socketTimeout": "120s",
                    **conf_from(args),
                },
            )
            for rep in range(args.reps):
                order = sides[rep % len(sides) :] + sides[: rep % len(sides)]
                for side in order:
                    run = run_side(spark, side, servers, args, workdir / f"rep{rep}")
                    results[side].append(run)
                    print(
                        f"rep {rep + 1} {side}: window {run['window'][1] - run['window'][0]:.0f} s, "
                        f"{run['batches']} batches, load {run['loads'][0]:.1f} -> {run['loads'][1]:.1f}",
                        flush=True,
                    )
        finally:
            stop.set()
            producer.join(30)
            if spark is not None:
                spark.stop()
        try:
            inputs = hub_events(servers[HUB_IN])
            sent = {head: int(head[12:]) / 1e6 for head, _ in inputs}
            for side in sides:
                outputs = inputs if side == "floor" else hub_events(servers[out_hub(side)])
                for run in results[side]:
                    run.update(latencies(side, run["window"], sent, outputs))
        finally:
            emulator.stop()

    print(
        f"\nsend -> output hub: {args.rate} events/s, {args.partitions} partitions, {args.body} B bodies, "
        f"local[2], {args.reps} rep(s) x {args.seconds:g} s measured after {args.warmup:g} s warm-up, "
        f"real-time checkpoint interval {args.real_time_interval}\n"
    )
    print(summarize(results))


if __name__ == "__main__":
    main()
