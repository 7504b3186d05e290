"""Delta table maintenance: compaction, VACUUM past the retention, a log checkpoint when it is due.

Run by the cleanup DAG through spark-submit (``jobs/lake_maintenance.py``), once per job, over the
Delta tables the job writes. For each table, in this order:

1. **compaction** - ``OPTIMIZE`` bin-packs the small files of each partition (files under Delta's
   ``spark.databricks.delta.optimize.minFileSize``, in partitions holding two or more of them)
   into larger ones. Its commit has ``dataChange=false``: streaming readers of the table skip it,
   so no row is read twice, and it does not conflict with the stream's appends.
2. **VACUUM** - deletes files no version within the retention needs any more (files replaced by
   compaction, backfills, failed write attempts). Delta refuses a retention shorter than the
   table's ``delta.deletedFileRetentionDuration`` (7 days by default); keep it longer than the
   slowest streaming reader of the table may lag, or that reader fails on a vacuumed file.
3. **log checkpoint** - when more than ``checkpoint_after_commits`` commits follow the last Delta
   checkpoint (Delta writes one every ``delta.checkpointInterval`` commits, 10 by default, but a
   failed or disabled one leaves readers replaying a long JSON log), one is written now.

With ``dry_run`` nothing changes: each step says what it would do. Sizes are logged before and
after: the live table (version, files and bytes the current version references) and what is
stored under the folder (every file, including the log and files only older versions need).
Every step runs on the driver, through delta-spark; the log checkpoint and the file list use
delta-spark's ``DeltaLog`` through Py4J (no Python API offers them) and fail with that reason if a
Delta upgrade moves them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from hubflow_jobs.lake.tables import delta_table_exists, with_conflict_retries

log = logging.getLogger(__name__)

#: Delta's default ``spark.databricks.delta.optimize.minFileSize``: smaller files are compacted.
DEFAULT_MIN_FILE_SIZE = 1024**3
#: The number of tasks delta-spark's VACUUM lists the table folder in (``DeltaFileOperations
#: .recursiveListDirs`` repartitions the listing to it). Spark's default is 10,000 tasks whatever
#: the table's size; their fixed cost took minutes on a 2-core machine for a table of a dozen files.
LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
#: Listing tasks per core of the session when the job's Spark conf does not set ``LISTING_PARALLELISM``.
LISTING_TASKS_PER_CORE = 4
_COMMIT_FILE = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT_FILE = re.compile(r"^(\d{20})\.checkpoint(\.\d+\.\d+|\.[^.]+)?\.parquet$")


@dataclass
class TableSizes:
    """What a Delta table holds and stores, for the before/after lines of the log."""

    version: int
    live_files: int
    live_bytes: int
    stored_files: int
    stored_bytes: int
    commits_since_checkpoint: int

    def describe(self) -> str:
        return (
            f"version {self.version}, {self.live_files} live files ({_size(self.live_bytes)}), "
            f"{self.stored_files} files stored ({_size(self.stored_bytes)}), "
            f"{self.commits_since_checkpoint} commits since the last log checkpoint"
        )


def _size(count: int) -> str:
    value = float(count)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


def _hadoop(spark: Any, path: str) -> tuple[Any, Any]:
    """(Hadoop file system, Hadoop path) of ``path``."""
    jvm = spark.sparkContext._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    return hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), hadoop_path


def _delta_log(spark: Any, path: str) -> tuple[Any, Any]:
    """(DeltaLog, its current Snapshot) of the table at ``path``, through Py4J."""
    try:
        pair = spark.sparkContext._jvm.org.apache.spark.sql.delta.DeltaLog.forTableWithSnapshot(
            spark._jsparkSession, path
        )
        return pair._1(), pair._2()
    except Exception as exc:
        raise RuntimeError(
            "delta-spark's DeltaLog.forTableWithSnapshot, which lake maintenance uses to list a "
            f"table's files and write its log checkpoint, failed or is missing: {exc}"
        ) from exc


def commits_since_checkpoint(spark: Any, path: str) -> int:
    """How many commits (``_delta_log/<version>.json``) follow the newest log checkpoint."""
    fs, table = _hadoop(spark, path)
    log_dir = spark.sparkContext._jvm.org.apache.hadoop.fs.Path(table, "_delta_log")
    commits, checkpoints = [], [-1]
    for status in fs.listStatus(log_dir):
        name = status.getPath().getName()
        if match := _COMMIT_FILE.match(name):
            commits.append(int(match.group(1)))
        elif match := _CHECKPOINT_FILE.match(name):
            checkpoints.append(int(match.group(1)))
    newest = max(checkpoints)
    return sum(1 for version in commits if version > newest)


def table_sizes(spark: Any, path: str) -> TableSizes:
    """The table's current version, live files and bytes, stored files and bytes, log length."""
    _, snapshot = _delta_log(spark, path)
    fs, table = _hadoop(spark, path)
    summary = fs.getContentSummary(table)
    return TableSizes(
        version=int(snapshot.version()),
        live_files=int(snapshot.numOfFiles()),
        live_bytes=int(snapshot.sizeInBytes()),
        stored_files=int(summary.getFileCount()),
        stored_bytes=int(summary.getLength()),
        commits_since_checkpoint=commits_since_checkpoint(spark, path),
    )


