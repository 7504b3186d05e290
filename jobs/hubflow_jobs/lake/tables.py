"""The tables a job writes in the lake: Delta (the default) or parquet, and how each is written.

``sink.format`` of a lake-writing job says which. Both are exactly once per micro-batch:

* **delta** - every micro-batch is one Delta commit carrying an application transaction
  (``txn``: appId = the streaming query's id, version = the batch id). A batch replayed after a
  crash (Spark re-runs the last planned batch when its commit file is missing) finds its
  transaction already in the table and is skipped. A query's own output uses delta-spark's
  ``DeltaSink`` (``writeStream.format("delta")``); a ``foreachBatch`` writer that feeds two tables
  (lake rows and quarantine) gives each write the same transaction through the ``txnAppId`` /
  ``txnVersion`` writer options (:class:`TableBatchWriter`). Readers that are not Spark (delta-rs,
  DuckDB, Fabric, Synapse) see committed rows only.
* **parquet** - Spark's file sink and its ``_spark_metadata`` log (only Spark honours that log).

A backfill replaces an interval of a Delta table in one transaction (:func:`replace_rows`,
``replaceWhere``); conflicting commits (another backfill, a compaction, or a stream commit that
the replacement should have seen) are retried. Runs on the driver.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field, model_validator

from hubflow.config import KeyedValueError, StrictModel
from hubflow_jobs.lake.file_sink import ExactlyOnceFileSink

log = logging.getLogger(__name__)

LakeFormat = Literal["delta", "parquet"]
#: The date column lake tables written on arrival are partitioned by: the UTC date a row was ingested.
INGEST_DATE_COLUMN = "ingest_date"
#: What ``sink.format`` is when a config leaves it out.
DEFAULT_FORMAT: LakeFormat = "delta"
#: The local property Spark sets to the streaming query's id on the thread running a micro-batch.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
#: A Delta transaction that keeps losing to concurrent commits gives up after this many attempts.
COMMIT_ATTEMPTS = 8


class LakeOutputConfig(StrictModel):
    """The part of ``sink:`` every lake-writing job has: where its table is, in which format."""

    output_path: str = Field(min_length=1)
    format: LakeFormat = DEFAULT_FORMAT

    def delta_tables(self) -> list[str]:
        """The Delta tables this sink writes (none for parquet)."""
        return [self.output_path] if self.format == "delta" else []


def check_quarantine_path(output_path: str, quarantine_path: str) -> None:
    """Refuse a quarantine table that is the output table or lies inside or around it.

    The one rule every sink with a quarantine follows. Nested tables are refused because one
    table's maintenance would take the other's files for its own untracked ones (Delta's VACUUM
    deletes them) and a reader of the outer folder would read both; a folder whose name starts with
    ``_`` or ``.`` is hidden from both, so a quarantine in ``<output>/_quarantine`` is fine.
    Raises :class:`KeyedValueError` keyed ``quarantine_path``.
    """
    output, quarantine = output_path.rstrip("/"), quarantine_path.rstrip("/")
    if output == quarantine:
        raise KeyedValueError("quarantine_path", "must differ from output_path")
    for outer, inner, where in ((output, quarantine, "inside"), (quarantine, output, "around")):
        if inner.startswith(outer + "/") and not inner[len(outer) + 1 :].startswith(("_", ".")):
            raise KeyedValueError(
                "quarantine_path",
                f"lies {where} output_path {output_path}: one table's VACUUM would delete the other's "
                "files; put them side by side, or the quarantine in a folder of the output whose name "
                "starts with _ (e.g. _quarantine)",
            )


class QuarantinedOutputConfig(LakeOutputConfig):
    """A lake output with a quarantine table beside it, both in ``format``."""

    quarantine_path: str = Field(min_length=1)

    @model_validator(mode="after")
    def _quarantine_apart(self) -> QuarantinedOutputConfig:
        check_quarantine_path(self.output_path, self.quarantine_path)
        return self

    def delta_tables(self) -> list[str]:
        """The Delta tables this sink writes: the output and the quarantine (none for parquet)."""
        return [self.output_path, self.quarantine_path] if self.format == "delta" else []


class TableFormatError(ValueError):
    """The folder a job is told to write holds a table of the other format."""


def check_table_format(spark: Any, path: str, file_format: LakeFormat, key: str) -> None:
    """Refuse to write ``file_format`` into a folder that holds a table of the other format.

    A Delta table keeps ``_delta_log``, Spark's parquet file sink ``_spark_metadata``; writing one
    into the other's folder would leave a table neither reader understands. Checked through
    Hadoop's file system (any scheme Spark can write) before the query starts; ``key`` is the
    config key that named the path.
    """
    jvm = spark.sparkContext._jvm
    table = jvm.org.apache.hadoop.fs.Path(path)
    fs = table.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    marker, other, hint = (
        ("_spark_metadata", "a parquet table written by Spark's file sink", "parquet")
        if file_format == "delta"
        else ("_delta_log", "a Delta table", "delta")
    )
    if fs.exists(jvm.org.apache.hadoop.fs.Path(table, marker)):
        raise TableFormatError(
            f"{key}: {path} holds {other} ({marker}/), not a {file_format} table; set the sink's "
            f"format: {hint} to keep writing it, or choose a new folder (see docs/delta.md)"
        )


def start_table_stream(
    frame: Any,
    *,
    query_name: str,
    path: str,
    file_format: LakeFormat,
    checkpoint: str,
    partition_by: Sequence[str],
    trigger: dict[str, Any],
    output_mode: str = "append",
) -> Any:
    """Start ``frame`` as a streaming query writing the lake table at ``path``; return the query.

    Delta goes through delta-spark's ``DeltaSink`` (one commit per batch with the query's
    transaction), parquet through Spark's file sink.
    """
    return (
        frame.writeStream.queryName(query_name)
        .outputMode(output_mode)
        .format(file_format)
        .option("path", path)
        .option("checkpointLocation", checkpoint)
        .partitionBy(*partition_by)
        .trigger(**trigger)
        .start()
    )


def streaming_query_id(frame: Any) -> str:
    """The id of the streaming query running the micro-batch ``frame`` belongs to.

    Called inside ``foreachBatch``: Spark sets the id as a local property of the thread running the
    batch. It is the id kept in the checkpoint's ``metadata`` file, the same across restarts.
    """
    query_id = frame.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
    if not query_id:
        raise RuntimeError(
            "no streaming query id on this thread: TableBatchWriter.add_batch must be called from "
            "foreachBatch, where Spark sets it"
        )
    return str(query_id)


class TableBatchWriter:
    """Writes micro-batches handed to ``foreachBatch`` to one lake table, each batch exactly once.

    Delta: an append whose commit carries the transaction (query id, batch id); a batch id the
    table already holds for the query is skipped by Delta itself. Parquet: Spark's file sink
    (:class:`~hubflow_jobs.lake.file_sink.ExactlyOnceFileSink`). A batch with no rows still commits its
    transaction in Delta, so the table's record of the query keeps step with Spark's commits.
    """

    def __init__(self, spark: Any, path: str, file_format: LakeFormat, partition_by: Sequence[str] = ()):
        self.path = path
        self.file_format = file_format
        self.partition_by = list(partition_by)
        self._file_sink = (
            ExactlyOnceFileSink(spark, path, self.partition_by) if file_format == "parquet" else None
        )

    def add_batch(self, batch_id: int, frame: Any) -> None:
        """Write ``frame`` as batch ``batch_id`` of the query running it (from ``foreachBatch``)."""
        if self._file_sink is not None:
            self._file_sink.add_batch(batch_id, frame)
            return
        (
            frame.write.format("delta")
            .mode("append")
            .option("txnAppId", streaming_query_id(frame))
            .option("txnVersion", str(batch_id))
            .partitionBy(*self.partition_by)
            .save(self.path)
        )


def sql_string(value: str) -> str:
    """``value`` as a Spark SQL string literal (quotes and backslashes escaped)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def is_concurrent_commit(error: BaseException) -> bool:
    """Whether ``error`` is Delta's "a concurrent commit conflicts with this one" (worth retrying).

    delta-spark's Python conflict exceptions are siblings, not subclasses of
    ``DeltaConcurrentModificationException`` (4.x: ``ConcurrentAppendException`` derives from
    ``PySparkException`` only), so each is named.
    """
    from delta import exceptions

    conflicts = (
        exceptions.DeltaConcurrentModificationException,
        exceptions.ConcurrentWriteException,
        exceptions.MetadataChangedException,
        exceptions.ProtocolChangedException,
        exceptions.ConcurrentAppendException,
        exceptions.ConcurrentDeleteReadException,
        exceptions.ConcurrentDeleteDeleteException,
        exceptions.ConcurrentTransactionException,
    )
    return isinstance(error, conflicts)


