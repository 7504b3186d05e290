"""Which files a query's file sources have read, from its checkpoint. No Airflow, no Spark.

Spark's file stream source logs the files each batch takes in ``<checkpoint>/sources/<n>/<log
offset>`` (:func:`~hubflow.checkpoints.spark_logs.committed_file_entries`); the batch's end offset
in ``offsets/<batch>`` names the log offset (``{"logOffset": N}``). The files of the last committed
batch's offset are the ones whose rows the query has passed on: a landing folder's (a ``files``
source) or a parquet lake table's, read through its ``_spark_metadata`` log (a ``parquet`` source).
"""

from __future__ import annotations

from hubflow.checkpoints.spark_logs import committed_file_entries, join, list_batch_ids, read_offsets
from hubflow.storage.azure import url_to_fs


def files_taken(checkpoint: str) -> set[str]:
    """Every file the file sources of the query at ``checkpoint`` took in its committed batches, as
    Spark's log spells it (a URI: ``file:///...``, ``abfss://...``); empty before its first commit."""
    fs, root = url_to_fs(checkpoint)
    commits = list_batch_ids(fs, join(root, "commits"))
    if not commits:
        return set()
    taken: set[str] = set()
    for source in read_offsets(fs, root, commits[-1]).sources:
        if source.file_log_offset is not None:
            log_dir = join(root, "sources", source.source)
            taken |= {entry.path for entry in committed_file_entries(fs, log_dir, source.file_log_offset)}
    return taken
