"""What a Delta table says about the streaming query that writes it. No Airflow, no Spark.

A hubflow job's Delta sink records each micro-batch in the table's own log as an application
transaction (``txn`` action: appId = the streaming query's id, version = the batch id), in the
same commit as the batch's rows. Spark records the batch in the checkpoint's ``commits/`` folder
after that. Side by side, the two say whether the table and the checkpoint agree:

==================================  ===========================================================
table's batch vs Spark's commit     meaning
==================================  ===========================================================
equal                               in step
one ahead                           the batch is in the table; Spark had not recorded its commit
                                    yet (committing now, or the driver stopped in between). On
                                    restart Spark re-runs it and the sink skips it: nothing twice.
more than one ahead                 the checkpoint is older than the table (restored from a
                                    backup, or another checkpoint with the same query id): the
                                    sink will skip the batches it already holds - their new input
                                    would be lost. Stop the job and investigate.
behind (or none)                    batches Spark committed are not in the table: the table was
                                    restored to an older version, recreated, or is written by
                                    another query (a new checkpoint means a new query id).
==================================  ===========================================================

The log is read with delta-rs (PyPI ``deltalake``), which implements the whole log protocol -
JSON commits, classic, multi-part and V2 checkpoints, log compaction - and exposes
``transaction_version(app_id)``; a hand-written reader of ``_delta_log`` would have to copy that
protocol, and the Airflow side must not need Spark. Loaded tables are kept per path and brought
up to date incrementally (only new commits are read), so a status page refreshing every few
seconds does not replay the log each time.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from typing import Any

#: Loaded tables by (path, storage options), updated incrementally on each use.
_TABLES: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}
_TABLES_LOCK = threading.Lock()
_MAX_CACHED_TABLES = 64


@dataclass
class DeltaSinkReport:
    """One Delta table a job writes, beside the checkpoint of the query that writes it."""

    table: str
    version: int | None
    query_id: str | None
    table_batch: int | None
    spark_committed_batch: int | None
    agreement: str
    explanation: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _load(table: str, storage_options: dict[str, str] | None) -> Any:
    """The table at ``table`` (delta-rs), brought up to date; ``None`` when there is none yet."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    key = (table, tuple(sorted((storage_options or {}).items())))
    with _TABLES_LOCK:
        loaded = _TABLES.get(key)
    try:
        if loaded is None:
            loaded = DeltaTable(table, storage_options=storage_options)
        else:
            loaded.update_incremental()
    except TableNotFoundError:
        return None
    with _TABLES_LOCK:
        if key not in _TABLES and len(_TABLES) >= _MAX_CACHED_TABLES:
            _TABLES.pop(next(iter(_TABLES)))
        _TABLES[key] = loaded
    return loaded


def table_state(table: str, query_id: str | None, storage_options: dict[str, str] | None = None) -> tuple:
    """``(version, batch of query_id recorded in the table)``; ``(None, None)`` when no table yet."""
    loaded = _load(table, storage_options)
    if loaded is None:
        return None, None
    batch = loaded.transaction_version(query_id) if query_id else None
    return int(loaded.version()), None if batch is None else int(batch)


def oldest_commit_since(
    table: str, first_version: int, max_commits: int, storage_options: dict[str, str] | None = None
) -> tuple[int, int | None] | None:
    """``(newest version, commit time in epoch ms of the oldest commit at or after first_version)``,
    reading at most the newest ``max_commits`` commits (the oldest of those when more are newer);
    the time is None when no commit is that new. None when there is no table."""
    loaded = _load(table, storage_options)
    if loaded is None:
        return None
    newest = int(loaded.version())
    count = min(max(0, newest - first_version + 1), max_commits)
    if count == 0:
        return newest, None
    stamps = [
        int(commit["timestamp"])
        for commit in loaded.history(limit=count)
        if commit.get("timestamp") and int(commit["version"]) >= first_version
    ]
    return newest, min(stamps) if stamps else None


