"""Built-in job ``files_to_lake``: files landing in a folder -> a lake table, bad records quarantined.

A pipeline like any user's: one ``files`` source named ``landing`` (json, csv or parquet with a
declared schema; every folder below the landing path; archived once committed with
``archive_dir``), one lake sink named ``lake`` with a quarantine, and ``params``
(:class:`LandingParams`): the columns a good record must have. Every record is either

* a lake row: the declared columns, ``_source_file`` (the file it came from), ``_ingested_at`` and
  ``ingest_date`` (the UTC date of the micro-batch, the partition column); or
* a quarantine row (:data:`QUARANTINE_COLUMNS`): ``raw_record`` (the text of a json or csv record
  that does not parse, else its columns as JSON), ``source_file``, ``reason``, ``batch_id``,
  ``quarantined_at``, ``ingest_date``.

hubflow writes both tables per micro-batch exactly once (Delta or parquet), checks rows read =
written + quarantined before committing, counts them in status.json, archives the files, and
backfills an interval of landing folders (``interval_folder``). Its config before pipelines
(``source:`` with ``required_columns``, ``sink: {output_path, quarantine_path, format}``) is still
read, with a warning (:class:`FilesToLakeConfig`); checkpoint and tables stay where they were.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any, Literal

from pydantic import Field, model_validator

from hubflow.config import (
    JobConfig,
    KeyedValueError,
    StrictModel,
    declared_column_names,
    is_local,
    local_path,
)
from hubflow_jobs.builtins.legacy_config import LegacyPipelineConfig, LegacySections
from hubflow_jobs.lake.tables import INGEST_DATE_COLUMN, QuarantinedOutputConfig
from hubflow_jobs.pipeline import QUARANTINE_REASON, RAW_RECORD, SOURCE_FILE
from hubflow_jobs.pipeline.columns import BATCH_ID, QUARANTINE_SOURCE_FILE
from hubflow_jobs.pipeline.declarations import LandingFilesKeys

#: The names of its source and sink.
SOURCE, SINK = "landing", "lake"
#: What its quarantine table keeps of a record.
QUARANTINE_COLUMNS = (
    "raw_record",
    QUARANTINE_SOURCE_FILE,
    "reason",
    BATCH_ID,
    "quarantined_at",
    INGEST_DATE_COLUMN,
)


class LandingParams(StrictModel):
    """``params`` of files_to_lake: the columns a good record must have (and the files' format, for
    the reason of a record that does not parse; taken from the source when not written)."""

    required_columns: list[str] = Field(default_factory=list)
    record_format: Literal["json", "csv", "parquet"] = "json"


def output_columns(schema_ddl: str) -> list[str]:
    """The lake table's columns for the declared schema (the sink's ``columns``)."""
    return [*declared_column_names(schema_ddl), SOURCE_FILE, "_ingested_at", INGEST_DATE_COLUMN]


def landed(landing: Any, params: LandingParams) -> Any:
    """The landing records as lake rows, marked for the quarantine when they do not parse or lack a
    required column.

    Runs on the driver (it builds the plan); the same on a stream and on a backfill's batch.
    """
    from pyspark.sql import functions as F

    declared = [column for column in landing.columns if column not in (RAW_RECORD, SOURCE_FILE)]
    reason = F.lit(None).cast("string")
    for column in reversed(params.required_columns):
        reason = F.when(F.col(f"`{column}`").isNull(), F.lit(f"required column {column} is null")).otherwise(
            reason
        )
    as_json = F.to_json(F.struct(*[F.col(f"`{column}`") for column in declared]))
    raw = as_json
    if RAW_RECORD in landing.columns:
        not_parsed = F.lit(f"{params.record_format} record does not parse with the declared schema")
        reason = F.when(F.col(RAW_RECORD).isNotNull(), not_parsed).otherwise(reason)
        raw = F.coalesce(F.col(RAW_RECORD), as_json)
    now = F.current_timestamp()
    return landing.select(
        *[F.col(f"`{column}`") for column in declared],
        SOURCE_FILE,
        now.alias("_ingested_at"),
        F.to_date(now).alias(INGEST_DATE_COLUMN),
        raw.alias("raw_record"),
        F.col(SOURCE_FILE).alias(QUARANTINE_SOURCE_FILE),
        reason.alias("reason"),
        now.alias("quarantined_at"),
        reason.alias(QUARANTINE_REASON),
    )


class LegacyFileSource(LandingFilesKeys):
    """``source:`` of files_to_lake before pipelines: ``archive_dir`` required, ``required_columns``."""

    archive_dir: str = Field(min_length=1)
    required_columns: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> LegacyFileSource:
        columns = declared_column_names(self.schema_ddl)
        for column in self.required_columns:
            if column not in columns:
                raise KeyedValueError(
                    "required_columns", f"{column!r} is not a column of the declared schema {columns}"
                )
        if is_local(self.path) and is_local(self.archive_dir):
            landing = PurePosixPath(local_path(self.path).resolve().as_posix())
            archive = PurePosixPath(local_path(self.archive_dir).resolve().as_posix())
            if archive == landing or landing in archive.parents:
                raise KeyedValueError("archive_dir", f"{self.archive_dir} must not lie inside source.path")
        return self


class LegacyFilesToLakeConfig(JobConfig):
    """files_to_lake's whole config before pipelines, which names each mistake by its old key."""

    source: LegacyFileSource
    sink: QuarantinedOutputConfig


