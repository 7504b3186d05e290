"""The fixed cost per micro-batch of the pipeline layer (issue #26): a pipeline against a direct query.

The same backlog of ``--events`` Event Hubs events (``--size``-byte bodies, 4 partitions) is read
twice per repetition, each time from the earliest event into a new Delta table, by one ``local[2]``
session with the jobs' own defaults, ``maxEventsPerTrigger`` ``--per-batch`` (so ``events /
per_batch`` micro-batches), availableNow, through the jobs' runtime (``run_job``):

* **direct**: the query written by hand, as ``eventhubs_to_lake`` was before it became a pipeline:
  ``readStream.format("eventhubs")``, the bronze columns, ``lake_tables.start_table_stream`` (Delta);
* **pipeline**: the built-in ``eventhubs_to_lake`` as it is now, a pipeline (its function ``bronze``,
  a ``kind: delta`` sink), started through the pipeline layer (``start_function``).

Both write the same rows the same way once started, so what differs per batch is whatever the
pipeline layer adds. Each batch's ``durationMs.triggerExecution`` is taken from the query's progress
(a streaming listener); the first batch of a run (query start, worker spawn) is left out. The sides
alternate which goes first in each of ``--repeats`` repetitions, after one warm-up run of each that
is not counted; the medians and the ratio pipeline / direct are printed (goal: at most 1.05).

Usage: ``.venv/bin/python bench/pipeline_overhead.py [--events 200000] [--per-batch 10000] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "jobs"))

from connector_catchup import PARTITIONS, fill_hub
from harness import spread, start_emulator

SIDES = ("direct", "pipeline")
ENV_VAR = "HUBFLOW_BENCH_PIPELINE_CONNECTION"


def session() -> Any:
    """``local[2]`` with the jobs' defaults, UI off, the connector registered."""
    from pyspark.sql import SparkSession

    from hubflow_jobs.runtime.session import DEFAULT_CONF
    from pyspark_eventhubs import DefaultSource, register_data_source

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.master("local[2]").appName("hubflow-bench-pipeline")
    conf = {
        **DEFAULT_CONF,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
    }
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register_data_source(spark, DefaultSource)
    return spark


class TriggerTimes:
    """Collects ``durationMs.triggerExecution`` of every batch of every query, by query name."""

    def __init__(self, spark: Any) -> None:
        from pyspark.sql.streaming import StreamingQueryListener

        times: dict[str, list[tuple[int, int]]] = {}
        self.times = times

        class Listener(StreamingQueryListener):
            def onQueryStarted(self, event: Any) -> None:
                pass

            def onQueryProgress(self, event: Any) -> None:
                progress = event.progress
                if progress.numInputRows:
                    times.setdefault(progress.name, []).append(
                        (progress.batchId, progress.durationMs["triggerExecution"])
                    )

            def onQueryIdle(self, event: Any) -> None:
                pass

            def onQueryTerminated(self, event: Any) -> None:
                pass

        spark.streams.addListener(Listener())

    def after_first(self, name: str) -> list[int]:
        """The batches' trigger times of the query ``name``, its first batch left out."""
        return [ms for _batch, ms in sorted(self.times.pop(name, []))[1:]]


def config(base: Path, name: str, per_batch: int) -> dict[str, Any]:
    """The job config of one run (both sides read the same config: eventhubs_to_lake's)."""
    return {
        "name": name,
        "trigger": {"availableNow": True},
        "checkpoint_root": str(base / "checkpoints"),
        "status_root": str(base / "status"),
        "runtime": {"heartbeat_interval": "1 second", "poll_interval": "200 ms"},
        "sources": {
            "events": {
                "kind": "eventhubs",
                "connection_string_env": ENV_VAR,
                "max_events_per_trigger": per_batch,
            }
        },
        "sinks": {
            "bronze": {
                "kind": "delta",
                "output_path": str(base / "lake" / name),
                "partition_by": ["ingest_date"],
            }
        },
    }


