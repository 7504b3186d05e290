"""Built-in job ``eventhubs_to_lake``: an Event Hub -> the bronze table in the lake, raw body kept.

A pipeline like any user's: one ``eventhubs`` source named ``events``, one lake sink named
``bronze`` partitioned by ``ingest_date`` (the UTC date of the micro-batch). hubflow reads, writes
(exactly once, Delta or parquet), checkpoints, supervises and backfills it. Rows keep the
connector's columns unchanged - ``body`` (the raw bytes), ``partition``, ``offset``,
``sequenceNumber``, ``enqueuedTime``, ``publisher``, ``partitionKey``, ``properties``,
``systemProperties`` - plus ``_ingested_at``; ``(partition, sequenceNumber)`` identifies an event.

Its config before pipelines (``source:``, ``sink: {output_path, format}``) is still read, with a
warning (:class:`EventHubsToLakeConfig`); checkpoint and table stay where they were, so a job
upgraded mid-stream resumes exactly.
"""

from __future__ import annotations

from typing import Any

from hubflow_jobs.builtins.legacy_config import LegacyPipelineConfig, LegacySections
from hubflow_jobs.lake.tables import INGEST_DATE_COLUMN

#: The names of its source and sink (the function's parameter, the sink it returns).
SOURCE, SINK = "events", "bronze"


def bronze(events: Any) -> Any:
    """The connector's events as bronze rows: unchanged, plus ``_ingested_at`` and ``ingest_date``.

    Runs on the driver (it builds the plan); the same on a stream and on a backfill's batch.
    """
    from pyspark.sql import functions as F

    now = F.current_timestamp()
    return events.withColumn("_ingested_at", now).withColumn(INGEST_DATE_COLUMN, F.to_date(now))


class EventHubsToLakeConfig(LegacyPipelineConfig):
    """The config of eventhubs_to_lake: a pipeline config, or the old ``source:`` and ``sink:``."""

    LEGACY = LegacySections(
        builtin="eventhubs_to_lake",
        source=SOURCE,
        source_kind="eventhubs",
        sink=SINK,
        sink_defaults={"partition_by": [INGEST_DATE_COLUMN]},
    )
