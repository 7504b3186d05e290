"""A job of several streaming queries, supervised as one: a main query and helper queries.

The runner (:mod:`hubflow_jobs.runtime.runner`) supervises one query per job; :class:`QueryGroup` gives it
that one query for a job that runs more (eventhubs_aggregate: the aggregation and its quarantine).
A helper query runs on :func:`helper_session`, so the status listener of the job's session sees the
main query only. :func:`stop_after_batch` is how the runner and a group stop a query gracefully.
Runs on the driver; imports pyspark only inside the functions that need it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

log = logging.getLogger(__name__)


def stop_after_batch(query: Any, timeout_seconds: float, poll_seconds: float = 0.2) -> None:
    """Let the micro-batch running now finish (at most ``timeout_seconds``), then stop the query.

    The wait ends when no batch is running, or when the batch that was running at the call has
    reported its progress (it is committed then); a busy query starts its next batch at once, and
    that one is interrupted while it plans - Spark re-runs it from the offset log on restart.
    """
    deadline = time.monotonic() + timeout_seconds
    finished_before = last_batch_id(query)
    while query.isActive and query.status.get("isTriggerActive"):
        if last_batch_id(query) > finished_before:
            break
        if time.monotonic() >= deadline:
            log.warning("a batch is still running after %.0f s; stopping the query anyway", timeout_seconds)
            break
        time.sleep(min(poll_seconds, 0.1))
    query.stop()


def last_batch_id(query: Any) -> int:
    """The id of the last batch the query ran, -1 before the first (or when its progress list
    holds only idle triggers).

    Spark also lists triggers that found no data in its progress: no batch ran, their ``batchId``
    is the next batch's, and listeners get ``onQueryIdle`` for them, not a progress event. Counting
    one as a batch made the runner wait out its whole delivery timeout for a progress event that
    never comes (a restarted stream with nothing new, stopped), and a graceful stop wait out its
    timeout for a batch that had already finished. A batch that ran reports ``addBatch``.
    """
    last = query.lastProgress
    if not last:
        return -1
    for progress in [last] if _ran(last) else reversed(query.recentProgress or []):
        if _ran(progress):
            return int(progress["batchId"])
    return -1


def _ran(progress: Any) -> bool:
    return "addBatch" in (progress["durationMs"] or {})


def helper_session(spark: Any) -> Any:
    """A session for a helper query with the same conf and data sources as ``spark`` but streaming
    listeners of its own, so the runner's status listener reports the job's main query only.

    Spark's ``cloneSession`` (``private[sql]`` in Scala, reachable through Py4J) copies the runtime
    conf and the registered Python data sources; ``newSession`` copies neither and cannot register
    ``eventhubs`` again. If a Spark upgrade removes ``cloneSession``, this fails with that reason.
    """
    from pyspark.sql import SparkSession

    try:
        clone = spark._jsparkSession.cloneSession()
    except Exception as exc:
        raise RuntimeError(
            "this Spark version has no SparkSession.cloneSession, which a job with a helper query "
            f"(eventhubs_aggregate's quarantine) needs to run it beside its main query: {exc}"
        ) from exc
    return SparkSession(spark.sparkContext, clone)


class QueryGroup:
    """A main streaming query and helper queries, supervised by the runner as one query.

    It is active while any query is active; ``stop()`` lets each helper finish its running batch,
    then stops it, then the main query; a failure of any query stops the others and is reported by
    :meth:`exception`. Progress, status and id are the main query's.
    """

    def __init__(self, main: Any, helpers: list[Any], stop_timeout_seconds: float) -> None:
        self.main = main
        self.helpers = helpers
        self.stop_timeout_seconds = stop_timeout_seconds

    @property
    def queries(self) -> list[Any]:
        """The main query, then the helpers."""
        return [self.main, *self.helpers]

    @property
    def id(self) -> Any:
        return self.main.id

    @property
    def runId(self) -> Any:
        return self.main.runId

    @property
    def name(self) -> Any:
        return self.main.name

    @property
    def isActive(self) -> bool:
        return any(query.isActive for query in self.queries)

    @property
    def status(self) -> dict[str, Any]:
        return self.main.status

    @property
    def lastProgress(self) -> Any:
        return self.main.lastProgress

    def awaitTermination(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for every query to end; raise if one failed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for query in self.queries:
            remaining = None if deadline is None else max(0.001, deadline - time.monotonic())
            if query.isActive and not self._await(query, remaining):
                self._raise_if_failed()
                return False
        self._raise_if_failed()
        return True

    def stop(self) -> None:
        """Stop the helpers after their running batch, then the main query."""
        for query in self.helpers:
            if query.isActive:
                stop_after_batch(query, self.stop_timeout_seconds)
        self.main.stop()

    def exception(self) -> Any:
        """The first failure among the queries, or None."""
        for query in self.queries:
            error = query.exception()
            if error is not None:
                return error
        return None

    def _await(self, query: Any, timeout: float | None) -> bool:
        try:
            if timeout is None:
                query.awaitTermination()
                return True
            return bool(query.awaitTermination(timeout))
        except Exception:
            self._stop_all()
            raise

    def _raise_if_failed(self) -> None:
        error = self.exception()
        if error is not None:
            self._stop_all()
            raise RuntimeError(f"a query of the job failed: {error}")

    def _stop_all(self) -> None:
        for query in self.queries:
            if query.isActive:
                query.stop()
