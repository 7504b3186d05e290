"""The embedded hubflow stack on one machine: `make demo` (run) and `make demo-stop` (stop).

``run`` shows what hubflow is for, on local Spark with Delta tables: the Event Hubs emulator and
Airflow standalone (SQLite metadata, LocalExecutor) start together; sample events go to the hub and
landing files to a folder. ``telemetry_bronze`` is a supervised streaming job: its supervisor DAG
starts it, the demo kills its driver (SIGKILL), the supervisor finds it dead, waits out its restart
backoff (the run's note says when the next start is due) and starts it again, and the restart loop
alert reaches the demo's own webhook receiver (a Slack stand-in, printed as it arrives).
``telemetry_silver`` runs by its Asset when the supervisor announces bronze's commits;
``landing_orders`` runs once on its schedule. The stream is then stopped and a summary read back
with delta-rs: every table, the restarts, the alerts received, the status page's address. Each step
says how many seconds into the demo it happened; a step that does not happen by its deadline ends
the demo with a non-zero exit naming the step and the logs.

Everything lives under ``.hubflow/demo/`` at the repository root. Without ``--keep-running`` the
stack is stopped at the end; with it, ``make demo-stop`` stops it later. A default port that is
taken (5672 is also RabbitMQ's, 8080 is common) is replaced by a free one, and the demo says so.
"""

from __future__ import annotations

import argparse
import sys
import time

# The steps live in scripts/hubflow_demo/, beside this file (Python puts a script's folder on
# sys.path).
from hubflow_demo.progress import T0, console
from hubflow_demo.run import run
from hubflow_demo.stop import stop_stack


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", nargs="?", default="run", choices=["run", "stop"])
    parser.add_argument("--keep-running", action="store_true", help="leave the stack up after the summary")
    args = parser.parse_args(argv)
    if args.command == "stop":
        stop_stack()
        return 0
    try:
        return run(args.keep_running)
    except BaseException:
        stop_stack(quiet=True)
        raise


if __name__ == "__main__":
    try:
        code = main()
    finally:
        console.print(f"demo took {time.monotonic() - T0:.0f} s")
    sys.exit(code)
