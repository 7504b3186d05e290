"""What a pipeline's queries report beyond the job's progress, kept in status.json for any pipeline.

Runs on the driver, on Spark's listener bus. :class:`PipelineProgress` listens to every query hubflow
starts for the pipeline's sinks (the job's and those on helper sessions) and records:

* ``late_events`` (``last_batch``, ``run_total``) and ``watermark``, for a query with stateful
  operators (a windowed aggregation, a deduplication): the rows Spark dropped because the watermark
  had already closed their window or state (``numRowsDroppedByWatermark``), and the query's event-
  time watermark. Spark aggregates rows of the same key and window within an input partition
  before that operator, so several late events of one key and window from one partition count as
  one row there. Late rows are also logged as a warning.
* ``counts``: every metric the function declares with ``DataFrame.observe(name, <one aggregate>)``,
  summed over the batches of this run under its name (e.g. ``F.count(F.lit(1))`` counts the rows
  that pass that point of the plan). Metrics with more than one column are left out. A sink with a
  quarantine records its ``read``/``written``/``quarantined`` in ``counts`` as well; the two are
  merged.

The state store: a pipeline's stateful operators keep their state in RocksDB unless the config's
``spark_conf`` names another provider (:func:`use_state_store`).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from hubflow.status import JobStatus

log = logging.getLogger(__name__)

#: Spark's state store provider setting, and the provider a pipeline's state is kept in by default.
STATE_STORE_PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def state_store_provider(spark_conf: dict[str, Any]) -> str:
    """The state store provider of a job with this ``spark_conf``: its own, else RocksDB."""
    return str(spark_conf.get(STATE_STORE_PROVIDER_CONF, ROCKSDB_PROVIDER))


def use_state_store(spark: Any, spark_conf: dict[str, Any]) -> None:
    """Set the provider on ``spark`` too (a runtime SQL conf, read when a query starts and then pinned
    in its checkpoint), so a run on an existing session (tests, notebooks) keeps it as well."""
    spark.conf.set(STATE_STORE_PROVIDER_CONF, state_store_provider(spark_conf))


class PipelineProgress:
    """Adds up the late rows, watermark and observed counts of a pipeline's queries in its status."""

    def __init__(self, status: JobStatus) -> None:
        self.status = status
        self._lock = threading.Lock()
        self.late = {"last_batch": 0, "run_total": 0}
        self.counts: dict[str, int] = {}

    def listen(self, session: Any, query_name: str) -> None:
        """Record the progress of the query ``query_name`` of ``session`` (call before it starts)."""
        from hubflow_jobs.runtime.listener import QueryProgressListener

        session.streams.addListener(QueryProgressListener(session, query_name, self.on_progress))

    def on_progress(self, progress: Any) -> None:
        """One query's progress: its late rows and watermark (if stateful), its observed counts."""
        fields: dict[str, Any] = {}
        dropped = 0
        observed = observed_counts(progress)
        with self._lock:
            if progress.stateOperators:
                dropped = sum(int(op.numRowsDroppedByWatermark or 0) for op in progress.stateOperators)
                self.late["last_batch"] = dropped
                self.late["run_total"] += dropped
                fields["late_events"] = dict(self.late)
                fields["watermark"] = (progress.eventTime or {}).get("watermark")
            if observed:
                for name, value in observed.items():
                    self.counts[name] = self.counts.get(name, 0) + value
                recorded = self.status.snapshot().get("counts") or {}
                fields["counts"] = {**recorded, **self.counts}
            if fields:
                self.status.update(**fields)
        if dropped:
            log.warning(
                "query %s batch %s: %d late rows dropped by the watermark (%d in this run); see "
                "late_events in status.json",
                progress.name,
                progress.batchId,
                dropped,
                self.late["run_total"],
            )


def observed_counts(progress: Any) -> dict[str, int]:
    """The progress's ``observe()`` metrics that hold one number, by name."""
    counts: dict[str, int] = {}
    for name, row in (progress.observedMetrics or {}).items():
        values = list(row.asDict().values()) if hasattr(row, "asDict") else list(row)
        if len(values) == 1 and isinstance(values[0], int | float) and not isinstance(values[0], bool):
            counts[str(name)] = int(values[0])
    return counts
