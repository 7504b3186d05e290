"""Memory and time of an availableNow catch-up over many partitions (#30 item 5).

    .venv/bin/python bench/many_partitions.py [--events 20480] [--partitions 64,1024] [--reps 2]

The same number of events (100-byte bodies) spread evenly over a hub of each size, read by a
local[2] Spark session of its own (a fresh JVM and fresh Python workers, so no run inherits
another's cached receivers) with ``trigger(availableNow=True)`` into parquet (one batch:
``maxEventsPerTrigger`` = all events; management requests at 5,000/s). While a run goes, the
resident memory of the Spark driver JVM and of every Python worker is sampled every 0.2 s; the
peak of each is printed per hub size, with the catch-up time. Sizes alternate between repetitions,
each run on a fresh hub of the emulator (its own process). A wrong row count stops the bench.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import connector_spark, run_until_done, spread, start_emulator

from pyspark_eventhubs import EventPosition

SENDERS = 16
EARLIEST = EventPosition.start_of_stream().to_json()


def fill(connection_string: str, partitions: int, per_partition: int) -> None:
    """``per_partition`` events on each partition, from :data:`SENDERS` producer threads."""
    from azure.eventhub import EventData, EventHubProducerClient

    def send(share: list[str]) -> None:
        producer = EventHubProducerClient.from_connection_string(connection_string)
        try:
            for pid in share:
                batch = producer.create_batch(partition_id=pid)
                for i in range(per_partition):
                    batch.add(EventData(f"{pid}-{i}".ljust(100, ".")))
                producer.send_batch(batch)
        finally:
            producer.close()

    ids = [str(p) for p in range(partitions)]
    with ThreadPoolExecutor(SENDERS) as pool:
        list(pool.map(send, [ids[k::SENDERS] for k in range(SENDERS)]))


class PeakMemory:
    """Samples the RSS of the driver JVM and of each Python worker below this process."""

    def __init__(self) -> None:
        self.jvm = 0
        self.worker = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = psutil.Process(os.getpid())
        while not self._stop.wait(0.2):
            for proc in me.children(recursive=True):
                try:
                    rss = proc.memory_info().rss
                    line = " ".join(proc.cmdline())
                except psutil.Error:
                    continue
                if "java" in proc.name():
                    self.jvm = max(self.jvm, rss)
                elif "pyspark" in line:  # pyspark.daemon and the workers it forks
                    self.worker = max(self.worker, rss)


def catch_up(spark: object, connection_string: str, events: int, workdir: Path) -> tuple[float, int, int]:
    """Seconds of the catch-up, and the peak RSS (bytes) of the driver JVM and of a Python worker."""
    options = {
        "eventhubs.connectionString": connection_string,
        "eventhubs.startingPosition": EARLIEST,
        "eventhubs.managementRequestsPerSecond": "5000",
        "maxEventsPerTrigger": str(events),
    }
    out = workdir / "out"
    writer = (
        spark.readStream.format("eventhubs")  # type: ignore[attr-defined]
        .options(**options)
        .load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(workdir / "ckpt"))
        .trigger(availableNow=True)
    )
    with PeakMemory() as peak:
        elapsed, _ = run_until_done(writer, "catch-up")
    rows = spark.read.parquet(str(out)).select("partition", "sequenceNumber").distinct().count()  # type: ignore[attr-defined]
    if rows != events:
        raise RuntimeError(f"{rows} distinct events landed, {events} sent")
    return elapsed, peak.jvm, peak.worker


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20480)
    parser.add_argument("--partitions", default="64,1024")
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    sizes = [int(p) for p in args.partitions.split(",")]
    results: dict[int, list[tuple[float, int, int]]] = {size: [] for size in sizes}
    with tempfile.TemporaryDirectory() as tmp:
        hubs = {f"h{rep}x{size}": size for rep in range(args.reps) for size in sizes}
        emulator = start_emulator(Path(tmp), hubs)
        try:
            for rep in range(args.reps):
                for size in sizes if rep % 2 == 0 else list(reversed(sizes)):
                    hub = emulator.connection_strings[f"h{rep}x{size}"]
                    fill(hub, size, args.events // size)
                    spark = connector_spark("local[2]")
                    try:
                        result = catch_up(
                            spark, hub, size * (args.events // size), Path(tmp) / f"r{rep}-{size}"
                        )
                    finally:
                        spark.stop()
                    results[size].append(result)
                    print(
                        f"rep {rep} partitions {size}: {result[0]:.1f} s, JVM {result[1] >> 20} MiB, "
                        f"Python worker {result[2] >> 20} MiB",
                        flush=True,
                    )
        finally:
            emulator.stop()
    for size, runs in results.items():
        print(
            f"{size:>5} partitions: catch-up {spread([r[0] for r in runs], '{:.1f}')} s, "
            f"driver JVM peak {spread([r[1] / 2**20 for r in runs])} MiB, "
            f"Python worker peak {spread([r[2] / 2**20 for r in runs])} MiB"
        )


if __name__ == "__main__":
    main()
