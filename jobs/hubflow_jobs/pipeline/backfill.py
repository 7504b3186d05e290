"""Backfill of one data interval of a pipeline: the interval's input through the user's function
again, replacing that interval's rows in each of its lake sinks.

A pipeline can backfill (:func:`backfill_problem`, checked before Spark starts) when it reads one
source and writes lake sinks. Its function runs on a batch of the interval's input (a pipeline
function works on batch DataFrames as on streams):

* an ``eventhubs`` or ``eventhubs_kafka`` source (:mod:`.eventhubs_backfill`): the events
  enqueued in ``[start, end)``, their identity kept in every sink, refused when the sinks' queries
  have not committed past the interval or the tables hold events the hub no longer returns.
* a ``files`` source with ``interval_folder``: the files of the interval's folders, in the landing
  area or the archive (:mod:`.files_backfill`).
* a ``delta`` source with ``interval_column``: the table's rows whose time column lies in the
  interval, refused when the sinks' queries have not read every commit adding such rows or keep
  state across batches (:mod:`.delta_backfill`).
* a ``parquet`` source (a table written by Spark's file sink) with ``interval_column``: the same,
  of the files its ``_spark_metadata`` log lists (:mod:`.parquet_backfill`).

How the rows are written (Delta ``replaceWhere``, parquet side tables): :mod:`.interval_writes`.
A rerun replaces the interval's rows again, never adds to them. Runs on the driver.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from hubflow_jobs.backfill_window import folders_of_window
from hubflow_jobs.pipeline.binding import Binding
from hubflow_jobs.pipeline.declarations import (
    HUB_SINKS,
    DeltaSource,
    EventHubsKafkaSource,
    EventHubsSource,
    FilesSource,
    ParquetSource,
    PipelineConfig,
)
from hubflow_jobs.pipeline.delta_backfill import backfill_delta_interval, stateful_sinks
from hubflow_jobs.pipeline.eventhubs_backfill import backfill_events_interval
from hubflow_jobs.pipeline.files_backfill import backfill_files_interval
from hubflow_jobs.pipeline.parquet_backfill import backfill_parquet_interval

log = logging.getLogger(__name__)


def backfill_problem(config: PipelineConfig, binding: Binding) -> str | None:
    """Why the pipeline cannot backfill an interval (one message naming the keys), or None."""
    if binding.takes_context:
        return (
            f"pipeline {binding.reference!r} starts its own queries (it takes 'context'), so hubflow cannot "
            "run it on an interval; backfill is for functions that return DataFrames"
        )
    kinds = {name: source.kind for name, source in config.sources.items()}
    backfills = EventHubsSource | EventHubsKafkaSource | FilesSource | DeltaSource | ParquetSource
    if len(kinds) != 1 or not isinstance(next(iter(config.sources.values())), backfills):
        declared = ", ".join(f"{name} ({kind})" for name, kind in kinds.items())
        return (
            f"job {config.name}: a pipeline backfills an interval of one source of kind eventhubs, "
            f"eventhubs_kafka, files, delta or parquet; its sources are {declared}"
        )
    (name, source), *_ = config.sources.items()
    if isinstance(source, FilesSource) and source.interval_folder is None:
        key = config.key_as_written("sources", name, "interval_folder")
        return (
            f"job {config.name}: {key} is not set, so a backfill cannot tell which landing folder holds "
            "an interval's files; set it to the landing layout, e.g. %Y/%m/%d/%H"
        )
    if isinstance(source, DeltaSource | ParquetSource):
        problem = _table_problem(config, binding, name, source)
        if problem:
            return problem
    hubs = [(name, sink) for name, sink in config.sinks.items() if isinstance(sink, HUB_SINKS)]
    not_lake = [f"sinks.{name}.kind: {sink.kind}" for name, sink in hubs]
    if not_lake:
        return (
            f"job {config.name}: a backfill replaces the interval's rows in lake sinks (delta, parquet); an "
            f"Event Hub cannot take events back: {', '.join(not_lake)}"
        )
    return None


def _table_problem(
    config: PipelineConfig, binding: Binding, name: str, source: DeltaSource | ParquetSource
) -> str | None:
    """Why a pipeline reading the lake table ``source`` (Delta or parquet) cannot backfill, or None."""
    if source.interval_column is None:
        key = config.key_as_written("sources", name, "interval_column")
        return (
            f"job {config.name}: {key} is not set, so a backfill cannot tell which of the table's rows "
            "belong to an interval; set it to the table's time column (timestamp or date; the interval's "
            "rows are start <= column < end, in the table and in each Delta sink, which keeps it), e.g. "
            "interval_column: enqueuedTime"
        )
    stateful = stateful_sinks(config)
    if stateful:
        return (
            f"job {config.name}: pipeline {binding.reference!r} keeps state across batches ({stateful[0]}: "
            "an aggregation, dropDuplicates or a stream-stream join), so its rows of an interval depend "
            "on rows outside it and a backfill, which reads the interval's rows only, cannot recompute "
            "them; backfill a stateless function (select, filter, column expressions)"
        )
    return None


def check_window(config: PipelineConfig, start: datetime, end: datetime) -> None:
    """WindowError naming the key when the window cuts a landing folder of a files source's layout
    (checked before Spark starts; an Event Hub's interval may start and end anywhere)."""
    (name, source), *_ = config.sources.items()
    if isinstance(source, FilesSource):
        key = config.key_as_written("sources", name, "interval_folder")
        folders_of_window(source.interval_folder, key, config.name, start, end)


def backfill_pipeline(
    spark: Any, config: PipelineConfig, binding: Binding, start: datetime, end: datetime
) -> dict[str, int]:
    """Replace the rows of ``[start, end)`` in every sink with the function's rows of that interval's
    input; the rows read and written per table. Refused (:class:`BackfillRefused`) with the reason
    when that would double or lose rows."""
    source = next(iter(config.sources.values()))
    if isinstance(source, FilesSource):
        return backfill_files_interval(spark, config, binding, start, end)
    if isinstance(source, DeltaSource):
        return backfill_delta_interval(spark, config, binding, start, end)
    if isinstance(source, ParquetSource):
        return backfill_parquet_interval(spark, config, binding, start, end)
    return backfill_events_interval(spark, config, binding, start, end)
