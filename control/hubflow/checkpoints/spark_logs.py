"""Read the plain-text logs Spark keeps in a Structured Streaming checkpoint, through fsspec.

Spark owns the checkpoint: these helpers only list and read, never write. They know the layout
described in ``docs/checkpoints.md``:

* ``metadata``: ``{"id": "<query id>"}``
* ``offsets/<batchId>``: a version line (``v1``/``v2``), a metadata JSON line (``batchTimestampMs``...),
  then one line per source with its end offset (v1: by position; v2: ``<sourceId>:<offset json>``).
* ``commits/<batchId>``: a version line and one JSON line, written after the batch's sink committed.
* ``sources/<n>/<logOffset>[.compact]``: the file source's log of files it has taken, one JSON
  ``{"path", "timestamp", "batchId"}`` per line; ``.compact`` files repeat every earlier entry.

Every function works on an already opened filesystem and a protocol-stripped path, so the callers decide
how to authenticate (local paths in tests, ``abfss://`` in production).
"""

from __future__ import annotations

import json
import posixpath
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fsspec import AbstractFileSystem

from hubflow.utc_times import utc_time

COMPACT_SUFFIX = ".compact"
_VERSION_LINE = re.compile(r"^v(\d+)$")


class CheckpointFormatError(ValueError):
    """A checkpoint file exists but its content is not what Spark writes (truncated, garbage, unknown)."""

    def __init__(self, file: str, problem: str) -> None:
        super().__init__(f"{file}: {problem}")
        self.file = file
        self.problem = problem


@dataclass(frozen=True)
class SourceOffset:
    """The end offset of one source in one batch, exactly as Spark wrote it (``None`` for ``-``)."""

    source: str
    raw: str | None

    @property
    def file_log_offset(self) -> int | None:
        """The file source's log offset (``{"logOffset": N}``), or ``None`` for any other source."""
        if self.raw is None:
            return None
        try:
            value = json.loads(self.raw)
        except ValueError:
            return None
        if isinstance(value, dict) and set(value) == {"logOffset"} and isinstance(value["logOffset"], int):
            return value["logOffset"]
        return None


@dataclass(frozen=True)
class OffsetsFile:
    """One parsed ``offsets/<batchId>`` file."""

    batch_id: int
    version: int
    metadata: dict[str, Any]
    sources: list[SourceOffset] = field(default_factory=list)

    @property
    def batch_timestamp(self) -> datetime | None:
        """When Spark planned the batch (``batchTimestampMs``), in UTC."""
        ms = self.metadata.get("batchTimestampMs")
        if isinstance(ms, int | float) and ms > 0:
            return datetime.fromtimestamp(ms / 1000, tz=UTC)
        return None


@dataclass(frozen=True)
class FileEntry:
    """One line of a file source log: a file the query took in log offset ``batch_id``."""

    path: str  # URI-encoded, as Spark wrote it (``file:/...``, ``abfss://...``)
    timestamp: int
    batch_id: int


def join(base: str, *parts: str) -> str:
    """Join fsspec path parts with ``/`` (fsspec paths always use forward slashes)."""
    return posixpath.join(base.rstrip("/") or "/", *parts)


def list_batch_ids(fs: AbstractFileSystem, directory: str) -> list[int]:
    """Sorted batch ids of a metadata log directory (``offsets/`` or ``commits/``).

    Only the names are listed; no file is opened. Hidden files (Hadoop ``.crc`` checksums, Spark's
    ``.<uuid>.tmp`` files being written) and names that are not integers are ignored.
    """
    ids = []
    for name in _names(fs, directory):
        if name.isdigit():
            ids.append(int(name))
    return sorted(ids)


def list_file_log(fs: AbstractFileSystem, directory: str) -> dict[int, str]:
    """Log offset → file name for a file source log directory (``sources/<n>/``), names only."""
    return _log_files(_names(fs, directory))


