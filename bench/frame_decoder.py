"""Frames per second through the emulator's hardened decoder against the one before it (#28 item 2).

    .venv/bin/python bench/frame_decoder.py [--reps 5] [--seconds 1.0] [--before 31ec9f5^]

The emulator decodes every frame a client sends: its performative (decoded, now its fields checked
against their AMQP types, ``frames.check_fields``, and padded) and, for a producer's transfer, the
batch message after it. "Before" is ``codec.py`` as it was at ``--before`` (the commit before
the decoder refused hostile input), loaded from git into a module of its own, doing what the
connection did then (decode and pad). Frames: a producer's transfer of a 100-event batch (200 B
bodies, 3 properties), a consumer's flow and an attach. Sides alternate, ``--reps`` times each,
``--seconds`` per measurement; prints frames/s median (min-max) and the ratio now/before.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import spread

from eventhubs_emulator import codec, frames
from eventhubs_emulator.codec import Described, Symbol, UInt, ULong

REPO = Path(__file__).resolve().parent.parent


def load_codec(revision: str) -> Any:
    """``emulator/eventhubs_emulator/codec.py`` at ``revision`` as a module of its own."""
    source = subprocess.run(
        ["git", "show", f"{revision}:emulator/eventhubs_emulator/codec.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "codec_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("codec_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sample_frames() -> dict[str, bytes]:
    """Frame bodies (after the 8-byte header) a client sends, encoded by the current encoder."""
    event = codec.encode(Described(0x74, {"a": "1", "b": "two", "c": 3})) + codec.encode(
        Described(0x75, b"x" * 200)
    )
    header = Described(ULong(frames.TRANSFER), [UInt(1), UInt(7), b"tag", UInt(0x80013700), True])
    transfer = (
        codec.encode(header)
        + codec.encode(Described(0x73, [None, None, None]))
        + b"".join(codec.encode(Described(0x75, event)) for _ in range(100))  # one data section each
    )
    flow_fields = [UInt(0), UInt(5000), UInt(0), UInt(5000), UInt(2), UInt(0), UInt(500)]
    source = Described(frames.SOURCE, ["amqps://ns/hub/ConsumerGroups/$Default/Partitions/0"] + [None] * 10)
    attach_fields = ["receiver-1", UInt(2), True, None, None, source] + [None] * 7
    attach_fields.append({Symbol("com.microsoft:epoch"): 0})
    return {
        "transfer (100 events)": transfer,
        "flow": codec.encode(Described(ULong(frames.FLOW), flow_fields)),
        "attach": codec.encode(Described(ULong(frames.ATTACH), attach_fields)),
    }


def handler(module: Any, check: bool) -> Callable[[bytes], None]:
    """What the connection does with a frame body: its performative decoded, (now) checked and
    padded, then every section of a transfer's message decoded."""

    def handle(body: bytes) -> None:
        value, pos = module.decode(body, 0)
        code = int(value.descriptor)
        if check:  # as connection._performative: the fields as received, then padded
            assert frames.check_fields(code, value.value) is None
        frames.pad(value.value, code)
        while pos < len(body):
            _, pos = module.decode(body, pos)

    return handle


def rate(handle: Callable[[bytes], None], body: bytes, seconds: float) -> float:
    count, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        for _ in range(50):
            handle(body)
        count += 50
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--before", default="31ec9f5^")
    args = parser.parse_args()
    before, now = handler(load_codec(args.before), check=False), handler(codec, check=True)
    for name, body in sample_frames().items():
        results: dict[str, list[float]] = {"now": [], "before": []}
        for _ in range(args.reps):
            results["before"].append(rate(before, body, args.seconds))
            results["now"].append(rate(now, body, args.seconds))
        ratio = sorted(results["now"])[args.reps // 2] / sorted(results["before"])[args.reps // 2]
        print(
            f"{name:22} now {spread(results['now'])} frames/s, before {spread(results['before'])}"
            f" frames/s: {ratio:.2f}x"
        )


if __name__ == "__main__":
    main()
