"""Backfill of one data interval of a pipeline reading one Event Hub (``eventhubs`` or
``eventhubs_kafka``): the events enqueued in ``[start, end)`` through the user's function again.

The events are read as a batch (:func:`interval_events`: ``spark.read.format("eventhubs")`` from
the first event enqueued at or after the start to the first one at or after the end; the Kafka
source's offsets by timestamp for ``eventhubs_kafka``). Each Delta sink's frame keeps the events'
identity, :data:`IDENTITY_COLUMNS`, by which the interval's rows are found (:func:`enqueued_in`)
and checked. Before anything is written, for every Delta sink: its query has committed past the
interval (:func:`committed_positions`, read from its checkpoint), and its tables hold no event of
the interval that the hub no longer returns (:func:`refuse_if_events_gone`). Runs on the driver.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any

from hubflow_jobs.backfill_window import BackfillRefused
from hubflow_jobs.eventhubs_config import EventHubSourceConfig
from hubflow_jobs.lake.tables import delta_table_exists
from hubflow_jobs.pipeline.binding import Binding, sink_frames
from hubflow_jobs.pipeline.declarations import EventHubsKafkaSource, PipelineConfig
from hubflow_jobs.pipeline.interval_writes import interval_predicate, sink_writes, write_interval

log = logging.getLogger(__name__)

#: The columns of the events every sink of a backfilled pipeline keeps.
IDENTITY_COLUMNS = ("enqueuedTime", "partition", "sequenceNumber")


def interval_events(spark: Any, source: EventHubSourceConfig, start: datetime, end: datetime) -> Any:
    """The events of ``source``'s hub enqueued in ``[start, end)``, as a batch DataFrame."""
    from pyspark_eventhubs import DefaultSource, EventPosition, register_data_source

    register_data_source(spark, DefaultSource)
    options = source.spark_options()
    options.pop("maxEventsPerTrigger", None)
    options["eventhubs.startingPosition"] = EventPosition.from_enqueued_time(start).to_json()
    options["eventhubs.endingPosition"] = EventPosition.from_enqueued_time(end).to_json()
    return spark.read.format("eventhubs").options(**options).load()


def enqueued_in(start: datetime, end: datetime) -> str:
    """The SQL predicate of the bronze rows of ``[start, end)``: by the events' enqueued time."""
    return interval_predicate("enqueuedTime", start, end)


def refuse_if_events_gone(table_rows: Any, predicate: str, ids: Any, subject: str) -> None:
    """Refuse when ``table_rows`` hold events of the interval (``predicate``) that the backfill did not
    read (``ids``: its ``partition``, ``sequenceNumber``): replacing would delete them."""
    missing = (
        table_rows.where(predicate)
        .select("partition", "sequenceNumber")
        .join(ids, ["partition", "sequenceNumber"], "left_anti")
    )
    lost = missing.count()
    if lost:
        sample = [(r["partition"], r["sequenceNumber"]) for r in missing.limit(5).collect()]
        raise BackfillRefused(
            f"{subject}: the table holds {lost} events of this interval that the hub no longer "
            f"returns (e.g. partition, sequence number {sample}; purged by the hub's retention?); "
            "replacing the interval would delete them, so nothing was changed"
        )


def committed_positions(checkpoint: str, eventhub: str) -> dict[str, int] | None:
    """Per partition, the first sequence number the query of ``checkpoint`` has not committed (the
    end offset of its last committed batch); None before its first commit."""
    from hubflow.checkpoints.spark_logs import join, list_batch_ids, read_offsets
    from hubflow.storage.azure import url_to_fs
    from pyspark_eventhubs.offsets import offset_seqs

    fs, root = url_to_fs(checkpoint)
    committed = list_batch_ids(fs, join(root, "commits"))
    if not committed:
        return None
    source = read_offsets(fs, root, committed[-1]).sources[0]
    return offset_seqs(json.loads(source.raw) if source.raw else None, eventhub)


def backfill_events_interval(
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
