"""Job ``files_to_lake``: files landing in a folder -> a lake table, bad records quarantined.

Spark's streaming file source reads the landing folder and every folder below it (json, csv or
parquet, with the schema declared in the config; names starting with ``_`` or ``.`` are skipped),
at most ``max_files_per_trigger`` files per micro-batch, and archives each file into
``archive_dir`` once its batch is committed (``cleanSource=archive``). Every batch is split:

* records that parse and have all ``required_columns`` go to ``sink.output_path``, partitioned by
  ``ingest_date`` (the UTC date the batch ran), with ``_source_file`` and ``_ingested_at`` added;
* the others go to ``sink.quarantine_path`` with the raw record, the source file and the reason.

Both tables are in ``sink.format``: Delta (the default; each batch is one commit per table carrying
the query's transaction, so a replayed batch is skipped) or parquet through Spark's file sink
(exactly once through ``_spark_metadata``); see :mod:`hubflow_jobs.lake_tables`. Each batch checks
that rows read = rows written + rows quarantined before anything is committed.
"""

from __future__ import annotations

import logging
from pathlib import PurePosixPath
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from .config import (
    JobConfig,
    KeyedValueError,
    StrictModel,
    TextMap,
    declared_column_names,
    existing_local_folder,
    is_local,
    local_path,
)
from .interval_folders import check_pattern
from .lake_tables import INGEST_DATE_COLUMN, QuarantinedOutputConfig, TableBatchWriter, check_table_format
from .landing_area import archive_root as landing_archive_root
from .status_folder import JobStatus

log = logging.getLogger(__name__)

