"""Built-in job ``eventhubs_aggregate``: event-time window aggregates of an Event Hub's JSON events.

A pipeline like any user's: one ``eventhubs`` source named ``events``, two lake sinks - ``windows``
(the job's query: checkpoint ``<checkpoint_root>/<name>``, partitioned by ``window_date``) and
``quarantine`` (its own query, partitioned by ``ingest_date``) - and ``params``
(:class:`AggregationParams`). Every event's body is parsed as JSON with ``params.body_schema``; the
event time, group key and value come from the body:

* events that parse are grouped by a tumbling event-time ``window`` and the key, with a
  ``watermark``; a window is written once, in append mode, when the watermark passes its end, and
  never changes afterwards (exactly once, Delta or parquet). Its state is kept in RocksDB, as every
  pipeline's. Events of a window already closed are dropped by Spark and counted (status.json's
  ``late_events``, recorded by the pipeline layer for any stateful query);
* the others (not JSON, no event time, no key) go to ``quarantine`` with the raw body, the event's
  identity and the reason.

Both frames come from the same classification, so each event feeds the aggregation or lands in the
quarantine. The frames ``observe()`` the counts status.json shows: ``read``, ``aggregated``,
``quarantined``.

Its config before pipelines (``source:``, ``aggregation:``, ``sink: {output_path, quarantine_path,
format}``) is still read, with a warning (:class:`EventHubsAggregateConfig`): the output keeps its
checkpoint, and the quarantine sink its old one, ``<quarantine_path>/_checkpoint``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from hubflow.config import JobConfig, KeyedValueError, StrictModel, declared_column_names, join_path
from hubflow.durations import parse_positive_duration
from hubflow_jobs.builtins.legacy_config import LegacyPipelineConfig, LegacySections
from hubflow_jobs.eventhubs_config import EventHubSourceConfig
from hubflow_jobs.lake.tables import INGEST_DATE_COLUMN, QuarantinedOutputConfig, check_quarantine_path
from hubflow_jobs.pipeline.declarations import LakeSink

#: The names of its source and sinks (the first sink is the job's query).
SOURCE, SINK, QUARANTINE = "events", "windows", "quarantine"
#: The column the output is partitioned by: the UTC date a window starts.
WINDOW_DATE_COLUMN = "window_date"
#: Where the job before pipelines kept the quarantine query's checkpoint, inside the quarantine table
#: (readers and Delta's VACUUM skip ``_`` folders).
QUARANTINE_CHECKPOINT = "_checkpoint"
#: The ``observe()`` metrics of its frames, by the name status.json's ``counts`` shows.
READ, AGGREGATED, QUARANTINED = "read", "aggregated", "quarantined"
#: Hidden column that ``from_json`` fills with the raw text of a body that does not parse.
_CORRUPT_COLUMN = "_hubflow_corrupt_body"

AggregateFunction = Literal["sum", "count", "min", "max"]


class AggregationParams(StrictModel):
    """``params`` of eventhubs_aggregate (``aggregation:`` before pipelines): what to parse, group by
    and compute."""

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
    def _consistent(self) -> AggregationParams:
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


def windows(events: Any, params: AggregationParams) -> dict[str, Any]:
    """The window aggregates and the quarantined events of the hub's ``events``, by sink name.

    Runs on the driver (it builds the plan); hubflow starts one query per sink.
    """
    from pyspark.sql import functions as F

    classified = classify_events(events, params)
    usable = (
        classified.observe(READ, F.count(F.lit(1)).alias("rows"))
        .where(F.col("reason").isNull())
        .observe(AGGREGATED, F.count(F.lit(1)).alias("rows"))
    )
    return {SINK: window_aggregates(usable, params), QUARANTINE: quarantined_events(classified)}


def classify_events(events: Any, params: AggregationParams) -> Any:
    """The connector's events with the parsed body fields and a ``reason`` (null = usable).

    Columns: ``raw_body`` (string), ``partition``, ``sequenceNumber``, ``enqueuedTime``,
    ``event_time`` (timestamp), the key and value fields, and ``reason``.
    """
    from pyspark.sql import functions as F

    schema = f"{params.body_schema}, {_CORRUPT_COLUMN} STRING"
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT_COLUMN}
    parsed = events.select(
        F.col("body").cast("string").alias("raw_body"),
        "partition",
        "sequenceNumber",
        "enqueuedTime",
        F.from_json(F.col("body").cast("string"), schema, options).alias("_data"),
    )
    data = F.col("_data")
    event_time = data[params.event_time_field].cast("timestamp")
    key = data[params.key_field]
    reason = (
        F.when(
            data.isNull() | data[_CORRUPT_COLUMN].isNotNull(),
            F.lit("body is not a JSON object matching aggregation.body_schema"),
        )
        .when(
            event_time.isNull(),
            F.lit(f"event time field {params.event_time_field!r} is missing or not a timestamp"),
        )
        .when(key.isNull(), F.lit(f"key field {params.key_field!r} is missing"))
    )
    return parsed.select(
        "raw_body",
        "partition",
        "sequenceNumber",
        "enqueuedTime",
        event_time.alias("event_time"),
        key.alias(params.key_field),
        data[params.value_field].alias(params.value_field),
        reason.alias("reason"),
    )


def window_aggregates(usable: Any, params: AggregationParams) -> Any:
    """The windowed aggregation of the usable events, one row per window and key (the output's columns)."""
    from pyspark.sql import functions as F

    value = F.col(params.value_field)
    functions = {"sum": F.sum, "count": F.count, "min": F.min, "max": F.max}
    aggregates = [F.count(F.lit(1)).alias("event_count")] + [
        functions[fn](value).alias(f"{params.value_field}_{fn}") for fn in params.functions
    ]
    windowed = (
        usable.withWatermark("event_time", _spark_interval(params.watermark))
        .groupBy(F.window("event_time", _spark_interval(params.window)), F.col(params.key_field))
        .agg(*aggregates)
    )
    return windowed.select(
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        params.key_field,
        "event_count",
        *[f"{params.value_field}_{fn}" for fn in params.functions],
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
        .observe(QUARANTINED, F.count(F.lit(1)).alias("rows"))
    )


def _spark_interval(duration: str) -> str:
    """A config duration as an interval string Spark always accepts (milliseconds)."""
    return f"{round(parse_positive_duration(duration).total_seconds() * 1000)} milliseconds"


class LegacyEventHubsAggregateConfig(JobConfig):
    """The config of eventhubs_aggregate before pipelines (``source``, ``aggregation``, ``sink``): an
    old config is validated with it first, so its mistakes get the messages they always had."""

    source: EventHubSourceConfig
    aggregation: AggregationParams
    sink: QuarantinedOutputConfig


@dataclass(frozen=True)
class AggregateSections(LegacySections):
    """eventhubs_aggregate's old ``sink:`` holds two tables: the output becomes the sink ``windows``,
    ``quarantine_path`` the sink ``quarantine``, whose query keeps its checkpoint where it was."""

    quarantine_defaults: dict[str, Any] | None = None
    #: Not offered to backfills: a window's rows are not one interval's events, and a window may span
    #: two intervals (applications.backfill_builtins).
    backfills: bool = False

    def upgraded(self, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` in the pipeline's keys: two sinks from the old ``sink:``."""
        data = super().upgraded(data)
        output = (data.get("sinks") or {}).get(self.sink)
        if isinstance(output, dict) and "quarantine_path" in output:
            output = dict(output)
            path = output.pop("quarantine_path")
            quarantine = {"kind": output["kind"], "output_path": path}
            if isinstance(path, str):
                quarantine["checkpoint"] = join_path(path, QUARANTINE_CHECKPOINT)
            data["sinks"] = {self.sink: output, QUARANTINE: quarantine}
        return data

    def with_defaults(self, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` with each sink's partition column unless the config names its own."""
        data = super().with_defaults(data)
        sinks = data.get("sinks")
        quarantine = sinks.get(QUARANTINE) if isinstance(sinks, dict) else None
        if not isinstance(quarantine, dict):
            return data
        return {**data, "sinks": {**sinks, QUARANTINE: {**(self.quarantine_defaults or {}), **quarantine}}}

    def notice(self, name: Any) -> str:
        """The deprecation warning of an old config: its two sinks named."""
        return (
            super()
            .notice(name)
            .replace(
                f"sinks: {{{self.sink}: {{kind: delta, ...}}}}",
                f"sinks: {{{self.sink}: {{kind: delta, ...}}, {QUARANTINE}: {{kind: delta, ...}}}}",
            )
        )

    def as_written(self, loc: tuple[Any, ...]) -> tuple[Any, ...]:
        """An error location of the upgraded config, as the old config names it."""
        if loc[:2] == ("sinks", QUARANTINE):
            return ("sink", "format" if loc[2:3] == ("kind",) else "quarantine_path")
        return super().as_written(loc)


class EventHubsAggregateConfig(LegacyPipelineConfig):
    """The config of eventhubs_aggregate: a pipeline config (sources ``events``, sinks ``windows`` then
    ``quarantine``), or the old ``source:``, ``aggregation:`` and ``sink:``."""

    LEGACY = AggregateSections(
        builtin="eventhubs_aggregate",
        source=SOURCE,
        source_kind="eventhubs",
        sink=SINK,
        sink_keys=("output_path", "quarantine_path", "format"),
        sink_required=("output_path", "quarantine_path"),
        sink_defaults={"partition_by": [WINDOW_DATE_COLUMN]},
        params="aggregation",
        params_model=AggregationParams,
        legacy_model=LegacyEventHubsAggregateConfig,
        quarantine_defaults={"partition_by": [INGEST_DATE_COLUMN]},
    )

    @model_validator(mode="after")
    def _its_sinks(self) -> EventHubsAggregateConfig:
        if list(self.sinks) != [SINK, QUARANTINE]:
            raise KeyedValueError(
                "sinks",
                f"eventhubs_aggregate writes the sinks {SINK} (first: the job's query) and {QUARANTINE}; "
                f"the config names {', '.join(self.sinks)}",
            )
        output, quarantine = self.sinks[SINK], self.sinks[QUARANTINE]
        if isinstance(output, LakeSink) and isinstance(quarantine, LakeSink):
            try:
                check_quarantine_path(output.output_path, quarantine.output_path)
            except KeyedValueError as error:
                raise KeyedValueError(f"sinks.{QUARANTINE}.output_path", str(error)) from None
        return self
