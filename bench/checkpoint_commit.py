"""What a micro-batch's checkpoint writes cost on a local disk: Spark's default checkpoint manager
against the one every hubflow job uses (``CHECKPOINT_CONF``).

Spark writes two files per micro-batch into the checkpoint: the offset log before the batch
(``walCommit``) and the commit log after it (``commitOffsets``). Its default manager goes through
Hadoop's FileContext, which on a local disk without Hadoop's native library starts ``readlink``
processes for every file it renames into place; hubflow's goes through Hadoop's FileSystem API.
Same session, one query per side: Spark's ``rate`` source (``--rate`` rows/s, one partition; its
offset moves once a second, so one batch a second) into Spark's ``noop`` sink,
``processingTime="0 seconds"``, a fresh checkpoint folder under ``--folder`` each time. The sides
alternate (order rotated per repetition); the summary gives the median of Spark's own
``durationMs`` per side over the batches of the measured windows and hubflow's
``triggerExecution`` as a share of Spark's default.

Usage: ``.venv/bin/python bench/checkpoint_commit.py [--rate 1000] [--seconds 20] [--warmup 5]``
``[--reps 3] [--folder /tmp]``
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any

from harness import add_conf_argument, conf_from, connector_spark
from streaming_measures import measured_batches, median_durations

from hubflow_jobs.runtime.session import CHECKPOINT_CONF

KEY = "spark.sql.streaming.checkpointFileManagerClass"
SIDES = {
    "Spark's default (FileContext)": (
        "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager"
    ),
    "hubflow's (FileSystem)": CHECKPOINT_CONF[KEY],
}
PHASES = ("walCommit", "addBatch", "commitOffsets", "triggerExecution")


def run_side(spark: Any, manager: str, args: argparse.Namespace) -> list[Any]:
    """The progress of the batches in one measured window of a rate -> noop query using ``manager``."""
    spark.conf.set(KEY, manager)  # read when the query starts
    folder = tempfile.mkdtemp(prefix="checkpoint-commit-", dir=args.folder)
    query = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", args.rate)
        .option("numPartitions", 1)
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", f"{folder}/checkpoint")
        .trigger(processingTime="0 seconds")
        .start()
    )
    try:
        time.sleep(args.warmup)
        from_ms = time.time() * 1000
        time.sleep(args.seconds)
        return measured_batches(query.recentProgress, from_ms)
    finally:
        query.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=int, default=1000, help="rows per second")
    parser.add_argument("--seconds", type=float, default=20, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=5, help="seconds left out at each query start")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--folder", default=None, help="where the checkpoints go (default: the temp dir)")
    add_conf_argument(parser)
    args = parser.parse_args()

    spark = connector_spark("local[2]", conf_from(args))
    names = list(SIDES)
    batches: dict[str, list[Any]] = {name: [] for name in names}
    for rep in range(args.reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for name in order:
            measured = run_side(spark, SIDES[name], args)
            batches[name].extend(measured)
            print(f"rep {rep + 1} {name}: {len(measured)} batches", flush=True)
    spark.stop()

    window = f"{args.reps} rep(s) x {args.seconds:g} s after {args.warmup:g} s"
    print(f"\nrate -> noop, {args.rate} rows/s, local[2], {window}")
    print("\n| checkpoint manager | batches | " + " | ".join(f"{p} (ms)" for p in PHASES) + " |")
    print("|---|---|" + "---|" * len(PHASES))
    medians = {}
    for name in names:
        medians[name] = median_durations(batches[name], PHASES)
        cells = " | ".join(f"{medians[name][p]:.0f}" for p in PHASES)
        print(f"| {name} | {len(batches[name])} | {cells} |")
    default, hubflow = (medians[name]["triggerExecution"] for name in names)
    print(f"\nhubflow's triggerExecution / Spark's default: {hubflow / default:.2f}x")


if __name__ == "__main__":
    main()
