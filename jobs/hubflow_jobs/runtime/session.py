"""The Spark session of a job, built from its config, with its first executor (on a cluster)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hubflow.config import JobConfig
from hubflow.spark_auth import SPARK_AUTH_SECRET_ENV, auth_conf
from hubflow.storage.azure import SPARK_REDACTION_REGEX, accesses_from_env, spark_hadoop_conf
from hubflow_jobs.runtime.executors import NoExecutorsError, wait_for_executors

#: Delta Lake's SQL extension and catalog. Its jars are not fetched at run time: scripts/bootstrap.sh
#: (and the image build) install the locked ones (jvm-deps.lock) into pyspark's own jars folder.
DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

#: Spark talks to its Python workers and planners over Unix domain sockets (Spark 4.1+), not TCP:
#: over loopback TCP every Python data source read task and sink batch waits for the JVM's next
#: small packet (Nagle's algorithm against delayed ACKs); docs/benchmarks.md, "The 40 ms per Python
#: task". The sockets are files in the JVM's temp dir (docs/connector.md, "Installing").
PYTHON_WORKER_CONF = {"spark.python.unix.domain.socket.enabled": "true"}

#: Spark's checkpoint file manager over Hadoop's FileSystem API, not its default over FileContext.
#: On a local or mounted disk, without Hadoop's native library (pyspark ships none), the default
#: starts eight ``readlink`` processes for every file it renames into place (four for the file, four
#: for its checksum file), beside the two ``chmod`` both start: a micro-batch's offset and commit log
#: cost tens of milliseconds of process starts. This one writes the same way (a temporary file
#: renamed into place, refused when the batch's file exists) with the same checksum files, and
#: starts no ``readlink``; docs/benchmarks.md, "Checkpoint commits".
CHECKPOINT_CONF = {
    "spark.sql.streaming.checkpointFileManagerClass": (
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
    )
}

#: Defaults every job gets unless ``spark_conf`` overrides them.
DEFAULT_CONF = {
    **PYTHON_WORKER_CONF,
    **CHECKPOINT_CONF,
    # Dates such as ingest_date must not depend on the driver machine's time zone.
    "spark.sql.session.timeZone": "UTC",
    **DELTA_CONF,
    # Delta rebuilds a table's state from its log in this many tasks (Delta's default: 50). 50 tiny
    # tasks per commit dominate a micro-batch's time on a small cluster; raise it for tables with
    # millions of files.
    "spark.databricks.delta.snapshotPartitions": "8",
}


class DriverRefusedError(NoExecutorsError):
    """The cluster's master did not accept the driver, so the application has no executor."""


def refused_message(job: str, conf: Mapping[str, str], error: str) -> str | None:
    """What to check when the session of ``job`` could not start on a standalone master, or None
    when ``error`` (the first line of Spark's exception) is not such a refusal.

    Spark itself only says "Cannot call methods on a stopped SparkContext" after a minute of
    retries: the master's RPC authentication refused the driver's secret (logged as a
    ``SaslException`` among the driver's lines), or the master did not answer at all.
    """
    master = conf.get("spark.master", "")
    if not master.startswith("spark://"):
        return None
    authenticate = conf.get("spark.authenticate", "false").lower() == "true"
    if "secret key must be specified" in error:
        return (
            f"job {job} cannot start on {master}: spark.authenticate is on and the driver has no "
            f"secret. Set {SPARK_AUTH_SECRET_ENV} in the driver's environment to the cluster's "
            "secret (the compose stack's is HUBFLOW_SPARK_AUTH_SECRET in .hubflow/stack/secrets.env)"
        )
    if "stopped SparkContext" not in error:
        return None
    secret = (
        f"the cluster refused the driver's secret (the variable {SPARK_AUTH_SECRET_ENV} must hold the "
        "secret the master and workers were started with), or"
        if authenticate
        else "the cluster requires spark.authenticate (set it to true and give the driver the "
        f"cluster's secret in {SPARK_AUTH_SECRET_ENV}), or"
    )
    return (
        f"job {job}'s driver was not accepted by the Spark master {master} (Spark gave up "
        f"registering the application: all masters unresponsive). Either {secret} the master is not "
        "running or not reachable from this host (see its web UI and log)"
    )


def storage_conf(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Hadoop settings (``spark.hadoop.fs.azure.*``) for the storage accesses in the driver's
    environment (``HUBFLOW_AZURE_STORAGE``, put there by the supervisor from the job's
    ``storage_conn_id``): shared key, SAS, service principal or managed identity, per account."""
    return spark_hadoop_conf(accesses_from_env(None if environ is None else dict(environ)))


def build_session(config: JobConfig) -> Any:
    """Return the SparkSession for ``config``: app name = job name, conf = defaults, the storage
    access of the driver's environment (:func:`storage_conf`), the job's
    :meth:`~hubflow.config.JobConfig.extra_spark_conf`, then ``spark_conf``; Spark's redaction
    pattern is always hubflow's (:data:`~hubflow.storage.azure.SPARK_REDACTION_REGEX`).

    The master and deploy mode come from spark-submit (or a local default when run by plain python).
    On a cluster it returns once the application has an executor, and raises
    :class:`~hubflow_jobs.runtime.executors.NoExecutorsError` when none came within ``runtime.executor_wait``.
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(config.name)
    conf = {
        **DEFAULT_CONF,
        **auth_conf(),
        **storage_conf(),
        **config.extra_spark_conf(),
        **config.spark_conf,
        # last: a job's own settings cannot unmask a secret
        "spark.redaction.regex": SPARK_REDACTION_REGEX,
    }
    for key, value in conf.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:
        message = refused_message(config.name, _effective_conf(conf), str(exc))
        if message is None:
            raise
        raise DriverRefusedError(message) from exc
    try:
        wait_for_executors(spark, config.name, config.runtime.seconds("executor_wait"))
    except BaseException:
        spark.stop()  # give the cluster its slot back at once
        raise
    return spark


def _effective_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """``conf`` over what spark-submit gave the JVM (``spark.master`` among it), read after a failed
    start; just ``conf`` when no JVM came up."""
    from pyspark import SparkConf
    from pyspark.context import SparkContext

    if SparkContext._jvm is None:
        return dict(conf)
    return {**dict(SparkConf().getAll()), **conf}
