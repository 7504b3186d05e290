"""A process of a test that holds a job's lease, as a driver elsewhere would, until told to let go.

    python -m tests.support.lease_keeper STATUS_DIR JOB

Takes the job's real :class:`~hubflow.status.lease.Lease` in ``STATUS_DIR`` (waiting for it like a
starting driver), prints ``HELD <token>``, renews it every second, and on a line on stdin (or its
end) releases it, prints ``RELEASED`` and exits 0. It writes nothing else: no status.json, no
heartbeat, no watchdog, so to hubflow the job is stopped while its lease is in use - what an on-call
rewind sees of a driver that has not let go of the checkpoint yet (it waits for the lease).
Lines go to stdout, flushed at once.
"""

from __future__ import annotations

import sys
import threading

from hubflow.status import Lease, StatusFolder
from hubflow.status.lease import LeaseTiming


def main() -> int:
    status_dir, job = sys.argv[1], sys.argv[2]
    lease = Lease(StatusFolder(status_dir), job, LeaseTiming(duration=60, refresh_interval=1, fence_after=30))
    lease.acquire()
    print(f"HELD {lease.token}", flush=True)
    told = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), told.set()), daemon=True).start()
    while not told.wait(1.0):
        if not lease.renew():
            print(f"LOST to {lease.lost_to}", flush=True)
            return 1
    lease.release()
    print("RELEASED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
