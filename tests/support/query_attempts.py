"""Starting a test's streaming query again when Spark's Python worker for its source did not connect
back in time, as the jobs' runner does (``hubflow_jobs.runtime.query_start``).

Spark waits a fixed 10 s, with no setting, for the Python process that plans a Python data source's
batches to start and connect back; on a saturated 2-core machine it can miss that window, and the
query fails before it has planned a batch. A test that starts a query directly would then fail for
the machine's load, not for the code under test. :func:`run_query` starts it again from its
checkpoint, which is what a restart does, and only for that failure before any batch ran.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from hubflow_jobs.runtime.query_start import FIRST_PAUSE, MAX_PAUSE, worker_start_timed_out

#: Starts in all, as the runner's default ``runtime.start_attempts``.
ATTEMPTS = 3

T = TypeVar("T")


def wait_available_now(query: Any, timeout: float = 180) -> Any:
    """Wait for an availableNow query to end; raise its failure (for :func:`run_query` to judge)."""
    assert query.awaitTermination(timeout), f"availableNow query did not finish within {timeout} s"
    if query.exception():
        raise query.exception()
    return query


def run_query(start: Callable[[], Any], wait: Callable[[Any], T], attempts: int = ATTEMPTS) -> T:
    """``wait(start())``; when the query failed because its source's Python worker did not connect
    back before its first batch, stop it and do it again (up to ``attempts`` starts), after the
    runner's pause (a load spike that starved one start may pass before the next)."""
    for attempt in range(1, attempts + 1):
        query = start()
        try:
            return wait(query)
        except Exception as exc:
            retry = attempt < attempts and worker_start_timed_out(exc) and not query.recentProgress
            if not retry:
                raise
        finally:
            query.stop()
        time.sleep(min(MAX_PAUSE, FIRST_PAUSE * 2 ** (attempt - 1)))
    raise AssertionError("unreachable: the last attempt returns or raises")
