"""What one Spark task of a Python streaming source costs per micro-batch, against the ``rate`` source.

An in-memory Python ``DataSourceStreamReader`` (no broker, no I/O: each task builds its rows as one
Arrow batch) produces ``--rate`` rows/s, planned into 1, 2 or 4 tasks per micro-batch, and writes
the same three columns as ``connector_latency.py`` (``timestamp``, ``value``, a 100-byte ``body``)
into a parquet sink with ``trigger(processingTime="0 seconds")`` on ``local[2]``. The reference is
Spark's ``rate`` source at the same rows/s with 4 partitions, same sink, same session. The sides
alternate (order rotated per repetition); the summary gives the median ``addBatch`` and
``triggerExecution`` of Spark's own progress per side and their ratio to the rate source.

This is the measurement behind ``eventhubs.minEventsPerTask``: the difference between the
1-task and the 4-task runs is what extra tasks of a Python source cost, whatever they read.

Three more sides put the Python on the other end or in the middle of the rate source's query: ``rate
-> python sink`` (a Python ``DataSourceStreamWriter`` that drops its rows: the write planner, the
write worker and the commit runner of a Python sink, without any work), ``rate -> python foreach``
(Spark's ``foreach`` sink with a Python writer that drops its rows: the task's Python worker alone)
and ``rate -> mapInArrow`` (an identity ``mapInArrow``: one Python worker in the task). With
``--sink noop`` (Spark's ``noop`` format instead of parquet, for every side but the Python sinks)
the sides show what Python itself
costs a micro-batch, with no file written; ``--rate-partitions 1`` gives them one task each.

Usage: ``.venv/bin/python bench/python_task_cost.py [--rate 1000] [--seconds 30] [--reps 3]``
``[--sink parquet|noop] [--sides rate,python 1,...]``
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import add_conf_argument, conf_from, connector_spark, spread
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)

TASKS = (1, 2, 4)
SIDES = (
    "rate",
    *(f"python {n}" for n in TASKS),
    "rate -> python sink",
    "rate -> python foreach",
    "rate -> mapInArrow",
)


class RowRange(InputPartition):
    """Rows ``[first, last)`` of the in-memory stream: one task."""

    def __init__(self, first: int, last: int) -> None:
        self.first, self.last = first, last


class InMemoryStreamReader(DataSourceStreamReader):
    """``rate`` rows/s since the query started, split into ``tasks`` tasks per micro-batch."""

    def __init__(self, rate: int, tasks: int) -> None:
        self.rate, self.tasks, self.started = rate, tasks, time.time()

    def initialOffset(self) -> dict:
        return {"rows": 0}

    def latestOffset(self) -> dict:
        return {"rows": int((time.time() - self.started) * self.rate)}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        first, last = start["rows"], end["rows"]
        step = -(-(last - first) // self.tasks)
        return [RowRange(lo, min(last, lo + step)) for lo in range(first, last, step)]

    def read(self, partition: InputPartition) -> Any:
        """Executor: the task's rows as one Arrow batch."""
        import datetime

        import pyarrow as pa

        assert isinstance(partition, RowRange)
        count = partition.last - partition.first
        now = datetime.datetime.now(datetime.UTC)
        yield pa.RecordBatch.from_arrays(
            [
                pa.array([now] * count, pa.timestamp("us", "UTC")),
                pa.array(range(partition.first, partition.last), pa.int64()),
                pa.array([b"x" * 100] * count, pa.binary()),
            ],
            names=["timestamp", "value", "body"],
        )

    def commit(self, end: dict) -> None:
        """Nothing to keep."""


class InMemorySource(DataSource):
    """``format("in_memory_rows")``: options ``rate`` and ``tasks``."""

    @classmethod
    def name(cls) -> str:
        return "in_memory_rows"

    def schema(self) -> str:
        return "timestamp timestamp, value long, body binary"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return InMemoryStreamReader(int(self.options["rate"]), int(self.options["tasks"]))


class DroppingWriter(DataSourceStreamWriter):
    """Executor: reads its rows and keeps none; driver: commits nothing."""

    def write(self, iterator: Any) -> WriterCommitMessage:
        for _ in iterator:
            pass
        return WriterCommitMessage()

    def commit(self, messages: Any, batchId: int) -> None:
        """Nothing was kept."""

    def abort(self, messages: Any, batchId: int) -> None:
        """Nothing was kept."""


class DroppingSink(DataSource):
    """``format("dropping_sink")``: a Python streaming sink that does no work."""

    @classmethod
    def name(cls) -> str:
        return "dropping_sink"

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        return DroppingWriter()


