"""How far a query reading a Delta table has read it, and which commits after that it will read.
No Airflow, no Spark.

delta-spark's streaming source keeps its end offset of each batch in the query's checkpoint
(``offsets/<batch>``): ``reservoirVersion`` and ``index`` (the file within that version; ``-1``
and below: before its first file, so none of the version is read), and ``isStartingVersion``
while the query is still reading the table's snapshot at that version (a new checkpoint without
``startingVersion``). What the query will pass downstream next are the rows the commits from there
on add, except commits that remove rows (a DELETE, an UPDATE, a ``replaceWhere``): those fail the
query, or are skipped whole with ``skipChangeCommits``.

A commit's actions are read from its ``_delta_log/<version>.json`` (newline-delimited JSON, the
Delta protocol's commit file): delta-rs (:mod:`.delta_log`) exposes a table's snapshots and
history, not what one commit added.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from hubflow.checkpoints.spark_logs import join, list_batch_ids, read_offsets, read_text
from hubflow.storage.azure import url_to_fs


@dataclass(frozen=True)
class DeltaSourcePosition:
    """The end offset of a query's last committed batch in the Delta table it reads."""

    version: int  # reservoirVersion
    index: int  # the last file read within it; < 0: none of it
    initial_snapshot: bool  # still reading the table's snapshot at ``version``

    @property
    def first_unread_version(self) -> int:
        """The first commit the query may not have read whole (the one it stopped in, if any)."""
        return self.version


@dataclass(frozen=True)
class AddedFile:
    """A data file a commit added, with what its ``add`` action says about its rows."""

    version: int
    path: str
    partition_values: dict[str, str | None] = field(default_factory=dict)
    #: ``minValues`` / ``maxValues`` of the file's columns (Delta's statistics), when written.
    min_values: dict[str, Any] = field(default_factory=dict)
    max_values: dict[str, Any] = field(default_factory=dict)


def committed_delta_position(checkpoint: str) -> DeltaSourcePosition | None:
    """Where the query of ``checkpoint`` has read its (only) Delta source up to: the end offset of its
    last committed batch; None before its first commit."""
    fs, root = url_to_fs(checkpoint)
    committed = list_batch_ids(fs, join(root, "commits"))
    if not committed:
        return None
    source = read_offsets(fs, root, committed[-1]).sources[0]
    offset = json.loads(source.raw) if source.raw else None
    if not isinstance(offset, dict) or "reservoirVersion" not in offset:
        batch = committed[-1]
        raise ValueError(f"{checkpoint}: batch {batch}'s offset is not a Delta source's: {source.raw}")
    return DeltaSourcePosition(
        int(offset["reservoirVersion"]),
        int(offset.get("index", -1)),
        bool(offset.get("isStartingVersion", offset.get("isInitialSnapshot", False))),
    )


def commit_file(table: str, version: int) -> str:
    """The path of commit ``version``'s file in ``table``'s log."""
    return join(table.rstrip("/"), "_delta_log", f"{version:020d}.json")


def appended_files(table: str, first: int, last: int) -> Iterator[AddedFile]:
    """The files that commits ``first`` to ``last`` of ``table`` added as new rows and that a streaming
    source passes downstream: ``add`` actions with ``dataChange``, of commits that remove no rows.
    FileNotFoundError names a commit file no longer in the log (cleaned up by log retention)."""
    fs, root = url_to_fs(table)
    for version in range(first, last + 1):
        text = read_text(fs, commit_file(root, version))
        actions = [json.loads(line) for line in text.splitlines() if line.strip()]
        if any(a.get("remove", {}).get("dataChange", True) for a in actions if "remove" in a):
            continue
        for action in actions:
            add = action.get("add")
            if not add or not add.get("dataChange", True):
                continue
            stats = json.loads(add["stats"]) if add.get("stats") else {}
            yield AddedFile(
                version,
                add["path"],
                add.get("partitionValues") or {},
                stats.get("minValues") or {},
                stats.get("maxValues") or {},
            )
