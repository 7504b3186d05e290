"""The job's watchdog: threads in the driver process that keep the job honest towards its supervisors.

The main thread may be busy for a long time (a big batch, a slow ``query.stop()``), so what must
happen on time happens here instead:

* every ``runtime.poll_interval`` one listing of the status folder: ``STOP`` or ``HOLD`` ask for a
  graceful stop (the running batch finishes); ``KILL`` (meant for this holder, or for anyone)
  fences the job at once;
* every ``runtime.heartbeat_interval`` a fresh heartbeat in status.json;
* every ``runtime.lease_refresh_interval`` a lease renewal; a renewal that finds the lease taken
  over fences the job at once (another driver may be writing the checkpoint already).

A second thread, the dead man's switch, does no I/O and so cannot hang on storage: once the lease
has not been renewed for half of ``runtime.lease_fence_after`` it asks for a graceful stop, and at
``lease_fence_after`` it fences the job (see :mod:`hubflow.status` for why this keeps
two drivers off one checkpoint).

To *fence* is to stop writing to the checkpoint now, whatever the main thread is doing. In a real
driver that is :class:`HardExit`: halt the driver JVM (``Runtime.halt``, SIGKILL if it does not
answer), record why, exit the process. Tests that share one Spark session use :class:`StopQueries`
instead, which stops the session's queries at once.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from hubflow.config import RuntimeConfig
from hubflow.status import (
    HOLD_MARKER,
    KILL_MARKER,
    STOP_MARKER,
    JobState,
    JobStatus,
    Lease,
    StatusFolder,
    pid_alive,
)
from hubflow.status.exit_codes import EXIT_KILLED, EXIT_LEASE_LOST
from hubflow_jobs.runtime.stop import StopRequest

log = logging.getLogger(__name__)

#: Called once to fence the job: ``fence(reason, exit_code)``.
Fence = Callable[[str, int], None]
#: How often the dead man's switch looks at the clock.
DEADMAN_TICK_SECONDS = 0.1


class Watchdog:
    """The watchdog of one run (see the module docstring); ``start()`` it, ``close()`` it."""

    def __init__(
        self,
        folder: StatusFolder,
        status: JobStatus,
        stop: StopRequest,
        runtime: RuntimeConfig,
        fence: Fence,
        lease: Lease | None = None,
    ) -> None:
        self.folder = folder
        self.status = status
        self.stop = stop
        self.fence = fence
        self.lease = lease
        self.poll_seconds = runtime.seconds("poll_interval")
        self.heartbeat_seconds = runtime.seconds("heartbeat_interval")
        self.timing = runtime.lease_timing()
        #: ``(reason, exit code)`` once the job was fenced.
        self.fenced: tuple[str, int] | None = None
        self._closed = threading.Event()
        self._fence_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._ignored_kill: str | None = None

    def start(self) -> Watchdog:
        """Start the threads (daemons: they never keep the process alive)."""
        targets: list[Callable[[], None]] = [self._watch]
        if self.lease is not None:
            targets.append(self._dead_man)
        for target in targets:
            thread = threading.Thread(
                target=target, name=f"hubflow-{target.__name__.strip('_')}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        return self

    def close(self, timeout: float = 10.0) -> None:
        """Stop the threads (waits for a storage call in progress, at most ``timeout``)."""
        self._closed.set()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout)

    # The watching thread ----------------------------------------------------------------------

    def _watch(self) -> None:
        last_beat = time.monotonic()
        renew_due = (self.lease.last_success if self.lease else 0.0) + self.timing.refresh_interval
        while True:
            try:
                self._look_for_markers()
            except Exception as exc:
                log.warning(
                    "could not look for stop/kill markers in %s (will retry): %s", self.folder.url, exc
                )
            if self.fenced is not None:
                return
            now = time.monotonic()
            if self.lease is not None and now >= renew_due:
                renew_due = self._renew(now)
                if self.fenced is not None:
                    return
            if now - last_beat >= self.heartbeat_seconds:
                last_beat = now
                try:
                    self.status.heartbeat()
                except Exception as exc:
                    log.warning("could not refresh status.json (will retry): %s", exc)
            if self._closed.wait(self.poll_seconds):
                return

    def _look_for_markers(self) -> None:
        present = self.folder.markers_present()
        if KILL_MARKER in present:
            kill = self.folder.marker(KILL_MARKER)
            if kill is not None:
                mine = self.lease is None or kill.target in (None, self.lease.token)
                if mine:
                    self._fence(
                        f"killed on request: kill marker {self.folder.path(KILL_MARKER)} ({kill.describe()})",
                        EXIT_KILLED,
                    )
                    return
                if self._ignored_kill != kill.target:
                    self._ignored_kill = kill.target
                    log.warning("ignoring %s: it is meant for lease holder %s", KILL_MARKER, kill.target)
        if self.stop.requested:
            return
        if STOP_MARKER in present:
            stop = self.folder.marker(STOP_MARKER)
            if stop is not None:
                details = f" ({stop.describe()})" if stop.by or stop.reason else ""
                self.stop.request(f"stop marker {self.folder.path(STOP_MARKER)} found{details}")
        elif HOLD_MARKER in present:
            hold = self.folder.hold()
            if hold is not None:
                self.stop.request(f"held by on-call {hold.describe()}")

    def _renew(self, now: float) -> float:
        """Renew the lease; returns when to renew next (soon again after a storage error)."""
        assert self.lease is not None
        try:
            renewed = self.lease.renew()
        except Exception as exc:
            log.warning("could not renew the lease of job %s (will retry): %s", self.lease.job, exc)
            return now + min(self.poll_seconds, self.timing.refresh_interval)
        if not renewed:
            self._fence(
                f"lost its lease: {self.lease.holder_description(self.lease.lost_to)} took it over",
                EXIT_LEASE_LOST,
            )
        return now + self.timing.refresh_interval

    # The dead man's switch --------------------------------------------------------------------

    def _dead_man(self) -> None:
        assert self.lease is not None
        half = self.timing.fence_after / 2
        while not self._closed.wait(DEADMAN_TICK_SECONDS):
            if self.fenced is not None:
                return
            silent = time.monotonic() - self.lease.last_success
            if silent >= self.timing.fence_after:
                self._fence(
                    f"could not renew its lease for {silent:.0f} s (lease_fence_after "
                    f"{self.timing.fence_after:g} s): fenced before another instance may take it over",
                    EXIT_LEASE_LOST,
                )
                return
            if silent >= half and not self.stop.requested:
                log.warning("job %s: the lease was not renewed for %.0f s; stopping", self.lease.job, silent)
                self.stop.request(f"could not renew its lease for {silent:.0f} s")

    def _fence(self, reason: str, code: int) -> None:
        with self._fence_lock:
            if self.fenced is not None:
                return
            self.fenced = (reason, code)
        self.stop.request(reason)
        self.fence(reason, code)


class HardExit:
    """The fence of a real driver: halt the driver JVM, record why, exit the process.

    The JVM goes first because it is what writes the checkpoint. ``Runtime.halt`` through Py4J
    ends it at once with ``code`` as spark-submit's exit code; when the JVM does not answer within
    a few seconds it is sent SIGKILL (then spark-submit ends with 137). After a kill request the
    job still holds its lease: it writes ``state: stopped`` with the reason and releases the lease
    (the JVM is gone, so nothing writes the checkpoint any more). After a lost lease it writes
    nothing: the folder belongs to the new holder.
    """

    #: The log line needs a moment to pass through spark-submit's output pipe before the JVM ends.
    LOG_GRACE_SECONDS = 0.3

    def __init__(self, job: str, status: JobStatus, lease: Lease | None) -> None:
        self.job = job
        self.status = status
        self.lease = lease
        self.spark: Any = None
        # Under spark-submit the Python driver is a child of the driver JVM.
        self.jvm_pid: int | None = os.getppid() if "PYSPARK_GATEWAY_PORT" in os.environ else None

    def attach(self, spark: Any) -> None:
        """Remember the session, and ask its JVM for its pid."""
        self.spark = spark
        try:
            self.jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
        except Exception as exc:
            log.warning("could not read the driver JVM's pid: %s", exc)

    def __call__(self, reason: str, code: int) -> None:
        log.error("job %s %s; exiting hard (exit code %d)", self.job, reason, code)
        for handler in logging.getLogger().handlers:
            handler.flush()
        time.sleep(self.LOG_GRACE_SECONDS)
        self._end_jvm(code)
        if code == EXIT_KILLED:
            _within(3.0, lambda: self.status.update(state=JobState.STOPPED, stop_reason=reason))
            if self.lease is not None:
                _within(3.0, self.lease.release)
        os._exit(code)

    def _end_jvm(self, code: int) -> None:
        if self.spark is not None:
            jvm = self.spark.sparkContext._jvm
            threading.Thread(
                target=lambda: jvm.java.lang.Runtime.getRuntime().halt(code), daemon=True
            ).start()
        pid = self.jvm_pid
        if pid is None or pid == os.getpid():
            time.sleep(1.0)  # no pid to watch: give the halt a moment
            return
        if _wait_gone(pid, 3.0 if self.spark is not None else 0.0):
            return
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        _wait_gone(pid, 5.0)


class StopQueries:
    """The fence of a run that shares its Spark session (tests): stop every active query now."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark

    def __call__(self, reason: str, code: int) -> None:
        log.error("fenced (exit code %d): %s; stopping the session's queries now", code, reason)
        for query in list(self.spark.streams.active):
            try:
                query.stop()
            except Exception as exc:
                log.warning("stopping query %s failed: %s", query.id, exc)


def _wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _within(seconds: float, action: Callable[[], Any]) -> None:
    """Run ``action`` in a thread and wait at most ``seconds`` (storage may be what failed)."""

    def run() -> None:
        try:
            action()
        except Exception as exc:
            log.warning("while exiting hard: %s", exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
