"""Write the checkpoint a long-running file-source query leaves, without running it for days.

A query that took one file per batch for 10,000 batches leaves (as Spark 4.2 writes them, with its
defaults): ``metadata``; the last 100 ``offsets/<id>`` and ``commits/<id>`` files
(``minBatchesToRetain``); and in ``sources/0/`` the file source log, compacted every 10 batches
(``fileSource.log.compactInterval``) into ``<id>.compact`` files that repeat every entry so far, plus
the deltas after the newest compact. :func:`write_file_source_checkpoint` writes exactly that
through any fsspec filesystem (local or Azure Blob), in Spark's byte format: ``v1`` version lines,
no trailing newline, JSON with Spark's key order. ``tests/support/test_file_source_checkpoint.py``
proves Spark itself resumes from one.
"""

from __future__ import annotations

import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

#: Spark's defaults that shape the checkpoint.
COMPACT_INTERVAL = 10
MIN_BATCHES_TO_RETAIN = 100
#: One batch a second, the last one now: Spark forgets the log's files older than ``maxFileAge``
#: (7 days) before the newest file it sees, so a fixed date here would make every old file new again
#: once the calendar passed it (it did: ci on 2026-11-25 re-read all of them).
BATCH_INTERVAL_MS = 1000
#: The SQL confs Spark 4.2 pins in every offsets file (read back on restart).
PINNED_CONF = {
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
    ),
    "spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion": "2",
    "spark.sql.streaming.stateStore.rocksdb.formatVersion": "5",
    "spark.sql.streaming.queryEvolution.enableSourceEvolution": "false",
    "spark.sql.streaming.stateStore.encodingFormat": "unsaferow",
    "spark.sql.streaming.statefulOperator.useStrictDistribution": "true",
    "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion": "2",
    "spark.sql.streaming.multipleWatermarkPolicy": "min",
    "spark.sql.streaming.stateStore.rowChecksum.enabled": "false",
    "spark.sql.streaming.aggregation.stateFormatVersion": "2",
    "spark.sql.function.protobufExtensions.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.streaming.join.stateFormatVersion": "2",
    "spark.sql.streaming.stateStore.compression.codec": "lz4",
    "spark.sql.optimizer.pruneFiltersCanPruneStreamingSubplan": "false",
}


def _offsets(batch_id: int, first_batch_ms: int) -> str:
    metadata = {
        "batchWatermarkMs": 0,
        "batchTimestampMs": first_batch_ms + BATCH_INTERVAL_MS * batch_id,
        "conf": PINNED_CONF,
    }
    return (
        "v1\n"
        + json.dumps(metadata, separators=(",", ":"))
        + "\n"
        + json.dumps({"logOffset": batch_id}, separators=(",", ":"))
    )


def _entry(landing_url: str, batch_id: int, index: int, first_batch_ms: int) -> str:
    return json.dumps(
        {
            "path": f"{landing_url.rstrip('/')}/batch-{batch_id:06d}-{index}.json",
            "timestamp": first_batch_ms + BATCH_INTERVAL_MS * batch_id,
            "batchId": batch_id,
        },
        separators=(",", ":"),
    )


def file_log_text(
    landing_url: str, batch_ids: range, files_per_batch: int, first_batch_ms: int | None = None
) -> str:
    """One file source log file listing ``files_per_batch`` files for each of ``batch_ids``."""
    first = _first_batch_ms(batch_ids.stop) if first_batch_ms is None else first_batch_ms
    lines = [_entry(landing_url, b, i, first) for b in batch_ids for i in range(files_per_batch)]
    return "\n".join(["v1", *lines])


def _first_batch_ms(batches: int) -> int:
    """The first batch's time when ``batches`` batches ran one a second and the last one just now."""
    return int(time.time() * 1000) - BATCH_INTERVAL_MS * max(0, batches - 1)


def checkpoint_files(batches: int, landing_url: str, files_per_batch: int = 1) -> dict[str, str]:
    """Relative path -> content of the checkpoint after ``batches`` committed batches."""
    last = batches - 1
    first_ms = _first_batch_ms(batches)
    files = {"metadata": json.dumps({"id": str(uuid.uuid4())}, separators=(",", ":"))}
    for batch_id in range(max(0, batches - MIN_BATCHES_TO_RETAIN), batches):
        files[f"offsets/{batch_id}"] = _offsets(batch_id, first_ms)
        files[f"commits/{batch_id}"] = 'v1\n{"nextBatchWatermarkMs":0}'
    compacts = [b for b in range(batches) if (b + 1) % COMPACT_INTERVAL == 0]
    newest_compact = compacts[-1] if compacts else None
    if newest_compact is not None:
        files[f"sources/0/{newest_compact}.compact"] = file_log_text(
            landing_url, range(0, newest_compact + 1), files_per_batch, first_ms
        )
    for batch_id in range(0 if newest_compact is None else newest_compact + 1, last + 1):
        files[f"sources/0/{batch_id}"] = file_log_text(
            landing_url, range(batch_id, batch_id + 1), files_per_batch, first_ms
        )
    return files


def write_file_source_checkpoint(
    fs: Any, root: str, batches: int, landing_url: str, files_per_batch: int = 1
) -> dict[str, str]:
    """Write the checkpoint of :func:`checkpoint_files` under ``root`` (fsspec path); return it."""
    files = checkpoint_files(batches, landing_url, files_per_batch)

    def write(item: tuple[str, str]) -> None:
        fs.pipe_file(f"{root.rstrip('/')}/{item[0]}", item[1].encode("utf-8"))

    for folder in ("offsets", "commits", "sources/0"):
        fs.makedirs(f"{root.rstrip('/')}/{folder}", exist_ok=True)
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(write, files.items()))
    return files
