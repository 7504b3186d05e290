"""Start a process that outlives its starter: its own session, output to a log file, no stdin.

The one way hubflow starts a detached process - spark-submit for a streaming job's driver (the
driver must outlive the Airflow task that started it), the demo's services, and the test fixtures'
background processes. A process leading its own session can be stopped with everything it started
by one ``os.killpg(process.pid, signal)``, as a lost machine would stop it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path


def shipping_log(command: Sequence[str], log_path: Path, ship_to: str) -> list[str]:
    """``command`` run under ``hubflow_jobs.runtime.driver_log``, which copies ``log_path`` into the
    status folder ``ship_to``'s ``driver.log`` while it runs and when it ends (a remote folder)."""
    return [
        sys.executable,
        "-m",
        "hubflow_jobs.runtime.driver_log",
        "--status-dir",
        ship_to,
        "--local-log",
        str(log_path),
        "--",
        *command,
    ]


def start_detached(
    command: Sequence[str],
    log_path: Path,
    env: Mapping[str, str] | None = None,
    *,
    append: bool = True,
) -> subprocess.Popen:
    """Start ``command`` in a new session, stdout and stderr to ``log_path`` (appended unless not ``append``).

    The log's parent folder is created. The child keeps its own copy of the log's descriptor, so
    this process's copy is closed before returning. ``env`` is the child's whole environment
    (None: this process's).
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab" if append else "wb") as log:
        return subprocess.Popen(
            list(command),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=None if env is None else dict(env),
            start_new_session=True,
        )