class LandingSections(LegacySections):
    """The old ``source:`` (whose ``required_columns`` are now ``params``) and ``sink:``."""

    def upgraded(self, data: dict[str, Any]) -> dict[str, Any]:
        source = data.get("source")
        required = source.get("required_columns") if isinstance(source, dict) else None
        if isinstance(source, dict):
            data = {**data, "source": {k: v for k, v in source.items() if k != "required_columns"}}
        data = super().upgraded(data)
        if required is not None:
            data["params"] = {"required_columns": required}
        return data

    def with_defaults(self, data: dict[str, Any]) -> dict[str, Any]:
        """The sink's defaults, its ``columns`` from the source's schema, the records' format."""
        data = super().with_defaults(data)
        sources, sinks = data.get("sources"), data.get("sinks")
        source = sources.get(self.source) if isinstance(sources, dict) else None
        sink = sinks.get(self.sink) if isinstance(sinks, dict) else None
        if not isinstance(source, dict):
            return data
        if isinstance(sink, dict) and "columns" not in sink and isinstance(source.get("schema"), str):
            try:
                sink = {**sink, "columns": output_columns(source["schema"])}
            except ValueError:
                pass  # the source's own validation names what is wrong with the schema
            data = {**data, "sinks": {**sinks, self.sink: sink}}
        params = data.get("params")
        if isinstance(params, dict) and "record_format" not in params and source.get("format"):
            data = {**data, "params": {**params, "record_format": source["format"]}}
        elif params is None and source.get("format"):
            data = {**data, "params": {"record_format": source["format"]}}
        return data

    def as_written(self, loc: tuple[Any, ...]) -> tuple[Any, ...]:
        if loc[:2] == ("params", "required_columns"):
            return ("source", *loc[1:])
        return super().as_written(loc)


class FilesToLakeConfig(LegacyPipelineConfig):
    """The config of files_to_lake: a pipeline config, or the old ``source:`` and ``sink:``."""

    LEGACY = LandingSections(
        builtin="files_to_lake",
        source=SOURCE,
        source_kind="files",
        sink=SINK,
        sink_keys=("output_path", "quarantine_path", "format"),
        sink_required=("output_path", "quarantine_path"),
        sink_defaults={"partition_by": [INGEST_DATE_COLUMN], "quarantine_columns": list(QUARANTINE_COLUMNS)},
        params_model=LandingParams,
        legacy_model=LegacyFilesToLakeConfig,
    )

    @model_validator(mode="after")
    def _required_columns_declared(self) -> FilesToLakeConfig:
        source = self.sources.get(SOURCE)
        schema = getattr(source, "schema_ddl", None)
        required = self.params.get("required_columns") or []
        if schema is not None and isinstance(required, list):
            columns = declared_column_names(schema)
            for index, column in enumerate(required):
                if column not in columns:
                    raise KeyedValueError(
                        f"params.required_columns.{index}",
                        f"{column!r} is not a column of sources.{SOURCE}.schema {columns}",
                    )
        return self
