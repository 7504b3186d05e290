"""The fast receive path's hot loops, compiled against pure Python, without Spark (#49 item 4).

    .venv/bin/python bench/decoder_loops.py [--events 20000] [--reps 15] [--rounds 2]

Messages as the emulator delivers a producer's events (200 B body, three string properties,
sequence number, offset, enqueued time, encoded by the emulator's codec) go through
``decode_deliveries``; transfer frames of 250 B through the receiver's ``_scan`` and
``_take_block``. Each measurement is the fastest of ``--reps`` runs; the two modes
(``pyspark_eventhubs.native.accel`` set or None) alternate for ``--rounds`` rounds in one process.
Prints µs per event, median (min-max) over the rounds, and the ratio pure Python / compiled.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import spread

from eventhubs_emulator.codec import Described, Symbol, Timestamp, encode
from pyspark_eventhubs import native
from pyspark_eventhubs.delivery_decoder import decode_deliveries
from tests.support.amqp_frames import Scanner, transfer


def messages(count: int) -> tuple[bytes, list[int], list[int]]:
    """``count`` encoded messages in one buffer, and where each one is."""
    data = bytearray()
    starts, ends = [], []
    for i in range(count):
        seq = 5_000_000_000 + i
        annotations = {
            Symbol("x-opt-sequence-number"): seq,
            Symbol("x-opt-offset"): str(seq * 250),
            Symbol("x-opt-enqueued-time"): Timestamp(1_763_800_000_000 + i),
        }
        props = {"source": "bench", "kind": "reading", "n": f"x{i:05d}"}
        message = encode(Described(0x72, annotations)) + encode(Described(0x74, props))
        message += encode(Described(0x75, b"z" * 200))
        starts.append(len(data))
        data += message
        ends.append(len(data))
    return bytes(data), starts, ends


def fastest(run: Callable[[], None], reps: int, events: int) -> float:
    """µs per event of the fastest of ``reps`` runs."""
    best = float("inf")
    for _ in range(reps):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best / events * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    compiled = native.accel
    if compiled is None:
        sys.exit("pyspark_eventhubs._native is not built (make venv builds it; docs/connector.md)")
    data, starts, ends = messages(args.events)
    frames = b"".join(transfer(1000 + i, b"p" * 250) for i in range(args.events))

    def decode() -> None:
        decode_deliveries(data, starts, ends, "0")

    def scan() -> None:
        scanner = Scanner()
        scanner._buf += frames
        scanner._scan(args.events + 1)
        scanner._take_block()

    results: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for mode, accel in (("compiled", compiled), ("pure Python", None)):
            native.accel = accel
            for name, run in (("decode_deliveries", decode), ("_scan + _take_block", scan)):
                results.setdefault((name, mode), []).append(fastest(run, args.reps, args.events))
    native.accel = compiled
    print(f"{args.events:,} events, fastest of {args.reps} runs, {args.rounds} rounds alternating")
    print("| Per event | pure Python µs | compiled µs | pure Python / compiled |")
    print("|---|---|---|---|")
    for name in ("decode_deliveries", "_scan + _take_block"):
        python, fast = results[(name, "pure Python")], results[(name, "compiled")]
        ratio = statistics.median(p / c for p, c in zip(python, fast, strict=True))
        print(f"| {name} | {spread(python, '{:.2f}')} | {spread(fast, '{:.2f}')} | {ratio:.1f}x |")


if __name__ == "__main__":
    main()
