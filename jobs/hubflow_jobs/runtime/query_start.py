"""Starting a job's query again when Spark's worker for a Python source did not start in time.

A streaming query that reads a Python data source (``eventhubs``) gets one Python process on the
driver for the source's planning calls (``initialOffset``, ``latestOffset``, ``partitions``,
``commit``). Spark starts it when the query plans its first batch and waits a fixed 10 seconds,
with no setting to change it, for that process to start Python, import PySpark and connect back
(``PythonWorkerFactory``; the executors' workers come from a daemon and are not concerned). On a
driver host whose CPUs are saturated for a moment the process misses that window and the query
fails with "Python worker failed to connect back" before it has read anything. A supervisor would
restart the job after its interval; the runner restarts the query itself, at once, after a short
pause: up to ``runtime.start_attempts`` starts in all. Starting a query again from its checkpoint
is what every restart does, so it loses and repeats nothing.

Other failures are never retried here: they go to the supervisor with their reason.
Runs on the driver; imports no Spark (it looks at the query only through its methods).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from hubflow_jobs.runtime.stop import StopRequest

log = logging.getLogger(__name__)

#: What Spark says (``SparkCoreErrors.failedToConnectBackPythonWorkerError``) when the Python worker
#: it started did not connect back within its fixed 10 seconds.
WORKER_DID_NOT_CONNECT = "Python worker failed to connect back"
#: The pause before the second start; it doubles for each further one, up to ``MAX_PAUSE``.
FIRST_PAUSE = 5.0
MAX_PAUSE = 30.0


class WorkerStartTimedOut(Exception):
    """The query failed because Spark's Python worker for its source did not connect back in time."""

    def __init__(self, query: Any, error: object) -> None:
        super().__init__(str(error))
        self.query = query


def worker_start_timed_out(error: object) -> bool:
    """Whether a query's failure is Spark's Python worker not connecting back in time."""
    return error is not None and WORKER_DID_NOT_CONNECT in str(error)


def check_worker_start(query: Any) -> None:
    """Raise :class:`WorkerStartTimedOut` if ``query`` ended with that failure; otherwise nothing."""
    error = query.exception()
    if worker_start_timed_out(error):
        raise WorkerStartTimedOut(query, error)


def start_attempts(
    job: str, attempts: int, stop: StopRequest, before_retry: Callable[[Any, int], None]
) -> Retrying:
    """The attempts to start and run ``job``'s query (tenacity): a :class:`WorkerStartTimedOut`
    raised in one leads to the next, after a pause, until ``attempts`` ran or a stop was requested.

    ``before_retry(query, next_attempt)`` runs before the pause, so the job's status says at once
    that it is starting again. The pause ends early on a stop request; the last failure is
    re-raised when no attempt is left.
    """

    def log_and_prepare(state: RetryCallState) -> None:
        failed = state.outcome.exception()
        assert isinstance(failed, WorkerStartTimedOut)
        pause = state.upcoming_sleep
        log.warning(
            "job %s: Spark's Python worker for the query's source did not connect back within Spark's "
            "fixed 10 s (%s; the driver's host was busy); starting the query again in %.0f s "
            "(attempt %d of %d, from the checkpoint)",
            job,
            _first_line(failed),
            pause,
            state.attempt_number + 1,
            attempts,
        )
        before_retry(failed.query, state.attempt_number + 1)

    return Retrying(
        retry=retry_if_exception_type(WorkerStartTimedOut),
        stop=stop_after_attempt(attempts) | (lambda _state: stop.requested),
        wait=wait_exponential(multiplier=FIRST_PAUSE, min=FIRST_PAUSE, max=MAX_PAUSE),
        sleep=stop.wait,
        before_sleep=log_and_prepare,
        reraise=True,
    )


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0].rstrip(".") if lines else type(error).__name__
