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

**Hub -> select -> hub** (``--hub-to-hub``, issue #49 item 2): the question is no longer how fast a
stream lands in parquet but how late an event reaches the *next* hub. Two sides, interleaved:

* ``eventhubs``: hubflow's connector source and sink, ``format("eventhubs")`` both ways, against the
  emulator (its own process): hub ``h2h-in`` -> ``select`` -> hub ``h2h-out``;
* ``kafka``: Spark's Kafka source and sink, micro-batch, against a **real Apache Kafka broker**
  (``tests/support/kafka_broker.py``, the jars of ``jvm-deps-kafka.lock``; SASL PLAIN as Event Hubs'
  Kafka endpoint takes it): topic ``h2h-in`` -> the same ``select`` -> topic ``h2h-out``. Both
  topics stamp records with the broker's append time (``message.timestamp.type=LogAppendTime``),
  as the hub stamps ``enqueuedTime``. This is what a user would run instead (``kind: eventhubs_kafka``
  reads the hub's Kafka endpoint the same way); the emulator's Kafka endpoint is not used here.

The ``select`` carries the input's broker time into the output (a ``properties`` entry / a Kafka
header), so an event's latency = its broker time on the output minus its broker time on the input,
each stamped by the side's own broker. One producer per side sends ``--rate`` numbered events/s
round-robin over ``--partitions`` partitions for the whole run (both run all the time, so either
side runs beside the same load). Events whose input time falls in the measured window count; the
run checks that each of them reached the output (at least once) and reports any missing.
Trigger ``processingTime="0 seconds"`` on ``local[2]``; ``--reps`` repetitions rotate which side
goes first; the summary gives medians (min-max) and the ratio eventhubs / kafka, with the load
average of each run.

With ``--sink-floor`` each repetition also runs the connector source into two sinks that send
nothing, ``format("python-noop")`` (a Python data source sink: read the Arrow batches, commit
nothing) and Spark's JVM ``noop``, and a second table gives every side's per-batch durations: what
Spark's Python sink machinery costs a micro-batch whatever the sink does, against what the connector's
sink adds to it.

Usage: ``.venv/bin/python bench/connector_latency.py --hub-to-hub [--sink-floor] [--rate 1000]
[--partitions 4] [--seconds 40] [--warmup 15] [--reps 3]``
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
from streaming_measures import (
    DURATIONS,
    measured_batches,
    median_durations,
    percentile,
    process_cpu_seconds,
)

from eventhubs_emulator import EmulatorConfig
from eventhubs_emulator.launcher import start_emulator_process

HUB = "latency"


def produce_steadily(conn: str, rate: int, partitions: int, body_size: int, stop: Any) -> None:
    """Send ``rate`` events/s round-robin over the partitions until ``stop`` is set (own process).

    Every 20 ms the events due by then are sent, one ``send_batch`` per partition, so the stream is
    steady rather than bursty.
    """
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
            if due > 0:
                for p in range(partitions):
                    share = due // partitions + (1 if p < due % partitions else 0)
                    if share:
                        batch = producer.create_batch(partition_id=str(p))
                        for _ in range(share):
                            body = numbered_body(sent, body_size)
                            sent += 1
                            try:
                                batch.add(EventData(body))
                            except ValueError:  # full: a producer behind schedule sends more
                                producer.send_batch(batch)
                                batch = producer.create_batch(partition_id=str(p))
                                batch.add(EventData(body))
                        producer.send_batch(batch)
            time.sleep(max(0.0, tick - time.monotonic()))


def numbered_body(number: int, size: int) -> bytes:
    """A body of ``size`` bytes (at least 12) that starts with its event's number: unique per run."""
    head = f"{number:012d}".encode()
    return head + b"x" * max(0, size - len(head))


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
    cpu_before, wall_before = process_cpu_seconds(emulator_pid), time.monotonic()
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
            len(measured_batches(query.recentProgress, measured_from)) < 3
            and query.isActive
            and time.monotonic() < extra_deadline
        ):
            time.sleep(0.5)
    finally:
        query.stop()
    load_after = os.getloadavg()[0]
    emulator_cpu = (process_cpu_seconds(emulator_pid) - cpu_before) / (time.monotonic() - wall_before)
    if query.exception() is not None:
        raise RuntimeError(f"{side} query failed: {query.exception()}")
    batches = measured_batches(query.recentProgress, measured_from)
    latencies = sorted(committed_latencies(out, measured_from))
    if not latencies or not batches:
        raise RuntimeError(f"{side}: nothing was committed in the measured window")

    return {
        "rows": len(latencies),
        "batches": len(batches),
        "p50": percentile(latencies, 0.50),
        "p99": percentile(latencies, 0.99),
        **median_durations(batches, ("latestOffset", "addBatch", "triggerExecution")),
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


# ----------------------------------------------------------------------------- hub -> select -> hub
H2H_IN, H2H_OUT = "h2h-in", "h2h-out"  # the emulator's hubs, and the broker's topics
IN_TIME = "hubflowInMicros"  # the property / header that carries the input's broker time
H2H_SIDES = ("eventhubs", "kafka")
LOG_APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}