class DroppingForeach:
    """Executor: Spark's ``foreach`` sink with a Python writer that keeps no row (no write planner,
    no commit runner: the sink's per-batch work is the task's Python worker alone)."""

    def open(self, partition_id: int, epoch_id: int) -> bool:
        return True

    def process(self, row: Any) -> None:
        """Nothing is kept."""

    def close(self, error: BaseException | None) -> None:
        """Nothing was kept."""


def _identity(batches: Any) -> Any:
    yield from batches


def run_side(spark: Any, side: str, args: argparse.Namespace, workdir: Path) -> dict[str, float]:
    """One query of one side; the medians of its batches' durations after the warm-up."""
    if side.startswith("rate"):
        df = (
            spark.readStream.format("rate")
            .option("rowsPerSecond", args.rate)
            .option("numPartitions", args.rate_partitions)
            .load()
            .selectExpr("timestamp", "value", "cast(repeat('x', 100) AS binary) AS body")
        )
    else:
        tasks = side.split()[1]
        df = spark.readStream.format("in_memory_rows").option("rate", args.rate).option("tasks", tasks).load()
    if side == "rate -> mapInArrow":
        df = df.mapInArrow(_identity, df.schema)
    sink = "dropping_sink" if side == "rate -> python sink" else args.sink
    writer = df.writeStream.format(sink).option("checkpointLocation", str(workdir / "ckpt"))
    if side == "rate -> python foreach":
        writer = df.writeStream.foreach(DroppingForeach()).option("checkpointLocation", str(workdir / "ckpt"))
    if sink == "parquet":
        writer = writer.option("path", str(workdir / "out"))
    query = writer.trigger(processingTime="0 seconds").start()
    try:
        while not any(p["numInputRows"] for p in query.recentProgress) and query.isActive:
            time.sleep(0.2)
        skipped = len(query.recentProgress)
        time.sleep(args.warmup + args.seconds)
    finally:
        query.stop()
    if query.exception() is not None:
        raise RuntimeError(f"{side} query failed: {query.exception()}")
    warm = time.time() - args.seconds
    batches = [
        p
        for p in query.recentProgress[skipped:]
        if p["numInputRows"] > 0 and p["durationMs"].get("triggerExecution") and _after(p, warm)
    ]
    if not batches:
        raise RuntimeError(f"{side}: no batch in the measured window")
    return {
        key: statistics.median(p["durationMs"].get(key, 0) for p in batches)
        for key in ("addBatch", "triggerExecution")
    }


def _after(progress: dict, epoch_seconds: float) -> bool:
    from datetime import datetime

    return datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp() >= epoch_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=int, default=1000, help="rows per second")
    parser.add_argument("--seconds", type=float, default=30, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=10, help="seconds left out at each query start")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--sink", choices=("parquet", "noop"), default="parquet")
    parser.add_argument("--rate-partitions", type=int, default=4, help="the rate source's partitions")
    add_conf_argument(parser)
    parser.add_argument(
        "--sides", default=",".join(SIDES[:4]), help="comma-separated subset of " + ",".join(SIDES)
    )
    args = parser.parse_args()
    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    if unknown := set(sides) - set(SIDES):
        parser.error(f"--sides: unknown {sorted(unknown)}; choose from {', '.join(SIDES)}")
    if "rate" not in sides:
        parser.error("--sides must include rate (the reference)")
    results: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
    spark = connector_spark(
        "local[2]",
        {
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.streaming.numRecentProgressUpdates": "10000",
            **conf_from(args),
        },
    )
    spark.dataSource.register(InMemorySource)
    spark.dataSource.register(DroppingSink)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for rep in range(args.reps):
                order = sides[rep % len(sides) :] + sides[: rep % len(sides)]
                for side in order:
                    got = run_side(spark, side, args, Path(tmp) / f"{rep}-{side.replace(' ', '')}")
                    results[side].append(got)
                    print(
                        f"rep {rep + 1} {side:>19}: addBatch {got['addBatch']:.0f} ms, "
                        f"triggerExecution {got['triggerExecution']:.0f} ms",
                        flush=True,
                    )
    finally:
        spark.stop()
    rate = {
        key: statistics.median(r[key] for r in results["rate"]) for key in ("addBatch", "triggerExecution")
    }
    print(
        f"\n{args.rate} rows/s, local[2], trigger 0 s, {args.sink} sink, rate source "
        f"{args.rate_partitions} partition(s), {args.reps} reps x {args.seconds:g} s\n"
    )
    print("| side | addBatch ms | triggerExecution ms | triggerExecution / rate |")
    print("|---|---|---|---|")
    for side in sides:
        trigger = [r["triggerExecution"] for r in results[side]]
        print(
            f"| {side} | {spread([r['addBatch'] for r in results[side]])} | {spread(trigger)} | "
            f"{statistics.median(trigger) / rate['triggerExecution']:.2f} |"
        )


if __name__ == "__main__":
    main()
