"""Judge a Spark Structured Streaming checkpoint's health without Spark and without Airflow.

``inspect_checkpoint(path, stalled_after=timedelta(minutes=30))`` reads the checkpoint through fsspec
(local paths, ``abfss://...``) and returns a :class:`CheckpointReport`: what the query last did, each
source's end offsets, the file source logs, the state operators, and one ``verdict`` with a ``reason``
an on-call person can act on:

``healthy``          the newest batch is committed, and recently.
``batch-in-flight``  the newest batch is planned (offsets written) but not committed yet, recently.
``failed-batch``     the newest batch was planned longer ago than allowed and never committed: the run
                     that planned it most likely died; a restart re-runs it from the logged offsets.
``stalled``          every batch is committed, but the last commit is older than allowed.
``corrupt``          a file does not parse, batch ids have a gap, or commits run ahead of offsets.
``missing``          no checkpoint (or no batch planned yet) at that path.

Cost does not grow with the number of batches: it lists ``offsets/``, ``commits/`` and each
``sources/<n>/`` once and opens only the newest files (at most two offsets files, one commit file,
one log file per source, one metadata file per state operator). A file source's newest log file may
be a ``.compact`` file listing every file the query ever took; only its end (the newest batch's
entries) is read, and not at all when its version (ETag on Blob) is one already seen.

Given the Delta tables the query writes (``delta_tables``), the report also puts each table's
version and the last batch its log records for the query (the ``txn`` action) beside Spark's last
committed batch, and says what a difference means (:mod:`hubflow.checkpoints.delta_log`).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from fsspec import AbstractFileSystem

from hubflow.checkpoints.delta_log import DeltaSinkReport, inspect_delta_sink
from hubflow.checkpoints.spark_logs import (
    CheckpointFormatError,
    OffsetsFile,
    count_file_log_entries,
    id_ranges,
    join,
    list_batch_ids,
    list_file_log_details,
    modification_time,
    read_commit,
    read_metadata,
    read_offsets,
    read_text,
)
from hubflow.storage.azure import url_to_fs


class Verdict(StrEnum):
    """The health of a checkpoint, most severe first in :func:`inspect_checkpoint`'s checks."""

    HEALTHY = "healthy"
    BATCH_IN_FLIGHT = "batch-in-flight"
    FAILED_BATCH = "failed-batch"
    STALLED = "stalled"
    CORRUPT = "corrupt"
    MISSING = "missing"


@dataclass
class SourceReport:
    """One source of the query: its end offset in the newest batch and in the newest committed batch.

    Offsets are the raw JSON Spark wrote (``None`` when the batch had no offset for that source), so
    a caller that knows the source (Event Hubs sequence numbers, file ``logOffset``) can parse them.
    """

    source: str
    end_offset: str | None
    committed_end_offset: str | None


@dataclass
class FileSourceLogReport:
    """Summary of one ``sources/<n>/`` file source log, from its newest file only."""

    source: str
    latest_log_offset: int
    latest_file: str
    files_in_latest_entry: int
    committed_log_offset: int | None


