"""Job ``eventhubs_aggregate``: event-time window aggregation over an Event Hub, written to the lake.

Every event's body is parsed as JSON with the schema declared in ``aggregation.body_schema``. The
event time (``event_time_field``), the group key (``key_field``) and the value (``value_field``)
come from the body. Two streaming queries read the hub (same config, same consumer group):

* the **aggregation query** (the job's query: its checkpoint is ``<checkpoint_root>/<name>``, its
  progress is what status.json shows) groups the events that parse by a tumbling event-time
  ``window`` and the key, with a ``watermark``; its state lives in RocksDB. The output is a lake
  table in ``sink.format`` written in append mode - Delta (the default: one commit per batch with
  the query's transaction) or Spark's parquet file sink - exactly once either way: a window is
  written once, when the watermark passes its end, and never changes afterwards. Events of a window the
  watermark has already closed are dropped by Spark and **counted**: every batch's
  ``numRowsDroppedByWatermark`` is added up in status.json (``late_events``) and logged.
* the **quarantine query** writes the events that do not parse (not JSON, no event time, no key)
  to ``sink.quarantine_path`` with the raw body, the event's identity and the reason, in the same
  format (exactly once; its checkpoint is ``<quarantine_path>/_checkpoint``, which readers of the
  quarantine ignore like every ``_`` folder, and which Delta's VACUUM leaves alone).

Both queries classify events with the same expression, so each event either feeds the
aggregation or lands in the quarantine. A :class:`~hubflow_jobs.query_group.QueryGroup` hands both
to the shared runner as one query: the job runs while either runs, a graceful stop lets both finish
their batch, and a failure of either fails the job.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from .config import JobConfig, KeyedValueError, StrictModel, declared_column_names, join_path
from .durations import parse_positive_duration
from .eventhubs_config import EventHubSourceConfig
from .lake_tables import INGEST_DATE_COLUMN, QuarantinedOutputConfig, check_table_format, start_table_stream
from .query_group import QueryGroup, helper_session
from .status_folder import JobStatus

log = logging.getLogger(__name__)

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
STATE_STORE_PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"
#: The quarantine query's checkpoint, inside the quarantine output (Spark readers skip ``_`` folders).
QUARANTINE_CHECKPOINT = "_checkpoint"
#: The column the output is partitioned by: the UTC date a window starts.
WINDOW_DATE_COLUMN = "window_date"
#: Hidden column that ``from_json`` fills with the raw text of a body that does not parse.
_CORRUPT_COLUMN = "_hubflow_corrupt_body"
#: Names of the ``observe()`` metrics the two queries report in their progress.
AGGREGATE_INPUT_METRIC = "aggregate_input"
QUARANTINE_METRIC = "quarantine"

AggregateFunction = Literal["sum", "count", "min", "max"]


class AggregationConfig(StrictModel):
    """``aggregation:`` of eventhubs_aggregate: what to parse, group by and compute."""

    body_schema: str = Field(min_length=1)
    event_time_field: str = Field(min_length=1)
    key_field: str = Field(min_length=1)
    value_field: str = Field(min_length=1)
    functions: list[AggregateFunction] = Field(default_factory=lambda: ["sum", "count", "min", "max"])
    window: str
    watermark: str

    @field_validator("window", "watermark")
    @classmethod
    def _duration(cls, value: str) -> str:
        parse_positive_duration(value)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> AggregationConfig:
        columns = declared_column_names(self.body_schema)
        for key in ("event_time_field", "key_field", "value_field"):
            field = getattr(self, key)
            if field not in columns:
                raise KeyedValueError(key, f"{field!r} is not a field of body_schema {columns}")
        if not self.functions:
            raise KeyedValueError("functions", "name at least one of sum, count, min, max")
        if len(set(self.functions)) != len(self.functions):
            raise KeyedValueError("functions", f"{self.functions} names a function twice")
        if self.key_field in (self.event_time_field, self.value_field):
            raise KeyedValueError("key_field", "must differ from event_time_field and value_field")
        return self

    def output_columns(self) -> list[str]:
        """The columns of an output row, in order (``window_date`` is the partition column)."""
        values = [f"{self.value_field}_{fn}" for fn in self.functions]
        return ["window_start", "window_end", self.key_field, "event_count", *values, WINDOW_DATE_COLUMN]


class AggregateSinkConfig(QuarantinedOutputConfig):
    """``sink:`` of eventhubs_aggregate: ``output_path``, ``quarantine_path`` (apart) and ``format``."""


class EventHubsAggregateConfig(JobConfig):
    """The whole config of eventhubs_aggregate: common section, ``source``, ``aggregation``, ``sink``."""

    source: EventHubSourceConfig
    aggregation: AggregationConfig
    sink: AggregateSinkConfig

    def extra_spark_conf(self) -> dict[str, str]:
        """Mask the connection string (static setting) and keep the state in RocksDB (``spark_conf``
        may name another provider)."""
        from pyspark_eventhubs import redaction_conf

        return {**redaction_conf(), STATE_STORE_PROVIDER_CONF: ROCKSDB_PROVIDER}

    def delta_tables(self) -> list[str]:
        """The Delta tables the job writes (maintained by the cleanup DAG)."""
        return self.sink.delta_tables()

    @property
    def quarantine_checkpoint_location(self) -> str:
        """Where the quarantine query keeps its checkpoint."""
        return join_path(self.sink.quarantine_path, QUARANTINE_CHECKPOINT)

    def delta_table_writers(self) -> list[tuple[str, str]]:
        """The quarantine table is written by the quarantine query, with its own checkpoint."""
        writers = {self.sink.quarantine_path: self.quarantine_checkpoint_location}
        return [(table, writers.get(table, self.checkpoint_location)) for table in self.delta_tables()]


def classify_events(events: Any, aggregation: AggregationConfig) -> Any:
    """The connector's events with the parsed body fields and a ``reason`` (null = usable).

    Columns: ``raw_body`` (string), ``partition``, ``sequenceNumber``, ``enqueuedTime``,
    ``event_time`` (timestamp), the key and value fields, and ``reason``.
    """
    from pyspark.sql import functions as F

    schema = f"{aggregation.body_schema}, {_CORRUPT_COLUMN} STRING"
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT_COLUMN}
    parsed = events.select(
        F.col("body").cast("string").alias("raw_body"),
        "partition",
        "sequenceNumber",
        "enqueuedTime",
        F.from_json(F.col("body").cast("string"), schema, options).alias("_data"),
    )
    data = F.col("_data")
    event_time = data[aggregation.event_time_field].cast("timestamp")
    key = data[aggregation.key_field]
    reason = (
        F.when(
            data.isNull() | data[_CORRUPT_COLUMN].isNotNull(),
            F.lit("body is not a JSON object matching aggregation.body_schema"),
        )
        .when(
            event_time.isNull(),
            F.lit(f"event time field {aggregation.event_time_field!r} is missing or not a timestamp"),
        )
        .when(key.isNull(), F.lit(f"key field {aggregation.key_field!r} is missing"))
    )
    return parsed.select(
        "raw_body",
        "partition",
        "sequenceNumber",
        "enqueuedTime",
        event_time.alias("event_time"),
        key.alias(aggregation.key_field),
        data[aggregation.value_field].alias(aggregation.value_field),
        reason.alias("reason"),
    )


def window_aggregates(classified: Any, aggregation: AggregationConfig) -> Any:
    """The windowed aggregation of the usable events (``reason`` null), one row per window and key."""
    from pyspark.sql import functions as F

    usable = classified.where(F.col("reason").isNull()).observe(
        AGGREGATE_INPUT_METRIC, F.count(F.lit(1)).alias("rows")
    )
    value = F.col(aggregation.value_field)
    functions = {"sum": F.sum, "count": F.count, "min": F.min, "max": F.max}
    aggregates = [F.count(F.lit(1)).alias("event_count")] + [
        functions[fn](value).alias(f"{aggregation.value_field}_{fn}") for fn in aggregation.functions
    ]
    windowed = (
        usable.withWatermark("event_time", _spark_interval(aggregation.watermark))
        .groupBy(F.window("event_time", _spark_interval(aggregation.window)), F.col(aggregation.key_field))
        .agg(*aggregates)
    )
    return windowed.select(
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        aggregation.key_field,
        "event_count",
        *[f"{aggregation.value_field}_{fn}" for fn in aggregation.functions],
        F.to_date(F.col("window.start")).alias(WINDOW_DATE_COLUMN),
    )


def quarantined_events(classified: Any) -> Any:
    """The unusable events (``reason`` set) as quarantine rows, raw body kept."""
    from pyspark.sql import functions as F

    now = F.current_timestamp()
    return (
        classified.where(F.col("reason").isNotNull())
        .select(
            "raw_body",
            "partition",
            "sequenceNumber",
            "enqueuedTime",
            "reason",
            now.alias("quarantined_at"),
            F.to_date(now).alias(INGEST_DATE_COLUMN),
        )
        .observe(QUARANTINE_METRIC, F.count(F.lit(1)).alias("rows"))
    )


def _spark_interval(duration: str) -> str:
    """A config duration as an interval string Spark always accepts (milliseconds)."""
    return f"{round(parse_positive_duration(duration).total_seconds() * 1000)} milliseconds"


def start_eventhubs_aggregate(spark: Any, config: EventHubsAggregateConfig, status: JobStatus) -> Any:
    """Start the aggregation and quarantine queries; return them as one :class:`QueryGroup`."""
    from pyspark_eventhubs import DefaultSource, protect_secrets, register_data_source

    # Runtime SQL conf, read when a query starts (and then pinned in its checkpoint): set here too so
    # a run on an existing session (tests, notebooks) keeps its state in RocksDB as well.
    spark.conf.set(
        STATE_STORE_PROVIDER_CONF, config.spark_conf.get(STATE_STORE_PROVIDER_CONF, ROCKSDB_PROVIDER)
    )
    # Registering explicitly works however the connector was installed (see eventhubs_to_lake).
    register_data_source(spark, DefaultSource)
    protect_secrets(spark)
    quarantine_session = helper_session(spark)

    counters = AggregateCounters(status)
    quarantine_name = f"{config.name}_quarantine"
    counters.listen(spark, config.name, counters.on_aggregation_progress)
    counters.listen(quarantine_session, quarantine_name, counters.on_quarantine_progress)
    trigger = config.trigger.spark_kwargs()

    sink = config.sink
    check_table_format(spark, sink.output_path, sink.format, "sink.output_path")
    check_table_format(spark, sink.quarantine_path, sink.format, "sink.quarantine_path")
    quarantine_events = classify_events(_read_events(quarantine_session, config), config.aggregation)
    quarantine_query = start_table_stream(
        quarantined_events(quarantine_events),
        query_name=quarantine_name,
        path=sink.quarantine_path,
        file_format=sink.format,
        checkpoint=config.quarantine_checkpoint_location,
        partition_by=[INGEST_DATE_COLUMN],
        trigger=trigger,
    )
    try:
        events = classify_events(_read_events(spark, config), config.aggregation)
        aggregation_query = start_table_stream(
            window_aggregates(events, config.aggregation),
            query_name=config.name,
            path=sink.output_path,
            file_format=sink.format,
            checkpoint=config.checkpoint_location,
            partition_by=[WINDOW_DATE_COLUMN],
            trigger=trigger,
        )
    except Exception:
        quarantine_query.stop()
        raise
    log.info(
        "job %s: aggregation query %s and quarantine query %s started (state store %s)",
        config.name,
        aggregation_query.id,
        quarantine_query.id,
        spark.conf.get(STATE_STORE_PROVIDER_CONF),
    )
    return QueryGroup(aggregation_query, [quarantine_query], config.runtime.seconds("stop_timeout"))


def _read_events(session: Any, config: EventHubsAggregateConfig) -> Any:
    return session.readStream.format("eventhubs").options(**config.source.spark_options()).load()


class AggregateCounters:
    """Adds up what the two queries report and keeps it in status.json.

    ``late_events``: rows Spark's stateful operator dropped because their window had already been
    closed by the watermark (``numRowsDroppedByWatermark``). Spark aggregates rows of the same key
    and window within an input partition before that operator, so several late events of one key
    and window from one Event Hubs partition count as one row there.
    ``counts``: events read by the aggregation query, events that fed the aggregation, events
    quarantined - all since this run started.
    """

    def __init__(self, status: JobStatus) -> None:
        self.status = status
        self._lock = threading.Lock()
        self.late = {"last_batch": 0, "run_total": 0}
        self.counts = {"read": 0, "aggregated": 0, "quarantined": 0}

    def listen(self, session: Any, query_name: str, on_progress: Any) -> None:
        """Call ``on_progress`` with each progress of the query ``query_name`` of ``session``."""
        from .listener import QueryProgressListener

        session.streams.addListener(QueryProgressListener(session, query_name, on_progress))

    def on_aggregation_progress(self, progress: Any) -> None:
        dropped = sum(int(op.numRowsDroppedByWatermark or 0) for op in progress.stateOperators)
        aggregated = _observed_rows(progress, AGGREGATE_INPUT_METRIC)
        with self._lock:
            self.late["last_batch"] = dropped
            self.late["run_total"] += dropped
            self.counts["read"] += int(progress.numInputRows or 0)
            self.counts["aggregated"] += aggregated
            fields = {
                "late_events": dict(self.late),
                "counts": dict(self.counts),
                "watermark": progress.eventTime.get("watermark") if progress.eventTime else None,
            }
            self.status.update(**fields)
        if dropped:
            log.warning(
                "batch %s: %d late rows dropped by the watermark (%d in this run); see late_events in "
                "status.json",
                progress.batchId,
                dropped,
                self.late["run_total"],
            )

    def on_quarantine_progress(self, progress: Any) -> None:
        quarantined = _observed_rows(progress, QUARANTINE_METRIC)
        with self._lock:
            self.counts["quarantined"] += quarantined
            self.status.update(counts=dict(self.counts))
        if quarantined:
            log.warning("quarantine batch %s: %d events quarantined", progress.batchId, quarantined)


def _observed_rows(progress: Any, name: str) -> int:
    row = (progress.observedMetrics or {}).get(name)
    return int(row["rows"]) if row is not None else 0
