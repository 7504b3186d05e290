"""Input rate and lag of a job over time, from what the job leaves behind.

The status page draws two charts per job: rows per second and lag (events the source holds that the
query has not read yet, and the seconds they span), one point per batch. A source that reports its
backlog (``sources[].backlog``, names in ``pyspark_eventhubs.backlog``: the Event Hubs source, and
the files and Delta sources through the jobs runtime) gives both; otherwise the lag is its latest
minus its end offset and its seconds are not known. Three sources of points, best first:

1. ``progress_history.jsonl`` in the job's status folder, one ``last_progress`` block (the shape of
   status.json's ``last_progress``) per line, if the jobs runtime writes one.
2. The checkpoint's offsets log (``offsets/<batchId>``; Spark keeps the last 100): each batch's
   planning time and end offsets. For Event Hubs offsets (``{"hub": {"0": seq}}``) the difference
   of two consecutive batches is the rows of the later one, hence a rate. Lag cannot be derived from
   the checkpoint (it does not record what the hub held), so these points have ``lag = None``.
3. :class:`ProgressSamples`, what this process saw in status.json's ``last_progress`` each time it
   built a snapshot (kept in memory, per job, bounded): rate and lag for every batch it saw.

No Airflow import and nothing heavy at import time: Airflow imports every file of ``plugins/``.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any

from hubflow.status import PROGRESS_HISTORY_FILE as HISTORY_FILE
from hubflow.utc_times import utc_time
from pyspark_eventhubs.backlog import SOURCE_BACKLOG, backlog_count, backlog_seconds

#: Points returned per job (the newest ones).
MAX_POINTS = 120
#: Offsets files read from a checkpoint to derive a history (newest ones).
MAX_CHECKPOINT_BATCHES = 60


def source_lag(end_offset: Any, latest_offset: Any) -> int | None:
    """Events the source holds beyond ``end_offset`` (None when the offsets do not say).

    Event Hubs offsets are ``{"<hub>": {"<partition>": <sequence number>}}``: the lag is the sum over
    partitions of latest minus end (a partition the query has not read yet counts from 0). Plain
    numbers (``LongOffset``) and file source offsets (``{"logOffset": n}``) subtract directly.
    """
    if latest_offset is None or end_offset is None:
        return None
    if isinstance(latest_offset, int | float) and isinstance(end_offset, int | float):
        return max(0, int(latest_offset) - int(end_offset))
    if not (isinstance(latest_offset, dict) and isinstance(end_offset, dict)):
        return None
    if "logOffset" in latest_offset and "logOffset" in end_offset:
        return source_lag(end_offset["logOffset"], latest_offset["logOffset"])
    total = 0
    for hub, partitions in latest_offset.items():
        if str(hub).startswith("$"):  # a connector's report riding along ($backlog, $dataLoss)
            continue
        done = end_offset.get(hub) or {}
        if not isinstance(partitions, dict) or not isinstance(done, dict):
            return None
        for partition, latest in partitions.items():
            try:
                total += max(0, int(latest) - int(done.get(partition, 0)))
            except (TypeError, ValueError):
                return None
    return total


def source_backlog(source: dict[str, Any]) -> dict[str, Any] | None:
    """A ``sources[]`` entry's backlog report (``pyspark_eventhubs.backlog``), or None."""
    backlog = source.get(SOURCE_BACKLOG)
    return backlog if isinstance(backlog, dict) else None


def progress_lag(progress: dict[str, Any] | None) -> int | None:
    """Total lag over the sources of one ``last_progress`` block; None if no source reports one.

    A source's backlog report (events, files or versions behind) when it has one, else its latest
    minus its end offset (:func:`source_lag`).
    """
    if not progress:
        return None
    lags = []
    for s in progress.get("sources") or []:
        counted = backlog_count(source_backlog(s))
        if counted is None:
            counted = source_lag(_json_value(s.get("end_offset")), _json_value(s.get("latest_offset")))
        lags.append(counted)
    known = [lag for lag in lags if lag is not None]
    return sum(known) if known else None


def progress_lag_seconds(progress: dict[str, Any] | None) -> float | None:
    """The largest ``secondsBehindLatest`` the sources of one ``last_progress`` block report, or None."""
    if not progress:
        return None
    known = [
        seconds
        for s in progress.get("sources") or []
        if (seconds := backlog_seconds(source_backlog(s))) is not None
    ]
    return max(known) if known else None


