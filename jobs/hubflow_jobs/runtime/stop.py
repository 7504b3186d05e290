"""Graceful stop requests: a flag set by SIGTERM (to the Python driver or to the spark-submit JVM) and
by the watchdog when it finds the ``STOP`` or ``HOLD`` marker (:mod:`hubflow_jobs.runtime.watchdog`).

A request only sets a flag; the runner then lets the running micro-batch finish and calls
``query.stop()``. Under spark-submit the signal usually reaches the JVM (spark-submit's pid), whose
default SIGTERM handling runs the shutdown hooks and kills the SparkContext mid-batch. So besides a
Python handler, :func:`install_jvm_sigterm_handler` replaces the JVM's SIGTERM handler by one that
calls back into Python and only sets the same flag.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)


class StopRequest:
    """A one-way flag saying why the job should stop, settable from signal handlers and threads.

    Setting it takes no lock: a Python signal handler runs on the main thread between two bytecodes,
    possibly while that thread holds the lock a ``threading.Event`` would take to set itself (Python's
    signal docs warn of that deadlock; a driver hung on SIGTERM in a retry's wait). Waiting polls it.
    """

    #: How often :meth:`wait` looks at the flag: a stop lets the running batch finish anyway.
    POLL_SECONDS = 0.05

    def __init__(self) -> None:
        self._requested = False
        self.reason: str | None = None

    def request(self, reason: str) -> None:
        """Ask the job to stop; the first reason is kept."""
        if not self._requested:
            self.reason = reason
            self._requested = True

    @property
    def requested(self) -> bool:
        """Whether a stop was asked for."""
        return self._requested

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, less if a stop is asked for meanwhile; whether one was."""
        deadline = time.monotonic() + seconds
        while not self._requested:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(self.POLL_SECONDS, left))
        return self._requested


class SignalHandlers:
    """Python SIGTERM/SIGINT handlers that set a :class:`StopRequest`; restores the old ones on exit."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, stop: StopRequest) -> None:
        self.stop = stop
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> SignalHandlers:
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.stop.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C means "now"
        self.stop.request(f"{name} received by the Python driver")


class _JvmSignalHandler:
    """A Java ``sun.misc.SignalHandler`` implemented in Python through the Py4J callback server."""

    def __init__(self, on_signal: Callable[[str], None]) -> None:
        self._on_signal = on_signal

    def handle(self, signal_object: Any) -> None:
        self._on_signal(f"SIG{signal_object.getName()} received by the driver JVM")

    class Java:
        implements = ["sun.misc.SignalHandler"]


def install_jvm_sigterm_handler(spark: Any, stop: StopRequest) -> Any | None:
    """Make SIGTERM to the driver JVM request a graceful stop instead of killing the SparkContext.

    Returns the JVM's previous handler, for :func:`restore_jvm_sigterm_handler`, or None (and logs
    why) when the handler cannot be installed, e.g. under Spark Connect; SIGTERM to the Python
    driver still works then.
    """
    try:
        from pyspark.java_gateway import ensure_callback_server_started

        ensure_callback_server_started(spark.sparkContext._gateway)
        jvm = spark.sparkContext._jvm
        handler = _JvmSignalHandler(stop.request)
        previous = jvm.sun.misc.Signal.handle(jvm.sun.misc.Signal("TERM"), handler)
        # Keep a reference so the Python object lives as long as the JVM may call it.
        spark._hubflow_sigterm_handler = handler
        return previous
    except Exception as exc:
        log.warning(
            "could not install the JVM SIGTERM handler (%s); SIGTERM to spark-submit will stop the "
            "job without letting the running batch finish",
            exc,
        )
        return None


def restore_jvm_sigterm_handler(spark: Any, previous: Any | None) -> None:
    """Put back the JVM SIGTERM handler that :func:`install_jvm_sigterm_handler` replaced."""
    if previous is None:
        return
    try:
        jvm = spark.sparkContext._jvm
        jvm.sun.misc.Signal.handle(jvm.sun.misc.Signal("TERM"), previous)
    except Exception as exc:
        log.warning("could not restore the JVM SIGTERM handler: %s", exc)
