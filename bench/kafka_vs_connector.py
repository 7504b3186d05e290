"""Catch-up speed, hubflow's connector over AMQP vs Spark's Kafka source over the Kafka endpoint
(issue #30 item 3); with ``--broker``, Spark's Kafka source on a real Apache Kafka broker (own
columns, and mapped to the connector's: issue #49 item 3) vs the connector (issue #49 item 4).

The same ``--events`` events (``--size``-byte body, 3 application properties, 4 partitions, sent
over AMQP) in one emulator process with its Kafka port, read two ways by one Spark session on
``local[2]`` (equal cores), each a new ``availableNow`` query into parquet with the same columns:

* ``amqp``: ``format("eventhubs")`` (hubflow's connector, the fast receive path), what ``kind:
  eventhubs`` reads;
* ``kafka``: ``format("kafka")`` with hubflow's client settings, its rows mapped to the connector's
  columns (:func:`hubflow_jobs.eventhubs_kafka.as_eventhubs_rows`), what ``kind: eventhubs_kafka``
  reads.

Each side gets a per-trigger limit of all events (one batch). Timed from ``start()`` to the end of
``awaitTermination()``; rows are counted where they landed, by distinct (partition, sequenceNumber),
and a wrong count stops the benchmark. The emulator's CPU time (user + system, from /proc) during
each run is reported per path, per event, and as a kafka/amqp ratio. Both sides are warmed up on a
small hub first; sides alternate which goes first in each of ``--reps`` repetitions; the summary
gives the median and min-max rows/s, the kafka/amqp ratios and the load average.

``--broker``: Spark's Kafka source reads a real Apache Kafka broker (KRaft, SASL PLAIN as Event Hubs'
endpoint; ``tests/support/kafka_broker.py``, the jars of jvm-deps-kafka.lock) holding ``--events``
records (``--size``-byte value, 3 headers, no key, 4 partitions, written by Spark's Kafka sink), and
hubflow's connector reads the same events (sent over AMQP, 3 properties) from an emulator, one Spark
session on ``local[2]``, each run a new ``availableNow`` query into parquet with a per-trigger limit
of all records, the order rotating each repetition:

* ``own``: ``format("kafka")`` with its own columns (``key``, ``value``, ..., ``headers``), hubflow's
  client settings and ``includeHeaders``;
* ``mapped``: the same, mapped by :func:`hubflow_jobs.eventhubs_kafka.as_eventhubs_rows`, what
  ``kind: eventhubs_kafka`` reads (issue #49 item 3);
* ``amqp``: ``format("eventhubs")`` on the emulator, what ``kind: eventhubs`` reads (issue #49 item 4);
* ``ceiling``: ``format("arrow_replay")`` (``replay_source.py``), a Python source handing Spark the
  connector's own Arrow batches of the same events, captured once from the emulator, with no
  network and no decoding: what any Python source costs in Spark, the bound of ``amqp``.

Rows are checked by distinct (partition, offset / sequenceNumber). Besides rows/s, the Spark JVM's
CPU time per run (user + system, with its Python workers; the broker's and the emulator's not
counted) is given per record, and for ``amqp`` the Python workers' share: with other load on the
machine CPU time moves less than the wall clock. The summary gives amqp/own, amqp/mapped and ceiling/own.

Usage: ``.venv/bin/python bench/kafka_vs_connector.py [--events 1000000] [--size 200] [--reps 3]``
``[--broker]``
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "jobs"))
sys.path.insert(0, str(Path(__file__).parents[1]))  # tests.support.kafka_broker (--broker)

from connector_catchup import CATCHUP_CONF, PARTITIONS, fill_hub, workload_line
from connector_throughput import PROPERTIES
from harness import connector_spark, run_until_done, spread
from replay_source import capture
from replay_source import register as register_replay

from eventhubs_emulator import EmulatorConfig
from eventhubs_emulator.launcher import EmulatorProcess, start_emulator_process

SIDES = ("amqp", "kafka")
BROKER_SIDES = ("own", "mapped")
WARM_EVENTS = 4000


def free_port() -> int:
    """A port nothing listens on now (the emulator binds it a moment later)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and its threads and children so far."""
    import psutil

    process = psutil.Process(pid)
    total = 0.0
    for each in [process, *process.children(recursive=True)]:
        times = each.cpu_times()
        total += times.user + times.system
    return total


def reader(spark: Any, side: str, conn: str, bootstrap: str, events: int) -> Any:
    """The streaming DataFrame of ``side`` over the hub of ``conn``, in the connector's columns."""
    if side == "amqp":
        from pyspark_eventhubs import EventPosition

        return (
            spark.readStream.format("eventhubs")
            .option("eventhubs.connectionString", conn)
            .option("eventhubs.startingPosition", EventPosition.start_of_stream().to_json())
            .option("maxEventsPerTrigger", str(events))
            .load()
        )
    from hubflow_jobs.eventhubs_kafka import as_eventhubs_rows, client_options
    from pyspark_eventhubs import EventHubsConnectionString

    hub = EventHubsConnectionString.parse(conn).entity_path
    return as_eventhubs_rows(
        spark.readStream.format("kafka")
        .options(**client_options(conn, bootstrap))
        .option("subscribe", hub)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(events))
        .option("includeHeaders", "true")
        .load()
    )


