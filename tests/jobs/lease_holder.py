"""A stand-in driver for the lease tests: the real lease, watchdog and hard exit, without Spark.

    python tests/jobs/lease_holder.py STATUS_DIR --timing DURATION REFRESH FENCE [--go FILE] [--ignore-stop]
        [--checkpoint DIR HUB]

Waits for ``--go`` to exist (so many start at once), takes the job's lease (prints ``REFUSED`` and
exits 3 when another instance holds it), prints ``ACQUIRED <seconds it waited>``, runs the
watchdog (lease renewal, STOP/HOLD/KILL markers, fencing by :class:`HardExit`) and reports
``running`` in status.json until a stop request (ignored with ``--ignore-stop``), then stops
cleanly (exit 0). With ``--checkpoint``, it writes the checkpoint as a Spark driver would while it
holds the lease: every tick the batch after the last commit, its ``offsets/<id>`` (reading up to
sequence number ``10 * (id + 1)`` in partitions 0 and 1 of ``HUB``) and its ``commits/<id>``,
printing ``BATCH <id>``. Lines go to stdout, flushed at once.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from hubflow.config import RuntimeConfig
from hubflow.status import JobState, JobStatus, Lease, LeaseHeldError, StatusFolder
from hubflow.status.exit_codes import EXIT_LOCKED, EXIT_OK
from hubflow_jobs.runtime.stop import StopRequest
from hubflow_jobs.runtime.watchdog import HardExit, Watchdog


def say(text: str) -> None:
    print(text, flush=True)


def write_batch(checkpoint: Path, hub: str) -> int:
    """Plan and commit the next batch of ``checkpoint`` (folders created as Spark creates them)."""
    offsets, commits = checkpoint / "offsets", checkpoint / "commits"
    offsets.mkdir(parents=True, exist_ok=True)
    commits.mkdir(parents=True, exist_ok=True)
    # The batch after the last commit: a planned batch never committed is planned again, as Spark does.
    batch = max((int(p.name) for p in commits.iterdir() if p.name.isdigit()), default=-1) + 1
    end = {"0": 10 * (batch + 1), "1": 10 * (batch + 1)}
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}'
    (offsets / str(batch)).write_text(f"v1\n{meta}\n{json.dumps({hub: end})}")
    (commits / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    return batch


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("status_dir")
    parser.add_argument(
        "--timing", nargs=3, type=float, required=True, metavar=("DURATION", "REFRESH", "FENCE")
    )
    parser.add_argument("--go")
    parser.add_argument("--ignore-stop", action="store_true")
    parser.add_argument("--checkpoint", nargs=2, metavar=("DIR", "HUB"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(name)s: %(message)s")
    duration, refresh, fence = args.timing
    runtime = RuntimeConfig.model_validate(
        {
            "poll_interval": "100 ms",
            "heartbeat_interval": "200 ms",
            "lease_duration": f"{duration} s",
            "lease_refresh_interval": f"{refresh} s",
            "lease_fence_after": f"{fence} s",
        }
    )
    if args.go:
        say("READY")
        while not Path(args.go).exists():
            time.sleep(0.01)
    folder = StatusFolder(args.status_dir)
    job = args.status_dir.rstrip("/").rsplit("/", 1)[-1]
    lease = Lease(folder, job, runtime.lease_timing())
    started = time.monotonic()
    try:
        lease.acquire()
    except LeaseHeldError as exc:
        say(f"REFUSED {exc}")
        return EXIT_LOCKED
    say(f"ACQUIRED {time.monotonic() - started:.2f}")
    stop = StopRequest()
    status = JobStatus(folder, job)
    status.update(state=JobState.RUNNING)
    watchdog = Watchdog(folder, status, stop, runtime, HardExit(job, status, lease), lease=lease).start()
    while args.ignore_stop or not stop.requested:
        if args.checkpoint and lease.held:
            say(f"BATCH {write_batch(Path(args.checkpoint[0]), args.checkpoint[1])}")
        time.sleep(0.05)
    say(f"STOPPING {stop.reason}")
    watchdog.close()
    status.update(state=JobState.STOPPED, stop_reason=stop.reason)
    lease.release()
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
