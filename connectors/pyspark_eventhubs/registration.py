"""Registering a Python data source so that its queries can start side by side (driver side).

Spark 4.2 hands every stream of a registered Python source the registered function's environment
map itself, not a copy, and a stream's source runner adds four variables to that shared map when
its query starts (``PythonStreamingSourceRunner.init``). Any other thread that defines a DataFrame
on the same source meanwhile copies the map (``PythonPlannerRunner``) and fails with
``java.util.ConcurrentModificationException``: a job that starts a second query while the first one
starts (the aggregate job's quarantine and aggregation queries, a pipeline with two sources) fails
at random. Replacing the value of a key that is already there is not a structural change, so
:func:`register_data_source` puts those keys in when it registers, before any query can run.
"""

from __future__ import annotations

from typing import Any


def registered_environment(spark: Any, name: str) -> Any:
    """The JVM map (``java.util.Map``) of environment variables shared by source ``name``'s streams."""
    manager = spark._jsparkSession.sessionState().dataSourceManager()
    return manager.lookupDataSource(name).dataSourceCls().envVars()


def stream_runner_environment(spark: Any) -> dict[str, str]:
    """The variables (and values) Spark 4.2's streaming source runner adds to the shared map when a
    query starts, read as it reads them from the driver's SparkEnv."""
    env = spark.sparkContext._jvm.org.apache.spark.SparkEnv.get()
    conf = env.conf()
    local_dirs = ",".join(str(d.getPath()) for d in env.blockManager().diskBlockManager().localDirs())
    auth_timeout = conf.getTimeAsSeconds("spark.python.authenticate.socketTimeout", "15s")
    return {
        "SPARK_LOCAL_DIRS": local_dirs,
        "SPARK_AUTH_SOCKET_TIMEOUT": str(auth_timeout),
        "SPARK_BUFFER_SIZE": str(conf.getInt("spark.buffer.size", 65536)),
        "SPARK_PYTHON_RUNTIME": "PYTHON_WORKER",
    }


def register_data_source(spark: Any, source: type) -> None:
    """``spark.dataSource.register(source)``, with the shared environment map already holding every
    key a starting stream adds, so queries on the source can start while others are defined."""
    spark.dataSource.register(source)
    shared = registered_environment(spark, source.name())
    for key, value in stream_runner_environment(spark).items():
        shared.putIfAbsent(key, value)
