"""Where a pipeline meets Spark: its declared sources read as streams, its results written to its sinks.

Runs on the driver. :func:`start_pipeline` is the pipeline's ``start_query`` for the runner
(:mod:`hubflow_jobs.runtime.runner`): it reads every source, calls the user's function, and starts one
query per sink. The first sink's query is the job's query (checkpoint ``<checkpoint_root>/<name>``,
reported in status.json); each further sink gets a query of its own on a helper session, with the
function called again on that session's sources, so the job's status listener sees the first only.
Every query's late rows, watermark and ``observe()`` counts go to status.json too
(:mod:`.progress`), and stateful operators keep their state in RocksDB by default.

Lake sinks are exactly once like the built-in jobs' tables (:mod:`hubflow_jobs.lake.tables`): Delta
through delta-spark's sink (one commit per batch with the query's transaction), parquet through
Spark's file sink. An Event Hubs sink publishes each row through the connector (``eventhubs``) or
Spark's Kafka sink (``eventhubs_kafka``), at least once. A
frame with a ``_quarantine_reason`` column is split per batch: rows where it is
null go to ``output_path`` without it, the others to ``quarantine_path`` as they are, both written
with the same batch's transaction.
"""

from __future__ import annotations

import logging
from typing import Any

from hubflow.status import JobStatus
from hubflow_jobs.lake.tables import TableBatchWriter, check_table_format, start_table_stream
from hubflow_jobs.pipeline.binding import Binding, PipelineError, sink_frames
from hubflow_jobs.pipeline.columns import BATCH_ID, QUARANTINE_REASON, RAW_RECORD, SOURCE_FILE
from hubflow_jobs.pipeline.declarations import (
    DeltaSource,
    EventHubsKafkaSink,
    EventHubsKafkaSource,
    EventHubsSink,
    EventHubsSource,
    FilesSource,
    LakeSink,
    ParquetSource,
    PipelineConfig,
)
from hubflow_jobs.pipeline.progress import PipelineProgress, use_state_store
from hubflow_jobs.runtime.query_group import QueryGroup, helper_session

log = logging.getLogger(__name__)


def read_source(spark: Any, source: Any, real_time: bool = False) -> Any:
    """The declared ``source`` as a streaming DataFrame on ``spark`` (``real_time``: for Spark's
    real-time mode, which reads each event as it arrives and refuses a per-batch limit)."""
    if isinstance(source, EventHubsSource):
        from pyspark_eventhubs import DefaultSource, register_data_source

        register_data_source(spark, DefaultSource)
        return spark.readStream.format("eventhubs").options(**source.spark_options()).load()
    if isinstance(source, EventHubsKafkaSource):
        from hubflow_jobs.eventhubs_kafka import KAFKA_BATCH_LIMIT, as_eventhubs_rows

        options = source.spark_options()
        if real_time:
            options.pop(KAFKA_BATCH_LIMIT, None)
        return as_eventhubs_rows(spark.readStream.format("kafka").options(**options).load())
    if isinstance(source, DeltaSource):
        from hubflow_jobs.lake.delta_source import read_delta_stream

        return read_delta_stream(spark, source.path, source)
    if isinstance(source, FilesSource):
        return read_files(spark, source)
    if isinstance(source, ParquetSource):
        return (
            spark.readStream.format("parquet")
            .schema(source.schema_ddl)
            .option("maxFilesPerTrigger", str(source.max_files_per_trigger))
            .load(source.path)
        )
    raise PipelineError(f"no reader for source kind {getattr(source, 'kind', type(source).__name__)!r}")


def read_files(spark: Any, source: FilesSource, paths: list[str] | None = None) -> Any:
    """The files source as a stream of its landing folder or, with ``paths``, as a batch of those
    files (a backfill's): the same columns either way - the declared ones, ``_raw_record`` for json
    and csv, ``_source_file``."""
    from pyspark.sql import functions as F

    text = source.format in ("json", "csv")
    reader = spark.read if paths is not None else spark.readStream
    reader = (
        reader.format(source.format)
        .schema(source.schema_ddl + (f", {RAW_RECORD} STRING" if text else ""))
        .options(**source.options)
    )
    if text:
        reader = reader.option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", RAW_RECORD)
    if paths is not None:
        frame = reader.load(paths)
    else:
        reader = reader.option("maxFilesPerTrigger", str(source.max_files_per_trigger))
        reader = reader.option("recursiveFileLookup", "true")
        if source.archive_dir:
            reader = reader.option("cleanSource", "archive").option("sourceArchiveDir", source.archive_dir)
        frame = reader.load(source.path)
    return frame.withColumn(SOURCE_FILE, F.col("_metadata.file_path"))


