"""The runtime every hubflow PySpark job shares, and the contract its supervisors read.

A job runs as ``spark-submit jobs/<entry>.py --config FILE``. Its layers, each a package:

* :mod:`.pipeline` - a pipeline: the user's function bound to declared sources and sinks, its
  streams, backfills and progress; :mod:`.builtins` - the five built-in pipelines, written on it.
* :mod:`.runtime` - the driver: Spark session, the query loop, listener, stop, watchdog.
* :mod:`.status` - the contract with supervisors: the status folder, job states, lease, liveness.
* :mod:`.lake` - the lake's tables: Delta and parquet writes, the Delta source, maintenance.
* :mod:`.storage` - documents and objects on local disk, fsspec and Azure Blob.

Beside them, what all layers share: the validated YAML config (:mod:`.config`, with
:mod:`.eventhubs_config`), durations, UTC times, redaction, Spark checkpoint logs, landing areas
and interval folders, and what every backfill shares (:mod:`.backfill`).

No Airflow imports here. The Airflow side (``hubflow_plugins``) imports :mod:`.status`, so
importing this package and that one must not import Spark either (a test checks it): Spark is
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