def produce_kafka_steadily(
    config: dict[str, Any], rate: int, partitions: int, body_size: int, stop: Any
) -> None:
    """:func:`produce_steadily` for the Kafka broker (kafka-python, own process): every 20 ms the
    events due, round-robin over the partitions of topic ``h2h-in``, then a flush."""
    from kafka import KafkaProducer

    parent = os.getppid()
    producer = KafkaProducer(**config, linger_ms=0, acks=1)
    try:
        started = time.monotonic()
        sent = 0
        tick = started
        while not stop.is_set() and os.getppid() == parent:
            tick += 0.02
            due = int((time.monotonic() - started) * rate) - sent
            for _ in range(max(0, due)):
                producer.send(H2H_IN, value=numbered_body(sent, body_size), partition=sent % partitions)
                sent += 1
            producer.flush()
            time.sleep(max(0.0, tick - time.monotonic()))
    finally:
        producer.close(timeout=10)


def _spark_kafka_options(bootstrap: str, password: str) -> dict[str, str]:
    """Spark's ``kafka.*`` client settings for the test broker (SASL PLAIN, as Event Hubs takes it)."""
    from tests.support.kafka_broker import USERNAME

    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{USERNAME}" password="{password}";'
    )
    return {
        "kafka.bootstrap.servers": bootstrap,
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": jaas,
    }


def hub_to_hub_query(spark: Any, side: str, servers: dict[str, Any], workdir: Path) -> Any:
    """Start one side's stream: input -> select (carry the input's broker time) -> output."""
    checkpoint = str(workdir / f"{side}-ckpt")
    if side == "eventhubs":
        stream = (
            spark.readStream.format("eventhubs")
            .option("eventhubs.connectionString", servers["conn_in"])
            .load()
            .selectExpr("body", f"map('{IN_TIME}', CAST(unix_micros(enqueuedTime) AS STRING)) AS properties")
            .writeStream.format("eventhubs")
            .option("eventhubs.connectionString", servers["conn_out"])
        )
    else:
        options = servers["spark_kafka"]
        stream = (
            spark.readStream.format("kafka")
            .options(**options)
            .option("subscribe", H2H_IN)
            .option("startingOffsets", "latest")
            .load()
            .selectExpr(
                "value",
                f"array(named_struct('key', '{IN_TIME}', "
                "'value', CAST(CAST(unix_micros(timestamp) AS STRING) AS BINARY))) AS headers",
            )
            .writeStream.format("kafka")
            .options(**options)
            .option("topic", H2H_OUT)
        )
    return stream.option("checkpointLocation", checkpoint).trigger(processingTime="0 seconds").start()


def hub_events(conn: str) -> list[tuple[bytes, int, int | None]]:
    """Every event of a hub as (body, broker time ms, carried input time µs or None)."""
    from pyspark_eventhubs.batch_reader import EventHubsBatchReader
    from pyspark_eventhubs.options import parse_options
    from pyspark_eventhubs.receiver_cache import read_range

    options = parse_options({"eventhubs.connectionString": conn})
    start, end = EventHubsBatchReader(options).resolve_ranges()
    events = []
    for pid in start:
        for batch in read_range(options, pid, start[pid], end[pid]):
            for body, enqueued, props in zip(
                batch.column("body").to_pylist(),
                batch.column("enqueuedTime").to_pylist(),
                batch.column("properties").to_pylist(),
                strict=True,
            ):
                carried = dict(props or {}).get(IN_TIME)
                events.append((bytes(body), _ms(enqueued), int(carried) if carried else None))
    return events


