"""Backfill of one data interval: a batch read of an enqueued-time window, overwriting its partition.

A scheduled job's normal runs are streaming runs (availableNow) that resume from the checkpoint.
A backfill run (Airflow's ``backfill create``, or the UI's Backfill) must instead process exactly
its data interval ``[window_start, window_end)`` and be safe to rerun. For Event Hubs that is a
batch read (``spark.read.format("eventhubs")``) from the first event enqueued at or after the start
to the first one at or after the end, written to the job's backfill table
``<sink.output_path>_backfill`` partitioned by ``window_start``, overwriting only that partition
(dynamic partition overwrite): rerunning an interval replaces its rows, never adds to them.

The backfill table is separate from the streaming output on purpose: the streaming file sink's
``_spark_metadata`` log hides files written by batch jobs into its folder, and the same events
may already be in the streaming output under their ingest date. The checkpoint is not touched.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from .eventhubs_bronze import EventHubsToLakeConfig

log = logging.getLogger(__name__)

WINDOW_COLUMN = "window_start"


class WindowError(ValueError):
    """The window given on the command line cannot be used."""


def parse_window(start: str, end: str) -> tuple[datetime, datetime]:
    """Two ISO-8601 times (UTC when no zone is given) with start < end."""
    try:
        bounds = [datetime.fromisoformat(value.replace("Z", "+00:00")) for value in (start, end)]
    except ValueError as exc:
        raise WindowError(f"window times must be ISO-8601, e.g. 2026-11-22T10:00:00Z: {exc}") from None
    first, last = (b if b.tzinfo else b.replace(tzinfo=UTC) for b in bounds)
    if not first < last:
        raise WindowError(f"--window-start {start} must be before --window-end {end}")
    return first.astimezone(UTC), last.astimezone(UTC)


def backfill_path(config: EventHubsToLakeConfig) -> str:
    """Where the job's backfills go: ``<sink.output_path>_backfill``."""
    return config.sink.output_path.rstrip("/") + "_backfill"


def window_label(start: datetime) -> str:
    """The partition value of a window: its start, ISO-8601 in UTC, e.g. ``2026-11-22T10:00:00Z``."""
    return start.strftime("%Y-%m-%dT%H:%M:%SZ")


def _position(moment: datetime) -> str:
    when = moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return f'{{"offset": null, "seqNo": -1, "enqueuedTime": "{when}", "isInclusive": true}}'


def backfill_eventhubs(spark: Any, config: EventHubsToLakeConfig, start: datetime, end: datetime) -> int:
    """Read the events enqueued in ``[start, end)`` and overwrite that window's partition; return rows."""
    from pyspark.sql import functions as F

    from pyspark_eventhubs import DefaultSource

    spark.dataSource.register(DefaultSource)
    options = config.source.spark_options()
    options.pop("maxEventsPerTrigger", None)
    options["eventhubs.startingPosition"] = _position(start)
    options["eventhubs.endingPosition"] = _position(end)
    events = spark.read.format("eventhubs").options(**options).load()
    rows = events.withColumn("_ingested_at", F.current_timestamp()).withColumn(
        WINDOW_COLUMN, F.lit(window_label(start))
    )
    rows = rows.cache()
    count = rows.count()
    (
        rows.write.mode("overwrite")
        .option("partitionOverwriteMode", "dynamic")
        .partitionBy(WINDOW_COLUMN)
        .parquet(backfill_path(config))
    )
    rows.unpersist()
    log.info(
        "job %s backfill: %d events enqueued in [%s, %s) written to %s/%s=%s",
        config.name,
        count,
        start.isoformat(),
        end.isoformat(),
        backfill_path(config),
        WINDOW_COLUMN,
        window_label(start),
    )
    return count