def pipeline_frames(spark: Any, config: PipelineConfig, binding: Binding) -> dict[str, Any]:
    """Read every source on ``spark``, call the function, and return its frames by sink name."""
    real_time = config.trigger.real_time is not None
    frames = {name: read_source(spark, source, real_time) for name, source in config.sources.items()}
    result = binding.call(frames, config.params, spark)
    return sink_frames(result, binding.reference, list(config.sinks))


def start_pipeline(spark: Any, config: PipelineConfig, status: JobStatus, binding: Binding) -> Any:
    """Start the pipeline's queries and return the job's query (a :class:`QueryGroup` for several sinks)."""
    if binding.takes_context:
        return start_own_queries(spark, config, binding)
    names = list(config.sinks)
    use_state_store(spark, config.spark_conf)
    progress = PipelineProgress(status)
    first = pipeline_frames(spark, config, binding)
    progress.listen(spark, config.name)
    main = start_sink(spark, first[names[0]], config, names[0], binding.reference, status)
    helpers: list[Any] = []
    try:
        for name in names[1:]:
            session = helper_session(spark)
            frame = pipeline_frames(session, config, binding)[name]
            progress.listen(session, f"{config.name}.{name}")
            helpers.append(start_sink(session, frame, config, name, binding.reference))
    except Exception:
        for query in [main, *helpers]:
            query.stop()
        raise
    if not helpers:
        return main
    return QueryGroup(main, helpers, config.runtime.seconds("stop_timeout"))


def start_sink(
    spark: Any, frame: Any, config: PipelineConfig, name: str, reference: str, status: JobStatus | None = None
) -> Any:
    """Start the query writing ``frame`` (of the pipeline ``reference``) to the sink ``name``; return it.

    ``status`` is the job's (for its query only): a sink with a quarantine records each batch's rows
    read, written and quarantined in it.
    """
    sink = config.sinks[name]
    query_name = config.name if name == next(iter(config.sinks)) else f"{config.name}.{name}"
    checkpoint = config.sink_checkpoint(name)
    trigger = config.trigger.spark_kwargs()
    if isinstance(sink, EventHubsSink | EventHubsKafkaSink):
        return _start_eventhubs_sink(spark, frame, sink, name, reference, query_name, checkpoint, trigger)
    for key, path in (("output_path", sink.output_path), ("quarantine_path", sink.quarantine_path)):
        if path:
            check_table_format(spark, path, sink.kind, config.key_as_written("sinks", name, key))
    check_columns(frame, sink, name, reference)
    if not marks_quarantine(frame, config, name, reference):
        return start_table_stream(
            output_rows(frame, sink),
            query_name=query_name,
            path=sink.output_path,
            file_format=sink.kind,
            checkpoint=checkpoint,
            partition_by=sink.partition_by,
            trigger=trigger,
        )
    writer = QuarantineSplit(spark, sink, status)
    return (
        frame.writeStream.queryName(query_name)
        .foreachBatch(writer.write)
        .option("checkpointLocation", checkpoint)
        .trigger(**trigger)
        .start()
    )


def output_rows(frame: Any, sink: LakeSink) -> Any:
    """What the sink's output table keeps of ``frame``: the rows not marked for the quarantine,
    without ``_quarantine_reason``, with ``sink.columns`` when it is set."""
    if QUARANTINE_REASON in frame.columns:
        from pyspark.sql import functions as F

        frame = frame.where(F.col(QUARANTINE_REASON).isNull()).drop(QUARANTINE_REASON)
    return frame.select(*sink.columns) if sink.columns else frame


def quarantine_rows(frame: Any, sink: LakeSink, batch_id: int | None = None) -> Any:
    """What the sink's quarantine table keeps of ``frame``: the marked rows, with
    ``sink.quarantine_columns`` when it is set (else every column). A ``batch_id`` they name and the
    frame lacks is the micro-batch's ``batch_id`` (null in a backfill's batch)."""
    from pyspark.sql import functions as F

    bad = frame.where(F.col(QUARANTINE_REASON).isNotNull())
    if not sink.quarantine_columns:
        return bad
    if BATCH_ID in sink.quarantine_columns and BATCH_ID not in bad.columns:
        bad = bad.withColumn(BATCH_ID, F.lit(batch_id).cast("long"))
    return bad.select(*sink.quarantine_columns)


