"""status.json as the running job keeps it: every change written at once, a heartbeat in between."""

from __future__ import annotations

import json
import threading
from typing import Any

from hubflow.redaction import redact
from hubflow.status.documents import utc_now
from hubflow.status.folder import StatusFolder
from hubflow.status.names import STATUS_FILE
from hubflow.status.process_identity import this_process
from hubflow.status.states import JobState, parse_state

#: The fields of status.json that hold free text (an exception's message, the run's reason): written
#: with their secrets masked, so no reader - the status page, ``hubflow run``, an Airflow task log
#: quoting the outcome - gets one.
FREE_TEXT_FIELDS = ("exception", "outcome", "start_failure")


class JobStatus:
    """The live status.json of one run, written by the job (main loop, listener and watchdog).

    Every change rewrites ``status.json`` at once; :meth:`heartbeat` rewrites it with a fresh
    ``heartbeat`` so a supervisor can tell a quiet job from a dead one. The free texts
    (:data:`FREE_TEXT_FIELDS`) are written masked.
    """

    def __init__(self, folder: StatusFolder, job: str) -> None:
        self.folder = folder
        self._lock = threading.Lock()
        self._doc: dict[str, Any] = {
            "job": job,
            "state": JobState.STARTING.value,
            "run_id": None,
            "query_id": None,
            "heartbeat": utc_now(),
            "started_at": utc_now(),
            "last_progress": None,
            "input_rows": 0,
            "exception": None,
            "jvm_pid": None,
            **this_process(),
        }

    @property
    def state(self) -> JobState:
        """The current state."""
        with self._lock:
            return JobState(self._doc["state"])

    def snapshot(self) -> dict[str, Any]:
        """A copy of the current document."""
        with self._lock:
            return json.loads(json.dumps(self._doc, default=str))

    def update(self, **fields: Any) -> None:
        """Set ``fields``, refresh the heartbeat and rewrite status.json.

        States only move forward (running/idle -> stopping -> stopped/failed): a late listener
        event cannot make a stopping or finished job look busy again.
        """
        if "state" in fields:
            new_state = parse_state(fields["state"])
            if new_state is None or new_state == JobState.HELD:
                written = [s.value for s in JobState if s != JobState.HELD]
                raise ValueError(f"unknown job state {fields['state']!r}; expected one of {written}")
            fields["state"] = new_state.value
        for name in FREE_TEXT_FIELDS:
            if name in fields:
                fields[name] = redact(fields[name])
        with self._lock:
            if "state" in fields and JobState(fields["state"]).rank < JobState(self._doc["state"]).rank:
                del fields["state"]
            self._doc.update(fields)
            self._doc["heartbeat"] = utc_now()
            self.folder.write_json(STATUS_FILE, self._doc)

    def restart_query(self, attempt: int, failure: str) -> None:
        """Another attempt of this run to start its query (:mod:`hubflow_jobs.runtime.query_start`): the
        state goes back to ``starting``, the one move backwards a run makes, with the attempt's
        number and why the last start failed (``start_attempt``, ``start_failure``)."""
        with self._lock:
            self._doc.update(
                state=JobState.STARTING.value,
                exception=None,
                query_terminated_at=None,
                start_attempt=attempt,
                start_failure=redact(failure),
                heartbeat=utc_now(),
            )
            self.folder.write_json(STATUS_FILE, self._doc)

    def add_input_rows(self, rows: int, **fields: Any) -> None:
        """Count ``rows`` more rows read by this run and apply ``fields`` (see :meth:`update`)."""
        with self._lock:
            total = int(self._doc.get("input_rows") or 0) + int(rows or 0)
        self.update(input_rows=total, **fields)

    def heartbeat(self) -> None:
        """Rewrite status.json with a fresh heartbeat and nothing else changed."""
        self.update()