@dataclass
class StateOperatorReport:
    """One stateful operator from ``state/<id>/_metadata/metadata``."""

    operator_id: int
    operator_name: str | None
    stores: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class CheckpointReport:
    """What :func:`inspect_checkpoint` found. ``to_dict()`` gives plain JSON types (ISO times)."""

    path: str
    verdict: Verdict
    reason: str
    checked_at: datetime
    query_id: str | None = None
    offsets_log_version: int | None = None
    latest_offsets_batch_id: int | None = None
    latest_offsets_time: datetime | None = None
    latest_batch_timestamp: datetime | None = None
    latest_commit_batch_id: int | None = None
    latest_commit_time: datetime | None = None
    sources: list[SourceReport] = field(default_factory=list)
    file_source_logs: list[FileSourceLogReport] = field(default_factory=list)
    state_operators: list[StateOperatorReport] = field(default_factory=list)
    delta_sinks: list[DeltaSinkReport] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True for the verdicts that need nobody's attention (healthy, batch in flight)."""
        return self.verdict in (Verdict.HEALTHY, Verdict.BATCH_IN_FLIGHT)

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-serialisable types: datetimes become ISO 8601 strings."""
        return _plain(asdict(self))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, StrEnum):
        return value.value
    return value


def inspect_checkpoint(
    path: str,
    *,
    stalled_after: timedelta,
    failed_after: timedelta | None = None,
    now: datetime | None = None,
    fs: AbstractFileSystem | None = None,
    storage_options: dict[str, Any] | None = None,
    delta_tables: Sequence[str] = (),
) -> CheckpointReport:
    """Inspect the checkpoint at ``path`` and give a verdict with a reason in words.

    Args:
        path: the query's ``checkpointLocation`` as an fsspec URL or local path.
        stalled_after: a query whose last commit is older than this is ``stalled``.
        failed_after: a planned-but-uncommitted batch older than this is ``failed-batch``
            (default: ``stalled_after``). Set it above the longest batch you expect.
        now: the time to judge against (UTC; default: the current time). Tests pin it.
        fs: an already authenticated fsspec filesystem to use instead of resolving ``path``.
        storage_options: fsspec storage options (default: Azure URLs use the process's registered
            storage access, see ``hubflow.storage.azure``).
        delta_tables: Delta tables this query writes; each gets a :class:`DeltaSinkReport`.

    I/O errors other than "not found" (authentication, network) are raised, not turned into a
    verdict: they say nothing about the checkpoint.
    """
    now = now or datetime.now(UTC)
    failed_after = failed_after if failed_after is not None else stalled_after
    if fs is None:
        fs, root = url_to_fs(path, storage_options)
    else:
        root = fs._strip_protocol(path)
    report = CheckpointReport(path=path, verdict=Verdict.MISSING, reason="", checked_at=now)
    try:
        _fill(report, fs, root, now=now, stalled_after=stalled_after, failed_after=failed_after)
    except CheckpointFormatError as exc:
        report.verdict = Verdict.CORRUPT
        report.reason = (
            f"Damaged checkpoint file {exc.file}: {exc.problem}. Spark cannot resume from a damaged "
            "log; restore the checkpoint from a backup or start a new checkpoint (rewind)."
        )
    for table in delta_tables:
        report.delta_sinks.append(inspect_delta_sink(table, report.query_id, report.latest_commit_batch_id))
    return report


def committed_position(
    path: str, storage_options: dict[str, Any] | None = None
) -> tuple[str | None, int | None]:
    """``(query id, last committed batch id)`` of the checkpoint at ``path`` (``None`` for what is missing).

    Lists ``commits/`` and opens ``metadata`` only: for a Delta sink written by another query of the
    job than the one :func:`inspect_checkpoint` looked at (e.g. a quarantine query).
    """
    fs, root = url_to_fs(path, storage_options)
    if not fs.exists(join(root, "metadata")):
        return None, None
    commits = list_batch_ids(fs, join(root, "commits"))
    return str(read_metadata(fs, root)["id"]), (commits[-1] if commits else None)


def inspect_delta_sinks(
    sinks: Sequence[tuple[str, str]], report: CheckpointReport | None = None
) -> list[DeltaSinkReport]:
    """A :class:`DeltaSinkReport` per ``(table, checkpoint of the query writing it)``.

    Tables written by ``report``'s query reuse its query id and last commit; others read theirs.
    """
    results = []
    for table, checkpoint in sinks:
        if report is not None and checkpoint.rstrip("/") == report.path.rstrip("/"):
            query_id, committed = report.query_id, report.latest_commit_batch_id
        else:
            query_id, committed = committed_position(checkpoint)
        results.append(inspect_delta_sink(table, query_id, committed))
    return results


def _fill(
    report: CheckpointReport,
    fs: AbstractFileSystem,
    root: str,
    *,
    now: datetime,
    stalled_after: timedelta,
    failed_after: timedelta,
) -> None:
    if not fs.exists(root):
        report.reason = (
            f"No checkpoint at {report.path}: the folder does not exist. Either the job has never run "
            "with this checkpoint location or the path is wrong."
        )
        return
    offsets = list_batch_ids(fs, join(root, "offsets"))
    commits = list_batch_ids(fs, join(root, "commits"))
    if fs.exists(join(root, "metadata")):
        report.query_id = str(read_metadata(fs, root)["id"])
    if not offsets:
        if commits:
            return _corrupt(
                report,
                f"commits/ holds batches {id_ranges(commits)} but offsets/ is empty: the offsets log was "
                "deleted or the folder was copied partly.",
            )
        report.reason = (
            f"The folder {report.path} exists but holds no offsets log: no query has planned a batch "
            "with this checkpoint yet."
        )
        return

    for name, ids in (("offsets", offsets), ("commits", commits)):
        holes = _holes(ids)
        if holes:
            return _corrupt(
                report,
                f"The {name} log has a gap: batch ids {id_ranges(holes)} are missing between "
                f"{ids[0]} and {ids[-1]}. Spark cannot resume over a gap.",
            )

    latest = offsets[-1]
    report.latest_offsets_batch_id = latest
    report.latest_offsets_time = modification_time(fs, join(root, "offsets", str(latest)))
    newest = read_offsets(fs, root, latest)
    report.offsets_log_version = newest.version
    report.latest_batch_timestamp = newest.batch_timestamp

    committed: OffsetsFile | None = None
    if commits:
        last_commit = commits[-1]
        report.latest_commit_batch_id = last_commit
        report.latest_commit_time = modification_time(fs, join(root, "commits", str(last_commit)))
        read_commit(fs, root, last_commit)
        if last_commit > latest:
            return _corrupt(
                report,
                f"Commits run ahead of offsets: batch {last_commit} is committed but the newest planned "
                f"batch is {latest}. A commit without its offsets file means files were lost or mixed "
                "from another checkpoint.",
            )
        if last_commit < offsets[0] - 1:
            return _corrupt(
                report,
                f"The newest commit ({last_commit}) is older than the oldest offsets file kept "
                f"({offsets[0]}): commits for batches {last_commit + 1}-{latest - 1} are missing.",
            )
        if last_commit == latest:
            committed = newest
        elif last_commit >= offsets[0]:
            committed = read_offsets(fs, root, last_commit)
        # else: Spark already purged the committed batch's offsets file (minBatchesToRetain = 1).

    committed_by_source = {s.source: s for s in committed.sources} if committed else {}
    for source in newest.sources:
        done = committed_by_source.get(source.source)
        report.sources.append(SourceReport(source.source, source.raw, done.raw if done else None))

    _fill_file_logs(report, fs, root, newest, committed)
    _fill_state(report, fs, root)

    behind = latest - (commits[-1] if commits else offsets[0] - 1)
    if behind > 1:
        return _corrupt(
            report,
            f"Offsets run {behind} batches ahead of commits (planned up to {latest}, committed up to "
            f"{report.latest_commit_batch_id}). Spark plans one batch at a time, so batches were "
            "lost from the commits log (or async progress tracking is on, which this tool does not judge).",
        )
    if behind == 1:
        planned_at = report.latest_offsets_time or report.latest_batch_timestamp
        age = now - planned_at if planned_at else timedelta.max
        if age > failed_after:
            report.verdict = Verdict.FAILED_BATCH
            report.reason = (
                f"Batch {latest} was planned {_ago(age)} ago and never committed (allowed: "
                f"{_ago(failed_after)}). The run that planned it most likely failed or was killed; "
                f"restarting the job re-runs batch {latest} from its logged offsets."
            )
        else:
            report.verdict = Verdict.BATCH_IN_FLIGHT
            report.reason = f"Batch {latest} is running: planned {_ago(age)} ago, not committed yet."
        return
    committed_at = report.latest_commit_time
    age = now - committed_at if committed_at else timedelta.max
    if age > stalled_after:
        report.verdict = Verdict.STALLED
        report.reason = (
            f"No batch committed for {_ago(age)} (allowed: {_ago(stalled_after)}); the last one was "
            f"batch {latest}. The job is stopped, idle with no new data, or hanging before it plans "
            "its next batch: check that it runs and that its input receives data."
        )
    else:
        report.verdict = Verdict.HEALTHY
        report.reason = f"Batch {latest} committed {_ago(age)} ago."


def _fill_file_logs(
    report: CheckpointReport,
    fs: AbstractFileSystem,
    root: str,
    newest: OffsetsFile,
    committed: OffsetsFile | None,
) -> None:
    """Summarise each file source log from its newest file, and check it is not behind the offsets."""
    committed_offsets = {s.source: s.file_log_offset for s in committed.sources} if committed else {}
    planned_offsets = {s.source: s.file_log_offset for s in newest.sources}
    for source_dir in sorted(_subdirs(fs, join(root, "sources"))):
        log_dir = join(root, "sources", source_dir)
        files = list_file_log_details(fs, log_dir)
        planned = planned_offsets.get(source_dir)
        if not files:
            if planned is not None:
                _raise_behind(log_dir, planned, None)
            continue
        latest_offset = max(files)
        latest_name = posixpath.basename(files[latest_offset]["name"].rstrip("/"))
        latest_path = join(log_dir, latest_name)
        count = count_file_log_entries(fs, latest_path, latest_offset, files[latest_offset])
        if count is None:
            continue  # another source's private metadata (e.g. the rate source's start time)
        if planned is not None and planned > latest_offset:
            _raise_behind(log_dir, planned, latest_offset)
        report.file_source_logs.append(
            FileSourceLogReport(
                source=source_dir,
                latest_log_offset=latest_offset,
                latest_file=latest_name,
                files_in_latest_entry=count,
                committed_log_offset=committed_offsets.get(source_dir),
            )
        )


def _raise_behind(log_dir: str, planned: int, latest: int | None) -> None:
    have = "no log files" if latest is None else f"log offsets only up to {latest}"
    raise CheckpointFormatError(
        log_dir,
        f"the offsets log points at file source log offset {planned} but the log holds {have}",
    )


def _fill_state(report: CheckpointReport, fs: AbstractFileSystem, root: str) -> None:
    """Read each state operator's metadata file (one per operator, whatever the number of batches)."""
    operator_dirs = [name for name in _subdirs(fs, join(root, "state")) if name.isdigit()]
    for operator_dir in sorted(operator_dirs, key=int):
        meta_path = join(root, "state", operator_dir, "_metadata", "metadata")
        operator = StateOperatorReport(operator_id=int(operator_dir), operator_name=None)
        if fs.exists(meta_path):
            lines = read_text(fs, meta_path).split("\n")
            if len(lines) < 2 or not lines[0].strip().startswith("v"):
                raise CheckpointFormatError(meta_path, "is not a state operator metadata file (truncated?)")
            try:
                value = json.loads(lines[1])
                info = value.get("operatorInfo", {})
                operator.operator_name = info.get("operatorName")
                for store in value.get("stateStoreInfo", []):
                    operator.stores.append(
                        {"store_name": store.get("storeName"), "num_partitions": store.get("numPartitions")}
                    )
            except (ValueError, AttributeError) as exc:
                raise CheckpointFormatError(meta_path, f"does not parse ({exc})") from exc
        report.state_operators.append(operator)