def start_direct(spark: Any, job_config: Any, status: Any) -> Any:
    """The reference: the query eventhubs_to_lake started before it was a pipeline, written by hand."""
    from pyspark.sql import functions as F

    from hubflow_jobs.lake.tables import INGEST_DATE_COLUMN, start_table_stream

    source, sink = job_config.sources["events"], job_config.sinks["bronze"]
    events = spark.readStream.format("eventhubs").options(**source.spark_options()).load()
    now = F.current_timestamp()
    rows = events.withColumn("_ingested_at", now).withColumn(INGEST_DATE_COLUMN, F.to_date(now))
    return start_table_stream(
        rows,
        query_name=job_config.name,
        path=sink.output_path,
        file_format=sink.kind,
        checkpoint=job_config.checkpoint_location,
        partition_by=sink.partition_by,
        trigger=job_config.trigger.spark_kwargs(),
    )


def run(spark: Any, times: TriggerTimes, side: str, workdir: Path, tag: str, per_batch: int) -> list[int]:
    """One availableNow run of ``side`` from the earliest event; its trigger times after the first."""
    import yaml

    from hubflow.config import load_config
    from hubflow.status.exit_codes import EXIT_OK
    from hubflow_jobs.builtins.eventhubs_to_lake import EventHubsToLakeConfig
    from hubflow_jobs.pipeline.job import start_function
    from hubflow_jobs.runtime.runner import run_job
    from hubflow_jobs.runtime.stop import StopRequest

    name = f"{side}_{tag}"
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config(workdir, name, per_batch)), encoding="utf-8")
    job_config = load_config(path, EventHubsToLakeConfig)
    start = start_direct if side == "direct" else start_function("eventhubs_to_lake")
    code, reason = run_job(spark, job_config, start, StopRequest())
    if code != EXIT_OK:
        raise RuntimeError(f"{side} run {tag} failed: {reason}")
    return times.after_first(name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--per-batch", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="hubflow-bench-pipeline-") as temp:
        workdir = Path(temp)
        emulator = start_emulator(workdir, {"telemetry": PARTITIONS})
        try:
            conn = emulator.connection_strings["telemetry"]
            os.environ[ENV_VAR] = conn
            print(f"filling the hub with {args.events:,} events of {args.size} B ...", flush=True)
            fill_hub(conn, args.events, args.size)
            spark = session()
            times = TriggerTimes(spark)
            for side in SIDES:
                run(spark, times, side, workdir, "warmup", args.per_batch)
            results: dict[str, list[int]] = {side: [] for side in SIDES}
            medians: dict[str, list[float]] = {side: [] for side in SIDES}
            for repeat in range(args.repeats):
                order = SIDES if repeat % 2 == 0 else tuple(reversed(SIDES))
                for side in order:
                    batch_ms = run(spark, times, side, workdir, f"r{repeat}", args.per_batch)
                    results[side] += batch_ms
                    medians[side].append(statistics.median(batch_ms))
                    print(
                        f"repeat {repeat + 1} {side:9s}: {len(batch_ms)} batches, triggerExecution median "
                        f"{statistics.median(batch_ms):,.0f} ms",
                        flush=True,
                    )
            spark.stop()
        finally:
            emulator.stop()
    print()
    for side in SIDES:
        print(
            f"{side:9s}: per-run medians {spread(medians[side])} ms; all batches median "
            f"{statistics.median(results[side]):,.0f} ms ({len(results[side])} batches)"
        )
    ratio = statistics.median(results["pipeline"]) / statistics.median(results["direct"])
    ratios = [p / b for p, b in zip(medians["pipeline"], medians["direct"], strict=True)]
    per_repeat = ", ".join(f"{r:.3f}" for r in ratios)
    print(f"ratio pipeline / direct (median batch): {ratio:.3f}; per repeat {per_repeat}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
