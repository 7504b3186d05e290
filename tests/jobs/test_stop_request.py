"""The driver's stop flag (:class:`hubflow_jobs.runtime.stop.StopRequest`): set from a signal handler
or a thread, it ends a wait, and a SIGTERM never hangs the driver.

The hang it guards against: a ``threading.Event`` set from a Python signal handler while the main
thread holds that Event's lock inside ``wait()`` deadlocks. A child waiting in a tight loop is inside
that lock about half the time, so ten SIGTERMs find it almost surely.
"""

from __future__ import annotations

import sys
import threading
import time

from hubflow_jobs.runtime.stop import StopRequest
from tests.support.processes import output_after_sigterm, piped_child

CHILD = """
from hubflow_jobs.runtime.stop import SignalHandlers, StopRequest

stop = StopRequest()
with SignalHandlers(stop):
    print("ready", flush=True)
    while not stop.wait(0):
        pass
print("stopped:", stop.reason, flush=True)
"""

#: A child's exit after its SIGTERM (a Python process that only prints and returns).
EXIT_WITHIN = 30


def test_a_sigterm_ends_a_driver_waiting_in_a_tight_loop_every_time() -> None:
    for attempt in range(10):
        with piped_child([sys.executable, "-c", CHILD]) as child:
            assert child.stdout is not None and child.stdout.readline() == "ready\n"
            time.sleep(attempt * 0.003)  # at other points of the loop
            out = output_after_sigterm(child, EXIT_WITHIN)
        assert child.returncode == 0, f"attempt {attempt}: exit {child.returncode}"
        assert out == "stopped: SIGTERM received by the Python driver\n", out


def test_a_request_from_another_thread_ends_a_wait_and_keeps_the_first_reason() -> None:
    stop = StopRequest()
    assert stop.wait(0.01) is False and not stop.requested and stop.reason is None
    timer = threading.Timer(0.2, stop.request, args=("stop marker found",))
    timer.start()
    try:
        assert stop.wait(60) is True
    finally:
        timer.cancel()
    stop.request("held by on-call")
    assert stop.requested and stop.reason == "stop marker found"
    assert stop.wait(60) is True, "a wait after the request returns at once"
