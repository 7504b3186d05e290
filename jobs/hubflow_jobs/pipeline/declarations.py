"""The config of a pipeline job: the common keys plus named ``sources:``, named ``sinks:`` and ``params:``.

A pipeline is the user's function over DataFrames (:mod:`.binding`); this config declares what it
reads and where its results go, so hubflow does every ``readStream`` and ``writeStream``::

    name: hot_devices
    trigger: {availableNow: true}
    checkpoint_root: /lake/_checkpoints
    status_root: /lake/_status
    sources:
      telemetry:                     # the function's parameter ``telemetry``
        kind: eventhubs              # eventhubs | eventhubs_kafka | files | delta | parquet
        connection_string_env: TELEMETRY_EVENTHUBS_CONNECTION
    sinks:
      hot:                           # the function returns this DataFrame (or {"hot": ...})
        kind: delta                  # delta | parquet | eventhubs | eventhubs_kafka
        output_path: /lake/silver/hot_devices
    params:
      threshold: 80

Each source kind takes the keys of today's ``source:`` of that kind (docs/jobs.md, docs/delta.md);
a files source's ``archive_dir`` is optional. The first sink's query is the job's query, with its
checkpoint at ``<checkpoint_root>/<name>``; each further sink's query keeps its own checkpoint in
``<checkpoint_root>/<name>/sinks/<sink>``, or where the sink's ``checkpoint`` says
(:func:`sink_checkpoint`). Imports no Spark.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from hubflow.config import (
    JOB_NAME_PATTERN,
    SINK_CHECKPOINTS,
    JobConfig,
    KeyedValueError,
    StrictModel,
    TextMap,
    existing_local_folder,
    join_path,
)
from hubflow_jobs.eventhubs_config import EventHubSinkConfig, EventHubSourceConfig
from hubflow_jobs.eventhubs_kafka import EventHubsKafkaSourceConfig
from hubflow_jobs.eventhubs_kafka_sink import EventHubsKafkaSinkConfig
from hubflow_jobs.interval_folders import check_pattern
from hubflow_jobs.lake.delta_source import DeltaSourceConfig
from hubflow_jobs.lake.tables import LakeFormat, check_quarantine_path


class EventHubsSource(EventHubSourceConfig):
    """``kind: eventhubs``: an Event Hub read through ``format("eventhubs")``."""

    kind: Literal["eventhubs"]


class EventHubsKafkaSource(EventHubsKafkaSourceConfig):
    """``kind: eventhubs_kafka``: an Event Hub read through Spark's Kafka source and the hub's Kafka
    endpoint, as rows of the ``eventhubs`` kind's columns (:mod:`hubflow_jobs.eventhubs_kafka`)."""

    kind: Literal["eventhubs_kafka"]


class IntervalColumnKey(StrictModel):
    """``interval_column`` of a lake table source (``delta``, ``parquet``): the table's time column
    (timestamp or date) by which a backfill selects an interval's rows, ``start <= column < end``, in
    the table and in every Delta sink (which keeps it); needed by backfills only
    (:mod:`.delta_backfill`, :mod:`.parquet_backfill`)."""

    interval_column: str | None = Field(default=None, min_length=1)


class DeltaSource(DeltaSourceConfig, IntervalColumnKey):
    """``kind: delta``: the rows each commit of a Delta table added (``interval_column``:
    :class:`IntervalColumnKey`)."""

    kind: Literal["delta"]


#: Reader options hubflow sets itself; a files source may not override them through ``options``.
RESERVED_FILE_OPTIONS = {
    "mode",
    "columnnameofcorruptrecord",
    "cleansource",
    "sourcearchivedir",
    "maxfilespertrigger",
    "maxbytespertrigger",
    "recursivefilelookup",
    "path",
}


class LandingFilesKeys(StrictModel):
    """The keys of every source that reads a landing folder (a ``kind: files`` source, and the
    ``source:`` of files_to_lake's config before pipelines)."""

    path: str = Field(min_length=1)
    format: Literal["json", "csv", "parquet"]
    schema_ddl: str = Field(alias="schema", min_length=1)
    options: TextMap = Field(default_factory=dict)
    max_files_per_trigger: int = Field(default=100, gt=0)
    #: strftime pattern (UTC) of the folder under ``path`` holding one interval's files, e.g.
    #: ``%Y/%m/%d/%H``; needed by backfills only (see :mod:`hubflow_jobs.interval_folders`).
    interval_folder: str | None = None

    @field_validator("interval_folder")
    @classmethod
    def _interval_folder(cls, value: str | None) -> str | None:
        return None if value is None else check_pattern(value)

    @field_validator("path")
    @classmethod
    def _landing_exists(cls, value: str, info: ValidationInfo) -> str:
        return existing_local_folder(value, "landing folder", info)

    @model_validator(mode="after")
    def _no_reserved_options(self) -> LandingFilesKeys:
        for key in self.options:
            if key.lower() in RESERVED_FILE_OPTIONS:
                raise KeyedValueError(
                    f"options.{key}", "is set by the job itself; use the source keys (see docs/jobs.md)"
                )
        return self


