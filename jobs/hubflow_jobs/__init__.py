"""The runtime every hubflow PySpark job shares.

A job is an entry script ``jobs/<name>.py`` run as ``spark-submit jobs/<name>.py --config FILE``.
This package gives it a validated YAML config (:mod:`.config`), a Spark session built from that
config (:mod:`.session`), a status file beside the checkpoint (:mod:`.status`, :mod:`.listener`),
graceful stop by SIGTERM or a ``STOP`` marker (:mod:`.stop`), one instance per checkpoint
(:mod:`.lock`) and the loop that ties them together (:mod:`.runner`). No Airflow imports here: the
same code runs under Airflow, by hand, or on a cluster shipped with ``--py-files``.
"""

__all__ = ["EXIT_CONFIG_ERROR", "EXIT_FAILED", "EXIT_LOCKED", "EXIT_OK"]

#: The job finished (availableNow ran dry) or stopped gracefully on request.
EXIT_OK = 0
#: The streaming query or the job's own code failed; the reason is on the last log line.
EXIT_FAILED = 1
#: The YAML config is invalid; nothing was started.
EXIT_CONFIG_ERROR = 2
#: Another live instance holds the job's lock; nothing was started.
EXIT_LOCKED = 3