def with_conflict_retries(action: Any, what: str, path: str) -> int:
    """Run ``action()`` (one Delta transaction on ``path``) until it commits; return the attempts.

    Delta rejects a commit that conflicts with one made since the transaction read the table, and
    nothing of the rejected commit is visible; the action then runs again on the new table state
    (tenacity, up to ``COMMIT_ATTEMPTS`` times, with growing pauses and jitter). Other errors are
    raised at once.
    """
    from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential_jitter

    attempts = 0

    def log_retry(state: Any) -> None:
        error = state.outcome.exception()
        log.warning(
            "%s: a concurrent commit to %s conflicts with this one (%s); attempt %d of %d next",
            what,
            path,
            type(error).__name__,
            state.attempt_number + 1,
            COMMIT_ATTEMPTS,
        )

    @retry(
        retry=retry_if_exception(is_concurrent_commit),
        stop=stop_after_attempt(COMMIT_ATTEMPTS),
        wait=wait_exponential_jitter(initial=1, max=30),
        before_sleep=log_retry,
        reraise=True,
    )
    def attempt() -> None:
        nonlocal attempts
        attempts += 1
        action()

    attempt()
    return attempts


def replace_rows(frame: Any, path: str, predicate: str, partition_by: Sequence[str], what: str) -> int:
    """Replace the rows of the Delta table ``path`` matching ``predicate`` with ``frame``; one commit.

    ``replaceWhere`` removes every row matching the predicate and adds ``frame``'s rows in the same
    transaction (Delta checks that each new row matches it too), so readers see the old interval
    or the new one, never both or neither. An empty ``frame`` removes the interval's rows.

    A commit that conflicts with one made since this write read the table - a stream's append
    into what the predicate covers, a compaction that rewrote files it read, another backfill - is
    retried (:func:`with_conflict_retries`); ``frame`` should be persisted by the caller, since each
    attempt writes it again. Returns the attempts made.
    """

    def write() -> None:
        (
            frame.write.format("delta")
            .mode("overwrite")
            .option("replaceWhere", predicate)
            .partitionBy(*partition_by)
            .save(path)
        )

    return with_conflict_retries(write, what, path)


def delta_table_exists(spark: Any, path: str) -> bool:
    """Whether ``path`` holds a Delta table (a ``_delta_log`` with at least one commit)."""
    from delta.tables import DeltaTable

    return bool(DeltaTable.isDeltaTable(spark, path))