class FilesSource(LandingFilesKeys):
    """``kind: files``: records of files landing in a folder (json, csv or parquet, declared schema).

    Each row has the declared columns, ``_source_file`` and, for json and csv, ``_raw_record`` (the
    text of a record that does not parse with the schema, null for a good one). With ``archive_dir``
    each file is moved there once its batch is committed (Spark's ``cleanSource=archive``).
    """

    kind: Literal["files"]
    archive_dir: str | None = Field(default=None, min_length=1)


class ParquetSource(IntervalColumnKey):
    """``kind: parquet``: a parquet lake table written by Spark's file sink (a ``kind: parquet`` sink),
    read through its ``_spark_metadata`` log, so only committed files, with the declared schema
    (``interval_column``: :class:`IntervalColumnKey`)."""

    kind: Literal["parquet"]
    path: str = Field(min_length=1)
    schema_ddl: str = Field(alias="schema", min_length=1)
    max_files_per_trigger: int = Field(default=100, gt=0)

    @field_validator("path")
    @classmethod
    def _table_exists(cls, value: str, info: ValidationInfo) -> str:
        return existing_local_folder(value, "table folder", info)


Source = Annotated[
    EventHubsSource | EventHubsKafkaSource | FilesSource | DeltaSource | ParquetSource,
    Field(discriminator="kind"),
]


class LakeSink(StrictModel):
    """``kind: delta`` or ``kind: parquet``: a lake table, with an optional quarantine table beside it.

    Rows the function marks bad (a non-null ``_quarantine_reason`` column) go to ``quarantine_path``;
    a sink without one refuses such a column. ``columns`` and ``quarantine_columns`` choose (and
    order) what each table keeps of the function's frame, when the two differ in shape; by default
    the output keeps every column but ``_quarantine_reason`` and the quarantine every column.
    ``checkpoint`` (optional, not on the first sink) is where the sink's query keeps its checkpoint
    instead of ``<checkpoint_root>/<name>/sinks/<sink>``, e.g. one an older job left there; inside
    a table only in a folder named ``_...`` (hidden from readers and VACUUM).
    """

    kind: LakeFormat
    output_path: str = Field(min_length=1)
    quarantine_path: str | None = Field(default=None, min_length=1)
    partition_by: list[str] = Field(default_factory=list)
    columns: list[str] | None = Field(default=None, min_length=1)
    quarantine_columns: list[str] | None = Field(default=None, min_length=1)
    checkpoint: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _distinct(self) -> LakeSink:
        if self.quarantine_path:
            check_quarantine_path(self.output_path, self.quarantine_path)
        if self.checkpoint:
            for table in self.tables():
                _check_checkpoint_apart(self.checkpoint, table)
        if self.quarantine_columns and not self.quarantine_path:
            raise KeyedValueError("quarantine_columns", "needs quarantine_path (the table that keeps them)")
        return self

    def tables(self) -> list[str]:
        """The output table and the quarantine table, when there is one."""
        return [self.output_path] + ([self.quarantine_path] if self.quarantine_path else [])


class EventHubsSink(EventHubSinkConfig):
    """``kind: eventhubs``: each row one event through ``format("eventhubs")``, at least once.

    The frame has the connector sink's columns: ``body`` (string or binary), and optionally
    ``partitionKey`` or ``partitionId`` and ``properties`` (map<string,string>) (docs/connector.md).
    The connection string comes from ``connection_string_env``, as a source's does.
    """

    kind: Literal["eventhubs"]


class EventHubsKafkaSink(EventHubsKafkaSinkConfig):
    """``kind: eventhubs_kafka``: each row one event through Spark's Kafka sink and the hub's Kafka
    endpoint, at least once; the frame has the ``eventhubs`` sink's columns, mapped to the record by
    :func:`hubflow_jobs.eventhubs_kafka_sink.kafka_rows`. The connection keys are the
    ``eventhubs_kafka`` source's."""

    kind: Literal["eventhubs_kafka"]


