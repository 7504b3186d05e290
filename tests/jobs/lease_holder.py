"""A stand-in driver for the lease tests: the real lease, watchdog and hard exit, without Spark.

    python tests/jobs/lease_holder.py STATUS_DIR --timing DURATION REFRESH FENCE [--go FILE] [--ignore-stop]

Waits for ``--go`` to exist (so many start at once), takes the job's lease (prints ``REFUSED`` and
exits 3 when another instance holds it), prints ``ACQUIRED <seconds it waited>``, runs the
watchdog (lease renewal, STOP/HOLD/KILL markers, fencing by :class:`HardExit`) and reports
``running`` in status.json until a stop request (ignored with ``--ignore-stop``), then stops
cleanly (exit 0). Lines go to stdout, flushed at once.
"""

from __future__ import annotations

import argparse
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


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("status_dir")
    parser.add_argument(
        "--timing", nargs=3, type=float, required=True, metavar=("DURATION", "REFRESH", "FENCE")
    )
    parser.add_argument("--go")
    parser.add_argument("--ignore-stop", action="store_true")
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
        time.sleep(0.05)
    say(f"STOPPING {stop.reason}")
    watchdog.close()
    status.update(state=JobState.STOPPED, stop_reason=stop.reason)
    lease.release()
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