def topic_events(config: dict[str, Any], topic: str) -> list[tuple[bytes, int, int | None]]:
    """Every record of a topic as (value, broker time ms, carried input time µs or None)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(**config, enable_auto_commit=False, consumer_timeout_ms=5000)
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        ends = consumer.end_offsets(parts)
        events = []
        while any(consumer.position(tp) < ends[tp] for tp in parts):
            for records in consumer.poll(timeout_ms=2000, max_records=50_000).values():
                for r in records:
                    carried = dict(r.headers or []).get(IN_TIME)
                    events.append((bytes(r.value), int(r.timestamp), int(carried) if carried else None))
        return events
    finally:
        consumer.close()


def _ms(value: Any) -> int:
    """Milliseconds since the epoch of an Arrow timestamp (datetime) or an int."""
    return int(value.timestamp() * 1000) if hasattr(value, "timestamp") else int(value)


def run_hub_to_hub_side(
    spark: Any, side: str, servers: dict[str, Any], args: argparse.Namespace, workdir: Path
) -> dict[str, Any]:
    """One measured run of one side: latency percentiles, per-batch durations, delivery check."""
    server_pid = servers["emulator_pid" if side == "eventhubs" else "broker_pid"]
    load_before = os.getloadavg()[0]
    cpu_before, wall_before = process_cpu_seconds(server_pid), time.monotonic()
    query = hub_to_hub_query(spark, side, servers, workdir)
    try:
        first_deadline = time.monotonic() + 300
        while (
            not any(p["numInputRows"] for p in query.recentProgress)
            and query.isActive
            and time.monotonic() < first_deadline
        ):
            time.sleep(0.2)
        measured_from = time.time() * 1000 + args.warmup * 1000
        time.sleep(args.warmup + args.seconds)
        measured_to = time.time() * 1000
        extra_deadline = time.monotonic() + 120
        while (
            len(measured_batches(query.recentProgress, measured_from)) < 3
            and query.isActive
            and time.monotonic() < extra_deadline
        ):
            time.sleep(0.5)
        time.sleep(5)  # the window's last events reach the output before the query stops
    finally:
        query.stop()
    load_after = os.getloadavg()[0]
    server_cpu = (process_cpu_seconds(server_pid) - cpu_before) / (time.monotonic() - wall_before)
    if query.exception() is not None:
        raise RuntimeError(f"{side} query failed: {query.exception()}")
    if side == "eventhubs":
        inputs, outputs = hub_events(servers["conn_in"]), hub_events(servers["conn_out"])
    else:
        inputs = topic_events(servers["kafka_client"], H2H_IN)
        outputs = topic_events(servers["kafka_client"], H2H_OUT)
    in_window = {body for body, t, _ in inputs if measured_from <= t < measured_to}
    latencies = []
    delivered: dict[bytes, int] = {}
    for body, out_ms, in_us in outputs:
        if in_us is not None and measured_from <= in_us / 1000 < measured_to:
            latencies.append((out_ms - in_us / 1000) / 1000)
            delivered[body] = delivered.get(body, 0) + 1
    latencies.sort()
    batches = measured_batches(query.recentProgress, measured_from)
    if not latencies or not batches:
        raise RuntimeError(f"{side}: nothing reached the output in the measured window")

    return {
        "rows": len(latencies),
        "batches": len(batches),
        "p50": percentile(latencies, 0.50),
        "p99": percentile(latencies, 0.99),
        **median_durations(batches),
        "serverCpu": 100 * server_cpu,
        "load": (load_before + load_after) / 2,
        "loads": (load_before, load_after),
        "inWindow": len(in_window),
        "missing": len(in_window - set(delivered)),
        "duplicates": sum(n - 1 for n in delivered.values()),
    }


H2H_METRICS = [
    ("p50", "latency p50 (s)", "{:.3f}"),
    ("p99", "latency p99 (s)", "{:.3f}"),
    ("latestOffset", "latestOffset median (ms)", "{:.0f}"),
    ("addBatch", "addBatch median (ms)", "{:.0f}"),
    ("triggerExecution", "triggerExecution median (ms)", "{:.0f}"),
    ("serverCpu", "broker CPU (% of a core)", "{:.0f}"),
    ("load", "load average (1 min)", "{:.1f}"),
]


FLOOR_SIDES = ("eventhubs -> Python no-op sink", "eventhubs -> JVM noop sink")


def register_python_noop_sink(spark: Any) -> None:
    """``format("python-noop")``: a Python streaming sink that reads its Arrow batches and sends
    nothing, with a commit that does nothing: what any Python sink costs Spark per micro-batch."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage

    class NoopWriter(DataSourceStreamArrowWriter):
        def write(self, iterator: Any) -> WriterCommitMessage:
            for _ in iterator:
                pass
            return WriterCommitMessage()

        def commit(self, messages: Any, batchId: int) -> None:
            return None

    class PythonNoopSink(DataSource):
        @classmethod
        def name(cls) -> str:
            return "python-noop"

        def streamWriter(self, schema: Any, overwrite: bool) -> NoopWriter:
            return NoopWriter()

    spark.dataSource.register(PythonNoopSink)