def list_file_log_details(fs: AbstractFileSystem, directory: str) -> dict[int, dict[str, Any]]:
    """Log offset -> the listing's info (name, size, ETag or mtime) for a file source log directory.

    One listing, no file opened: what :func:`count_file_log_entries` needs to skip unchanged files.
    """
    try:
        entries = fs.ls(directory, detail=True)
    except FileNotFoundError:
        return {}
    by_name = {posixpath.basename(e["name"].rstrip("/")): e for e in entries if e.get("type") != "directory"}
    return {offset: by_name[name] for offset, name in _log_files(by_name).items()}


def _log_files(names: Any) -> dict[int, str]:
    files: dict[int, str] = {}
    for name in names:
        if not name or name.startswith("."):
            continue
        stem = name[: -len(COMPACT_SUFFIX)] if name.endswith(COMPACT_SUFFIX) else name
        if stem.isdigit():
            # A compact file and a delta with the same id do not coexist; prefer the compact one.
            if int(stem) not in files or name.endswith(COMPACT_SUFFIX):
                files[int(stem)] = name
    return files


def _names(fs: AbstractFileSystem, directory: str) -> list[str]:
    try:
        paths = fs.ls(directory, detail=False)
    except FileNotFoundError:
        return []
    names = [posixpath.basename(p.rstrip("/")) for p in paths]
    return [n for n in names if n and not n.startswith(".")]


def read_text(fs: AbstractFileSystem, path: str) -> str:
    """The whole file as UTF-8 text; undecodable bytes raise :class:`CheckpointFormatError`."""
    with fs.open(path, "rb") as handle:
        data = handle.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CheckpointFormatError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def _version(path: str, line: str, supported: tuple[int, ...]) -> int:
    match = _VERSION_LINE.match(line.strip())
    if not match:
        shown = line.strip()[:40] or "an empty line"
        raise CheckpointFormatError(path, f"first line should be a log version like 'v1', found {shown!r}")
    version = int(match.group(1))
    if version not in supported:
        raise CheckpointFormatError(path, f"log version v{version} is not one this tool knows ({supported})")
    return version


