"""What Spark's file sink log says about a parquet table it writes. No Airflow, no Spark.

Spark's file sink (``writeStream.format("parquet")``, or hubflow's
:class:`~hubflow_jobs.lake.file_sink.ExactlyOnceFileSink` inside ``foreachBatch``) commits each
micro-batch by writing ``<table>/_spark_metadata/<batch id>``; every tenth one (by default) is a
compacted ``<batch id>.compact`` that also lists the files of the batches before it. The names
alone say which batches are committed: hidden files (Hadoop's ``.crc``, Spark's ``.<uuid>.tmp``
being written) are not commits. A parquet output's committed batch ids are to it what versions are
to a Delta table (:mod:`hubflow.lake_assets`).

Read through fsspec: a local path as it is, an ``abfss://``/``wasbs://`` URL with the access the
process has registered for its account (:func:`hubflow.storage.azure.url_to_fs`). Only the
folder is listed; no file is opened, but by :func:`committed_files`, which reads the log's entries
(``v1`` then one JSON line per file: its ``path`` and ``action``, ``add`` or ``delete``).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from hubflow.checkpoints.spark_logs import (
    COMPACT_SUFFIX,
    CheckpointFormatError,
    info_time,
    join,
    list_file_log,
    list_file_log_details,
    read_text,
)
from hubflow.storage.azure import url_to_fs

#: The folder of a table where Spark's file sink keeps its log.
FILE_SINK_LOG = "_spark_metadata"


def committed_batches(
    table: str, storage_options: dict[str, Any] | None = None
) -> dict[int, datetime | None]:
    """The batch ids the file sink committed to ``table``, each with when its log file was written
    (``N.compact`` is batch N); empty when the table has no ``_spark_metadata`` (yet)."""
    fs, root = url_to_fs(table, storage_options)
    details = list_file_log_details(fs, join(root.rstrip("/"), FILE_SINK_LOG))
    return {batch: info_time(info) for batch, info in details.items()}


def last_batch_id(table: str, storage_options: dict[str, Any] | None = None) -> int | None:
    """The last batch id the file sink committed to ``table``; None when it committed none."""
    batches = committed_batches(table, storage_options)
    return max(batches) if batches else None


def batches_between(
    table: str, since: datetime, up_to: int, storage_options: dict[str, Any] | None = None
) -> list[int]:
    """The batch ids up to ``up_to`` whose log file was written at ``since`` or later, in order."""
    return sorted(
        batch
        for batch, written in committed_batches(table, storage_options).items()
        if batch <= up_to and written is not None and written >= since
    )


def committed_files(table: str, storage_options: dict[str, Any] | None = None) -> dict[str, int]:
    """The data files of ``table`` its file sink committed and has not deleted, as the log spells
    them (``file:///...``, ``abfss://...``): what Spark reads of the table; each with the batch whose
    log file lists it (a file listed by a ``.compact`` was committed by that batch or before). Read
    as Spark does: the newest ``.compact`` and the batches after it; a file in the folder that no
    batch lists (a failed batch's leftover) is not one. Empty without a log."""
    fs, root = url_to_fs(table, storage_options)
    directory = join(root.rstrip("/"), FILE_SINK_LOG)
    names = list_file_log(fs, directory)
    compacts = [batch for batch, name in names.items() if name.endswith(COMPACT_SUFFIX)]
    files: dict[str, int] = {}
    for batch in sorted(b for b in names if b >= max(compacts, default=0)):
        path = join(directory, names[batch])
        lines = read_text(fs, path).splitlines()
        if not lines or not lines[0].startswith("v"):
            raise CheckpointFormatError(path, "is not a file sink log file (no version line)")
        for number, line in enumerate(lines[1:], start=2):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                file, action = str(entry["path"]), entry.get("action", "add")
            except (ValueError, KeyError, TypeError) as exc:
                raise CheckpointFormatError(path, f"line {number} is not a file sink entry") from exc
            if action == "delete":
                files.pop(file, None)
            else:
                files[file] = batch
    return files
