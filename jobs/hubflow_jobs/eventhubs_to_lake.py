"""Job ``eventhubs_to_lake``: an Event Hub -> the bronze table in the lake, raw body kept.

Reads ``format("eventhubs")`` (the ``pyspark_eventhubs`` connector) and writes every event exactly
once to a Delta table (``sink.format: delta``, the default: one commit per micro-batch with the
query's transaction) or through Spark's parquet file sink (``format: parquet``, exactly once
through ``_spark_metadata``), partitioned by ``ingest_date`` (the UTC date of the micro-batch); see
:mod:`hubflow_jobs.lake_tables`. Rows keep the connector's columns unchanged -
``body`` (the raw bytes), ``partition``, ``offset``, ``sequenceNumber``, ``enqueuedTime``,
``publisher``, ``partitionKey``, ``properties``, ``systemProperties`` - plus ``_ingested_at``.
``(partition, sequenceNumber)`` identifies an event.

The connection string is never in the config: ``source.connection_string_env`` names the
environment variable holding it, and the session masks it in plans, the UI and logs.
"""

from __future__ import annotations

from typing import Any

from .config import JobConfig
from .eventhubs_config import EventHubSourceConfig
from .lake_tables import INGEST_DATE_COLUMN, LakeOutputConfig, check_table_format, start_table_stream
from .status_folder import JobStatus


class BronzeSinkConfig(LakeOutputConfig):
    """``sink:`` of eventhubs_to_lake: ``output_path`` and ``format`` (delta or parquet)."""


class EventHubsToLakeConfig(JobConfig):
    """The whole config of eventhubs_to_lake: the common section plus ``source`` and ``sink``."""

    source: EventHubSourceConfig
    sink: BronzeSinkConfig

    def extra_spark_conf(self) -> dict[str, str]:
        """Mask the connection string wherever Spark prints options (a static, session-wide setting)."""
        from pyspark_eventhubs import redaction_conf

        return redaction_conf()

    def delta_tables(self) -> list[str]:
        """The Delta tables the job writes (maintained by the cleanup DAG)."""
        return self.sink.delta_tables()


def start_eventhubs_to_lake(spark: Any, config: EventHubsToLakeConfig, status: JobStatus) -> Any:
    """Start the streaming query of eventhubs_to_lake and return it."""
    from pyspark_eventhubs import DefaultSource, register_data_source

    # Registering explicitly works however the connector was installed (wheel, --py-files, editable);
    # Spark's own discovery only sees plain pyspark_* modules on sys.path.
    register_data_source(spark, DefaultSource)
    events = spark.readStream.format("eventhubs").options(**config.source.spark_options()).load()
    check_table_format(spark, config.sink.output_path, config.sink.format, "sink.output_path")
    return start_table_stream(
        bronze_rows(events),
        query_name=config.name,
        path=config.sink.output_path,
        file_format=config.sink.format,
        checkpoint=config.checkpoint_location,
        partition_by=[INGEST_DATE_COLUMN],
        trigger=config.trigger.spark_kwargs(),
    )


def bronze_rows(events: Any) -> Any:
    """The connector's events as bronze rows: unchanged, plus ``_ingested_at`` and ``ingest_date``.

    Shared by the streaming job and its backfill, so both write the same columns to the table.
    """
    from pyspark.sql import functions as F

    now = F.current_timestamp()
    return events.withColumn("_ingested_at", now).withColumn(INGEST_DATE_COLUMN, F.to_date(now))
