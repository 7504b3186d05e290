"""The exit codes of a job's driver: what the runner returns and supervisors judge."""

#: The job finished (availableNow ran dry) or stopped gracefully on request.
EXIT_OK = 0
#: The streaming query or the job's own code failed; the reason is on the last log line.
EXIT_FAILED = 1
#: The YAML config is invalid; nothing was started.
EXIT_CONFIG_ERROR = 2
#: Another live instance holds the job's lease; nothing was started.
EXIT_LOCKED = 3
#: On-call holds the job (the ``HOLD`` marker); nothing was started.
EXIT_HELD = 4
#: The job lost its lease (taken over, or not renewable for ``lease_fence_after``) and exited hard.
EXIT_LEASE_LOST = 5
#: The job's watchdog obeyed a ``KILL`` request and exited hard.
EXIT_KILLED = 6
