"""The names of the files in a job's status folder ``<status_root>/<name>/``, and their size limits.

Files (all through :mod:`hubflow.storage.document_stores`, so the folder may be local or ``abfss://``):

=====================  ===========  =============================================================
``status.json``        the job      ``JobStatus``: state, heartbeat, its process, last progress
``progress_history.jsonl``  the job  one line per batch (the status page's charts)
``lease``              the job      ``Lease``: one running instance per checkpoint
``STOP``               supervisor   please stop: the running batch finishes, exit 0
``KILL``               supervisor   stop now: the job's watchdog exits hard (after ``stop_wait``)
``HOLD``               on-call      keep the job stopped: supervisors must not start it
``restarts.json``      supervisor   when the supervisor restarted the job (backoff, restart loops)
``supervisor.json``    supervisor   the fingerprint the job was last started with, backoff resets
``alerts.json``        supervisor   the alerts sent and not yet resolved
``driver.log``         supervisor   the driver's output (written or copied here by the launcher)
``audit.jsonl``        on-call      one line per action: who, what, dry run, why, outcome, hold
``action.lock``        on-call      the action in progress (one at a time): what, who, since, expiry
=====================  ===========  =============================================================

status.json and the lease name the process that wrote them: ``pid`` and ``host`` (for people) and
``pid_start_ticks``, ``pid_namespace``, ``boot_id`` (:mod:`hubflow.status.process_identity`, which
alone judges whether that process still runs: only from its own process space).

Markers (``STOP``, ``KILL``, ``HOLD``) hold ``{"at", "by", "reason", "target"}`` (``target`` = the
lease holder a KILL is meant for, or null); an empty marker file counts too.
"""

STATUS_FILE = "status.json"
#: One JSON line per micro-batch (status.json's ``last_progress``): the status page's charts.
PROGRESS_HISTORY_FILE = "progress_history.jsonl"
#: The history is rotated (to ``.1``, replacing the older one) when it grows past this size.
PROGRESS_HISTORY_MAX_BYTES = 4 * 1024 * 1024
LEASE_FILE = "lease"
STOP_MARKER = "STOP"
KILL_MARKER = "KILL"
HOLD_MARKER = "HOLD"
RESTARTS_FILE = "restarts.json"
#: The job's active alerts (``hubflow.alerts``): what was sent, so no check sends it twice.
ALERTS_FILE = "alerts.json"
#: The supervisor's memory (``hubflow.supervision.supervisor``): the fingerprint of what the job was
#: last started with, when, and when its restart backoff was last reset.
SUPERVISOR_FILE = "supervisor.json"
DRIVER_LOG_FILE = "driver.log"
#: The driver log kept in a remote status folder is at most this long (its tail).
DRIVER_LOG_MAX_BYTES = 16 * 1024 * 1024
#: Restart times kept in restarts.json.
RESTARTS_KEPT = 50
#: The audit trail (``hubflow.operations.audit``): one JSON line per on-call action and per start the
#: supervisor makes; appended by conditional writes, so concurrent writers lose nothing.
AUDIT_FILE = "audit.jsonl"
#: Audit entries kept in audit.jsonl (the newest; older ones are dropped as new ones come).
AUDIT_KEPT = 500
#: Each text of an audit entry (reason, outcome, holds) is cut to this many characters.
AUDIT_TEXT_MAX_CHARS = 1000
#: The action lock (``hubflow.status.action_lock``): the one action in progress on the job.
ACTION_LOCK_FILE = "action.lock"
