"""The contract between a job and its supervisors: the job's status folder ``<status_root>/<name>/``.

The job (:mod:`hubflow_jobs.runtime`) and everything that watches or steers it from outside (the
Airflow operators and sensor, the status page, ``hubflow status``, on-call by hand) meet only here,
so this package owns every name and rule they share: the files' names (:mod:`.names`), the job's
states (:mod:`.states`), the folder and its markers (:mod:`.folder`, :mod:`.liveness`), the holds'
kinds and owners (:mod:`.holds`), the running job's ``status.json`` (:mod:`.job_status`, its
``data_loss`` in :mod:`.data_loss`), the single-instance lease (:mod:`.lease`) and which process
wrote a document (:mod:`.process_identity`). It imports neither Spark nor Airflow.
"""

from hubflow.status.documents import age_seconds, utc_now
from hubflow.status.folder import StatusFolder
from hubflow.status.holds import HoldKeptError, HoldKind
from hubflow.status.job_status import JobStatus
from hubflow.status.lease import Lease, LeaseHeldError, LeaseTiming
from hubflow.status.liveness import Liveness, Marker, pid_alive
from hubflow.status.names import (
    DRIVER_LOG_FILE,
    DRIVER_LOG_MAX_BYTES,
    HOLD_MARKER,
    KILL_MARKER,
    LEASE_FILE,
    PROGRESS_HISTORY_FILE,
    PROGRESS_HISTORY_MAX_BYTES,
    RESTARTS_FILE,
    RESTARTS_KEPT,
    STATUS_FILE,
    STOP_MARKER,
)
from hubflow.status.process_identity import this_host
from hubflow.status.states import LIVE_STATES, WORKING_STATES, JobState, parse_state

__all__ = [
    "DRIVER_LOG_FILE",
    "DRIVER_LOG_MAX_BYTES",
    "HOLD_MARKER",
    "KILL_MARKER",
    "LEASE_FILE",
    "LIVE_STATES",
    "PROGRESS_HISTORY_FILE",
    "PROGRESS_HISTORY_MAX_BYTES",
    "RESTARTS_FILE",
    "RESTARTS_KEPT",
    "STATUS_FILE",
    "STOP_MARKER",
    "WORKING_STATES",
    "HoldKeptError",
    "HoldKind",
    "JobState",
    "JobStatus",
    "Lease",
    "LeaseHeldError",
    "LeaseTiming",
    "Liveness",
    "Marker",
    "StatusFolder",
    "age_seconds",
    "parse_state",
    "pid_alive",
    "this_host",
    "utc_now",
]