def land(spark: Any, frame: Any, side: str, events: int, workdir: Path, tag: str, offset: str) -> float:
    """Seconds of one availableNow query of ``frame`` into parquet; checks that exactly ``events``
    distinct (partition, ``offset``) rows landed."""
    out, checkpoint = workdir / f"{tag}-out", workdir / f"{tag}-ckpt"
    elapsed, _ = run_until_done(
        frame.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True),
        side,
    )
    landed = spark.read.parquet(str(out))
    rows = landed.count()
    distinct = landed.select("partition", offset).distinct().count()
    if rows != events or distinct != events:
        raise RuntimeError(f"{side}: {rows} rows ({distinct} distinct) in parquet, expected {events}")
    return elapsed


def run(
    spark: Any, side: str, conn: str, bootstrap: str, events: int, workdir: Path, tag: str, emulator_pid: int
) -> tuple[float, float]:
    """(rows/s, emulator CPU seconds) of one availableNow query of ``side``; checks what landed."""
    cpu_before = cpu_seconds(emulator_pid)
    frame = reader(spark, side, conn, bootstrap, events)
    elapsed = land(spark, frame, side, events, workdir, tag, "sequenceNumber")
    return events / elapsed, cpu_seconds(emulator_pid) - cpu_before


def start(workdir: Path) -> tuple[EmulatorProcess, str]:
    """The emulator CLI with the bench and warm-up hubs and a Kafka port; it and the bootstrap address."""
    port = free_port()
    config = EmulatorConfig.many_hubs({"bench": PARTITIONS, "warm": PARTITIONS}, kafka_port=port)
    return start_emulator_process(config, workdir), f"127.0.0.1:{port}"


def emulator_main(args: argparse.Namespace) -> None:
    """The AMQP connector against Spark's Kafka source, both on one emulator process."""
    rates: dict[str, list[float]] = {side: [] for side in SIDES}
    cpu: dict[str, list[float]] = {side: [] for side in SIDES}
    ratios: list[float] = []
    loads: list[float] = []

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        emulator, bootstrap = start(workdir)
        pid, conns = emulator.process.pid, emulator.connection_strings
        try:
            started = time.perf_counter()
            fill_hub(conns["bench"], args.events, args.size)
            fill_hub(conns["warm"], WARM_EVENTS, args.size)
            print(
                f"sent {args.events:,} events over AMQP in {time.perf_counter() - started:.0f} s", flush=True
            )
            spark = connector_spark("local[2]", CATCHUP_CONF)
            for side in SIDES:  # warm-up, not timed
                run(spark, side, conns["warm"], bootstrap, WARM_EVENTS, workdir, f"warm-{side}", pid)
            for rep in range(args.reps):
                order = SIDES if rep % 2 == 0 else SIDES[::-1]
                got = {}
                for side in order:
                    rate, seconds = run(
                        spark, side, conns["bench"], bootstrap, args.events, workdir, f"{rep}-{side}", pid
                    )
                    got[side] = rate
                    rates[side].append(rate)
                    cpu[side].append(seconds)
                    loads.append(os.getloadavg()[0])
                ratios.append(got["kafka"] / got["amqp"])
                print(
                    f"rep {rep + 1} ({' -> '.join(order)}): "
                    + ", ".join(
                        f"{side} {got[side]:,.0f} rows/s (emulator CPU {cpu[side][-1]:.1f} s)"
                        for side in SIDES
                    )
                    + f"; kafka/amqp {ratios[-1]:.2f}; load {loads[-1]:.1f}",
                    flush=True,
                )
            spark.stop()
        finally:
            emulator.stop()

    print("\n" + workload_line(args.events, args.size, f"{args.reps} reps alternating", loads) + " (2 cores)")
    print("| Path | rows/s, median (min-max) | emulator CPU s per run, median (min-max) | µs per event |")
    print("|---|---|---|---|")
    names = {"amqp": "hubflow connector over AMQP", "kafka": "Spark's Kafka source over the Kafka endpoint"}
    for side in SIDES:
        per_event = statistics.median(cpu[side]) / args.events * 1e6
        print(f"| {names[side]} | {spread(rates[side])} | {spread(cpu[side], '{:.1f}')} | {per_event:.1f} |")
    cpu_ratios = [k / a for k, a in zip(cpu["kafka"], cpu["amqp"], strict=True)]
    print(f"| Kafka / AMQP | **{spread(ratios, '{:.2f}')}** | {spread(cpu_ratios, '{:.1f}')} | |")


