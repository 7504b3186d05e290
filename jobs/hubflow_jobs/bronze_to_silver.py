"""Job ``bronze_to_silver``: the bronze Delta table of ``eventhubs_to_lake`` -> typed silver rows.

Reads the bronze table incrementally with delta-spark's streaming source (``source:`` takes the
Delta read options of :mod:`hubflow_jobs.delta_source`: ``max_files_per_trigger`` and the rest),
under either trigger. Every event's body is parsed as JSON with ``parse.body_schema``:

* events that parse and have every ``parse.required_fields`` go to ``sink.output_path``: the
  event's identity (``partition``, ``sequenceNumber``), ``enqueuedTime``, the body's fields, and
  bronze's ``ingest_date`` (the partition column) and ``_ingested_at``;
* the others go to ``sink.quarantine_path`` with the raw body, the identity and the reason.

Both tables are written per micro-batch exactly once (Delta: one commit per table with the query's
transaction; see :mod:`hubflow_jobs.lake_tables`), after checking rows read = rows written + rows
quarantined. Bronze rows are only ever appended by ``eventhubs_to_lake``; a backfill's
``replaceWhere`` on bronze removes rows, which fails this query unless
``source.skip_change_commits`` is set (see docs/delta.md for which to choose).
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import Field, model_validator

from .config import JobConfig, KeyedValueError, StrictModel, declared_column_names
from .delta_source import DeltaSourceConfig, read_delta_stream
from .lake_tables import INGEST_DATE_COLUMN, QuarantinedOutputConfig, TableBatchWriter, check_table_format
from .status_folder import JobStatus

log = logging.getLogger(__name__)

#: The bronze columns this job reads (eventhubs_to_lake's output).
BRONZE_COLUMNS = ("body", "partition", "sequenceNumber", "enqueuedTime", "_ingested_at", INGEST_DATE_COLUMN)
#: Hidden column that ``from_json`` fills with the raw text of a body that does not parse.
_CORRUPT_COLUMN = "_hubflow_corrupt_body"
_REASON = "_hubflow_reason"


class ParseConfig(StrictModel):
    """``parse:`` of bronze_to_silver: the body's JSON schema and the fields a good event must have."""

    body_schema: str = Field(min_length=1)
    required_fields: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _fields_declared(self) -> ParseConfig:
        columns = declared_column_names(self.body_schema)
        for index, name in enumerate(self.required_fields):
            if name not in columns:
                raise KeyedValueError(
                    f"required_fields.{index}", f"{name!r} is not a field of body_schema {columns}"
                )
        clash = sorted(set(columns) & set(BRONZE_COLUMNS))
        if clash:
            raise KeyedValueError("body_schema", f"fields {clash} clash with the bronze columns; rename them")
        return self


class SilverSinkConfig(QuarantinedOutputConfig):
    """``sink:`` of bronze_to_silver: ``output_path``, ``quarantine_path`` and ``format``."""

    @model_validator(mode="after")
    def _distinct(self) -> SilverSinkConfig:
        if self.output_path.rstrip("/") == self.quarantine_path.rstrip("/"):
            raise KeyedValueError("quarantine_path", "must differ from output_path")
        return self


class BronzeToSilverConfig(JobConfig):
    """The whole config of bronze_to_silver: common section, ``source``, ``parse``, ``sink``."""

    source: DeltaSourceConfig
    parse: ParseConfig
    sink: SilverSinkConfig

    def delta_tables(self) -> list[str]:
        """The Delta tables the job writes (maintained by the cleanup DAG)."""
        return self.sink.delta_tables()