#: The sinks that publish to an Event Hub (no quarantine, no backfill: a hub takes no event back).
HUB_SINKS = (EventHubsSink, EventHubsKafkaSink)

Sink = Annotated[LakeSink | EventHubsSink | EventHubsKafkaSink, Field(discriminator="kind")]
NamedSources = dict[Annotated[str, Field(pattern=JOB_NAME_PATTERN)], Source]
NamedSinks = dict[Annotated[str, Field(pattern=JOB_NAME_PATTERN)], Sink]


class PipelineConfig(JobConfig):
    """The whole config of a pipeline job."""

    sources: NamedSources = Field(min_length=1)
    sinks: NamedSinks = Field(min_length=1)
    params: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> PipelineConfig:
        """Validate, with each problem of a source or sink keyed as the user wrote it.

        pydantic keys a tagged union's errors by the tag (``sources.orders.files.bogus``) and a bad or
        missing ``kind`` by the entry (``sources.orders``); :func:`_as_written` rewrites both to the
        YAML's own keys (``sources.orders.bogus``, ``sources.orders.kind``).
        """
        try:
            return super().model_validate(obj, **kwargs)
        except ValidationError as exc:
            errors = exc.errors(include_url=False)
            rewritten = [_as_written(error) for error in errors]
            if rewritten == errors:
                raise
            raise ValidationError.from_exception_data(exc.title, rewritten) from None  # type: ignore[arg-type]

    @model_validator(mode="after")
    def _archive_with_one_sink(self) -> PipelineConfig:
        if len(self.sinks) > 1:
            for name, source in self.sources.items():
                if isinstance(source, FilesSource) and source.archive_dir:
                    raise KeyedValueError(
                        f"sources.{name}.archive_dir",
                        f"a files source is archived by the query that reads it, and each of the "
                        f"{len(self.sinks)} sinks ({', '.join(self.sinks)}) has its own query; archive "
                        "only a pipeline with one sink, or remove archive_dir",
                    )
        return self

    @model_validator(mode="after")
    def _what_real_time_mode_runs(self) -> PipelineConfig:
        """Spark's real-time mode runs its Kafka source and sink (``eventhubs_kafka``) only, and reads
        each event as it arrives; say so by the key, before Spark starts (docs/pipelines.md)."""
        if self.trigger.real_time is None:
            return self
        for name, source in self.sources.items():
            if not isinstance(source, EventHubsKafkaSource):
                raise KeyedValueError(
                    self.key_as_written("sources", name, "kind"),
                    f"{source.kind} cannot be read with trigger realTime: Spark's real-time mode reads "
                    "kind eventhubs_kafka only; read this source with processingTime",
                )
            if "max_events_per_trigger" in source.model_fields_set:
                raise KeyedValueError(
                    self.key_as_written("sources", name, "max_events_per_trigger"),
                    "limits a micro-batch; real-time mode reads each event as it arrives: remove it",
                )
        for name, sink in self.sinks.items():
            if not isinstance(sink, EventHubsKafkaSink):
                raise KeyedValueError(
                    self.key_as_written("sinks", name, "kind"),
                    f"{sink.kind} cannot be written with trigger realTime: Spark's real-time mode writes "
                    "kind eventhubs_kafka only (Delta and parquet sinks write whole batches); write this "
                    "sink with processingTime",
                )
        return self

    def key_as_written(self, *loc: str) -> str:
        """The config key ``loc`` (e.g. ``"sources", "orders", "interval_folder"``) as the user's file
        names it, for messages: a built-in's config in its old keys names it by those."""
        return ".".join(loc)

    @model_validator(mode="after")
    def _sink_checkpoints_apart(self) -> PipelineConfig:
        first, *further = self.sinks
        if getattr(self.sinks[first], "checkpoint", None):
            raise KeyedValueError(
                f"sinks.{first}.checkpoint",
                "the first sink's query is the job's query; its checkpoint is <checkpoint_root>/<name>",
            )
        seen = {self.checkpoint_location.rstrip("/"): "the job's query"}
        for name in further:
            checkpoint = self.sink_checkpoint(name).rstrip("/")
            if checkpoint in seen:
                raise KeyedValueError(f"sinks.{name}.checkpoint", f"is the checkpoint of {seen[checkpoint]}")
            seen[checkpoint] = f"sink {name}"
        return self

    def extra_spark_conf(self) -> dict[str, str]:
        """With an Event Hubs source or sink (either kind): mask its connection string wherever Spark
        prints options (a Kafka source's is inside ``kafka.sasl.jaas.config``).
        Every pipeline keeps its streaming state in RocksDB unless ``spark_conf`` names another provider."""
        from hubflow_jobs.pipeline.progress import ROCKSDB_PROVIDER, STATE_STORE_PROVIDER_CONF

        state = {STATE_STORE_PROVIDER_CONF: ROCKSDB_PROVIDER}
        hubs = [*self.sources.values(), *self.sinks.values()]
        if not any(
            isinstance(declared, EventHubsSource | EventHubsKafkaSource | EventHubsSink | EventHubsKafkaSink)
            for declared in hubs
        ):
            return state
        from pyspark_eventhubs import redaction_conf

        return {**redaction_conf(), **state}

    def sink_checkpoint(self, sink: str) -> str:
        """The checkpoint of the query writing ``sink``: the job's own for the first sink, the sink's
        ``checkpoint`` when it sets one."""
        if sink == next(iter(self.sinks)):
            return self.checkpoint_location
        declared = getattr(self.sinks[sink], "checkpoint", None)
        return declared or join_path(self.checkpoint_location, SINK_CHECKPOINTS, sink)

    def delta_tables(self) -> list[str]:
        """Every Delta table of the sinks (outputs and quarantines), which the cleanup DAG maintains."""
        return [
            table
            for sink in self.sinks.values()
            if isinstance(sink, LakeSink) and sink.kind == "delta"
            for table in sink.tables()
        ]

    def delta_table_writers(self) -> list[tuple[str, str]]:
        """Each Delta table with the checkpoint of the query that writes it."""
        return [
            (table, self.sink_checkpoint(name))
            for name, sink in self.sinks.items()
            if isinstance(sink, LakeSink) and sink.kind == "delta"
            for table in sink.tables()
        ]

    def parquet_outputs(self) -> list[str]:
        """Every parquet table of the sinks (outputs and quarantines), each written by its sink's
        query through Spark's file sink."""
        return [
            table
            for sink in self.sinks.values()
            if isinstance(sink, LakeSink) and sink.kind == "parquet"
            for table in sink.tables()
        ]

    def file_landing(self) -> tuple[str, str | None] | None:
        """``(path, archive_dir)`` of the pipeline's only files source; None without exactly one."""
        files = [s for s in self.sources.values() if isinstance(s, FilesSource)]
        return (files[0].path, files[0].archive_dir) if len(files) == 1 else None


