"""Built-in job ``lake_to_eventhubs``: rows of a lake table -> events on an Event Hub (replays, forwarding).

A pipeline like any user's: one source named ``table``, read incrementally, at most
``max_files_per_trigger`` files per micro-batch - ``kind: delta`` (delta-spark's streaming source:
the rows each commit added, with the table's own schema and the Delta read options) or ``kind:
parquet`` (a table written by Spark's file sink, read through its ``_spark_metadata`` log with a
declared schema; :data:`BRONZE_SCHEMA` is ``eventhubs_to_lake``'s output) - and one ``eventhubs``
sink named ``hub``. Its ``params`` (:class:`MessageParams`) say how a row becomes an event:

* ``body_column`` is the body as it is (string or binary; other types are cast to string), or
  ``body_json_columns`` builds a JSON object of those columns;
* ``partition_key_column`` (optional) is the partition key: rows with the same key go to the same
  partition;
* ``property_columns`` become application properties (name = column, value = the value as a
  string; nulls are left out), merged over ``properties_map_column`` (a map<string,string> column,
  e.g. bronze's ``properties``).

Delivery is **at-least-once**: the checkpoint records what was published, so a restart after a
completed run publishes nothing new, but a batch interrupted while sending is sent again on restart
(and a retried send may duplicate). Give events an id property and de-duplicate downstream when
duplicates matter.

Its config before pipelines (``source:`` with ``format``/``layout``/``schema``, ``sink:``,
``message:``) is still read, with a warning (:class:`LakeToEventHubsConfig`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from hubflow.config import (
    JobConfig,
    KeyedValueError,
    StrictModel,
    checks_environment,
    declared_column_names,
    existing_local_folder,
)
from hubflow_jobs.builtins.legacy_config import LegacyPipelineConfig, LegacySections
from hubflow_jobs.eventhubs_config import EventHubSinkConfig
from hubflow_jobs.lake.delta_source import DeltaReadOptions, check_delta_table
from hubflow_jobs.lake.tables import LakeFormat

#: The names of its source and sink.
SOURCE, SINK = "table", "hub"

#: The columns of ``eventhubs_to_lake``'s output (the connector's read schema plus what job 1 adds).
BRONZE_SCHEMA = (
    "body BINARY, partition STRING, offset STRING, sequenceNumber BIGINT, enqueuedTime TIMESTAMP, "
    "publisher STRING, partitionKey STRING, properties MAP<STRING, STRING>, "
    "systemProperties MAP<STRING, STRING>, _ingested_at TIMESTAMP, ingest_date DATE"
)


#: Keys that only the Delta source understands (refused with ``format: parquet``).
_DELTA_ONLY_KEYS = ("max_bytes_per_trigger", "starting_version", "starting_timestamp", "skip_change_commits")


class LakeTableSourceConfig(DeltaReadOptions):
    """``source:`` of lake_to_eventhubs: the table to publish (Delta, or parquet with its schema)."""

    path: str = Field(min_length=1)
    format: LakeFormat = "delta"
    layout: Literal["table", "bronze"] = "table"
    schema_ddl: str | None = Field(default=None, alias="schema", min_length=1)

    @field_validator("path")
    @classmethod
    def _table_exists(cls, value: str, info: ValidationInfo) -> str:
        return existing_local_folder(value, "table folder", info)

    @model_validator(mode="after")
    def _schema_matches_format_and_layout(self, info: ValidationInfo) -> LakeTableSourceConfig:
        if self.format == "delta":
            try:
                if checks_environment(info):
                    check_delta_table(self.path)
            except ValueError as error:
                raise KeyedValueError("path", str(error)) from None
            for key in ("schema_ddl", "layout"):
                if key in self.model_fields_set:
                    name = "schema" if key == "schema_ddl" else key
                    raise KeyedValueError(name, "is for format: parquet; a Delta table knows its columns")
            return self
        for key in _DELTA_ONLY_KEYS:
            if key in self.model_fields_set:
                raise KeyedValueError(key, "is a Delta source option; it needs format: delta")
        if self.layout == "table" and self.schema_ddl is None:
            raise KeyedValueError("schema", "is required with layout: table (declare the table's columns)")
        if self.layout == "bronze" and self.schema_ddl is not None:
            raise KeyedValueError("schema", "must be left out with layout: bronze (its columns are known)")
        return self

    @property
    def schema(self) -> str | None:
        """The DDL schema a parquet table is read with (None for Delta: the table's own)."""
        if self.format == "delta":
            return None
        return BRONZE_SCHEMA if self.layout == "bronze" else (self.schema_ddl or "")


class MessageParams(StrictModel):
    """``params`` of lake_to_eventhubs (``message:`` before pipelines): how a row becomes an event."""

    body_column: str | None = Field(default=None, min_length=1)
    body_json_columns: list[str] | None = None
    partition_key_column: str | None = Field(default=None, min_length=1)
    property_columns: list[str] = Field(default_factory=list)
    properties_map_column: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _one_body(self) -> MessageParams:
        if (self.body_column is None) == (self.body_json_columns is None):
            raise KeyedValueError("body_column", "set exactly one of body_column or body_json_columns")
        if self.body_json_columns is not None and not self.body_json_columns:
            raise KeyedValueError("body_json_columns", "name at least one column")
        return self

    def check_columns(self, columns: list[str]) -> None:
        """Raise :class:`KeyedValueError` naming the first key that names a column not in ``columns``."""
        named: list[tuple[str, str | None]] = [
            ("body_column", self.body_column),
            ("partition_key_column", self.partition_key_column),
            ("properties_map_column", self.properties_map_column),
        ]
        named += [(f"body_json_columns.{i}", c) for i, c in enumerate(self.body_json_columns or [])]
        named += [(f"property_columns.{i}", c) for i, c in enumerate(self.property_columns)]
        for key, column in named:
            if column is not None and column not in columns:
                raise KeyedValueError(key, f"{column!r} is not a column of the source table {columns}")


class LegacyLakeToEventHubsConfig(JobConfig):
    """The config of lake_to_eventhubs before pipelines (``source``, ``sink``, ``message``): an old
    config is validated with it first, so its mistakes get the messages they always had."""

    source: LakeTableSourceConfig
    sink: EventHubSinkConfig
    message: MessageParams

    @model_validator(mode="after")
    def _message_columns_exist(self) -> LegacyLakeToEventHubsConfig:
        if self.source.schema is not None:  # a Delta table's columns are checked when the job starts
            self.check_message_columns(declared_column_names(self.source.schema))
        return self

    def check_message_columns(self, columns: list[str]) -> None:
        """Raise :class:`KeyedValueError` (``message.<key>``) when a message key names a missing column."""
        try:
            self.message.check_columns(columns)
        except KeyedValueError as error:
            raise KeyedValueError(f"message.{error.key}", str(error)) from None


def event_columns(frame: Any, message: MessageParams) -> Any:
    """``frame`` as the connector sink's columns: ``body``, optional ``partitionKey``, ``properties``."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType, StringType

    if message.body_column is not None:
        body = F.col(f"`{message.body_column}`")
        if not isinstance(frame.schema[message.body_column].dataType, (StringType, BinaryType)):
            body = body.cast("string")
    else:
        body = F.to_json(F.struct(*[F.col(f"`{c}`") for c in message.body_json_columns or []]))
    columns = [body.alias("body")]
    if message.partition_key_column is not None:
        columns.append(F.col(f"`{message.partition_key_column}`").cast("string").alias("partitionKey"))
    properties = _properties_column(message)
    if properties is not None:
        columns.append(properties.alias("properties"))
    return frame.select(*columns)


def _properties_column(message: MessageParams) -> Any:
    """The ``properties`` map: the map column's entries, overridden by the property columns."""
    from pyspark.sql import functions as F

    maps = []
    if message.properties_map_column is not None:
        maps.append(
            F.coalesce(
                F.col(f"`{message.properties_map_column}`"),
                F.create_map().cast("map<string,string>"),
            )
        )
    if message.property_columns:
        entries = []
        for column in message.property_columns:
            entries += [F.lit(column), F.col(f"`{column}`").cast("string")]
        maps.append(F.map_filter(F.create_map(*entries), lambda _key, value: value.isNotNull()))
    if not maps:
        return None
    if len(maps) == 1:
        return maps[0]
    # map_concat fails on duplicate keys by default; the later map (the columns) wins here.
    merged = F.map_concat(
        F.map_filter(maps[0], lambda key, _value: ~F.array_contains(F.map_keys(maps[1]), key)), maps[1]
    )
    return merged


def events(table: Any, params: MessageParams) -> Any:
    """The table's rows as the connector sink's columns (``body``, ``partitionKey``, ``properties``).

    Runs on the driver (it builds the plan). A key of ``params`` naming a column the table lacks
    fails the start with the key and the table's columns.
    """
    try:
        params.check_columns(list(table.columns))
    except KeyedValueError as error:
        before = f"message.{error.key} in a config before pipelines"
        raise ValueError(f"jobs config error: params.{error.key} ({before}): {error}") from None
    return event_columns(table, params)


def _source_of(old: dict[str, Any]) -> dict[str, Any]:
    """The old ``source:`` (``format``, ``layout``, ``schema``) as a ``delta`` or ``parquet`` source."""
    source = dict(old)
    file_format, layout = source.pop("format", "delta"), source.pop("layout", "table")
    schema = source.pop("schema", source.pop("schema_ddl", None))
    if file_format == "delta":
        return {"kind": "delta", **source}
    kept = {key: source[key] for key in ("path", "max_files_per_trigger") if key in source}
    return {"kind": "parquet", **kept, "schema": BRONZE_SCHEMA if layout == "bronze" else schema}


class LakeToEventHubsConfig(LegacyPipelineConfig):
    """The config of lake_to_eventhubs: a pipeline config, or the old ``source:``, ``sink:``, ``message:``."""

    LEGACY = LegacySections(
        builtin="lake_to_eventhubs",
        source=SOURCE,
        source_kind="delta",
        sink=SINK,
        sink_kind="eventhubs",
        source_of=_source_of,
        params="message",
        params_model=MessageParams,
        legacy_model=LegacyLakeToEventHubsConfig,
    )
