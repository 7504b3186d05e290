"""The Spark session of a job, built from its config, with its first executor (on a cluster)."""

from __future__ import annotations

from typing import Any

from hubflow_jobs.config import JobConfig
from hubflow_jobs.runtime.executors import wait_for_executors

#: Delta Lake's SQL extension and catalog. Its jars are not fetched at run time: scripts/bootstrap.sh
#: (and the image build) install the locked ones (jvm-deps.lock) into pyspark's own jars folder.
DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

#: Defaults every job gets unless ``spark_conf`` overrides them.
DEFAULT_CONF = {
    # Dates such as ingest_date must not depend on the driver machine's time zone.
    "spark.sql.session.timeZone": "UTC",
    **DELTA_CONF,
    # Delta rebuilds a table's state from its log in this many tasks (Delta's default: 50). 50 tiny
    # tasks per commit dominate a micro-batch's time on a small cluster; raise it for tables with
    # millions of files.
    "spark.databricks.delta.snapshotPartitions": "8",
}


def build_session(config: JobConfig) -> Any:
    """Return the SparkSession for ``config``: app name = job name, conf = defaults, then the job's
    :meth:`~hubflow_jobs.config.JobConfig.extra_spark_conf`, then ``spark_conf``.

    The master and deploy mode come from spark-submit (or a local default when run by plain python).
    On a cluster it returns once the application has an executor, and raises
    :class:`~hubflow_jobs.runtime.executors.NoExecutorsError` when none came within ``runtime.executor_wait``.
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(config.name)
    for key, value in {**DEFAULT_CONF, **config.extra_spark_conf(), **config.spark_conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        wait_for_executors(spark, config.name, config.runtime.seconds("executor_wait"))
    except BaseException:
        spark.stop()  # give the cluster its slot back at once
        raise
    return spark
