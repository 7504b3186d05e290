"""``hubflow run JOB``: a registered job in the foreground, on local Spark, as Airflow would run it.

The job is checked first (``hubflow check --local`` for that job: nothing starts on a problem), then
``spark-submit jobs/<application>.py --config FILE`` (``jobs/pipeline.py --pipeline module:function``
for a pipeline) runs with the job's ``--conf`` from the registry on ``local[*]``. Its output goes to
``driver.log`` in the job's status folder (the file the status page shows), and every few seconds a
progress line is printed from its ``status.json``. ``--once`` runs a copy of the config with
``trigger: {availableNow: true}``: everything available is processed, then the job exits.

Ctrl-C or SIGTERM asks the job to stop gracefully (SIGTERM to spark-submit: the jobs runtime lets
the running batch finish, :mod:`hubflow_jobs.runtime.stop`); a second one kills it (SIGKILL to its process
group; Spark replays the unfinished batch from the checkpoint on the next run). The exit code is the
job's (:mod:`hubflow_jobs`), or 128 + the signal that ended spark-submit.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

from hubflow.invocation import JobInvocation, job_environment
from hubflow.operations.job_control import JobControl
from hubflow.progress.history import progress_lag, progress_lag_seconds
from hubflow.registry import (
    RegisteredJob,
    RegistryError,
    load_registry,
    read_job_paths,
    registry_path,
)
from hubflow.status import StatusFolder
from hubflow.status.exit_codes import (
    EXIT_CONFIG_ERROR,
    EXIT_FAILED,
    EXIT_HELD,
    EXIT_KILLED,
    EXIT_LEASE_LOST,
    EXIT_LOCKED,
    EXIT_OK,
)
from hubflow.supervision.detached_process import start_detached
from hubflow.supervision.job_exit import run_outcome
from hubflow_cli.check import check_job_config

#: What each of the job's exit codes means, for the last line of a run.
EXIT_MEANINGS = {
    EXIT_OK: "finished (availableNow ran dry) or stopped gracefully",
    EXIT_FAILED: "failed: its reason is below",
    EXIT_CONFIG_ERROR: "the config was refused; nothing ran",
    EXIT_LOCKED: "another instance holds the job's lease; nothing ran",
    EXIT_HELD: "held by on-call (HOLD marker in the status folder); nothing ran",
    EXIT_LEASE_LOST: "lost its lease and exited hard",
    EXIT_KILLED: "killed on request (KILL marker)",
}
#: Lines of the driver log printed when a run fails.
LOG_TAIL_LINES = 20


def driver_environment() -> dict[str, str]:
    """The driver's environment: this one plus what every job's driver gets, on loopback Spark."""
    env = {**os.environ, **job_environment()}
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return env


def once_config(config_path: Path, folder: Path) -> Path:
    """A copy of the config in ``folder`` with ``trigger: {availableNow: true}``."""
    data = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    data["trigger"] = {"availableNow": True}
    copy = folder / config_path.name
    copy.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return copy


def progress_line(status: dict[str, Any]) -> str:
    """What a run's status.json says: state, last batch, rows read by this run, backlog if known."""
    progress = status.get("last_progress") if isinstance(status.get("last_progress"), dict) else None
    parts = [f"state {status.get('state')}"]
    if progress and progress.get("batch_id") is not None:
        parts.append(f"batch {progress['batch_id']} ({progress.get('num_input_rows', 0)} rows)")
    parts.append(f"input rows {status.get('input_rows') or 0}")
    lag = progress_lag(progress)
    if lag is not None:
        seconds = progress_lag_seconds(progress)
        parts.append(f"backlog {lag}" + (f" ({seconds:.1f} s behind)" if seconds is not None else ""))
    if status.get("exception"):
        parts.append(f"error: {status['exception']}")
    return ", ".join(parts)


