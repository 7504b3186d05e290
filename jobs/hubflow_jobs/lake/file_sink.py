"""Spark's own exactly-once file sink, driven from ``foreachBatch`` so one query can feed two outputs.

The file-landing job writes every micro-batch to two places - the lake output and the quarantine -
and both must be exactly once. Spark's file sink (``FileStreamSink``, what ``writeStream.format(
"parquet")`` uses) gives that through its ``_spark_metadata`` log: a batch id it has already
committed is skipped when a restarted query replays the batch, and readers only see committed
files. PySpark exposes that sink only as a query's single output, so :class:`ExactlyOnceFileSink`
creates it through Py4J and hands it each batch with its batch id. This touches a Spark class that
is not public API (it moved packages in Spark 4.x): :func:`_sink_class` fails with a clear message
if a Spark upgrade moves it again, and ``tests/jobs/test_file_sink.py`` pins the behaviour.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_SINK_CLASSES = (
    "org.apache.spark.sql.execution.streaming.sinks.FileStreamSink",  # Spark 4.x
    "org.apache.spark.sql.execution.streaming.FileStreamSink",  # Spark 3.x
)
_FORMATS = {
    "parquet": "org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat",
}


def _java_class(jvm: Any, dotted: str) -> Any:
    target = jvm
    for part in dotted.split("."):
        target = getattr(target, part)
    return target


def _sink_class(jvm: Any) -> Any:
    from py4j.java_gateway import JavaClass

    for name in _SINK_CLASSES:
        candidate = _java_class(jvm, name)
        if isinstance(candidate, JavaClass):
            return candidate
    raise RuntimeError(
        "this Spark version has no FileStreamSink class where hubflow_jobs.lake.file_sink looks for it "
        f"({', '.join(_SINK_CLASSES)}); update _SINK_CLASSES for the installed Spark"
    )


class ExactlyOnceFileSink:
    """A parquet file sink at ``path`` whose batches are committed once each, by batch id."""

    def __init__(self, spark: Any, path: str, partition_by: Sequence[str] = (), file_format: str = "parquet"):
        if file_format not in _FORMATS:
            raise ValueError(f"unsupported sink format {file_format!r}; supported: {sorted(_FORMATS)}")
        jvm = spark.sparkContext._jvm
        self.path = path
        columns = jvm.java.util.ArrayList()
        for column in partition_by:
            columns.add(column)
        scala_columns = jvm.scala.jdk.javaapi.CollectionConverters.asScala(columns).toList()
        no_options = jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(jvm.java.util.HashMap())
        file_format_object = _java_class(jvm, _FORMATS[file_format])()
        self._sink = _sink_class(jvm)(
            spark._jsparkSession, path, file_format_object, scala_columns, no_options
        )

    def add_batch(self, batch_id: int, frame: Any) -> None:
        """Write ``frame`` as batch ``batch_id``; a batch id already committed here is skipped."""
        self._sink.addBatch(batch_id, frame._jdf)
