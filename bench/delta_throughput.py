"""Delta vs Spark's parquet file sink and source: the same 1M rows, the same Spark, ratios printed.

* **sink**: a streaming query reads the same input (bronze-shaped rows in parquet files: a
  200-byte body, partition, sequence number, enqueued time, ingest date) with the file source,
  ``maxFilesPerTrigger`` files per micro-batch, availableNow, and writes it partitioned by
  ``ingest_date`` either with delta-spark's ``DeltaSink`` (``format("delta")``: one Delta commit
  per batch with the query's transaction) or with Spark's parquet file sink (``_spark_metadata``).
* **source**: a streaming query reads one of those outputs back incrementally (Delta's streaming
  source, or the file source over the parquet output's ``_spark_metadata``), the same number of
  files per micro-batch, into the ``noop`` sink.

Both sides run in one ``local[2]`` session with the jobs' own defaults (``hubflow_jobs.runtime.session``),
after a warm-up run of each that is not counted; runs are interleaved (Delta, parquet, parquet,
Delta, ...) and the median of ``--repeats`` is reported with the ratio Delta / parquet (above 1:
Delta takes longer).

Usage: ``.venv/bin/python bench/delta_throughput.py [--rows 1000000] [--files 20] [--per-trigger 2]``
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from harness import run_until_done

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "jobs"))


def session():
    from pyspark.sql import SparkSession

    from hubflow_jobs.runtime.session import DEFAULT_CONF

    builder = SparkSession.builder.master("local[2]").appName("hubflow-bench-delta")
    for key, value in {
        **DEFAULT_CONF,
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
    }.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


SCHEMA = "body BINARY, partition STRING, sequenceNumber BIGINT, enqueuedTime TIMESTAMP, ingest_date DATE"


def make_input(spark, folder: Path, rows: int, files: int) -> None:
    """``rows`` bronze-shaped rows in ``files`` parquet files."""
    from pyspark.sql import functions as F

    frame = (
        spark.range(rows)
        .select(
            F.expr("cast(concat(lpad(cast(id AS STRING), 12, '0'), repeat('x', 188)) AS BINARY)").alias(
                "body"
            ),
            (F.col("id") % 4).cast("string").alias("partition"),
            F.col("id").alias("sequenceNumber"),
            F.expr("timestamp_seconds(1795000000 + id DIV 1000)").alias("enqueuedTime"),
            F.expr("date_add(DATE'2026-11-20', cast(id % 3 AS INT))").alias("ingest_date"),
        )
        .repartition(files)
    )
    frame.write.mode("overwrite").parquet(str(folder))


def run_sink(spark, source: Path, out: Path, checkpoint: Path, file_format: str, per_trigger: int) -> float:
    """Seconds for an availableNow query copying ``source`` into a ``file_format`` table."""
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", per_trigger).parquet(str(source))
    elapsed, _ = run_until_done(
        stream.writeStream.format(file_format)
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .partitionBy("ingest_date")
        .trigger(availableNow=True),
        f"{file_format} sink",
    )
    return elapsed


def run_source(spark, table: Path, checkpoint: Path, file_format: str, per_trigger: int) -> tuple[float, int]:
    """Seconds (and rows) for an availableNow query reading ``table`` incrementally into noop."""
    reader = spark.readStream.format(file_format).option("maxFilesPerTrigger", per_trigger)
    if file_format == "parquet":
        reader = reader.schema(SCHEMA)
    elapsed, query = run_until_done(
        reader.load(str(table))
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True),
        f"{file_format} source",
    )
    rows = sum(int(p["numInputRows"]) for p in query.recentProgress)
    return elapsed, rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=20, help="input parquet files")
    parser.add_argument("--per-trigger", type=int, default=2, help="maxFilesPerTrigger on both sides")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    spark = session()
    work = Path(tempfile.mkdtemp(prefix="hubflow-bench-delta-"))
    try:
        source = work / "input"
        make_input(spark, source, args.rows, args.files)
        sink_times: dict[str, list[float]] = {"delta": [], "parquet": []}
        source_times: dict[str, list[float]] = {"delta": [], "parquet": []}
        order = ["delta", "parquet"]
        for run in range(args.repeats + 1):  # run 0 warms both sides up and is not counted
            for file_format in order if run % 2 == 0 else reversed(order):
                out, checkpoint = work / f"{file_format}-{run}", work / f"cp-{file_format}-{run}"
                took = run_sink(spark, source, out, checkpoint, file_format, args.per_trigger)
                read, rows = run_source(
                    spark, out, work / f"cpr-{file_format}-{run}", file_format, args.per_trigger
                )
                if rows != args.rows:
                    raise RuntimeError(f"{file_format} source read {rows} rows, expected {args.rows}")
                if run:
                    sink_times[file_format].append(took)
                    source_times[file_format].append(read)
                print(f"run {run} {file_format:7s} sink {took:7.1f} s   source {read:7.1f} s", flush=True)
                shutil.rmtree(checkpoint, ignore_errors=True)
        batches = -(-args.files // args.per_trigger)
        shape = (
            f"{args.rows} rows, {args.files} files, {args.per_trigger} files per batch ({batches} batches)"
        )
        print(f"\n{shape}")
        for what, times in (("sink", sink_times), ("source", source_times)):
            delta, parquet = statistics.median(times["delta"]), statistics.median(times["parquet"])
            rates = f"({args.rows / delta:9,.0f} rows/s)", f"({args.rows / parquet:9,.0f} rows/s)"
            print(
                f"{what:6s}: Delta {delta:6.1f} s {rates[0]}  parquet {parquet:6.1f} s {rates[1]}  "
                f"ratio Delta/parquet {delta / parquet:.2f}"
            )
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
