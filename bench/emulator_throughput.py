"""Benchmark: the Event Hubs emulator with the real azure-eventhub SDK on both ends (one run).

What it measures, for 200-byte and 2 KB events:

- produce: events/s sent with ``send_batch`` (full batches) from one producer process;
- consume 1: events/s read from one partition by one consumer process;
- consume 4: aggregate events/s of four consumer processes reading four partitions at once;
- ratio: aggregate / single. Near the number of usable cores means the consumers (the SDK) are the
  limit, not the emulator; the emulator's own CPU use during the run is printed too.

The emulator runs as its own process (``python -m eventhubs_emulator``), like in the local stack.

Usage: ``.venv/bin/python bench/emulator_throughput.py [--events 20000] [--sizes 200,2048]``

With ``--against [REV]`` (REV defaults to ``31ec9f5^``, the commit before the emulator's hardening,
#28) it compares: the ``emulator/`` tree at REV is exported from git into a temporary folder and the
same measurements run against an emulator process importing that package (``PYTHONPATH`` first)
and against today's, interleaved (before, today, before, today, ...), ``--reps N`` times each
(default 3); it prints per side median (min-max) and the ratio today/before of the medians.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness import spread, start_emulator

HUB = "bench"
PARTITIONS = 4
REPO = Path(__file__).resolve().parent.parent
BEFORE = "31ec9f5^"  # the commit before the emulator's hardening (#28)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used by a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def produce(conn: str, partition: str, count: int, size: int) -> float:
    """Send ``count`` events of ``size`` bytes to one partition in full batches; return seconds taken."""
    from azure.eventhub import EventData, EventHubProducerClient

    body = b"x" * size
    with EventHubProducerClient.from_connection_string(conn) as producer:
        warm_up = producer.create_batch(partition_id=partition)  # the first send opens the link: not timed
        warm_up.add(EventData(body))
        producer.send_batch(warm_up)
        started = time.perf_counter()
        sent = 1
        while sent < count:
            batch = producer.create_batch(partition_id=partition)
            while sent < count:
                try:
                    batch.add(EventData(body))
                except ValueError:
                    break
                sent += 1
            producer.send_batch(batch)
        return time.perf_counter() - started


def consume(conn: str, partition: str, count: int, results: mp.Queue) -> None:
    """Read ``count`` events from one partition; report (count, first event time, last event time)."""
    from azure.eventhub import EventHubConsumerClient

    from pyspark_eventhubs import DEFAULT_CONSUMER_GROUP

    client = EventHubConsumerClient.from_connection_string(conn, consumer_group=DEFAULT_CONSUMER_GROUP)
    state = {"n": 0, "first": 0.0, "last": 0.0}
    done = threading.Event()

    def on_batch(_ctx, events) -> None:
        if not events:
            return
        now = time.perf_counter()
        if state["n"] == 0:
            state["first"] = now
        state["n"] += len(events)
        state["last"] = now
        if state["n"] >= count:
            done.set()

    thread = threading.Thread(
        target=lambda: client.receive_batch(
            on_batch, partition_id=partition, starting_position="-1", max_batch_size=300, max_wait_time=1
        ),
        daemon=True,
    )
    thread.start()
    done.wait(timeout=600)
    client.close()
    results.put((partition, state["n"], state["first"], state["last"]))


def run_consumers(conn: str, partitions: list[str], count: int) -> tuple[int, float]:
    """Run one consumer process per partition; return (events, seconds from first to last event)."""
    ctx = mp.get_context("spawn")
    results: mp.Queue = ctx.Queue()
    procs = [ctx.Process(target=consume, args=(conn, p, count, results)) for p in partitions]
    for p in procs:
        p.start()
    rows = [results.get(timeout=900) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    total = sum(r[1] for r in rows)
    # The first batch arrives as one burst of `prefetch` events, so time from the earliest first batch.
    elapsed = max(r[3] for r in rows) - min(r[2] for r in rows)
    return total, elapsed


def measure(workdir: Path, size: int, events: int, tree: Path | None = None) -> dict[str, float]:
    """One run at ``size``: a fresh emulator process, produce, consume 1, consume 4 (rates and CPU).

    ``tree``: a folder holding another ``eventhubs_emulator`` for the emulator process to import
    (first on its PYTHONPATH); the SDK clients are the same either way."""
    with pythonpath(tree):  # the emulator process inherits it; the clients, started later, do not
        emulator = start_emulator(workdir, {HUB: PARTITIONS})
    proc, conn = emulator.process, emulator.connection_strings[HUB]
    try:
        ids = [str(i) for i in range(PARTITIONS)]
        cpu0 = cpu_seconds(proc.pid)
        seconds = sum(produce(conn, p, events, size) for p in ids)
        cpu1 = cpu_seconds(proc.pid)
        one_n, one_s = run_consumers(conn, ["0"], events)
        cpu2 = cpu_seconds(proc.pid)
        wall = time.perf_counter()
        four_n, four_s = run_consumers(conn, ids, events)
        wall = time.perf_counter() - wall
        cpu3 = cpu_seconds(proc.pid)
    finally:
        emulator.stop()
    return {
        "produce": PARTITIONS * events / seconds,
        "produce_s": seconds,
        "produce_cpu": cpu1 - cpu0,
        "consume1": one_n / one_s,
        "consume1_n": one_n,
        "consume1_cpu": cpu2 - cpu1,
        "consume4": four_n / four_s,
        "consume4_n": four_n,
        "consume4_cpu": cpu3 - cpu2,
        "consume4_wall": wall,
    }


def print_single(size: int, r: dict[str, float]) -> None:
    """The one-side report of one size (the script's output without ``--against``)."""
    print(f"## {size}-byte events")
    print(
        f"produce (1 producer, batched):   {r['produce']:10,.0f} events/s "
        f"(emulator CPU {r['produce_cpu']:.1f}s of {r['produce_s']:.1f}s)"
    )
    print(
        f"consume 1 partition, 1 process:  {r['consume1']:10,.0f} events/s ({r['consume1_n']} events, "
        f"emulator CPU {r['consume1_cpu']:.1f}s)"
    )
    print(
        f"consume 4 partitions, 4 procs:   {r['consume4']:10,.0f} events/s aggregate ({r['consume4_n']} "
        f"events, emulator CPU {r['consume4_cpu']:.1f}s of {r['consume4_wall']:.1f}s wall)"
    )
    print(f"aggregate / single ratio:        {r['consume4'] / r['consume1']:10.2f}\n", flush=True)


def export_emulator(revision: str, dest: Path) -> Path:
    """The ``emulator/`` tree at ``revision`` extracted under ``dest``; returns the folder to put on
    PYTHONPATH (the one holding ``eventhubs_emulator``)."""
    archive = subprocess.run(
        ["git", "archive", revision, "emulator"], cwd=REPO, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest / "emulator"


@contextmanager
def pythonpath(first: Path | None) -> Iterator[None]:
    """``first`` ahead on PYTHONPATH while starting a child process (nothing when None)."""
    old = os.environ.get("PYTHONPATH")
    if first is not None:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(first), *([old] if old else [])])
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def imported_from(first: Path | None) -> str:
    """Where ``python -m eventhubs_emulator`` imports the package from, with ``first`` on PYTHONPATH
    (a child with the same interpreter, environment and working directory as the emulator's)."""
    with pythonpath(first):
        return subprocess.run(
            [sys.executable, "-c", "import eventhubs_emulator.__main__ as m; print(m.__file__)"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()


def compare(revision: str, sizes: list[int], events: int, reps: int) -> None:
    """Today's emulator against the one at ``revision``, interleaved; medians and ratios."""
    rev = subprocess.run(
        ["git", "rev-parse", "--short", revision], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        old_tree = export_emulator(revision, Path(tmp))
        sides = {f"before ({revision} = {rev})": old_tree, "today": None}
        for name, first in sides.items():
            where = imported_from(first)
            print(f"# {name}: eventhubs_emulator imported from {where}")
            expected = old_tree if first is not None else REPO / "emulator"
            if not Path(where).is_relative_to(expected):
                raise SystemExit(f"{name} would import the emulator from {where}, not from {expected}")
        print()
        results: dict[tuple[str, int], list[dict[str, float]]] = {}
        for rep in range(reps):
            for size in sizes:
                for name, first in sides.items():
                    workdir = Path(tmp) / f"run-{rep}-{size}-{name.split()[0]}"
                    workdir.mkdir()
                    r = measure(workdir, size, events, first)
                    results.setdefault((name, size), []).append(r)
                    print(
                        f"rep {rep + 1} {size:>5} B {name.split()[0]:>6}: produce {r['produce']:8,.0f}  "
                        f"consume 1 {r['consume1']:8,.0f}  consume 4 {r['consume4']:8,.0f} events/s",
                        flush=True,
                    )
    before, today = sides
    print(f"\n## medians (min-max) of {reps} runs, events/s; ratio = today / before")
    for size in sizes:
        print(f"\n### {size}-byte events")
        for key, label in (("produce", "produce"), ("consume1", "consume 1"), ("consume4", "consume 4")):
            a = [r[key] for r in results[(before, size)]]
            b = [r[key] for r in results[(today, size)]]
            ratio = statistics.median(b) / statistics.median(a)
            print(f"{label:<10} before {spread(a):<26} today {spread(b):<26} ratio {ratio:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20000, help="events per partition (default 20000)")
    parser.add_argument("--sizes", default="200,2048", help="event sizes in bytes (default 200,2048)")
    parser.add_argument(
        "--against",
        nargs="?",
        const=BEFORE,
        default=None,
        metavar="REV",
        help=f"compare today's emulator with the one at REV (default REV {BEFORE}, before the hardening)",
    )
    parser.add_argument("--reps", type=int, default=3, help="runs per side with --against (default 3)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"# Event Hubs emulator throughput, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"# {os.cpu_count()} CPUs, python {sys.version.split()[0]}, {args.events} events per partition")
    print(f"# load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    if args.against is not None:
        compare(args.against, sizes, args.events, args.reps)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            for size in sizes:
                print_single(size, measure(Path(tmp), size, args.events))
    print(f"# load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
