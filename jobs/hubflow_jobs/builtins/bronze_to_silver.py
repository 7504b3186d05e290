"""Built-in job ``bronze_to_silver``: the bronze Delta table of ``eventhubs_to_lake`` -> typed silver rows.

A pipeline like any user's: one ``delta`` source named ``bronze`` (read incrementally with
delta-spark's streaming source, under either trigger), one lake sink named ``silver`` with a
quarantine, and ``params`` (:class:`ParseParams`): the bodies' JSON schema and the fields a good
event must have. Every event's body is parsed as JSON with ``params.body_schema``:

* events that parse and have every ``required_fields`` go to the output: the event's identity
  (``partition``, ``sequenceNumber``), ``enqueuedTime``, the body's fields, and bronze's
  ``ingest_date`` (the partition column) and ``_ingested_at`` (:func:`output_columns`);
* the others go to the quarantine with the raw body, the identity, ``reason`` and
  ``quarantined_at`` (:data:`QUARANTINE_COLUMNS`).

Both tables are written per micro-batch exactly once, and the job's status.json counts rows read,
written and quarantined. Bronze rows are only ever appended by ``eventhubs_to_lake``; a backfill's
``replaceWhere`` on bronze removes rows, which fails this query unless the source sets
``skip_change_commits`` (docs/delta.md says which to choose).

Its config before pipelines (``source:``, ``parse:``, ``sink: {output_path, quarantine_path,
format}``) is still read, with a warning (:class:`BronzeToSilverConfig`); checkpoint and tables stay
where they were.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from hubflow.config import KeyedValueError, StrictModel, declared_column_names
from hubflow_jobs.builtins.legacy_config import LegacyPipelineConfig, LegacySections
from hubflow_jobs.lake.tables import INGEST_DATE_COLUMN
from hubflow_jobs.pipeline import QUARANTINE_REASON

#: The names of its source and sink.
SOURCE, SINK = "bronze", "silver"
#: The bronze columns it reads (eventhubs_to_lake's output).
BRONZE_COLUMNS = ("body", "partition", "sequenceNumber", "enqueuedTime", "_ingested_at", INGEST_DATE_COLUMN)
#: What its quarantine table keeps of an event.
QUARANTINE_COLUMNS = (
    "raw_body",
    "partition",
    "sequenceNumber",
    "enqueuedTime",
    "reason",
    "quarantined_at",
    INGEST_DATE_COLUMN,
)
#: Hidden column that ``from_json`` fills with the raw text of a body that does not parse.
_CORRUPT_COLUMN = "_hubflow_corrupt_body"


class ParseParams(StrictModel):
    """``params`` of bronze_to_silver: the body's JSON schema and the fields a good event must have."""

    body_schema: str = Field(min_length=1)
    required_fields: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _fields_declared(self) -> ParseParams:
        columns = declared_column_names(self.body_schema)
        for index, name in enumerate(self.required_fields):
            if name not in columns:
                raise KeyedValueError(
                    f"required_fields.{index}", f"{name!r} is not a field of body_schema {columns}"
                )
        clash = sorted(set(columns) & {*BRONZE_COLUMNS, *QUARANTINE_COLUMNS})
        if clash:
            raise KeyedValueError("body_schema", f"fields {clash} clash with the bronze columns; rename them")
        return self


def output_columns(params: ParseParams) -> list[str]:
    """The silver table's columns for ``params`` (the sink's ``columns``)."""
    fields = declared_column_names(params.body_schema)
    return ["partition", "sequenceNumber", "enqueuedTime", *fields, "_ingested_at", INGEST_DATE_COLUMN]


def silver(bronze: Any, params: ParseParams) -> Any:
    """Bronze rows with the parsed body fields, marked for the quarantine when they do not parse.

    Runs on the driver (it builds the plan); the same on a stream and on a batch of bronze rows.
    """
    from pyspark.sql import functions as F

    missing = [column for column in BRONZE_COLUMNS if column not in bronze.columns]
    if missing:
        raise ValueError(
            f"the source lacks the bronze columns {missing}; point it at an eventhubs_to_lake output"
        )
    text = F.col("body").cast("string")
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT_COLUMN}
    data = F.from_json(text, f"{params.body_schema}, {_CORRUPT_COLUMN} STRING", options)
    reason = F.when(
        data.isNull() | data[_CORRUPT_COLUMN].isNotNull(),
        F.lit("body is not a JSON object matching parse.body_schema"),
    )
    for name in params.required_fields:
        reason = reason.when(data[name].isNull(), F.lit(f"required field {name} is missing or null"))
    fields = [data[name].alias(name) for name in declared_column_names(params.body_schema)]
    return bronze.select(
        text.alias("raw_body"),
        "partition",
        "sequenceNumber",
        "enqueuedTime",
        *fields,
        "_ingested_at",
        INGEST_DATE_COLUMN,
        reason.alias("reason"),
        F.current_timestamp().alias("quarantined_at"),
        reason.alias(QUARANTINE_REASON),
    )


class BronzeToSilverConfig(LegacyPipelineConfig):
    """The config of bronze_to_silver: a pipeline config, or the old ``source:``, ``parse:``, ``sink:``."""

    LEGACY = LegacySections(
        builtin="bronze_to_silver",
        source=SOURCE,
        source_kind="delta",
        sink=SINK,
        sink_keys=("output_path", "quarantine_path", "format"),
        sink_required=("output_path", "quarantine_path"),
        sink_defaults={"partition_by": [INGEST_DATE_COLUMN], "quarantine_columns": list(QUARANTINE_COLUMNS)},
        params="parse",
        params_model=ParseParams,
        sink_columns=output_columns,
    )