#: Hidden column that Spark's json/csv readers fill with the raw text of a record that does not parse.
RAW_RECORD_COLUMN = "_hubflow_raw_record"
#: Options the job sets itself; a config may not override them through ``source.options``.
RESERVED_OPTIONS = {
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
    """The keys of every source that reads a landing folder: files_to_lake's ``source:`` and a
    pipeline's ``kind: files`` source."""

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
            if key.lower() in RESERVED_OPTIONS:
                raise KeyedValueError(
                    f"options.{key}", "is set by the job itself; use the source keys (see docs/jobs.md)"
                )
        return self


class FileSourceConfig(LandingFilesKeys):
    """``source:`` of files_to_lake."""

    archive_dir: str = Field(min_length=1)
    required_columns: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> FileSourceConfig:
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


class LakeSinkConfig(QuarantinedOutputConfig):
    """``sink:`` of files_to_lake: ``output_path``, ``quarantine_path`` (apart from it) and ``format``."""


class FilesToLakeConfig(JobConfig):
    """The whole config of files_to_lake: the common section plus ``source`` and ``sink``."""

    source: FileSourceConfig
    sink: LakeSinkConfig

    def delta_tables(self) -> list[str]:
        """The Delta tables the job writes (maintained by the cleanup DAG)."""
        return self.sink.delta_tables()


def start_files_to_lake(spark: Any, config: FilesToLakeConfig, status: JobStatus) -> Any:
    """Start the streaming query of files_to_lake and return it."""
    source = config.source
    reader = (
        spark.readStream.format(source.format)
        .schema(reader_schema(source))
        .options(**parse_options(source))
        .option("maxFilesPerTrigger", str(source.max_files_per_trigger))
        .option("recursiveFileLookup", "true")
        .option("cleanSource", "archive")
        .option("sourceArchiveDir", source.archive_dir)
    )
    frame = with_source_file(reader.load(source.path))

    batches = LandingBatchWriter(spark, config, status)
    return (
        frame.writeStream.queryName(config.name)
        .foreachBatch(batches.write)
        .option("checkpointLocation", config.checkpoint_location)
        .trigger(**config.trigger.spark_kwargs())
        .start()
    )


def _parses_text(source: FileSourceConfig) -> bool:
    return source.format in ("json", "csv")


def reader_schema(source: FileSourceConfig) -> str:
    """The declared schema, plus the raw-record column when the format is text."""
    return source.schema_ddl + (f", {RAW_RECORD_COLUMN} STRING" if _parses_text(source) else "")


def parse_options(source: FileSourceConfig) -> dict[str, str]:
    """Reader options: the config's, plus permissive parsing that keeps broken records' text."""
    options = dict(source.options)
    if _parses_text(source):
        options.update({"mode": "PERMISSIVE", "columnNameOfCorruptRecord": RAW_RECORD_COLUMN})
    return options


def with_source_file(frame: Any) -> Any:
    """``frame`` with ``_source_file``: the path of the file each record came from."""
    from pyspark.sql import functions as F

    return frame.withColumn("_source_file", F.col("_metadata.file_path"))


def rejection_reason(source: FileSourceConfig) -> Any:
    """A column: why a record goes to quarantine, or null when it is good."""
    from pyspark.sql import functions as F

    reason = F.lit(None).cast("string")
    for column in reversed(source.required_columns):
        reason = F.when(F.col(f"`{column}`").isNull(), F.lit(f"required column {column} is null")).otherwise(
            reason
        )
    if _parses_text(source):
        reason = F.when(
            F.col(RAW_RECORD_COLUMN).isNotNull(),
            F.lit(f"{source.format} record does not parse with the declared schema"),
        ).otherwise(reason)
    return reason


def raw_record(source: FileSourceConfig) -> Any:
    """A column: the record as it was in the file (text formats) or as JSON of its parsed columns."""
    from pyspark.sql import functions as F

    as_json = F.to_json(F.struct(*[F.col(f"`{c}`") for c in declared_column_names(source.schema_ddl)]))
    if _parses_text(source):
        return F.coalesce(F.col(RAW_RECORD_COLUMN), as_json)
    return as_json


REASON_COLUMN = "_hubflow_reason"
NOW_COLUMN = "_hubflow_now"


def classify(records: Any, source: FileSourceConfig) -> Any:
    """``records`` with why each is rejected (null when good) and the processing time."""
    from pyspark.sql import functions as F

    return records.withColumn(REASON_COLUMN, rejection_reason(source)).withColumn(
        NOW_COLUMN, F.current_timestamp()
    )


def split_records(
    classified: Any, source: FileSourceConfig, partition_column: str, batch_id: int | None = None
) -> tuple[Any, Any]:
    """The lake rows and the quarantine rows of a classified frame that has ``partition_column``.

    Lake rows: the declared columns, ``_source_file``, ``_ingested_at``. Quarantine rows:
    ``raw_record``, ``source_file``, ``reason``, ``batch_id`` (streaming only), ``quarantined_at``.
    """
    from pyspark.sql import functions as F

    good = classified.where(F.col(REASON_COLUMN).isNull()).select(
        *[F.col(f"`{c}`") for c in declared_column_names(source.schema_ddl)],
        "_source_file",
        F.col(NOW_COLUMN).alias("_ingested_at"),
        partition_column,
    )
    batch = [] if batch_id is None else [F.lit(batch_id).cast("long").alias("batch_id")]
    bad = classified.where(F.col(REASON_COLUMN).isNotNull()).select(
        raw_record(source).alias("raw_record"),
        F.col("_source_file").alias("source_file"),
        F.col(REASON_COLUMN).alias("reason"),
        *batch,
        F.col(NOW_COLUMN).alias("quarantined_at"),
        partition_column,
    )
    return good, bad


def reconciled_counts(classified: Any, good: Any, bad: Any, subject: str) -> tuple[int, int, int]:
    """(read, written, quarantined); raises before anything is written when they do not add up."""
    read, written, quarantined = classified.count(), good.count(), bad.count()
    if read != written + quarantined:
        raise RuntimeError(
            f"{subject}: counts do not reconcile: read {read} != written {written} + quarantined "
            f"{quarantined}; nothing of it was written"
        )
    return read, written, quarantined


class LandingBatchWriter:
    """Splits each micro-batch into lake rows and quarantined rows and commits both exactly once."""

    def __init__(self, spark: Any, config: FilesToLakeConfig, status: JobStatus) -> None:
        self.config = config
        self.status = status
        sink = config.sink
        check_table_format(spark, sink.output_path, sink.format, "sink.output_path")
        check_table_format(spark, sink.quarantine_path, sink.format, "sink.quarantine_path")
        self.output = TableBatchWriter(spark, sink.output_path, sink.format, [INGEST_DATE_COLUMN])
        self.quarantine = TableBatchWriter(spark, sink.quarantine_path, sink.format, [INGEST_DATE_COLUMN])
        self.totals = {"read": 0, "written": 0, "quarantined": 0}

    def write(self, batch: Any, batch_id: int) -> None:
        """foreachBatch callback: split, reconcile, commit to both sinks, record the counts."""
        from pyspark.sql import functions as F

        classified = classify(batch, self.config.source)
        classified = classified.withColumn(INGEST_DATE_COLUMN, F.to_date(NOW_COLUMN)).persist()
        try:
            good, bad = split_records(classified, self.config.source, INGEST_DATE_COLUMN, batch_id)
            read, written, quarantined = reconciled_counts(classified, good, bad, f"batch {batch_id}")
            self.quarantine.add_batch(batch_id, bad)
            self.output.add_batch(batch_id, good)
        finally:
            classified.unpersist()
        batch_counts = {"batch_id": batch_id, "read": read, "written": written, "quarantined": quarantined}
        for key in ("read", "written", "quarantined"):
            self.totals[key] += batch_counts[key]
        try:
            self.status.update(last_batch_counts=batch_counts, counts=dict(self.totals))
        except Exception as exc:  # the batch is committed; a status hiccup must not fail it
            log.warning("batch %s: could not record counts in status.json: %s", batch_id, exc)


def archive_root(source: FileSourceConfig) -> str:
    """Where ``cleanSource=archive`` puts the source's landing files (:func:`.landing_area.archive_root`)."""
    return landing_archive_root(source.path, source.archive_dir)
