"""A landing area of files: where its archive keeps them, and the files of one data interval in it.

Runs on the driver (and in Airflow tasks, for :func:`archive_root`). Files land under a landing
folder and are moved, once processed, to the archive (by Spark's ``cleanSource=archive`` or by the
archive task) at the path :func:`archive_root` gives, whoever moves them. A backfill reads one data
interval's folders (``interval_folder``, :mod:`hubflow_jobs.interval_folders`) wherever the files
are now (:func:`interval_files`), and lists them again when one moves while it reads
(:func:`retry_when_files_move`). Used by the backfill of pipelines with a ``kind: files`` source
(the built-in ``files_to_lake`` is one).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Spark's words for a file that was listed but is gone when read (moved to the archive meanwhile).
MOVED_FILE_ERRORS = ("PATH_NOT_FOUND", "FILE_NOT_EXIST", "FileNotFoundException")
#: How many times an interval is listed and read when files keep moving under it.
MOVED_FILE_ATTEMPTS = 3


def interval_files(landing: str, archive: str | None, folders: list[str]) -> tuple[list[str], dict[str, int]]:
    """The files of an interval's ``folders``: landing copies first, then archived ones not also in
    landing (an interrupted move leaves a file in both; it is read once).

    Returns the paths (as Spark reads them) and how many came from where (``landing``, ``archive``,
    ``in_both``).
    """
    found: dict[str, str] = {}
    counts = {"landing": 0, "archive": 0, "in_both": 0}
    roots = [("landing", landing)] + ([("archive", archive)] if archive else [])
    for where, root in roots:
        for folder in folders:
            for relative, path in _files_under(f"{root.rstrip('/')}/{folder}").items():
                key = f"{folder}/{relative}"
                if key in found:
                    counts["in_both"] += 1
                    continue
                found[key] = path
                counts[where] += 1
    return [found[key] for key in sorted(found)], counts


def files_read(paths: list[str], where: dict[str, int]) -> str:
    """How many of an interval's files were read, and from where (for log lines)."""
    return (
        f"{len(paths)} files ({where['landing']} from landing, {where['archive']} from the archive, "
        f"{where['in_both']} in both read once)"
    )


def _files_under(folder: str) -> dict[str, str]:
    """Data files under ``folder`` by relative path, skipping names Spark skips (``_*``, ``.*``)."""
    from hubflow.storage.azure import url_to_fs

    fs, root = url_to_fs(folder)
    if not fs.isdir(root):
        return {}
    root = root.rstrip("/")
    files: dict[str, str] = {}
    for path in fs.find(root):
        relative = path[len(root) :].lstrip("/")
        if any(part.startswith(("_", ".")) for part in relative.split("/")):
            continue
        files[relative] = folder.rstrip("/") + "/" + relative
    return files


def retry_when_files_move(work: Callable[..., T], subject: str) -> Callable[..., T]:
    """``work`` run again (up to :data:`MOVED_FILE_ATTEMPTS` times) when Spark finds a listed file gone.

    A streaming run of the same job may archive a file between a backfill's listing and its read
    (Airflow runs backfill and scheduled runs side by side); listing the interval again finds it in
    the archive. ``work`` must write nothing before its read succeeded.
    """
    from tenacity import retry, retry_if_exception, stop_after_attempt, wait_fixed

    def log_retry(state: Any) -> None:
        log.warning(
            "%s: a file moved while it was read (%s); listing the interval again",
            subject,
            str(state.outcome.exception()).splitlines()[0][:300],
        )

    return retry(
        retry=retry_if_exception(lambda exc: any(word in str(exc) for word in MOVED_FILE_ERRORS)),
        stop=stop_after_attempt(MOVED_FILE_ATTEMPTS),
        wait=wait_fixed(1),
        before_sleep=log_retry,
        reraise=True,
    )(work)


def qualified_uri(spark: Any, path: str) -> str:
    """``path`` as Spark writes it in ``_metadata.file_path`` and its file source log (scheme added,
    characters %-escaped).

    Hadoop 3.5 qualifies a path without authority as ``file:///tmp/x``, while the paths Spark lists
    (and records in ``_metadata.file_path``) read ``file:/tmp/x``; the empty authority is dropped
    (:func:`without_empty_authority`) so that prefixes built here match what the tables hold.
    """
    jvm = spark.sparkContext._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    fs = hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    return without_empty_authority(str(fs.makeQualified(hadoop_path).toUri().toString())).rstrip("/")


def without_empty_authority(uri: str) -> str:
    """``file:///tmp/x`` as ``file:/tmp/x``: one spelling of a file's URI, whichever Spark wrote
    (its file source log writes the first, ``_metadata.file_path`` the second)."""
    scheme, separator, rest = uri.partition(":///")
    if separator and scheme and "/" not in scheme:
        return f"{scheme}:/{rest}"
    return uri


def as_landing_path(spark: Any, column: str, landing: str, archive: str) -> tuple[Any, Any]:
    """Columns ``(path, from_archive)`` for a frame whose ``column`` names the file each row was read
    from: the path under ``landing`` (a file read from ``archive`` gets its landing path back, as the
    stream recorded it) and whether it was read from the archive."""
    from pyspark.sql import functions as F

    landing_uri = qualified_uri(spark, landing) + "/"
    archived = qualified_uri(spark, archive) + "/"
    from_archive = F.col(column).startswith(archived)
    rest = F.expr(f"substring(`{column}`, {len(archived) + 1})")
    path = F.when(from_archive, F.concat(F.lit(landing_uri), rest)).otherwise(F.col(column))
    return path, from_archive
