"""Keep a driver's log in its status folder when that folder is remote (``abfss://``, ...).

A supervisor that starts a driver detached on a worker sends the driver's output to a file. When
the status folder is a local path that file *is* ``<status folder>/driver.log``. When it is remote,
the launcher runs the driver under this module instead::

    python -m hubflow_jobs.runtime.driver_log --status-dir URL --local-log PATH \
        [--copy-every 30] -- spark-submit ...

which runs the command (its output goes wherever this process's output goes: the launcher points
it at ``PATH``), copies ``PATH`` to ``<status-dir>/driver.log`` every ``--copy-every`` seconds while
it runs (only when it grew) and once more when it ends, and exits with the command's exit code.
SIGTERM and SIGINT are passed on to the command. If this process dies with its host, the status
folder keeps the copy from at most ``--copy-every`` seconds before. No Spark import here.
"""

from __future__ import annotations

import argparse
import logging
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from hubflow.status import DRIVER_LOG_FILE, StatusFolder

log = logging.getLogger(__name__)

#: Default seconds between two copies while the driver runs.
COPY_EVERY_SECONDS = 30.0


def copy_log(local_log: Path, folder: StatusFolder) -> bool:
    """Copy ``local_log`` into the folder's ``driver.log``; False (and a warning) when that failed."""
    try:
        folder.upload_driver_log(local_log)
        return True
    except FileNotFoundError:
        return False  # nothing written yet
    except Exception as exc:
        log.warning("could not copy %s to %s: %s", local_log, folder.path(DRIVER_LOG_FILE), exc)
        return False


def run(command: Sequence[str], local_log: Path, folder: StatusFolder, copy_every: float) -> int:
    """Run ``command``, copying ``local_log`` to the folder while it runs and at its end."""
    process = subprocess.Popen(list(command), stdin=subprocess.DEVNULL)

    def pass_on(signum: int, _frame: FrameType | None) -> None:
        if process.poll() is None:
            process.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, pass_on)
    ended = threading.Event()

    def copy_while_running() -> None:
        last_size = -1
        while not ended.wait(copy_every):
            try:
                size = local_log.stat().st_size
            except OSError:
                continue
            if size != last_size and copy_log(local_log, folder):
                last_size = size

    copier = threading.Thread(target=copy_while_running, name="driver-log-copier", daemon=True)
    copier.start()
    code = process.wait()
    ended.set()
    copier.join(60)
    for _ in range(3):
        if copy_log(local_log, folder):
            break
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(description="Run a driver and keep its log in its status folder.")
    parser.add_argument("--status-dir", required=True, help="the job's status folder (local path or URL)")
    parser.add_argument("--local-log", required=True, help="the file the command's output goes to")
    parser.add_argument("--copy-every", type=float, default=COPY_EVERY_SECONDS, help="seconds between copies")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given after --")
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return run(command, Path(args.local_log), StatusFolder(args.status_dir), args.copy_every)


if __name__ == "__main__":
    sys.exit(main())
