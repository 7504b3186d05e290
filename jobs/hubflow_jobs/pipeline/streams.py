"""Where a pipeline meets Spark: its declared sources read as streams, its results written to its sinks.

Runs on the driver. :func:`start_pipeline` is the pipeline's ``start_query`` for the runner
(:mod:`hubflow_jobs.runner`): it reads every source, calls the user's function, and starts one
query per sink. The first sink's query is the job's query (checkpoint ``<checkpoint_root>/<name>``,
reported in status.json); each further sink gets a query of its own on a helper session, with the
function called again on that session's sources, so the job's status listener sees the first only.

Sinks are exactly once like the built-in jobs' tables (:mod:`hubflow_jobs.lake_tables`): Delta
through delta-spark's sink (one commit per batch with the query's transaction), parquet through
Spark's file sink. A frame with a ``_quarantine_reason`` column is split per batch: rows where it is
null go to ``output_path`` without it, the others to ``quarantine_path`` as they are, both written
with the same batch's transaction.
"""

from __future__ import annotations

from typing import Any

from ..lake_tables import TableBatchWriter, check_table_format, start_table_stream
from ..query_group import QueryGroup, helper_session
from ..status_folder import JobStatus
from .binding import Binding, PipelineError, sink_frames
from .columns import QUARANTINE_REASON, RAW_RECORD, SOURCE_FILE
from .declarations import DeltaSource, EventHubsSource, FilesSource, LakeSink, PipelineConfig


def read_source(spark: Any, source: Any) -> Any:
    """The declared ``source`` as a streaming DataFrame on ``spark``."""
    if isinstance(source, EventHubsSource):
        from pyspark_eventhubs import DefaultSource

        spark.dataSource.register(DefaultSource)
        return spark.readStream.format("eventhubs").options(**source.spark_options()).load()
    if isinstance(source, DeltaSource):
        from ..delta_source import read_delta_stream

        return read_delta_stream(spark, source.path, source)
    if isinstance(source, FilesSource):
        return _read_files(spark, source)
    raise PipelineError(f"no reader for source kind {getattr(source, 'kind', type(source).__name__)!r}")


def _read_files(spark: Any, source: FilesSource) -> Any:
    from pyspark.sql import functions as F

    text = source.format in ("json", "csv")
    reader = (
        spark.readStream.format(source.format)
        .schema(source.schema_ddl + (f", {RAW_RECORD} STRING" if text else ""))
        .options(**source.options)
        .option("maxFilesPerTrigger", str(source.max_files_per_trigger))
        .option("recursiveFileLookup", "true")
    )
    if text:
        reader = reader.option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", RAW_RECORD)
    if source.archive_dir:
        reader = reader.option("cleanSource", "archive").option("sourceArchiveDir", source.archive_dir)
    return reader.load(source.path).withColumn(SOURCE_FILE, F.col("_metadata.file_path"))


def pipeline_frames(spark: Any, config: PipelineConfig, binding: Binding) -> dict[str, Any]:
    """Read every source on ``spark``, call the function, and return its frames by sink name."""
    frames = {name: read_source(spark, source) for name, source in config.sources.items()}
    result = binding.call(frames, config.params, spark)
    return sink_frames(result, binding.reference, list(config.sinks))


def start_pipeline(spark: Any, config: PipelineConfig, status: JobStatus, binding: Binding) -> Any:
    """Start the pipeline's queries and return the job's query (a :class:`QueryGroup` for several sinks)."""
    names = list(config.sinks)
    first = pipeline_frames(spark, config, binding)
    main = start_sink(spark, first[names[0]], config, names[0], binding.reference)
    helpers: list[Any] = []
    try:
        for name in names[1:]:
            session = helper_session(spark)
            frame = pipeline_frames(session, config, binding)[name]
            helpers.append(start_sink(session, frame, config, name, binding.reference))
    except Exception:
        for query in [main, *helpers]:
            query.stop()
        raise
    if not helpers:
        return main
    return QueryGroup(main, helpers, config.runtime.seconds("stop_timeout"))


def start_sink(spark: Any, frame: Any, config: PipelineConfig, name: str, reference: str) -> Any:
    """Start the query writing ``frame`` (of the pipeline ``reference``) to the sink ``name``; return it."""
    sink = config.sinks[name]
    for key, path in (("output_path", sink.output_path), ("quarantine_path", sink.quarantine_path)):
        if path:
            check_table_format(spark, path, sink.kind, f"sinks.{name}.{key}")
    query_name = config.name if name == next(iter(config.sinks)) else f"{config.name}.{name}"
    checkpoint = config.sink_checkpoint(name)
    trigger = config.trigger.spark_kwargs()
    if QUARANTINE_REASON not in frame.columns:
        return start_table_stream(
            frame,
            query_name=query_name,
            path=sink.output_path,
            file_format=sink.kind,
            checkpoint=checkpoint,
            partition_by=sink.partition_by,
            trigger=trigger,
        )
    if not sink.quarantine_path:
        raise PipelineError(
            f"pipeline {reference!r}: sink {name!r} gets a {QUARANTINE_REASON} column but has no "
            f"quarantine_path; add sinks.{name}.quarantine_path or drop the column"
        )
    writer = QuarantineSplit(spark, sink)
    return (
        frame.writeStream.queryName(query_name)
        .foreachBatch(writer.write)
        .option("checkpointLocation", checkpoint)
        .trigger(**trigger)
        .start()
    )


class QuarantineSplit:
    """foreachBatch writer of a sink with a quarantine: good rows and quarantined rows, one batch each."""

    def __init__(self, spark: Any, sink: LakeSink) -> None:
        self.output = TableBatchWriter(spark, sink.output_path, sink.kind, sink.partition_by)
        self.quarantine = TableBatchWriter(spark, sink.quarantine_path or "", sink.kind, sink.partition_by)

    def write(self, batch: Any, batch_id: int) -> None:
        """Write the batch's good rows to the output and the others to the quarantine (runs on the driver)."""
        from pyspark.sql import functions as F

        batch = batch.persist()
        try:
            reason = F.col(QUARANTINE_REASON)
            self.quarantine.add_batch(batch_id, batch.where(reason.isNotNull()))
            self.output.add_batch(batch_id, batch.where(reason.isNull()).drop(QUARANTINE_REASON))
        finally:
            batch.unpersist()
