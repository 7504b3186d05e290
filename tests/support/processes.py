"""Small helpers to start, wait for and stop the background processes that fixtures own, and to run a
test's check module in a child process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from hubflow.supervision.detached_process import start_detached

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parents[2]


#: Ports free_port has handed out in this process: the kernel may give a port just released to the
#: next bind(0) (8 of 20,000 draws of four ports repeated one), and two services started from one
#: set of ports then collide.
_handed_out: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, and not one handed out before."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def start_background(cmd: list[str], log_path: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``cmd`` in its own process group, its output going to ``log_path``."""
    return start_detached(cmd, log_path, env)


def stop_process(proc: subprocess.Popen, timeout: float = 15.0) -> None:
    """Stop a process started by :func:`start_background` and everything in its group."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=timeout)


@contextmanager
def piped_child(command: list[str]) -> Iterator[subprocess.Popen]:
    """``command`` with its stdout piped as text, in this process group; killed on the way out if
    it still runs."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


def output_after_sigterm(process: subprocess.Popen, timeout: float) -> str:
    """SIGTERM a :func:`piped_child` and return the rest of its output once it exited; the test fails
    when it still runs ``timeout`` seconds later."""
    process.terminate()
    try:
        return process.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        raise AssertionError(f"pid {process.pid} still ran {timeout:.0f} s after SIGTERM") from None


def stop_processes(procs: list[subprocess.Popen], timeout: float = 15.0) -> None:
    """Stop several processes started by :func:`start_background` at once: each group gets SIGTERM
    first, so their shutdowns overlap (rather than one ``timeout`` after another), then SIGKILL
    whatever is still running ``timeout`` seconds later."""
    for proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=timeout)


#: A poll waits at least this many times as long as the predicate took before asking again, so a
#: costly predicate (a Spark read of a lake table, an Airflow query) takes at most a third of the
#: time it polls: on 2 shared cores a poll every 0.2 s of a Spark read kept a core from the very job
#: it waited for.
POLL_BACKOFF = 2.0


def wait_until(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.2) -> T:
    """Poll ``predicate`` until it returns something true, and return that; fail naming ``what``
    after ``timeout`` seconds. Between polls it sleeps ``interval``, or :data:`POLL_BACKOFF` times the
    predicate's own time when that is longer (never past the deadline: the last poll is at it)."""
    deadline = time.monotonic() + timeout
    while True:
        started = time.monotonic()
        result = predicate()
        if result:
            return result
        now = time.monotonic()
        if now >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(min(max(interval, POLL_BACKOFF * (now - started)), deadline - now))


def run_json_check(
    module: str, env: dict[str, str], *args: str, timeout: float = 180
) -> tuple[Any, subprocess.CompletedProcess[str]]:
    """Run ``python -m module args`` from the repository root with exactly ``env`` (a process of its
    own, as Airflow's would be); fail with the tail of its stderr unless it exits 0. The JSON document
    it printed (its last line of output that is one: Airflow's logging writes to stdout too, from any
    thread, at exit included), and the finished process (for what else it printed)."""
    result = subprocess.run(
        [sys.executable, "-m", module, *args],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for line in reversed(result.stdout.splitlines()):
        if line.startswith(("{", "[")):
            try:
                return json.loads(line), result
            except ValueError:
                continue  # a log line such as "[2026-11-25T10:00:00.000+0000] {...} INFO - ..."
    raise AssertionError(f"{module} printed no JSON line:\n{result.stdout[-3000:]}")
