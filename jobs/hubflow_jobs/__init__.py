"""The Spark driver side of hubflow: the runtime every PySpark job shares, and its pipelines.

A job runs as ``spark-submit jobs/<entry>.py --config FILE``. Its layers, each a package:

* :mod:`.pipeline` - a pipeline: the user's function bound to declared sources and sinks, its
  streams, backfills and progress; :mod:`.builtins` - the five built-in pipelines, written on it.
* :mod:`.runtime` - the driver: Spark session, the query loop, listener, stop, watchdog.
* :mod:`.lake` - the lake's tables: Delta and parquet writes, the Delta source, maintenance.

Beside them: the inputs a config describes (:mod:`.eventhubs_config`, :mod:`.eventhubs_kafka`),
landing areas and interval folders, and what every backfill shares (:mod:`.backfill_window`). The
config models' base, the registry and the status contract are the control plane's. What the job shares
with its supervisors (the status folder, its exit codes, storage) is the control plane's
(:mod:`hubflow`), imported from there.

No Airflow imports here. Importing this package does not import Spark either (a test checks it):
Spark is imported inside the functions that run in the driver only.
"""