def _json_object(path: str, line: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except ValueError as exc:
        raise CheckpointFormatError(path, f"{what} is not valid JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise CheckpointFormatError(path, f"{what} should be a JSON object, found {type(value).__name__}")
    return value


def read_metadata(fs: AbstractFileSystem, checkpoint: str) -> dict[str, Any]:
    """The checkpoint's ``metadata`` file: ``{"id": "<query id>"}``."""
    path = join(checkpoint, "metadata")
    value = _json_object(path, read_text(fs, path).strip(), "the metadata file")
    if not isinstance(value.get("id"), str):
        raise CheckpointFormatError(path, "has no query 'id'")
    return value


def parse_offsets(path: str, batch_id: int, text: str) -> OffsetsFile:
    """Parse an ``offsets/<batchId>`` file (format v1 or v2)."""
    lines = text.removesuffix("\n").split("\n")
    if len(lines) < 2:
        raise CheckpointFormatError(path, "is truncated: it should hold a version line and a metadata line")
    version = _version(path, lines[0], (1, 2))
    metadata = _json_object(path, lines[1], "the metadata line")
    sources: list[SourceOffset] = []
    for index, line in enumerate(lines[2:]):
        if version == 1:
            source, raw = str(index), line.strip()
        else:
            source, sep, raw = line.partition(":")
            if not sep:
                raise CheckpointFormatError(path, f"v2 source line {index + 1} has no 'sourceId:' prefix")
            raw = raw.strip()
        if raw == "-":
            sources.append(SourceOffset(source, None))
            continue
        try:
            json.loads(raw)
        except ValueError as exc:
            raise CheckpointFormatError(
                path, f"end offset of source {source} is not valid JSON ({exc})"
            ) from exc
        sources.append(SourceOffset(source, raw))
    return OffsetsFile(batch_id=batch_id, version=version, metadata=metadata, sources=sources)


def read_offsets(fs: AbstractFileSystem, checkpoint: str, batch_id: int) -> OffsetsFile:
    """Read and parse ``offsets/<batch_id>``."""
    path = join(checkpoint, "offsets", str(batch_id))
    return parse_offsets(path, batch_id, read_text(fs, path))


def read_commit(fs: AbstractFileSystem, checkpoint: str, batch_id: int) -> dict[str, Any]:
    """Read and parse ``commits/<batch_id>``; returns its JSON (``nextBatchWatermarkMs``...)."""
    path = join(checkpoint, "commits", str(batch_id))
    lines = read_text(fs, path).split("\n")
    if len(lines) < 2:
        raise CheckpointFormatError(path, "is truncated: it should hold a version line and a JSON line")
    _version(path, lines[0], (1, 2))
    return _json_object(path, lines[1], "the commit line")


def iter_file_log(fs: AbstractFileSystem, path: str) -> Iterator[FileEntry]:
    """Stream the entries of one file source log file (a delta or a ``.compact``).

    Streams line by line because compact files list every file the query ever took.
    Raises :class:`CheckpointFormatError` when the file is not a file source log.
    """
    with fs.open(path, "rb") as handle:
        first = handle.readline().decode("utf-8", errors="replace")
        _version(path, first, (1,))
        for number, raw in enumerate(handle, start=2):
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError as exc:
                raise CheckpointFormatError(path, f"line {number} is not UTF-8 text") from exc
            if not line:
                continue
            entry = _json_object(path, line, f"line {number}")
            try:
                yield FileEntry(str(entry["path"]), int(entry.get("timestamp", 0)), int(entry["batchId"]))
            except (KeyError, TypeError, ValueError) as exc:
                raise CheckpointFormatError(
                    path, f"line {number} is not a file source entry (needs 'path' and 'batchId')"
                ) from exc


#: Bytes read per request when a file source log is read from its end.
TAIL_CHUNK = 64 * 1024
_COUNT_CACHE_SIZE = 512
_count_cache: OrderedDict[tuple[Any, ...], int | None] = OrderedDict()
_count_cache_lock = threading.Lock()


def file_version(info: dict[str, Any]) -> str | None:
    """What identifies one version of a file in an fsspec info dict: the ETag (Azure Blob), else the
    size and modification time; None when the storage gives neither."""
    etag = info.get("etag") or info.get("ETag")
    if etag:
        return f"etag:{etag}"
    modified = next(
        (info[k] for k in ("mtime", "last_modified", "LastModified") if info.get(k) is not None), None
    )
    return None if modified is None else f"mtime:{modified}:{info.get('size')}"


def count_file_log_entries(
    fs: AbstractFileSystem, path: str, batch_id: int, info: dict[str, Any] | None = None
) -> int | None:
    """How many files one file source log file lists for ``batch_id``, reading only what is needed.

    A ``.compact`` file repeats every file the query ever took, in batch order, so the newest
    batch's entries are its last lines: the file is read from its end, :data:`TAIL_CHUNK` bytes at a
    time, until an older batch's entry shows up - a bounded read however long the query has run.
    With ``info`` (from a listing) the answer is also kept per file version (its ETag on Blob), so
    asking again about an unchanged file reads nothing.

    Returns ``None`` when the file is not a file source log: other sources also keep files under
    ``sources/<n>/`` (the rate source stores its start time there), so the folder name alone does not
    say which source wrote it. A line that breaks in the part read raises :class:`CheckpointFormatError`.
    """
    version = file_version(info) if info else None
    key = (getattr(fs, "protocol", None), path, batch_id, version)
    if version is not None:
        with _count_cache_lock:
            if key in _count_cache:
                _count_cache.move_to_end(key)
                return _count_cache[key]
    count = _count_from_tail(
        fs, path, batch_id, int(info["size"]) if info and info.get("size") is not None else None
    )
    if version is not None:
        with _count_cache_lock:
            _count_cache[key] = count
            while len(_count_cache) > _COUNT_CACHE_SIZE:
                _count_cache.popitem(last=False)
    return count


def _count_from_tail(fs: AbstractFileSystem, path: str, batch_id: int, size: int | None) -> int | None:
    size = int(fs.size(path)) if size is None else size
    head = fs.cat_file(path, start=0, end=min(size, TAIL_CHUNK))
    header, _, rest = head.partition(b"\n")
    if header.decode("utf-8", errors="replace").strip() != "v1":
        return None
    second = rest.split(b"\n", 1)[0].strip()
    if (
        second
        and (b"\n" in rest or size <= TAIL_CHUNK)
        and _entry_batch(path, second, 2, lenient=True) is None
    ):
        return None  # the first entry is not a file source entry: another source's file
    count = 0
    end, carry = size, b""
    while end > 0:
        start = max(0, end - TAIL_CHUNK)
        data = (head[start:end] if end <= len(head) else fs.cat_file(path, start=start, end=end)) + carry
        lines = data.split(b"\n")
        carry = lines.pop(0) if start > 0 else b""  # maybe cut: completed by the next read
        if start == 0:
            lines = lines[1:]  # the version line
        for raw in reversed(lines):
            line = raw.strip()
            if not line:
                continue
            found = _entry_batch(path, line, None)
            if found == batch_id:
                count += 1
            elif found is not None and found < batch_id:
                return count  # the entries before the newest batch's: done
        end = start
    return count


def _entry_batch(path: str, line: bytes, number: int | None, lenient: bool = False) -> int | None:
    """The ``batchId`` of one file source log line; None (lenient) or an error when it is not one."""
    where = f"line {number}" if number else "a line near the end"
    try:
        entry = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        if lenient:
            return None
        raise CheckpointFormatError(path, f"{where} is not valid JSON ({exc})") from exc
    if not (isinstance(entry, dict) and "path" in entry and isinstance(entry.get("batchId"), int)):
        if lenient:
            return None
        raise CheckpointFormatError(path, f"{where} is not a file source entry")
    return entry["batchId"]


def committed_file_entries(
    fs: AbstractFileSystem, log_dir: str, up_to_log_offset: int
) -> Iterator[FileEntry]:
    """Every file a file source took in log offsets ``0..up_to_log_offset`` (inclusive).

    Reads the newest ``.compact`` file at or below the offset plus the deltas after it, as Spark does.
    Entries above the offset (files of a batch that is not committed) are never returned, even when
    a compact file written for such a batch is the only copy left.
    """
    files = list_file_log(fs, log_dir)
    wanted = sorted(i for i in files if i <= up_to_log_offset)
    compacts = [i for i in wanted if files[i].endswith(COMPACT_SUFFIX)]
    start = compacts[-1] if compacts else 0
    needed = list(range(start, up_to_log_offset + 1))
    missing = [i for i in needed if i not in files]
    if missing:
        # Spark deletes older log files once a later compact exists; that compact may belong to an
        # uncommitted batch, so fall back to it and filter by batch id.
        later = sorted(i for i in files if i > up_to_log_offset and files[i].endswith(COMPACT_SUFFIX))
        if later:
            for entry in iter_file_log(fs, join(log_dir, files[later[0]])):
                if entry.batch_id <= up_to_log_offset:
                    yield entry
            return
    if missing:
        raise CheckpointFormatError(
            log_dir,
            f"file source log is missing log offsets {id_ranges(missing)} needed to list the files of "
            f"committed batches (up to log offset {up_to_log_offset})",
        )
    for offset in needed:
        for entry in iter_file_log(fs, join(log_dir, files[offset])):
            if entry.batch_id <= up_to_log_offset:
                yield entry


def id_ranges(ids: list[int]) -> str:
    """``[1, 2, 3, 7]`` → ``"1-3, 7"`` for messages."""
    parts: list[str] = []
    start = prev = ids[0]
    for i in ids[1:]:
        if i != prev + 1:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
            start = i
        prev = i
    parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ", ".join(parts)


def modification_time(fs: AbstractFileSystem, path: str) -> datetime | None:
    """A file's modification time in UTC from ``fs.info``."""
    return info_time(fs.info(path))


def info_time(info: dict[str, Any]) -> datetime | None:
    """The modification time in an fsspec info dict, in UTC (local ``mtime``, adlfs ``last_modified``)."""
    for key in ("mtime", "last_modified", "LastModified", "modified", "created"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, int | float):
            return datetime.fromtimestamp(float(value), tz=UTC)
        moment = utc_time(value)
        if moment is not None:
            return moment
    return None