def broker_options(bootstrap: str) -> dict[str, str]:
    """hubflow's Kafka client settings for the test broker: SASL PLAIN over plain TCP (no TLS)."""
    from hubflow_jobs.eventhubs_kafka import client_options
    from tests.support import kafka_broker

    return {**client_options(kafka_broker.PASSWORD, bootstrap), "kafka.security.protocol": "SASL_PLAINTEXT"}


def fill_topic(spark: Any, options: dict[str, str], topic: str, events: int, size: int) -> None:
    """``events`` records spread evenly over the partitions by Spark's Kafka sink: a ``size``-byte
    value, the benchmark's 3 properties as headers (UTF-8), no key."""
    from pyspark.sql import functions as F

    headers = F.array(
        *(F.struct(F.lit(k).alias("key"), F.lit(v.encode()).alias("value")) for k, v in PROPERTIES.items())
    )
    (
        spark.range(events)
        .select(
            (F.col("id") % PARTITIONS).cast("int").alias("partition"),
            F.lit(b"x" * size).alias("value"),
            headers.alias("headers"),
        )
        .write.format("kafka")
        .options(**options)
        .option("topic", topic)
        .save()
    )


def jvm_cpu_seconds(spark: Any) -> float:
    """User + system CPU seconds of the Spark JVM (and its children) so far."""
    return cpu_seconds(_jvm_pid(spark))


def python_cpu_seconds(spark: Any) -> float:
    """User + system CPU seconds of the Spark JVM's children (its Python workers) so far."""
    import psutil

    children = psutil.Process(_jvm_pid(spark)).children(recursive=True)
    return sum(t.user + t.system for t in (child.cpu_times() for child in children))


def _jvm_pid(spark: Any) -> int:
    return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())


def broker_run(
    spark: Any, side: str, options: dict[str, str], topic: str, events: int, workdir: Path, tag: str
) -> tuple[float, float]:
    """(rows/s, Spark JVM CPU seconds) of one availableNow query of ``side``; checks what landed."""
    from hubflow_jobs.eventhubs_kafka import as_eventhubs_rows

    frame = (
        spark.readStream.format("kafka")
        .options(**options)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(events))
        .option("includeHeaders", "true")
        .load()
    )
    offset = "offset"
    if side == "mapped":
        frame, offset = as_eventhubs_rows(frame), "sequenceNumber"
    cpu_before = jvm_cpu_seconds(spark)
    elapsed = land(spark, frame, side, events, workdir, tag, offset)
    return events / elapsed, jvm_cpu_seconds(spark) - cpu_before


