"""The runtime every hubflow PySpark job shares, and the contract its supervisors read.

A job is an entry script ``jobs/<name>.py`` run as ``spark-submit jobs/<name>.py --config FILE``.
This package gives it a validated YAML config (:mod:`.config`), a Spark session built from that
config (:mod:`.session`), its status folder (:mod:`.status_folder`: status.json, the lease, the
STOP/KILL/HOLD markers; through :mod:`.storage`), a listener that keeps status.json current
(:mod:`.listener`), graceful stop by SIGTERM or marker (:mod:`.stop`), a watchdog thread that
renews the lease and obeys kill requests (:mod:`.watchdog`) and the loop that ties them together
(:mod:`.runner`). :mod:`.driver_log` copies a driver's log into a remote status folder.

No Airflow imports here. The Airflow side (``hubflow_plugins``) imports :mod:`.status_folder`, so
importing this package and that module must not import Spark either (a test checks it): Spark is
imported inside the modules that run in the driver only.
"""

__all__ = [
    "EXIT_CONFIG_ERROR",
    "EXIT_FAILED",
    "EXIT_HELD",
    "EXIT_KILLED",
    "EXIT_LEASE_LOST",
    "EXIT_LOCKED",
    "EXIT_OK",
]

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