class Foreground:
    """spark-submit started in its own session, and what Ctrl-C / SIGTERM do to it."""

    def __init__(self, process: subprocess.Popen, say: Callable[[str], None]) -> None:
        self.process = process
        self.say = say
        self.requests = 0

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        """First signal: SIGTERM to spark-submit (graceful stop); second: SIGKILL to its process group."""
        if self.process.poll() is not None:
            return
        self.requests += 1
        with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
            if self.requests == 1:
                os.kill(self.process.pid, signal.SIGTERM)
                line = "stopping the job gracefully (the running batch finishes); Ctrl-C again to kill it"
            else:
                os.killpg(self.process.pid, signal.SIGKILL)
                line = "killing the job (its unfinished batch is replayed from the checkpoint next time)"
            # Said after the signal is sent: a handler runs between two bytecodes of the main thread,
            # and when that thread was printing, this print fails ("reentrant call"); the job still
            # gets its signal, and the line is only what is being done.
            with contextlib.suppress(RuntimeError):
                self.say(line)


def checked_job(name: str, registry: Path | None, command: str) -> tuple[RegisteredJob, Any] | None:
    """The registered job ``name`` and its paths (:func:`read_job_paths`) once its config passed what
    ``hubflow check --local`` checks; None, after printing each problem, when it did not."""
    registry = registry or registry_path()
    try:
        job = load_registry(registry).job(name)
    except RegistryError as exc:
        print(f"hubflow {command}: {exc}")
        return None
    checked = check_job_config(job.application, job.config_path(), name=job.name, registry_path=registry)
    if checked.failed(local=True):
        print("\n".join(checked.lines(local=True)))
        return None
    return job, read_job_paths(job.config_path(), job.application, expected_name=job.name)


def run_job(
    name: str, *, registry: Path | None, once: bool, master: str = "local[*]", every: float = 5.0
) -> int:
    """The ``hubflow run`` command: the job's exit code."""
    checked = checked_job(name, registry, "run")
    if checked is None:
        return EXIT_CONFIG_ERROR
    job, paths = checked
    with tempfile.TemporaryDirectory(prefix=f"hubflow-run-{name}-") as temp:
        config = job.config_path()
        if once and paths.trigger != "availableNow":
            config = once_config(config, Path(temp))
            print(f"--once: running {config} (a copy of {job.config_path()} with availableNow)")
        log_path, _ = JobControl(job.name, paths.status_dir).driver_log_target()
        folder = StatusFolder(paths.status_dir)
        command = JobInvocation.run(job, config=config).command(master)
        return _supervise(job, command, log_path, folder, every)


def _supervise(
    job: RegisteredJob, command: list[str], log_path: Path, folder: StatusFolder, every: float
) -> int:
    """Start spark-submit, print progress until it exits, and return its exit code."""
    earlier = (folder.status() or {}).get("started_at")
    print(f"starting job {job.name}: {' '.join(command)}")
    print(f"driver log: {log_path}")
    process = start_detached(command, log_path, driver_environment(), append=False)
    foreground = Foreground(process, lambda text: print(text, flush=True))
    previous = {sig: signal.signal(sig, foreground.on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    shown = None
    try:
        while True:
            try:
                code = process.wait(timeout=every)
            except subprocess.TimeoutExpired:
                code = None
            status = folder.status()
            if status and status.get("started_at") != earlier:
                line = progress_line(status)
                if line != shown:
                    print(f"[{datetime.now():%H:%M:%S}] {job.name}: {line}", flush=True)
                    shown = line
            if code is not None:
                break
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    code = code if code >= 0 else 128 - code
    print(f"job {job.name} exited {code}: {EXIT_MEANINGS.get(code, 'spark-submit failed')}")
    reason = run_outcome(folder.status(), earlier)
    if code != EXIT_OK and reason:
        print(f"reason: {reason}")
    if code != EXIT_OK:
        print(f"--- the last lines of {log_path} ---")
        print(log_tail(log_path, LOG_TAIL_LINES))
    return code


def log_tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(cannot read it: {exc.strerror})"