def _subdirs(fs: AbstractFileSystem, directory: str) -> list[str]:
    """The sub-folder names of ``directory``, each once.

    On Blob storage written by hadoop-azure a folder can be listed twice: as the prefix of its
    blobs and as the empty marker blob (``hdi_isfolder``) that the driver creates for it.
    """
    try:
        entries = fs.ls(directory, detail=True)
    except FileNotFoundError:
        return []
    names = []
    for entry in entries:
        if entry.get("type") == "directory":
            name = entry["name"].rstrip("/").rsplit("/", 1)[-1]
            if not name.startswith(".") and name not in names:
                names.append(name)
    return names


def _holes(ids: list[int]) -> list[int]:
    """Batch ids missing between the smallest and largest kept id (old ones purged by Spark are fine)."""
    if not ids or len(ids) == ids[-1] - ids[0] + 1:
        return []
    present = set(ids)
    return [i for i in range(ids[0], ids[-1]) if i not in present]


def _corrupt(report: CheckpointReport, problem: str) -> None:
    report.verdict = Verdict.CORRUPT
    report.reason = (
        f"{problem} Restore the checkpoint from a backup or start a new checkpoint (rewind); do not "
        "edit it in place."
    )


def _ago(delta: timedelta) -> str:
    """``timedelta(seconds=3725)`` → ``"1h 2m 5s"``."""
    if delta == timedelta.max:
        return "an unknown time"
    seconds = max(0, int(delta.total_seconds()))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes}m {secs}s"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"


def main(argv: list[str] | None = None) -> int:
    """Command line for on-call: print the report as JSON; exit 0 when ok, 1 otherwise.

    ``python -m hubflow.checkpoints.inspector CHECKPOINT --stalled-after-minutes 30``
    """
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m hubflow.checkpoints.inspector", description=main.__doc__.splitlines()[0]
    )
    parser.add_argument("checkpoint", help="the query's checkpointLocation (local path or fsspec URL)")
    parser.add_argument("--stalled-after-minutes", type=float, default=30.0)
    parser.add_argument("--failed-after-minutes", type=float, default=None)
    parser.add_argument(
        "--delta-table",
        action="append",
        default=[],
        help="a Delta table the query writes (repeatable): its version and recorded batch are reported",
    )
    args = parser.parse_args(argv)
    report = inspect_checkpoint(
        args.checkpoint,
        stalled_after=timedelta(minutes=args.stalled_after_minutes),
        failed_after=None
        if args.failed_after_minutes is None
        else timedelta(minutes=args.failed_after_minutes),
        delta_tables=args.delta_table,
    )
    print(json.dumps(report.to_dict(), indent=2))
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