def progress_backlogs(progress: dict[str, Any] | None) -> list[dict[str, Any]]:
    """``[{"source": description, **report}]`` for each source of a progress that reports a backlog."""
    return [
        {"source": str(s.get("description")), **backlog}
        for s in (progress or {}).get("sources") or []
        if (backlog := source_backlog(s)) is not None
    ]


def point_from_progress(progress: dict[str, Any], origin: str) -> dict[str, Any] | None:
    """One chart point from a ``last_progress`` block, or None when it has no batch id."""
    batch_id = progress.get("batch_id")
    if not isinstance(batch_id, int):
        return None
    return {
        "batch_id": batch_id,
        "time": _iso(progress.get("timestamp")),
        "num_input_rows": progress.get("num_input_rows"),
        "input_rows_per_second": _number(progress.get("input_rows_per_second")),
        "processed_rows_per_second": _number(progress.get("processed_rows_per_second")),
        "lag": progress_lag(progress),
        "lag_seconds": progress_lag_seconds(progress),
        "origin": origin,
    }


#: Bytes read from the end of a long history file (enough for far more than MAX_POINTS lines).
HISTORY_TAIL_BYTES = 512 * 1024


def read_history_file(fs: Any, status_root: str) -> list[dict[str, Any]] | None:
    """Points from the end of ``progress_history.jsonl``; None when the file does not exist.

    Only the last ``HISTORY_TAIL_BYTES`` are read, so a file that grows for months costs the same.
    Broken lines (a line being appended while we read, a hand edit) are skipped, not fatal.
    """
    path = f"{status_root.rstrip('/')}/{HISTORY_FILE}"
    try:
        with fs.open(path, "rb") as handle:
            size = handle.seek(0, 2)
            start = max(0, size - HISTORY_TAIL_BYTES)
            handle.seek(start)
            data = handle.read()
    except FileNotFoundError:
        return None
    lines = data.decode("utf-8", errors="replace").splitlines()
    if start > 0 and lines:
        lines = lines[1:]  # the first line was cut by the seek
    points = []
    for line in lines[-MAX_POINTS * 2 :]:
        try:
            progress = json.loads(line)
        except ValueError:
            continue
        if isinstance(progress, dict):
            point = point_from_progress(progress.get("last_progress", progress), HISTORY_FILE)
            if point:
                points.append(point)
    return points


class OffsetsCache:
    """Parsed ``offsets/<batchId>`` files, so a page refresh opens only the batches planned since.

    Spark never rewrites an offsets file, but a checkpoint can be replaced whole (a rewind starts a
    new one at the same path), so entries are keyed by path, batch id, size and modification time.
    Thread-safe; holds at most ``limit`` files.
    """

    def __init__(self, limit: int = 2000) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._files: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self.reads = 0  # files opened, for tests and curiosity

    def get(self, fs: Any, checkpoint_root: str, batch_id: int, info: dict[str, Any]) -> Any:
        """The parsed offsets file of ``batch_id``, read at most once per version of the file."""
        from hubflow.checkpoints.spark_logs import read_offsets

        key = (checkpoint_root, batch_id, info.get("size"), str(info.get("etag") or _mtime(info)))
        with self._lock:
            if key in self._files:
                self._files.move_to_end(key)
                return self._files[key]
        parsed = read_offsets(fs, checkpoint_root, batch_id)
        with self._lock:
            self.reads += 1
            self._files[key] = parsed
            while len(self._files) > self.limit:
                self._files.popitem(last=False)
        return parsed