def commits_since(
    table: str, version: int | None, storage_options: dict[str, str] | None = None
) -> list[tuple[int, str | None]]:
    """``(version, commitInfo.userMetadata)`` of each commit after ``version`` (every commit when
    None); empty when there is no table."""
    loaded = _load(table, storage_options)
    if loaded is None:
        return []
    newest = int(loaded.version())
    count = newest + 1 if version is None else newest - version
    if count <= 0:
        return []
    return [
        (int(commit["version"]), commit.get("userMetadata"))
        for commit in loaded.history(limit=count)
        if version is None or int(commit["version"]) > version
    ]


def commits_back_to(
    table: str, newest: int, since_ms: int, storage_options: dict[str, str] | None = None
) -> list[tuple[int, str | None]]:
    """``(version, commitInfo.userMetadata)`` of each commit up to version ``newest`` made at or after
    ``since_ms`` (epoch milliseconds, the commit's timestamp); empty when there is no table. Reads
    the history newest first, in growing steps, and stops at the first older commit."""
    loaded = _load(table, storage_options)
    if loaded is None:
        return []
    current = int(loaded.version())
    limit = 16
    while True:
        history = loaded.history(limit=limit)
        found = [
            (int(commit["version"]), commit.get("userMetadata"))
            for commit in history
            if int(commit["version"]) <= newest and int(commit.get("timestamp") or 0) >= since_ms
        ]
        reached_older = any(int(commit.get("timestamp") or 0) < since_ms for commit in history)
        if reached_older or len(history) < limit or limit > current:
            return found
        limit *= 4


def compare(
    table: str,
    version: int | None,
    query_id: str | None,
    table_batch: int | None,
    committed: int | None,
) -> DeltaSinkReport:
    """Put the table's recorded batch beside Spark's last committed batch and say what it means."""
    if version is None:
        agreement = "no-table"
        text = f"No Delta table at {table} yet: the job has not committed a batch to it."
    elif query_id is None:
        agreement = "no-checkpoint"
        text = (
            f"The table is at version {version}; the job's checkpoint has no query id yet, so its "
            "batches cannot be matched with the table's transactions."
        )
    elif table_batch is None and committed is None:
        agreement = "in-step"
        text = f"Neither the table (version {version}) nor Spark holds a batch of query {query_id} yet."
    elif table_batch is None:
        agreement = "behind"
        text = (
            f"Spark committed batches up to {committed} of query {query_id}, but the table (version "
            f"{version}) records none of them: it was recreated, restored to an older version, or "
            "is written by another query. Check DESCRIBE HISTORY before trusting it."
        )
    elif committed is None or table_batch == committed + 1:
        agreement = "table-ahead-by-one"
        text = (
            f"Batch {table_batch} is in the table (version {version}) but Spark has not recorded its "
            "commit: it is being committed now, or the driver stopped between the two commits. On "
            f"restart Spark re-runs batch {table_batch} and the Delta sink skips it (its transaction "
            "is recorded), so nothing is written twice."
        )
    elif table_batch == committed:
        agreement = "in-step"
        text = f"In step: batch {committed} is in the table (version {version}) and committed by Spark."
    elif table_batch > committed:
        agreement = "checkpoint-behind"
        text = (
            f"The table holds batches up to {table_batch} of query {query_id} but Spark's checkpoint "
            f"is at batch {committed}: the checkpoint is older than the table (restored from a "
            f"backup?). The Delta sink would skip batches {committed + 1}-{table_batch} as written "
            "already, losing their new input. Stop the job and investigate before it runs on."
        )
    else:
        agreement = "behind"
        text = (
            f"Spark committed batches up to {committed} but the table's last batch of query {query_id} "
            f"is {table_batch}: batches {table_batch + 1}-{committed} are not in the table (restored "
            "to an older version?). Check DESCRIBE HISTORY; a backfill can repair the interval."
        )
    return DeltaSinkReport(table, version, query_id, table_batch, committed, agreement, text)


def inspect_delta_sink(
    table: str,
    query_id: str | None,
    committed: int | None,
    storage_options: dict[str, str] | None = None,
) -> DeltaSinkReport:
    """Read ``table``'s version and the batch it records for ``query_id``, beside ``committed``."""
    version, table_batch = table_state(table, query_id, storage_options)
    return compare(table, version, query_id, table_batch, committed)
