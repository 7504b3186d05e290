"""Streaming query listeners: :class:`StatusListener` keeps ``status.json`` current with the query's
life; :class:`QueryProgressListener` hands one named query's progress to a job's own counters.

Started, every progress (batch id, rows, rates, duration and per-source offsets including the
latest offset, i.e. the lag), idle and terminated (with the exception) update
:class:`~hubflow.status.JobStatus`, which rewrites status.json atomically and counts the
run's ``input_rows``. Events an Event Hubs source skipped because they expired unread
(``failOnDataLoss=false``) go to status.json's ``data_loss`` (per source, for this run), which the
status page shows. Every source's backlog (events, files or versions, and seconds behind) goes to its
``backlog``: the Event Hubs source reports its own, the file and Delta sources are measured here
(:class:`~hubflow.progress.source_backlog.SourceBacklogs`, given the query's checkpoint). Each
progress is also appended to ``progress_history.jsonl``
(the status page's rate and lag charts). Callbacks run on Py4J threads; they never raise, because an
exception in a listener must not take the job down.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from hubflow.progress.source_backlog import SourceBacklogs
from hubflow.status import JobState, JobStatus, utc_now
from pyspark_eventhubs.backlog import BACKLOG_KEY, SOURCE_BACKLOG
from pyspark_eventhubs.data_loss import DATA_LOSS_KEY

log = logging.getLogger(__name__)


def _as_offset(value: Any) -> Any:
    """Offsets arrive as JSON text; keep them as JSON values (None when the source reports none)."""
    if value in (None, "None", "null", ""):
        return None
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def summarize_source(source: Any) -> dict[str, Any]:
    """One ``sources[]`` entry; an Event Hubs source's reports get their own keys.

    The connector reports events that expired unread (``failOnDataLoss=false``) and its backlog
    inside its latest offset under ``DATA_LOSS_KEY`` and ``BACKLOG_KEY`` (a Python source's only
    channel into the progress); they are moved out to ``data_loss`` and ``backlog`` so that
    ``latest_offset`` stays an offset.
    """
    latest = _as_offset(source.latestOffset)
    data_loss = backlog = None
    if isinstance(latest, dict):
        data_loss = latest.pop(DATA_LOSS_KEY, None)
        backlog = latest.pop(BACKLOG_KEY, None)
    summary = {
        "description": source.description,
        "start_offset": _as_offset(source.startOffset),
        "end_offset": _as_offset(source.endOffset),
        "latest_offset": latest,
        "num_input_rows": source.numInputRows,
    }
    if data_loss:
        summary["data_loss"] = data_loss
    if backlog:
        summary[SOURCE_BACKLOG] = backlog
    return summary


def data_loss_of(summary: dict[str, Any]) -> dict[str, Any] | None:
    """status.json's ``data_loss``: ``{source description: {partition: report}}`` of one progress.

    The connector's report is cumulative for the query run, so the newest one replaces the last.
    """
    losses = {
        str(source["description"]): source["data_loss"]
        for source in summary["sources"]
        if source.get("data_loss")
    }
    return losses or None


def summarize_progress(progress: Any) -> dict[str, Any]:
    """The ``last_progress`` block of status.json from a ``StreamingQueryProgress``."""
    return {
        "batch_id": progress.batchId,
        "timestamp": progress.timestamp,
        "num_input_rows": progress.numInputRows,
        "input_rows_per_second": progress.inputRowsPerSecond,
        "processed_rows_per_second": progress.processedRowsPerSecond,
        "batch_duration_ms": progress.batchDuration,
        "sources": [summarize_source(source) for source in progress.sources],
        "sink": progress.sink.description if progress.sink is not None else None,
    }


class StatusListener(StreamingQueryListener):
    """Writes the events of the session's streaming query (a job runs exactly one) to its status."""

    def __init__(self, status: JobStatus, backlogs: SourceBacklogs | None = None) -> None:
        self.status = status
        self.backlogs = backlogs
        self._written = threading.Condition()
        self._last_batch_id = -1
        self._forgotten_runs: set[str] = set()

    def forget_run(self, run_id: object) -> None:
        """Ignore the events of query run ``run_id`` from now on: the runner starts the query
        again (:mod:`hubflow_jobs.runtime.query_start`), and a late event of the failed start must not
        mark the new one failed."""
        self._forgotten_runs.add(str(run_id))

    def _forgotten(self, run_id: object) -> bool:
        return str(run_id) in self._forgotten_runs

    def wait_for_batch(self, batch_id: int, timeout: float) -> bool:
        """Wait until the progress of micro-batch ``batch_id`` (or a later one) has been written.

        Spark delivers progress events on its listener bus, after the query has moved on: the
        last batch's event may still be queued when the query ends. The runner waits for it before
        it writes the final state, so status.json's ``last_progress`` and input-row count include
        that batch and no late event follows the final state. False after ``timeout`` seconds.
        """
        with self._written:
            return self._written.wait_for(lambda: self._last_batch_id >= batch_id, timeout)

    def onQueryStarted(self, event: Any) -> None:
        if self._forgotten(event.runId):
            return
        self._safely(
            lambda: self.status.update(
                state=JobState.RUNNING, query_id=str(event.id), run_id=str(event.runId)
            )
        )

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        if self._forgotten(progress.runId):
            return
        # Spark also reports progress for triggers that found no data: that is an idle job.
        state = JobState.RUNNING if progress.numInputRows else JobState.IDLE
        summary = summarize_progress(progress)
        if self.backlogs is not None:
            self.backlogs.add_to(summary)
        rows = progress.numInputRows or 0
        fields: dict[str, Any] = {"state": state, "last_progress": summary}
        data_loss = data_loss_of(summary)
        if data_loss:
            fields["data_loss"] = data_loss
        self._safely(lambda: self.status.add_input_rows(rows, **fields))
        self._safely(lambda: self.status.folder.append_progress(json.dumps(summary, default=str)))
        with self._written:
            self._last_batch_id = max(self._last_batch_id, int(progress.batchId))
            self._written.notify_all()

    def onQueryIdle(self, event: Any) -> None:
        if self._forgotten(event.runId):
            return
        self._safely(lambda: self.status.update(state=JobState.IDLE))

    def onQueryTerminated(self, event: Any) -> None:
        if self._forgotten(event.runId):
            return
        if event.exception:
            self._safely(lambda: self.status.update(state=JobState.FAILED, exception=str(event.exception)))
        else:
            self._safely(lambda: self.status.update(query_terminated_at=utc_now()))

    def _safely(self, action: Any) -> None:
        try:
            action()
        except Exception:
            log.exception("could not write the job status; the job goes on")