def start_bronze_to_silver(spark: Any, config: BronzeToSilverConfig, status: JobStatus) -> Any:
    """Start the streaming query of bronze_to_silver and return it."""
    bronze = read_delta_stream(spark, config.source.path, config.source)
    missing = [c for c in BRONZE_COLUMNS if c not in bronze.columns]
    if missing:
        raise ValueError(
            f"jobs config error: source.path: {config.source.path} lacks the bronze columns {missing}; "
            "point it at an eventhubs_to_lake output"
        )
    batches = SilverBatchWriter(spark, config, status)
    return (
        classify_bronze(bronze, config.parse)
        .writeStream.queryName(config.name)
        .foreachBatch(batches.write)
        .option("checkpointLocation", config.checkpoint_location)
        .trigger(**config.trigger.spark_kwargs())
        .start()
    )


def classify_bronze(bronze: Any, parse: ParseConfig) -> Any:
    """Bronze rows with the parsed body fields and why an event is rejected (null when good)."""
    from pyspark.sql import functions as F

    text = F.col("body").cast("string")
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT_COLUMN}
    data = F.from_json(text, f"{parse.body_schema}, {_CORRUPT_COLUMN} STRING", options)
    reason = F.when(
        data.isNull() | data[_CORRUPT_COLUMN].isNotNull(),
        F.lit("body is not a JSON object matching parse.body_schema"),
    )
    for name in parse.required_fields:
        reason = reason.when(data[name].isNull(), F.lit(f"required field {name} is missing or null"))
    fields = [data[name].alias(name) for name in declared_column_names(parse.body_schema)]
    return bronze.select(
        text.alias("raw_body"),
        "partition",
        "sequenceNumber",
        "enqueuedTime",
        *fields,
        "_ingested_at",
        INGEST_DATE_COLUMN,
        reason.alias(_REASON),
    )


class SilverBatchWriter:
    """Splits each micro-batch into silver rows and quarantined events and commits both exactly once."""

    def __init__(self, spark: Any, config: BronzeToSilverConfig, status: JobStatus) -> None:
        sink = config.sink
        check_table_format(spark, sink.output_path, sink.format, "sink.output_path")
        check_table_format(spark, sink.quarantine_path, sink.format, "sink.quarantine_path")
        self.config = config
        self.status = status
        self.output = TableBatchWriter(spark, sink.output_path, sink.format, [INGEST_DATE_COLUMN])
        self.quarantine = TableBatchWriter(spark, sink.quarantine_path, sink.format, [INGEST_DATE_COLUMN])
        self.totals = {"read": 0, "written": 0, "quarantined": 0}

    def write(self, batch: Any, batch_id: int) -> None:
        """foreachBatch callback: split, reconcile, commit to both tables, record the counts."""
        from pyspark.sql import functions as F

        classified = batch.persist()
        try:
            fields = declared_column_names(self.config.parse.body_schema)
            good = classified.where(F.col(_REASON).isNull()).select(
                "partition", "sequenceNumber", "enqueuedTime", *fields, "_ingested_at", INGEST_DATE_COLUMN
            )
            bad = classified.where(F.col(_REASON).isNotNull()).select(
                "raw_body",
                "partition",
                "sequenceNumber",
                "enqueuedTime",
                F.col(_REASON).alias("reason"),
                F.current_timestamp().alias("quarantined_at"),
                INGEST_DATE_COLUMN,
            )
            read, written, quarantined = classified.count(), good.count(), bad.count()
            if read != written + quarantined:
                raise RuntimeError(
                    f"batch {batch_id}: counts do not reconcile: read {read} != written {written} + "
                    f"quarantined {quarantined}; nothing of it was written"
                )
            self.quarantine.add_batch(batch_id, bad)
            self.output.add_batch(batch_id, good)
        finally:
            classified.unpersist()
        counts = {"batch_id": batch_id, "read": read, "written": written, "quarantined": quarantined}
        for key in ("read", "written", "quarantined"):
            self.totals[key] += counts[key]
        try:
            self.status.update(last_batch_counts=counts, counts=dict(self.totals))
        except Exception as exc:  # the batch is committed; a status hiccup must not fail it
            log.warning("batch %s: could not record counts in status.json: %s", batch_id, exc)