def run_floor_side(
    spark: Any, side: str, servers: dict[str, Any], args: argparse.Namespace, workdir: Path
) -> dict[str, Any]:
    """The connector source into a sink that sends nothing (Python or JVM): per-batch durations
    only (nothing reaches an output hub, so no latency)."""
    stream = (
        spark.readStream.format("eventhubs")
        .option("eventhubs.connectionString", servers["conn_in"])
        .load()
        .selectExpr("body", f"map('{IN_TIME}', CAST(unix_micros(enqueuedTime) AS STRING)) AS properties")
    )
    sink = "python-noop" if "Python" in side else "noop"
    load_before = os.getloadavg()[0]
    query = (
        stream.writeStream.format(sink)
        .option("checkpointLocation", str(workdir / f"{sink}-ckpt"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    try:
        first_deadline = time.monotonic() + 300
        while (
            not any(p["numInputRows"] for p in query.recentProgress)
            and query.isActive
            and time.monotonic() < first_deadline
        ):
            time.sleep(0.2)
        measured_from = time.time() * 1000 + args.warmup * 1000
        time.sleep(args.warmup + args.seconds)
    finally:
        query.stop()
    if query.exception() is not None:
        raise RuntimeError(f"{side} query failed: {query.exception()}")
    batches = measured_batches(query.recentProgress, measured_from)
    if not batches:
        raise RuntimeError(f"{side}: no batch in the measured window")
    return {
        "batches": len(batches),
        "load": (load_before + os.getloadavg()[0]) / 2,
        **median_durations(batches),
    }


def summarize_durations(results: dict[str, list[dict[str, Any]]]) -> str:
    """Per-batch durations (medians over repetitions of each run's median, min-max) of every side."""
    sides = [side for side in (*H2H_SIDES, *FLOOR_SIDES) if results.get(side)]
    names = {"eventhubs": "eventhubs -> eventhubs", "kafka": "Kafka -> Kafka (broker)"}
    lines = [
        "| ms per batch, median (min-max) | " + " | ".join(names.get(s, s) for s in sides) + " |",
        "|---" * (1 + len(sides)) + "|",
    ]
    for key in DURATIONS:
        cells = []
        for side in sides:
            values = [r[key] for r in results[side]]
            cells.append(f"{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})")
        lines.append(f"| `{key}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summarize_hub_to_hub(results: dict[str, list[dict[str, Any]]]) -> str:
    """A Markdown table: median over repetitions (min-max) per side and eventhubs / kafka."""
    lines = [
        "| per repetition: median (min-max) | hubflow connector (emulator) | Spark Kafka micro-batch "
        "(Kafka broker) | eventhubs / kafka |",
        "|---|---|---|---|",
    ]
    for key, label, fmt in H2H_METRICS:
        cells, medians = [], {}
        for side in H2H_SIDES:
            values = [r[key] for r in results[side]]
            medians[side] = statistics.median(values)
            cells.append(f"{fmt.format(medians[side])} ({fmt.format(min(values))}-{fmt.format(max(values))})")
        ratio = f"{medians['eventhubs'] / medians['kafka']:.2f}" if medians["kafka"] else "-"
        if key in ("serverCpu", "load"):
            ratio = ""
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {ratio} |")
    for side in H2H_SIDES:
        runs = results[side]
        if not runs:
            continue
        lines.append(
            f"\n{side}: {sum(r['rows'] for r in runs)} events measured in "
            f"{sum(r['batches'] for r in runs)} batches over {len(runs)} runs; "
            f"{sum(r['inWindow'] for r in runs)} sent in the windows, "
            f"{sum(r['missing'] for r in runs)} missing at the output, "
            f"{sum(r['duplicates'] for r in runs)} duplicated"
        )
    return "\n".join(lines)


def main_hub_to_hub(args: argparse.Namespace) -> None:
    """``--hub-to-hub``: the connector (emulator) against Spark's Kafka source and sink (broker)."""
    repo = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(repo))
    from tests.support import kafka_broker
    from tests.support.kafka_broker import KafkaBroker

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        config = EmulatorConfig.many_hubs({H2H_IN: args.partitions, H2H_OUT: args.partitions})
        emulator = start_emulator_process(config, workdir)
        broker = KafkaBroker(workdir / "kafka")
        spawn = mp.get_context("spawn")
        stop = spawn.Event()
        producers = []
        sides = H2H_SIDES + (FLOOR_SIDES if args.sink_floor else ())
        results: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
        try:
            broker.start()
            for topic in (H2H_IN, H2H_OUT):
                broker.create_topic(topic, args.partitions, LOG_APPEND_TIME)
            assert broker._process is not None
            servers = {
                "conn_in": emulator.connection_strings[H2H_IN],
                "conn_out": emulator.connection_strings[H2H_OUT],
                "emulator_pid": emulator.process.pid,
                "broker_pid": broker._process.pid,
                "kafka_client": broker.client_config(),
                "spark_kafka": _spark_kafka_options(broker.bootstrap, kafka_broker.PASSWORD),
            }
            producers = [
                spawn.Process(
                    target=produce_steadily,
                    args=(servers["conn_in"], args.rate, args.partitions, args.body, stop),
                ),
                spawn.Process(
                    target=produce_kafka_steadily,
                    args=(servers["kafka_client"], args.rate, args.partitions, args.body, stop),
                ),
            ]
            for process in producers:
                process.start()
            spark = connector_spark(
                "local[2]",
                {
                    "spark.sql.shuffle.partitions": "2",
                    "spark.sql.streaming.numRecentProgressUpdates": "10000",
                    "spark.python.authenticate.socketTimeout": "120s",
                },
            )
            register_python_noop_sink(spark)
            for rep in range(args.reps):
                order = sides[rep % len(sides) :] + sides[: rep % len(sides)]
                for side in order:
                    run = run_hub_to_hub_side if side in H2H_SIDES else run_floor_side
                    for attempt in range(3):
                        try:
                            result = run(spark, side, servers, args, workdir / f"rep{rep}-{attempt}")
                            break
                        except RuntimeError as exc:  # see main(): Spark's fixed 10 s connect-back
                            if "connect back" not in str(exc) or attempt == 2:
                                raise
                            print(f"rep {rep + 1} {side}: {exc}; run again", flush=True)
                    results[side].append(result)
                    if side not in H2H_SIDES:
                        print(
                            f"rep {rep + 1} {side}: "
                            + ", ".join(f"{key} {result[key]:.0f} ms" for key in DURATIONS)
                            + f", {result['batches']} batches, load {result['load']:.1f}",
                            flush=True,
                        )
                        continue
                    print(
                        f"rep {rep + 1} {side:>9}: p50 {result['p50']:.3f} s, p99 {result['p99']:.3f} s, "
                        f"latestOffset {result['latestOffset']:.0f} ms, "
                        f"addBatch {result['addBatch']:.0f} ms, "
                        f"triggerExecution {result['triggerExecution']:.0f} ms, "
                        f"broker CPU {result['serverCpu']:.0f}%, {result['batches']} batches, "
                        f"{result['rows']} events, {result['missing']} missing, "
                        f"{result['duplicates']} duplicated, "
                        f"load {result['loads'][0]:.1f} -> {result['loads'][1]:.1f}",
                        flush=True,
                    )
            spark.stop()
        finally:
            stop.set()
            for process in producers:
                process.join(30)
            broker.stop()
            emulator.stop()
            # Also after a failure (a Spark JVM killed under load): what was measured is reported.
            report_hub_to_hub(args, results)


def report_hub_to_hub(args: argparse.Namespace, results: dict[str, list[dict[str, Any]]]) -> None:
    """Print the run's settings and both tables (sides without a finished run are left out)."""
    runs = {side: r for side, r in results.items() if r}
    print(
        f"\nhub -> select -> hub: {args.rate} events/s per side, {args.partitions} partitions, "
        f"{args.body} B bodies, local[2], trigger 0 s, {args.reps} reps x {args.seconds:g} s measured "
        f"(+{args.warmup:g} s warm-up); finished runs: "
        + ", ".join(f"{side} {len(r)}" for side, r in results.items())
        + "\n",
        flush=True,
    )
    if all(runs.get(side) for side in H2H_SIDES):
        print(summarize_hub_to_hub(runs))
        print()
    if runs:
        print(summarize_durations(runs), flush=True)


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
    parser.add_argument(
        "--hub-to-hub",
        action="store_true",
        help="hub -> select -> hub: the connector against Spark's Kafka source and sink on a Kafka broker",
    )
    parser.add_argument(
        "--sink-floor",
        action="store_true",
        help="with --hub-to-hub: also the connector source into a Python and a JVM sink that send nothing",
    )
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the cleanup below on kill
    if args.hub_to_hub:
        main_hub_to_hub(args)
        return

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