class QueryProgressListener(StreamingQueryListener):
    """Calls ``on_progress`` with each progress of one named query of a session; never raises.

    For counters a job keeps beside its status (a pipeline's late rows, watermark and observed counts:
    :mod:`hubflow_jobs.pipeline.progress`).

    It removes itself from the session when that query ends, so a session that runs the job again
    (tests, notebooks) does not collect listeners.
    """

    def __init__(self, session: Any, query_name: str, on_progress: Any) -> None:
        self.session = session
        self.query_name = query_name
        self.on_progress = on_progress
        self.query_id: str | None = None

    def onQueryStarted(self, event: Any) -> None:
        if event.name == self.query_name:
            self.query_id = str(event.id)

    def onQueryProgress(self, event: Any) -> None:
        if event.progress.name != self.query_name:
            return
        try:
            self.on_progress(event.progress)
        except Exception:
            log.exception("could not record the counts of a batch; the job goes on")

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        if self.query_id is not None and str(event.id) == self.query_id:
            # Not from the listener bus thread itself: removal waits for that thread's lock.
            threading.Thread(target=self._remove, daemon=True).start()

    def _remove(self) -> None:
        try:
            self.session.streams.removeListener(self)
        except Exception as exc:  # the session may be stopping
            log.debug("could not remove a progress listener: %s", exc)