def broker_main(args: argparse.Namespace) -> None:
    """Spark's Kafka source (own columns, and mapped) on a real broker against hubflow's connector
    reading the same events from the emulator over AMQP (issue #49 item 4), interleaved."""
    from tests.support.kafka_broker import KafkaBroker

    sides = (*BROKER_SIDES, "amqp", "ceiling")
    rates: dict[str, list[float]] = {side: [] for side in sides}
    cpu: dict[str, list[float]] = {side: [] for side in sides}
    loads: list[float] = []
    python_cpu: list[float] = []  # of the amqp side's Spark CPU, its Python workers'
    print(f"load average before: {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory() as tmp, KafkaBroker(Path(tmp) / "broker") as broker:
        workdir = Path(tmp)
        emulator = start_emulator_process(
            EmulatorConfig.many_hubs({"bench": PARTITIONS, "warm": PARTITIONS}), workdir
        )
        conns = emulator.connection_strings
        try:
            broker.create_topic("bench", PARTITIONS)
            broker.create_topic("warm", PARTITIONS)
            options = broker_options(broker.bootstrap)
            started = time.perf_counter()
            fill_hub(conns["bench"], args.events, args.size)
            fill_hub(conns["warm"], WARM_EVENTS, args.size)
            print(
                f"sent {args.events:,} events over AMQP in {time.perf_counter() - started:.0f} s", flush=True
            )
            started = time.perf_counter()
            replay = {topic: workdir / f"replay-{topic}" for topic in ("bench", "warm")}
            for topic, directory in replay.items():
                capture(conns[topic], directory)
            print(
                f"captured the connector's Arrow batches in {time.perf_counter() - started:.0f} s", flush=True
            )
            spark = connector_spark("local[2]", CATCHUP_CONF)
            register_replay(spark)
            started = time.perf_counter()
            fill_topic(spark, options, "bench", args.events, args.size)
            fill_topic(spark, options, "warm", WARM_EVENTS, args.size)
            print(f"wrote {args.events:,} records in {time.perf_counter() - started:.0f} s", flush=True)

            def one(side: str, topic: str, events: int, tag: str) -> tuple[float, float]:
                if side == "amqp":  # Spark CPU: the JVM and its Python workers
                    before, python_before = jvm_cpu_seconds(spark), python_cpu_seconds(spark)
                    rate, _ = run(spark, side, conns[topic], "", events, workdir, tag, emulator.process.pid)
                    python_cpu.append(python_cpu_seconds(spark) - python_before)
                    return rate, jvm_cpu_seconds(spark) - before
                if side == "ceiling":
                    before = jvm_cpu_seconds(spark)
                    frame = spark.readStream.format("arrow_replay").option("path", str(replay[topic])).load()
                    elapsed = land(spark, frame, side, events, workdir, tag, "sequenceNumber")
                    return events / elapsed, jvm_cpu_seconds(spark) - before
                return broker_run(spark, side, options, topic, events, workdir, tag)

            for side in sides:  # warm-up, not timed
                one(side, "warm", WARM_EVENTS, f"warm-{side}")
            for rep in range(args.reps):
                order = sides[rep % len(sides) :] + sides[: rep % len(sides)]
                for side in order:
                    rate, seconds = one(side, "bench", args.events, f"{rep}-{side}")
                    rates[side].append(rate)
                    cpu[side].append(seconds)
                    loads.append(os.getloadavg()[0])
                print(
                    f"rep {rep + 1} ({' -> '.join(order)}): "
                    + ", ".join(
                        f"{side} {rates[side][-1]:,.0f} rows/s (Spark CPU {cpu[side][-1]:.1f} s)"
                        for side in sides
                    )
                    + f", of which Python workers {python_cpu[-1]:.1f} s"
                    + f"; amqp/own {rates['amqp'][-1] / rates['own'][-1]:.2f}, "
                    f"ceiling/own {rates['ceiling'][-1] / rates['own'][-1]:.2f}, "
                    f"amqp/mapped {rates['amqp'][-1] / rates['mapped'][-1]:.2f}; load {loads[-1]:.1f}",
                    flush=True,
                )
            spark.stop()
        finally:
            emulator.stop()
    print(f"load average after: {os.getloadavg()[0]:.1f}")

    print(
        f"\n{args.events:,} records, {args.size} B + 3 headers, {PARTITIONS} partitions, one Apache "
        f"Kafka broker and one emulator, local[2], availableNow -> parquet, {args.reps} reps rotating; load "
        f"average {min(loads):.1f}-{max(loads):.1f} (2 cores)"
    )
    print("| Side | rows/s, median (min-max) | Spark CPU s per run, median (min-max) | µs per record |")
    print("|---|---|---|---|")
    names = {
        "own": "Spark's Kafka source (broker), its own columns",
        "mapped": "the same, `as_eventhubs_rows`",
        "amqp": "hubflow connector (emulator, AMQP)",
        "ceiling": "a Python source replaying the connector's Arrow batches (`arrow_replay`)",
    }
    for side in sides:
        per_record = statistics.median(cpu[side]) / args.events * 1e6
        print(f"| {names[side]} | {spread(rates[side])} | {spread(cpu[side], '{:.1f}')} | {per_record:.1f} |")
    python_ms = statistics.median(python_cpu[1:]) / args.events * 1e6  # [0]: the warm-up
    print(
        f"| of the connector's: its Python workers | | {spread(python_cpu[1:], '{:.1f}')} | {python_ms:.1f} |"
    )
    for side, other in (("amqp", "own"), ("amqp", "mapped"), ("ceiling", "own")):
        ratios = [a / b for a, b in zip(rates[side], rates[other], strict=True)]
        cpu_ratios = [a / b for a, b in zip(cpu[side], cpu[other], strict=True)]
        print(f"| {side} / {other} | **{spread(ratios, '{:.2f}')}** | {spread(cpu_ratios, '{:.2f}')} | |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="events in all (4 partitions)")
    parser.add_argument("--size", type=int, default=200, help="event body size in bytes")
    parser.add_argument("--reps", type=int, default=3, help="alternating repetitions")
    parser.add_argument(
        "--broker",
        action="store_true",
        help="Spark's Kafka source on a real Apache Kafka broker (own columns, mapped) vs the connector",
    )
    args = parser.parse_args()
    if args.broker:
        broker_main(args)
    else:
        emulator_main(args)


if __name__ == "__main__":
    main()