def check_columns(frame: Any, sink: LakeSink, name: str, reference: str) -> None:
    """PipelineError when ``columns`` or ``quarantine_columns`` name a column the frame lacks."""
    output = [column for column in frame.columns if column != QUARANTINE_REASON]
    for key, listed, available in (
        ("columns", sink.columns, output),
        ("quarantine_columns", sink.quarantine_columns, [*frame.columns, BATCH_ID]),
    ):
        missing = [column for column in listed or [] if column not in available]
        if missing:
            raise PipelineError(
                f"pipeline {reference!r}: sinks.{name}.{key} names {', '.join(missing)}, which the frame the "
                f"function returns for it lacks; its columns: {', '.join(available)}"
            )


def _start_eventhubs_sink(
    spark: Any,
    frame: Any,
    sink: EventHubsSink | EventHubsKafkaSink,
    name: str,
    reference: str,
    query_name: str,
    checkpoint: str,
    trigger: dict[str, Any],
) -> Any:
    """Publish each row of ``frame`` as one event (at least once: a batch cut off while sending is sent
    again on restart), through the connector (``eventhubs``: it checks the columns, ``body``, ...,
    when the query starts) or Spark's Kafka sink (``eventhubs_kafka``: the same columns, checked and
    mapped to Kafka's by :func:`~hubflow_jobs.eventhubs_kafka_sink.kafka_rows` before it starts)."""
    from pyspark_eventhubs import DefaultSource, protect_secrets, register_data_source

    if QUARANTINE_REASON in frame.columns:
        raise PipelineError(
            f"pipeline {reference!r}: sink {name!r} (kind {sink.kind}) has no quarantine, but its frame has "
            f"a {QUARANTINE_REASON} column; filter the bad rows out, or send them to a lake sink"
        )
    protect_secrets(spark)
    if isinstance(sink, EventHubsKafkaSink):
        from hubflow_jobs.eventhubs_kafka_sink import kafka_rows

        try:
            rows = kafka_rows(frame)
        except ValueError as exc:
            raise PipelineError(f"pipeline {reference!r}: sink {name!r} (kind {sink.kind}): {exc}") from None
        writer = rows.writeStream.format("kafka")
    else:
        register_data_source(spark, DefaultSource)
        writer = frame.writeStream.format("eventhubs")
    if "realTime" in trigger:
        writer = writer.outputMode("update")  # the only output mode of Spark's real-time mode
    return (
        writer.queryName(query_name)
        .options(**sink.spark_options())
        .option("checkpointLocation", checkpoint)
        .trigger(**trigger)
        .start()
    )


def marks_quarantine(frame: Any, config: PipelineConfig, name: str, reference: str) -> bool:
    """Whether the frame for sink ``name`` marks rows for the quarantine (a ``_quarantine_reason``
    column); PipelineError when it does and the sink has no ``quarantine_path``."""
    if QUARANTINE_REASON not in frame.columns:
        return False
    if not getattr(config.sinks[name], "quarantine_path", None):
        raise PipelineError(
            f"pipeline {reference!r}: sink {name!r} gets a {QUARANTINE_REASON} column but has no "
            f"quarantine_path; add sinks.{name}.quarantine_path or drop the column"
        )
    return True


