"""Lake tables as Airflow Assets: their names and URIs, the versions a run added, and the registry's
``schedule: asset(...)`` grammar. No Airflow import (the DAG factory and the operators turn these
plain values into Airflow's Asset objects).

A table's asset is named after the table (the last segment of its path: ``telemetry_bronze`` for
``/lake/telemetry_bronze`` or ``abfss://lake@acct.dfs.core.windows.net/bronze/telemetry_bronze``)
and its URI names its real location: a local path as ``file://`` + the absolute path, a cloud URL
(``abfss://``, ``wasbs://``, ``s3://``...) as written. A job's run does not know its tables when
the DAG is parsed (only the registry is read then), so its tasks declare one asset alias per job
(:func:`alias_name`) and add each table's event at run time.

Delta tables and parquet outputs (Spark's file sink) alike are assets. A Delta table's versions
are its log's versions; a parquet output's "versions" are the batch ids its file sink committed
(the numeric file names of ``<table>/_spark_metadata/``, :mod:`core.file_sink_log`). A parquet
output has one writer, the streaming query of its sink (a backfill writes a side table,
``<output>_backfill``), so the batches a run added are simply those after the run's ``before``:
no commit tag is needed (and the file sink has no place for one). A failed try's batches are told
by when their log files were written (:func:`versions_of_earlier_tries`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Any, Literal
from urllib.parse import urlsplit

#: What ``schedule: asset(...)`` accepts: one table's name, or several joined by ``&`` (all of
#: them changed) or ``|`` (any of them changed), as Airflow combines assets.
ASSET_SCHEDULE = re.compile(r"^\s*asset\((?P<names>[^()]*)\)\s*$")
TABLE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
#: The extra keys of an asset event hubflow emits.
EXTRA_JOB, EXTRA_FROM, EXTRA_TO, EXTRA_RUN = "job", "from_version", "to_version", "run"
EXTRA_VERSIONS = "versions"
#: The Spark setting Delta copies into each commit's ``commitInfo.userMetadata``: an Airflow run's
#: spark-submit sets it to the run's :func:`commit_tag`, so the run can tell its own commits from a
#: concurrent writer's (the stream, another backfill run).
COMMIT_TAG_CONF = "spark.databricks.delta.commitInfo.userMetadata"
#: What a lake table is: a Delta table, or a parquet table written by Spark's file sink.
TableKind = Literal["delta", "parquet"]


class AssetScheduleError(ValueError):
    """A registry ``schedule: asset(...)`` that cannot be read; the message says how to write it."""


@dataclass(frozen=True)
class TableAsset:
    """One lake table as an asset: its name, its URI, the path it is read at, and its kind (what
    its versions are: Delta versions, or the file sink's batch ids)."""

    name: str
    uri: str
    path: str
    kind: TableKind = "delta"


@dataclass(frozen=True)
class AssetSchedule:
    """``schedule: asset(a & b)``: run when all (``all``) or any (``any``) of the tables changed."""

    names: tuple[str, ...]
    when: Literal["all", "any"] = "all"


@dataclass(frozen=True)
class VersionsAdded:
    """The versions of one table a run committed (``versions``), or the stream committed since the
    last announcement (``versions`` empty: every version from ``first`` to ``last``)."""

    table: TableAsset
    first: int
    last: int
    versions: tuple[int, ...] = ()

    def extra(self, job: str, run: str) -> dict[str, Any]:
        """The asset event's ``extra``: who committed which versions, in what kind of run."""
        extra: dict[str, Any] = {EXTRA_JOB: job, EXTRA_FROM: self.first, EXTRA_TO: self.last, EXTRA_RUN: run}
        if self.versions:
            extra[EXTRA_VERSIONS] = list(self.versions)
        return extra


def commit_tag(dag_id: str, run_id: str, task_id: str, try_number: int) -> str:
    """The mark an Airflow task's Delta commits carry (:data:`COMMIT_TAG_CONF`): one per try."""
    return f"{commit_tag_prefix(dag_id, run_id, task_id)}{try_number}"


def commit_tag_prefix(dag_id: str, run_id: str, task_id: str) -> str:
    """What the commit tags of every try of one task in one DAG run begin with."""
    return f"airflow:{dag_id}/{run_id}/{task_id}/"


def alias_name(job: str) -> str:
    """The asset alias a job's tasks emit their tables' events through."""
    return f"hubflow.{job}.tables"


def table_asset(path: str, kind: TableKind = "delta") -> TableAsset:
    """The asset of the ``kind`` table at ``path`` (a local path or a URL)."""
    parts = urlsplit(path)
    if parts.scheme and parts.scheme != "file" and len(parts.scheme) > 1:  # "C:" is not a scheme
        uri = path.rstrip("/")
        name = PurePosixPath(parts.path.rstrip("/")).name or parts.netloc.split("@")[0]
    else:
        local = PurePosixPath(parts.path if parts.scheme == "file" else path)
        if not local.is_absolute():
            raise ValueError(f"table path {path!r} is relative; a lake table's asset needs its absolute path")
        uri = f"file://{local}"
        name = local.name
    return TableAsset(name=name, uri=uri, path=path, kind=kind)


def job_tables(delta_tables: list[str], parquet_outputs: Iterable[str] = ()) -> list[TableAsset]:
    """The assets of the tables a job writes (``JobPaths.delta_tables``, ``JobPaths.parquet_outputs``)."""
    return [table_asset(path) for path in delta_tables] + [
        table_asset(path, "parquet") for path in parquet_outputs
    ]


def table_versions(tables: list[TableAsset]) -> dict[str, int | None]:
    """Each table's current version by path: a Delta table's (delta-rs, through
    :mod:`core.delta_log`), a parquet output's last committed batch id (:mod:`core.file_sink_log`);
    None when there is none yet."""
    from hubflow.checkpoints.delta_log import table_state
    from hubflow.checkpoints.file_sink_log import last_batch_id

    return {
        table.path: last_batch_id(table.path) if table.kind == "parquet" else table_state(table.path, None)[0]
        for table in tables
    }


def versions_of_run(
    tables: list[TableAsset], before: dict[str, int | None], tag: str, backfill: bool = False
) -> list[VersionsAdded]:
    """What one run wrote to its tables after ``before`` (by path): each Delta table's versions
    whose commit carries ``tag`` (:func:`versions_tagged`), each parquet output's batches after
    ``before`` (its only writer is the job's query, so every new batch is the run's). A backfill
    run writes no parquet output (its rows go to the side table ``<output>_backfill``): a batch
    committed meanwhile is a scheduled run's, announced by that run."""
    delta = [table for table in tables if table.kind == "delta"]
    parquet = [] if backfill else [table for table in tables if table.kind == "parquet"]
    batches = versions_added(parquet, before, table_versions(parquet))
    return versions_tagged(delta, before, tag) + _listed(batches)


def _listed(changes: list[VersionsAdded]) -> list[VersionsAdded]:
    """``changes`` with each one's versions listed (a range ``first``..``last`` spelled out)."""
    return [
        VersionsAdded(c.table, c.first, c.last, c.versions or tuple(range(c.first, c.last + 1)))
        for c in changes
    ]


def versions_tagged(tables: list[TableAsset], before: dict[str, int | None], tag: str) -> list[VersionsAdded]:
    """The versions each table gained after ``before`` (by path) whose commit carries ``tag``: what
    one run wrote, whoever else wrote beside it. Reads the tables' history (delta-rs)."""
    from hubflow.checkpoints.delta_log import commits_since

    added = []
    for table in tables:
        mine = sorted(
            version
            for version, metadata in commits_since(table.path, before.get(table.path))
            if metadata == tag
        )
        if mine:
            added.append(VersionsAdded(table, mine[0], mine[-1], tuple(mine)))
    return added


def versions_of_earlier_tries(
    tables: list[TableAsset],
    before: dict[str, int | None],
    prefix: str,
    try_number: int,
    since_ms: int,
    backfill: bool = False,
) -> list[VersionsAdded]:
    """The versions earlier tries (1 to ``try_number - 1``) of the same task in the same run
    committed (tags ``prefix`` + try), up to ``before`` and back to ``since_ms`` (the run's start):
    a try that committed and then failed announced nothing, so the try that succeeds does. A
    parquet output's batches up to ``before`` whose log file was written since ``since_ms`` are the
    earlier tries' (the job's query is its only writer); a backfill run's tries wrote none."""
    from hubflow.checkpoints.delta_log import commits_back_to
    from hubflow.checkpoints.file_sink_log import batches_between

    earlier = {f"{prefix}{n}" for n in range(1, try_number)}
    added = []
    for table in tables:
        newest = before.get(table.path)
        if newest is None or not earlier:
            continue
        if table.kind == "parquet":
            if backfill:
                continue
            batches = batches_between(table.path, datetime.fromtimestamp(since_ms / 1000, tz=UTC), newest)
            if batches:
                added.append(VersionsAdded(table, batches[0], batches[-1], tuple(batches)))
            continue
        theirs = sorted(
            v for v, metadata in commits_back_to(table.path, newest, since_ms) if metadata in earlier
        )
        if theirs:
            added.append(VersionsAdded(table, theirs[0], theirs[-1], tuple(theirs)))
    return added


def merge_versions(*changes: list[VersionsAdded]) -> list[VersionsAdded]:
    """One :class:`VersionsAdded` per table from several lists of them (versions united)."""
    by_path: dict[str, tuple[TableAsset, set[int]]] = {}
    for change in (c for group in changes for c in group):
        versions = set(change.versions) or set(range(change.first, change.last + 1))
        _, known = by_path.setdefault(change.table.path, (change.table, set()))
        known |= versions
    return [
        VersionsAdded(table, min(versions), max(versions), tuple(sorted(versions)))
        for table, versions in by_path.values()
    ]


def versions_added(
    tables: list[TableAsset], before: dict[str, int | None], after: dict[str, int | None]
) -> list[VersionsAdded]:
    """The tables whose version moved from ``before`` to ``after`` (by path; None: no table yet),
    with the versions in between. A table that did not move, or that went back (restored), has none."""
    added = []
    for table in tables:
        old, new = before.get(table.path), after.get(table.path)
        if new is None or (old is not None and new <= old):
            continue
        added.append(VersionsAdded(table, 0 if old is None else old + 1, new))
    return added


def last_announced(events: Iterable[tuple[str, dict[str, Any]]]) -> dict[str, int]:
    """The highest version announced per table URI, from earlier asset events ``(uri, extra)`` (of
    the job's alias; events without hubflow's extra are ignored)."""
    last: dict[str, int] = {}
    for uri, extra in events:
        version = (extra or {}).get(EXTRA_TO)
        if isinstance(version, int) and version > last.get(uri, -1):
            last[uri] = version
    return last


def parse_asset_schedule(schedule: str) -> AssetSchedule | None:
    """``asset(a)``, ``asset(a & b)`` or ``asset(a | b)`` as an :class:`AssetSchedule`; None for any
    other schedule (a cron expression, a preset, a duration)."""
    match = ASSET_SCHEDULE.match(schedule)
    if match is None:
        if schedule.strip().startswith("asset"):
            raise AssetScheduleError(
                f"schedule {schedule!r}: write asset(<table>), asset(<table> & <table>) (all changed) "
                "or asset(<table> | <table>) (any changed)"
            )
        return None
    inner = match["names"]
    if "&" in inner and "|" in inner:
        raise AssetScheduleError(
            f"schedule {schedule!r} mixes & and |: a schedule waits for all of its tables (&) or any of "
            "them (|), not both"
        )
    when: Literal["all", "any"] = "any" if "|" in inner else "all"
    names = tuple(name.strip() for name in re.split(r"[&|]", inner))
    bad = [name for name in names if not TABLE_NAME.match(name)]
    if bad:
        raise AssetScheduleError(
            f"schedule {schedule!r}: {', '.join(repr(b) for b in bad)} is not a table's name (the last "
            "segment of the table's path, e.g. asset(telemetry_bronze))"
        )
    if len(set(names)) != len(names):
        raise AssetScheduleError(f"schedule {schedule!r} names a table twice")
    return AssetSchedule(names, when)