def compaction_candidates(spark: Any, path: str) -> dict[str, int]:
    """What OPTIMIZE would bin-pack: small files in partitions that hold two or more of them."""
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    min_size = int(spark.conf.get("spark.databricks.delta.optimize.minFileSize", str(DEFAULT_MIN_FILE_SIZE)))
    _, snapshot = _delta_log(spark, path)
    files = DataFrame(snapshot.allFiles().toDF(), spark)
    small = (
        files.where(F.col("size") < min_size)
        .groupBy(F.to_json("partitionValues").alias("partition"))
        .agg(F.count(F.lit(1)).alias("files"), F.sum("size").alias("bytes"))
        .where(F.col("files") > 1)
        .agg(
            F.count(F.lit(1)).alias("partitions"),
            F.coalesce(F.sum("files"), F.lit(0)).alias("files"),
            F.coalesce(F.sum("bytes"), F.lit(0)).alias("bytes"),
        )
        .collect()[0]
    )
    return {
        "partitions": int(small["partitions"]),
        "files": int(small["files"]),
        "bytes": int(small["bytes"]),
    }


def compact(spark: Any, path: str, *, dry_run: bool) -> dict[str, Any]:
    """OPTIMIZE the table (bin-packing); with ``dry_run`` only count what it would compact."""
    from delta.tables import DeltaTable

    candidates = compaction_candidates(spark, path)
    if dry_run or not candidates["files"]:
        verb = "would compact" if dry_run else "nothing to compact:"
        log.info(
            "%s: %s %d small files (%s) in %d partitions",
            path,
            verb,
            candidates["files"],
            _size(candidates["bytes"]),
            candidates["partitions"],
        )
        return {"candidates": candidates, "done": False}
    result: dict[str, Any] = {}

    def optimize() -> None:
        metrics = DeltaTable.forPath(spark, path).optimize().executeCompaction().collect()[0]["metrics"]
        result.update(
            files_removed=int(metrics["numFilesRemoved"]), files_added=int(metrics["numFilesAdded"])
        )

    attempts = with_conflict_retries(optimize, "compaction", path)
    log.info(
        "%s: compacted %d files into %d (commit with dataChange=false; %d attempt(s))",
        path,
        result["files_removed"],
        result["files_added"],
        attempts,
    )
    return {"candidates": candidates, "done": True, **result}


@contextmanager
def _listing_parallelism(spark: Any) -> Iterator[None]:
    """Run the block with ``LISTING_PARALLELISM`` at ``LISTING_TASKS_PER_CORE`` tasks per core of the
    session, unless the session's conf sets it (then it is left as set)."""
    if spark.conf.get(LISTING_PARALLELISM, None) is not None:
        yield
        return
    spark.conf.set(LISTING_PARALLELISM, str(LISTING_TASKS_PER_CORE * spark.sparkContext.defaultParallelism))
    try:
        yield
    finally:
        spark.conf.unset(LISTING_PARALLELISM)