class PipelineContext:
    """What a pipeline function that starts its own queries gets as ``context`` (the escape hatch).

    It reads the config's sources (:meth:`read`), starts hubflow's writer of a declared sink
    (:meth:`write`) or its own ``writeStream`` with the sink's :meth:`checkpoint` and the config's
    :attr:`trigger`, and returns the query, or a list of queries whose first is the job's: the
    runtime supervises them like any job's (lease, watchdog, stop markers, exit code). status.json
    follows the queries of :attr:`spark`; run further queries on :meth:`helper_session` so that it
    follows the first one only. Runs on the driver.
    """

    def __init__(self, spark: Any, config: PipelineConfig, reference: str) -> None:
        self.spark = spark
        self.config = config
        self.reference = reference

    @property
    def trigger(self) -> dict[str, Any]:
        """The config's trigger as ``writeStream.trigger(**context.trigger)`` takes it."""
        return self.config.trigger.spark_kwargs()

    def read(self, source: str, session: Any = None) -> Any:
        """The declared source ``source`` as a streaming DataFrame (on ``session``, else :attr:`spark`)."""
        if source not in self.config.sources:
            raise PipelineError(
                f"pipeline {self.reference!r}: context.read({source!r}): no such source; the config's "
                f"sources: {', '.join(self.config.sources)}"
            )
        return read_source(session or self.spark, self.config.sources[source])

    def checkpoint(self, sink: str) -> str:
        """The checkpoint of the query writing the declared sink ``sink`` (docs/pipelines.md)."""
        self._declared(sink)
        return self.config.sink_checkpoint(sink)

    def write(self, frame: Any, sink: str) -> Any:
        """Start hubflow's exactly-once writer of ``frame`` to the declared sink ``sink``; the query."""
        self._declared(sink)
        return start_sink(frame.sparkSession, frame, self.config, sink, self.reference)

    def helper_session(self) -> Any:
        """A session for a further query: same conf and data sources, listeners of its own."""
        return helper_session(self.spark)

    def _declared(self, sink: str) -> None:
        if sink not in self.config.sinks:
            declared = ", ".join(self.config.sinks)
            problem = f"no sink {sink!r}; the config's sinks: {declared}"
            raise PipelineError(f"pipeline {self.reference!r}: {problem}")


def start_own_queries(spark: Any, config: PipelineConfig, binding: Binding) -> Any:
    """Call a function that takes ``context``; return the query it started (a group for several)."""
    result = binding.call({}, config.params, spark, context=PipelineContext(spark, config, binding.reference))
    queries = list(result) if isinstance(result, list | tuple) else [result]
    if not queries or not all(_is_query(query) for query in queries):
        for query in queries:
            if _is_query(query) and query.isActive:
                query.stop()
        raise PipelineError(
            f"pipeline {binding.reference!r}: a function that takes 'context' returns the streaming query it "
            f"started, or a list of them (the job's first); it returned {type(result).__name__}"
        )
    main, *helpers = queries
    return main if not helpers else QueryGroup(main, helpers, config.runtime.seconds("stop_timeout"))


def _is_query(value: Any) -> bool:
    """Whether ``value`` looks like a StreamingQuery (what the runner supervises)."""
    return all(hasattr(value, name) for name in ("awaitTermination", "isActive", "stop", "exception"))


class QuarantineSplit:
    """foreachBatch writer of a sink with a quarantine: good rows and quarantined rows, one batch each.

    Before anything of a batch is written, its rows read must equal rows written plus rows
    quarantined (else the batch fails and nothing of it is committed). With the job's ``status`` it
    records each batch's counts there (``last_batch_counts``, and ``counts`` since the run
    started), as the status page shows them.
    """

    def __init__(self, spark: Any, sink: LakeSink, status: JobStatus | None = None) -> None:
        self.sink = sink
        self.status = status
        self.totals = {"read": 0, "written": 0, "quarantined": 0}
        self.output = TableBatchWriter(spark, sink.output_path, sink.kind, sink.partition_by)
        self.quarantine = TableBatchWriter(spark, sink.quarantine_path or "", sink.kind, sink.partition_by)

    def write(self, batch: Any, batch_id: int) -> None:
        """Write the batch's good rows to the output and the others to the quarantine (runs on the driver)."""
        batch = batch.persist()
        try:
            good, bad = output_rows(batch, self.sink), quarantine_rows(batch, self.sink, batch_id)
            counts = {"read": batch.count(), "written": good.count(), "quarantined": bad.count()}
            if counts["read"] != counts["written"] + counts["quarantined"]:
                raise RuntimeError(
                    f"batch {batch_id}: counts do not reconcile: read {counts['read']} != written "
                    f"{counts['written']} + quarantined {counts['quarantined']}; nothing of it was written"
                )
            self.quarantine.add_batch(batch_id, bad)
            self.output.add_batch(batch_id, good)
        finally:
            batch.unpersist()
        if self.status is not None:
            self._record(batch_id, counts)

    def _record(self, batch_id: int, counts: dict[str, int]) -> None:
        for key, value in counts.items():
            self.totals[key] += value
        try:
            self.status.update(last_batch_counts={"batch_id": batch_id, **counts}, counts=dict(self.totals))
        except Exception as exc:  # the batch is committed; a status hiccup must not fail it
            log.warning("batch %s: could not record counts in status.json: %s", batch_id, exc)