def history_from_checkpoint(
    fs: Any, checkpoint_root: str, cache: OffsetsCache | None = None
) -> list[dict[str, Any]]:
    """Points derived from the newest offsets files of a checkpoint (see the module docstring)."""
    from hubflow.checkpoints.spark_logs import CheckpointFormatError

    cache = cache or OffsetsCache()
    listing = _offsets_listing(fs, checkpoint_root)
    ids = sorted(listing)[-MAX_CHECKPOINT_BATCHES:]
    points: list[dict[str, Any]] = []
    previous = None
    for batch_id in ids:
        try:
            current = cache.get(fs, checkpoint_root, batch_id, listing[batch_id])
        except (CheckpointFormatError, FileNotFoundError):
            previous = None  # a file purged or being written between listing and reading
            continue
        stamp = current.batch_timestamp
        rows = _rows_between(previous, current) if previous else None
        rate = None
        if rows is not None and previous and previous.batch_timestamp and stamp:
            seconds = (stamp - previous.batch_timestamp).total_seconds()
            rate = rows / seconds if seconds > 0 else None
        points.append(
            {
                "batch_id": batch_id,
                "time": stamp.isoformat() if stamp else None,
                "num_input_rows": rows,
                "input_rows_per_second": rate,
                "processed_rows_per_second": None,
                "lag": None,
                "lag_seconds": None,
                "origin": "checkpoint",
            }
        )
        previous = current
    return points


def _offsets_listing(fs: Any, checkpoint_root: str) -> dict[int, dict[str, Any]]:
    """Batch id -> fsspec info of each ``offsets/<batchId>`` file, from one directory listing."""
    try:
        entries = fs.ls(f"{checkpoint_root.rstrip('/')}/offsets", detail=True)
    except FileNotFoundError:
        return {}
    listing = {}
    for entry in entries:
        name = entry["name"].rstrip("/").rsplit("/", 1)[-1]
        if name.isdigit() and entry.get("type") != "directory":
            listing[int(name)] = entry
    return listing


def _mtime(info: dict[str, Any]) -> Any:
    for key in ("mtime", "last_modified", "LastModified", "modified", "created"):
        if info.get(key) is not None:
            return info[key]
    return None


def _rows_between(previous: Any, current: Any) -> int | None:
    """Rows read by ``current`` when every source's offsets are Event Hubs sequence numbers."""
    before = {s.source: _json_value(s.raw) for s in previous.sources}
    total = 0
    for source in current.sources:
        now, then = _json_value(source.raw), before.get(source.source)
        if now is None:
            continue
        if not _is_sequence_map(now) or (then is not None and not _is_sequence_map(then)):
            return None
        for hub, partitions in now.items():
            done = (then or {}).get(hub, {})
            total += sum(max(0, int(seq) - int(done.get(pid, 0))) for pid, seq in partitions.items())
    return total


def _is_sequence_map(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(parts, dict) and all(isinstance(seq, int) for seq in parts.values())
        for parts in value.values()
    )


class ProgressSamples:
    """What this process saw of each job's ``last_progress``, newest ``MAX_POINTS`` batches per job.

    Thread-safe: the API server answers requests concurrently.
    """

    def __init__(self, limit: int = MAX_POINTS) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._by_job: dict[str, OrderedDict[int, dict[str, Any]]] = {}

    def record(self, job: str, progress: dict[str, Any] | None) -> None:
        """Remember the point of ``progress`` (once per batch id)."""
        point = point_from_progress(progress, "status.json") if progress else None
        if point is None:
            return
        with self._lock:
            points = self._by_job.setdefault(job, OrderedDict())
            points[point["batch_id"]] = point
            while len(points) > self.limit:
                points.popitem(last=False)

    def points(self, job: str) -> list[dict[str, Any]]:
        """A copy of the points seen for ``job``."""
        with self._lock:
            return [dict(p) for p in self._by_job.get(job, {}).values()]


def merge_points(*groups: list[dict[str, Any]], limit: int = MAX_POINTS) -> list[dict[str, Any]]:
    """Points by batch id; a later group's values win over an earlier one's (best source last).

    A value a later group lacks (None) keeps the earlier one, so a checkpoint-derived point keeps
    its row count when status.json adds the lag. Only the newest ``limit`` points are kept.
    """
    merged: dict[int, dict[str, Any]] = {}
    for group in groups:
        for point in group:
            known = merged.setdefault(point["batch_id"], {})
            known.update(
                {key: value for key, value in point.items() if value is not None or key not in known}
            )
    return [merged[i] for i in sorted(merged)][-limit:]


def _json_value(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and value == value:  # NaN is not a value to chart
        return float(value)
    return None


def _iso(value: Any) -> str | None:
    moment = utc_time(str(value)) if value else None
    return moment.isoformat() if moment is not None else None