def vacuum(spark: Any, path: str, *, retention_hours: float, dry_run: bool) -> dict[str, Any]:
    """VACUUM files no version within ``retention_hours`` needs; with ``dry_run`` list them only.

    The table folder is listed in ``LISTING_PARALLELISM`` tasks (see :func:`_listing_parallelism`).
    """
    with _listing_parallelism(spark):
        return _vacuum(spark, path, retention_hours=retention_hours, dry_run=dry_run)


def _vacuum(spark: Any, path: str, *, retention_hours: float, dry_run: bool) -> dict[str, Any]:
    from delta.tables import DeltaTable

    quoted = "`" + path.replace("`", "``") + "`"
    hours = f"{retention_hours:g}"
    if dry_run:
        listed = [
            row[0] for row in spark.sql(f"VACUUM delta.{quoted} RETAIN {hours} HOURS DRY RUN").collect()
        ]
        jvm = spark.sparkContext._jvm
        fs, _ = _hadoop(spark, path)
        total = sum(int(fs.getFileStatus(jvm.org.apache.hadoop.fs.Path(file)).getLen()) for file in listed)
        log.info(
            "%s: VACUUM would delete %d files (%s) older than the %s-hour retention",
            path,
            len(listed),
            _size(total),
            hours,
        )
        return {"files": len(listed), "bytes": total, "done": False}
    DeltaTable.forPath(spark, path).vacuum(float(retention_hours))
    log.info("%s: VACUUM deleted the files older than the %s-hour retention", path, hours)
    return {"done": True}


def checkpoint_log(spark: Any, path: str, *, after_commits: int, dry_run: bool) -> dict[str, Any]:
    """Write a Delta log checkpoint when more than ``after_commits`` commits follow the last one."""
    waiting = commits_since_checkpoint(spark, path)
    if waiting <= after_commits:
        log.info(
            "%s: %d commits since the last log checkpoint (limit %d): none needed",
            path,
            waiting,
            after_commits,
        )
        return {"commits_since_checkpoint": waiting, "done": False}
    if dry_run:
        log.info("%s: would write a log checkpoint (%d commits since the last one)", path, waiting)
        return {"commits_since_checkpoint": waiting, "done": False}
    delta_log, snapshot = _delta_log(spark, path)
    delta_log.checkpoint()
    log.info(
        "%s: wrote a log checkpoint at version %d (%d commits since the last one)",
        path,
        snapshot.version(),
        waiting,
    )
    return {"commits_since_checkpoint": waiting, "done": True, "version": int(snapshot.version())}


def maintain_table(
    spark: Any, path: str, *, retention_hours: float, checkpoint_after_commits: int, dry_run: bool
) -> dict[str, Any]:
    """Compaction, VACUUM and log checkpoint of one table, with sizes before and after."""
    if not delta_table_exists(spark, path):
        log.info("%s: no Delta table yet (the job has not written it): nothing to maintain", path)
        return {"table": path, "exists": False}
    before = table_sizes(spark, path)
    log.info("%s: before%s: %s", path, " (dry run)" if dry_run else "", before.describe())
    report: dict[str, Any] = {"table": path, "exists": True, "dry_run": dry_run, "before": asdict(before)}
    report["compaction"] = compact(spark, path, dry_run=dry_run)
    report["vacuum"] = vacuum(spark, path, retention_hours=retention_hours, dry_run=dry_run)
    report["checkpoint"] = checkpoint_log(
        spark, path, after_commits=checkpoint_after_commits, dry_run=dry_run
    )
    after = table_sizes(spark, path)
    report["after"] = asdict(after)
    log.info("%s: after%s: %s", path, " (dry run: unchanged)" if dry_run else "", after.describe())
    return report