def _check_checkpoint_apart(checkpoint: str, table: str) -> None:
    """Refuse a sink's ``checkpoint`` that is one of its tables or lies around one, or inside one but
    not in a ``_``/``.`` folder (readers would read its files and VACUUM delete them)."""
    checkpoint, table = checkpoint.rstrip("/"), table.rstrip("/")
    if checkpoint == table or table.startswith(checkpoint + "/"):
        raise KeyedValueError("checkpoint", f"must lie apart from the table {table}")
    inner = checkpoint[len(table) + 1 :] if checkpoint.startswith(table + "/") else None
    if inner is not None and not inner.startswith(("_", ".")):
        raise KeyedValueError(
            "checkpoint",
            f"lies inside the table {table}: put it apart, or in a folder of it named _... "
            "(e.g. _checkpoint)",
        )


#: The kinds each named section accepts, for the message of a wrong or missing ``kind``.
_KINDS = {
    "sources": ("eventhubs", "eventhubs_kafka", "files", "delta", "parquet"),
    "sinks": ("delta", "parquet", "eventhubs", "eventhubs_kafka"),
}


def _as_written(error: dict[str, Any]) -> dict[str, Any]:
    """A pydantic error of ``sources.<name>`` or ``sinks.<name>`` keyed by the YAML's keys."""
    loc = tuple(error["loc"])
    if len(loc) < 2 or loc[0] not in _KINDS:
        return error
    kinds = _KINDS[str(loc[0])]
    if len(loc) == 2 and error["type"] == "union_tag_invalid":
        expected = ", ".join(repr(kind) for kind in kinds)
        tag = (error.get("ctx") or {}).get("tag")
        return {"type": "literal_error", "loc": (*loc, "kind"), "input": tag, "ctx": {"expected": expected}}
    if len(loc) == 2 and error["type"] == "union_tag_not_found":
        return {"type": "missing", "loc": (*loc, "kind"), "input": error["input"]}
    if len(loc) >= 3 and loc[2] in kinds:
        return {**error, "loc": (*loc[:2], *loc[3:])}
    return error
