"""Backfill of one data interval of a pipeline: the interval's input through the user's function
again, replacing that interval's rows in each of its lake sinks.

A pipeline can backfill (:func:`backfill_problem`, checked before Spark starts) when it reads one
source and writes lake sinks. Its function runs on a batch of the interval's input (a pipeline
function works on batch DataFrames as on streams):

* an ``eventhubs`` or ``eventhubs_kafka`` source (here): the events enqueued in ``[start, end)``
  (the Kafka source's offsets by timestamp bound them; its checkpoint's offsets are sequence numbers
  too). Each Delta sink's frame
  keeps the events' identity, :data:`IDENTITY_COLUMNS`, by which the interval's rows are found
  (``enqueuedTime``) and checked (``partition``, ``sequenceNumber``). Before anything is written,
  for every Delta sink: its query has committed past the interval (read from its checkpoint, so a
  function that filters rows out is judged right), and its tables hold no event of the interval
  that the hub no longer returns.
* a ``files`` source with ``interval_folder``: the files of the interval's folders, in the landing
  area or the archive (:mod:`.file_backfill`).

How the rows are written (Delta ``replaceWhere``, parquet side tables): :mod:`.interval_writes`.
A rerun replaces the interval's rows again, never adds to them. Runs on the driver.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any

from hubflow_jobs.backfill import (
    BackfillRefused,
    enqueued_in,
    folders_of_window,
    interval_events,
    refuse_if_events_gone,
)
from hubflow_jobs.lake.tables import delta_table_exists
from hubflow_jobs.pipeline.binding import Binding, sink_frames
from hubflow_jobs.pipeline.declarations import (
    HUB_SINKS,
    EventHubsKafkaSource,
    EventHubsSource,
    FilesSource,
    PipelineConfig,
)
from hubflow_jobs.pipeline.file_backfill import backfill_files_interval
from hubflow_jobs.pipeline.interval_writes import sink_writes, write_interval

log = logging.getLogger(__name__)

#: The columns of the events every sink of a backfilled pipeline keeps.
IDENTITY_COLUMNS = ("enqueuedTime", "partition", "sequenceNumber")


def backfill_problem(config: PipelineConfig, binding: Binding) -> str | None:
    """Why the pipeline cannot backfill an interval (one message naming the keys), or None."""
    if binding.takes_context:
        return (
            f"pipeline {binding.reference!r} starts its own queries (it takes 'context'), so hubflow cannot "
            "run it on an interval; backfill is for functions that return DataFrames"
        )
    kinds = {name: source.kind for name, source in config.sources.items()}
    backfills = EventHubsSource | EventHubsKafkaSource | FilesSource
    if len(kinds) != 1 or not isinstance(next(iter(config.sources.values())), backfills):
        declared = ", ".join(f"{name} ({kind})" for name, kind in kinds.items())
        return (
            f"job {config.name}: a pipeline backfills an interval of one source of kind eventhubs, "
            f"eventhubs_kafka or files; its sources are {declared}"
        )
    (name, source), *_ = config.sources.items()
    if isinstance(source, FilesSource) and source.interval_folder is None:
        key = config.key_as_written("sources", name, "interval_folder")
        return (
            f"job {config.name}: {key} is not set, so a backfill cannot tell which landing folder holds "
            "an interval's files; set it to the landing layout, e.g. %Y/%m/%d/%H"
        )
    hubs = [(name, sink) for name, sink in config.sinks.items() if isinstance(sink, HUB_SINKS)]
    not_lake = [f"sinks.{name}.kind: {sink.kind}" for name, sink in hubs]
    if not_lake:
        return (
            f"job {config.name}: a backfill replaces the interval's rows in lake sinks (delta, parquet); an "
            f"Event Hub cannot take events back: {', '.join(not_lake)}"
        )
    return None


def check_window(config: PipelineConfig, start: datetime, end: datetime) -> None:
    """WindowError naming the key when the window cuts a landing folder of a files source's layout
    (checked before Spark starts; an Event Hub's interval may start and end anywhere)."""
    (name, source), *_ = config.sources.items()
    if isinstance(source, FilesSource):
        key = config.key_as_written("sources", name, "interval_folder")
        folders_of_window(source.interval_folder, key, config.name, start, end)


def committed_positions(checkpoint: str, eventhub: str) -> dict[str, int] | None:
    """Per partition, the first sequence number the query of ``checkpoint`` has not committed (the
    end offset of its last committed batch); None before its first commit."""
    from hubflow_jobs.checkpoint_logs import join, list_batch_ids, read_offsets
    from hubflow_jobs.storage.azure import url_to_fs
    from pyspark_eventhubs.offsets import offset_seqs

    fs, root = url_to_fs(checkpoint)
    committed = list_batch_ids(fs, join(root, "commits"))
    if not committed:
        return None
    source = read_offsets(fs, root, committed[-1]).sources[0]
    return offset_seqs(json.loads(source.raw) if source.raw else None, eventhub)


def backfill_pipeline(
    spark: Any, config: PipelineConfig, binding: Binding, start: datetime, end: datetime
) -> dict[str, int]:
    """Replace the rows of ``[start, end)`` in every sink with the function's rows of that interval's
    input; the rows read and written per table. Refused (:class:`BackfillRefused`) with the reason
    when that would double or lose rows."""
    if isinstance(next(iter(config.sources.values())), FilesSource):
        return backfill_files_interval(spark, config, binding, start, end)
    return _backfill_events(spark, config, binding, start, end)


def _backfill_events(
    spark: Any, config: PipelineConfig, binding: Binding, start: datetime, end: datetime
) -> dict[str, int]:
    """The backfill of a pipeline reading one Event Hub: the events enqueued in ``[start, end)``."""
    from pyspark.sql import functions as F

    from pyspark_eventhubs import parse_options

    subject = f"job {config.name} backfill [{start.isoformat()}, {end.isoformat()})"
    (source_name, source), *_ = config.sources.items()
    if isinstance(source, EventHubsKafkaSource):
        from hubflow_jobs.eventhubs_kafka import interval_rows

        hub, events = source.topic(), interval_rows(spark, source, start, end).persist()
    else:
        hub = parse_options(source.spark_options()).eventhub_name
        events = interval_events(spark, source, start, end).persist()
    try:
        ids = events.select("partition", "sequenceNumber")
        last = {
            r["partition"]: r["last"]
            for r in ids.groupBy("partition").agg(F.max("sequenceNumber").alias("last")).collect()
        }
        frames = sink_frames(
            binding.call({source_name: events}, config.params, spark), binding.reference, list(config.sinks)
        )
        writes = sink_writes(config, binding, frames, IDENTITY_COLUMNS, "the events' identity")
        for name, sink in config.sinks.items():
            if sink.kind == "delta":
                _refuse_unless_past(config.sink_checkpoint(name), hub, last, f"{subject}: sink {name!r}")
        predicate = enqueued_in(start, end)
        for write in writes:
            if write.kind == "delta" and delta_table_exists(spark, write.table):
                refuse_if_events_gone(spark.read.format("delta").load(write.table), predicate, ids, subject)
        counts = {"read": events.count(), **write_interval(writes, predicate, start, subject)}
    finally:
        events.unpersist()
    log.info("%s: %s", subject, ", ".join(f"{where} {n}" for where, n in counts.items()))
    return counts


def _refuse_unless_past(checkpoint: str, hub: str, last: dict[str, int], subject: str) -> None:
    """Refuse unless the sink's query committed every partition past its last event of the interval."""
    committed = committed_positions(checkpoint, hub)
    if committed is None:
        if last:
            raise BackfillRefused(
                f"{subject}: its query has not committed a batch yet ({checkpoint}); its first run reads "
                "this interval itself. Backfill once the job has run past it."
            )
        return
    behind = {p: n for p, n in sorted(last.items()) if committed.get(p, 0) <= n}
    if behind:
        raise BackfillRefused(
            f"{subject}: its query has not yet read partitions {sorted(behind)} past this interval (the "
            f"interval ends at sequence numbers {behind}, the query's next are "
            f"{ {p: committed.get(p, 0) for p in behind} }); it will land these events itself, so a "
            "backfill now would write them twice. Backfill this interval once the job has caught up."
        )
