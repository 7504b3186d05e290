"""Move the landing files a file-source streaming query has finished with into an archive.

``archive_processed_files(checkpoint, landing_root, archive_root)`` reads the query's file source log
(``sources/<n>/`` in the checkpoint) up to the log offset of the newest **committed** batch, and moves
every file listed there that still sits under ``landing_root`` to the same relative path under
``archive_root``. Files of a batch that is planned but not committed are never touched, nor is any path
outside ``landing_root``.

How a file moves depends on the storage, because only some storages can rename atomically:

* **Azure Blob** (``abfss://``, ``abfs://``, ``az://`` for both roots): a server-side copy to the archive
  path, conditional on the landing blob's ETag (the copy takes exactly the version that was listed)
  and on the archive path being free, which records that ETag in the copy's metadata; then the landing
  blob is deleted, conditional on the same ETag. No bytes pass through this process, and many copies
  run in parallel. There is no rename on Blob, and none is needed: a copy appears at its target whole.
* **Other filesystems** (local disk, fsspec): copy to a hidden temporary name of this run's own beside
  the archive path, check it byte for byte, flush it to the disk (local), rename it (atomic on a local
  disk and on ADLS with a hierarchical namespace), delete the landing copy. Two runs moving the same
  file at once (two DAGs, a retry beside a late run) each write their own copy, so neither renames a
  copy the other is still writing; the file ends in the archive once, whole.

Symbolic links: the plan resolves each logged path (``realpath``; one that leads outside the landing
root is refused), so a planned path holds no link. Whoever writes the landing folder may still swap a
planned file, or a folder on its way, for a link before the copy, minutes later. On a local disk the
file is therefore opened without following any link (:class:`hubflow.storage.no_follow.NoFollowFile`:
every folder from ``/`` with ``O_NOFOLLOW``, relative to its parent's descriptor), copied and compared
through that descriptor, and its name is deleted only while it still is that file; a path that is a
link (or no regular file) now is skipped with the reason (``ArchiveResult.skipped``), nothing copied,
nothing deleted. Azure Blob has no links, and its copies are conditional on the ETag listed at plan
time; other fsspec filesystems (none in hubflow's deployments) get no such check.

A run killed at any moment can simply be run again; nothing is lost and nothing lands twice:

* killed before or during the copy → the landing file is intact (a Blob copy either exists whole at
  its target or not at all; a partial local temporary copy is ignored), the copy is redone;
* killed after the copy, before the delete → the file is in both places, and the rerun deletes the
  landing copy once it has established that the two hold the **same content**: the archive copy
  records the landing version's ETag, or both carry the same Content-MD5, or (files archived by
  other means) both are read and hashed. Never by size alone: a different file of the same size
  is a conflict, reported and left alone;
* already archived → the file is no longer in the landing listing, nothing to do.

``purge_archive`` deletes archived files older than a retention period. Neither function imports
Airflow; the Airflow operator passes its task logger as ``log``.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import shutil
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import unquote, urlsplit

from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem

from hubflow.checkpoints.spark_logs import (
    CheckpointFormatError,
    committed_file_entries,
    info_time,
    join,
    list_batch_ids,
    read_offsets,
)
from hubflow.storage.azure import BlobUrl, url_to_fs
from hubflow.storage.blob_api import BlobInfo, BlobObjects
from hubflow.storage.no_follow import NoFollowFile, UnplannedLink

TEMP_SUFFIX = ".hubflow-archiving"
"""Suffix of the hidden temporary copy (``.<name>.<run token>.hubflow-archiving``) written before the
rename; each run writes its own."""

Log = Callable[[str], Any]


class ArchiveError(RuntimeError):
    """Archiving could not finish; ``result`` says what was done before it stopped."""

    def __init__(self, message: str, result: ArchiveResult | None = None) -> None:
        super().__init__(message)
        self.result = result


@dataclass
class ArchiveResult:
    """What one archive run did (or, with ``dry_run``, would do). Paths are relative to the roots."""

    dry_run: bool
    committed_batch_id: int | None = None
    committed_files: int = 0
    moved: list[str] = field(default_factory=list)
    landing_copies_removed: list[str] = field(default_factory=list)
    already_archived: int = 0
    conflicts: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types, e.g. for an Airflow XCom."""
        return asdict(self)

    def summary(self) -> str:
        """One line for the task log."""
        move, remove = ("would move", "would remove") if self.dry_run else ("moved", "removed")
        return (
            f"{move} {len(self.moved)} file(s); {remove} {len(self.landing_copies_removed)} landing "
            f"copies already archived; {self.already_archived} committed file(s) were archived before; "
            f"{len(self.conflicts)} conflict(s); {len(self.skipped)} skipped (not the file planned); "
            f"{len(self.refused)} path(s) refused; "
            f"{len(self.errors)} error(s) (committed batch {self.committed_batch_id}, "
            f"{self.committed_files} file(s) of committed batches under the landing root)"
        )


@dataclass
class PurgeResult:
    """What one retention run deleted (or would delete)."""

    dry_run: bool
    deleted: list[str] = field(default_factory=list)
    bytes_deleted: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types, e.g. for an Airflow XCom."""
        return asdict(self)


def _open_fs(
    url: str, fs: AbstractFileSystem | None, storage_options: dict[str, Any] | None
) -> tuple[AbstractFileSystem, str]:
    if fs is not None:
        return fs, fs._strip_protocol(url)
    return url_to_fs(url, storage_options)


def _is_local(fs: AbstractFileSystem) -> bool:
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
    return "file" in protocols


class LandingRoot:
    """Turns the URI-encoded paths of a file source log into paths relative to the landing root."""

    def __init__(self, url: str, fs: AbstractFileSystem, root: str) -> None:
        self.fs = fs
        self.local = _is_local(fs)
        self.protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
        self.netloc = urlsplit(url).netloc.lower() if "://" in url else ""
        root = posixpath.normpath(root)
        self.root = os.path.realpath(root) if self.local else root.rstrip("/")

    def relative(self, logged: str) -> tuple[str | None, str | None]:
        """``(relative path, None)`` for a file under the root, else ``(None, why it is refused)``."""
        parts = urlsplit(logged)
        scheme = parts.scheme or "file"
        if scheme not in self.protocols:
            return None, f"is on another filesystem ({scheme}://) than the landing root"
        path = unquote(parts.path)
        if ".." in path.split("/"):
            return None, "contains '..'; archiving never follows such paths"
        if self.local:
            resolved = os.path.realpath(path)
        else:
            # ``container@account.dfs.core.windows.net``: the account only shows in the host, so compare
            # hosts when both name an account; the container is compared through the stripped path.
            if "@" in self.netloc and "@" in parts.netloc and parts.netloc.lower() != self.netloc:
                return None, "is in another container or storage account than the landing root"
            resolved = posixpath.normpath(self.fs._strip_protocol(f"{scheme}://{parts.netloc}{path}"))
        if not resolved.startswith(self.root.rstrip("/") + "/"):
            return None, "is outside the landing root"
        return resolved[len(self.root.rstrip("/")) + 1 :], None

    def listing(self) -> set[str]:
        """Relative paths of every file now under the landing root (one recursive listing)."""
        prefix = self.root.rstrip("/") + "/"
        try:
            found = self.fs.find(self.root)
        except FileNotFoundError:
            return set()
        return {p[len(prefix) :] for p in found if p.startswith(prefix)}


def archive_processed_files(
    checkpoint: str,
    landing_root: str,
    archive_root: str,
    *,
    dry_run: bool = False,
    max_workers: int = 8,
    log: Log = print,
    progress_every: int = 100,
    fs: AbstractFileSystem | None = None,
    storage_options: dict[str, Any] | None = None,
) -> ArchiveResult:
    """Move the files consumed by committed batches from ``landing_root`` to ``archive_root``.

    Args:
        checkpoint: the query's checkpoint location (fsspec URL or local path).
        landing_root: the folder the query reads; only files below it are ever moved.
        archive_root: where files go, at the same path relative to ``landing_root``.
        dry_run: list what would be done, change nothing.
        max_workers: files moved in parallel (threads; the work is I/O).
        log: called with one line of progress every ``progress_every`` files and a summary.
        fs: an authenticated fsspec filesystem used for all three locations instead of resolving them.
        storage_options: passed to ``fsspec.core.url_to_fs`` for each location (credentials...).

    Returns an :class:`ArchiveResult`. Raises :class:`ArchiveError` (carrying the result) when some
    files could not be moved; running again is safe and finishes the job.
    """
    ck_fs, ck_root = _open_fs(checkpoint, fs, storage_options)
    land_fs, land_root = _open_fs(landing_root, fs, storage_options)
    arch_fs, arch_root = _open_fs(archive_root, fs, storage_options)
    landing = LandingRoot(landing_root, land_fs, land_root)
    arch_root = posixpath.normpath(arch_root)
    if _is_local(arch_fs):
        arch_root = os.path.realpath(arch_root)
    if _overlaps(landing.root, arch_root) and land_fs.protocol == arch_fs.protocol:
        raise ArchiveError(
            f"The archive root {archive_root} and the landing root {landing_root} overlap; choose an "
            "archive folder outside the landing folder (and the other way round)."
        )

    result = ArchiveResult(dry_run=dry_run)
    if not ck_fs.exists(ck_root):
        raise ArchiveError(
            f"No checkpoint at {checkpoint}: without it there is no list of processed files. Check the "
            "path; nothing was moved.",
            result,
        )
    try:
        committed = _committed_files(ck_fs, ck_root, landing, result)
    except CheckpointFormatError as exc:
        raise ArchiveError(
            f"Cannot read the checkpoint's logs: {exc}. Nothing was moved; inspect the checkpoint "
            "(python -m hubflow.checkpoints.inspector) before archiving.",
            result,
        ) from exc
    if result.committed_batch_id is None:
        log(f"No committed batch in {checkpoint} yet: nothing to archive.")
        return result
    for path, why in sorted(result.refused.items())[:20]:
        log(f"Refused {path}: it {why}.")
    if len(result.refused) > 20:
        log(f"... and {len(result.refused) - 20} more refused path(s).")
    if result.refused and not committed:
        log(
            f"Warning: none of the {len(result.refused)} file(s) of committed batches is under "
            f"{landing_root}. Check that landing_root is the folder this query reads."
        )

    mover = _mover(fs, landing_root, archive_root, landing, arch_fs, arch_root, dry_run)
    present = mover.landing_files()
    todo = sorted(committed & present)
    result.already_archived = len(committed - present)
    log(
        f"{'Dry run: ' if dry_run else ''}{len(todo)} file(s) of committed batches (up to batch "
        f"{result.committed_batch_id}) still in {landing_root}; archiving to {archive_root} with "
        f"{max_workers} worker(s){mover.how}."
    )
    mover.prepare(todo)
    done = 0
    with ThreadPoolExecutor(max_workers=max(1, max_workers), thread_name_prefix="archive") as pool:
        futures = {pool.submit(mover.archive, relative): relative for relative in todo}
        for future in as_completed(futures):
            relative = futures[future]
            try:
                action = future.result()
            except _Skipped as skipped:
                result.skipped[relative] = str(skipped)
                log(f"Skipped {relative}: {skipped}")
            except Exception as exc:  # one file's failure must not stop the others
                result.errors[relative] = f"{type(exc).__name__}: {exc}"
                log(f"Could not archive {relative}: {type(exc).__name__}: {exc}")
            else:
                if action == "moved":
                    result.moved.append(relative)
                elif action == "landing-copy-removed":
                    result.landing_copies_removed.append(relative)
                elif action == "conflict":
                    result.conflicts.append(relative)
                    log(
                        f"Conflict: {relative} is in the archive with different content; both copies "
                        "left as they are. Compare them and remove the wrong one by hand."
                    )
            done += 1
            if progress_every and done % progress_every == 0 and done < len(todo):
                log(f"Archived {done}/{len(todo)} file(s)...")
    for items in (result.moved, result.landing_copies_removed, result.conflicts):
        items.sort()
    log(("Dry run: " if dry_run else "") + result.summary())
    if result.errors:
        raise ArchiveError(
            f"{len(result.errors)} file(s) could not be archived (first: "
            f"{next(iter(sorted(result.errors.items())))}). Running the archive again is safe: it "
            "finishes what this run left.",
            result,
        )
    return result


def _committed_files(
    ck_fs: AbstractFileSystem, ck_root: str, landing: LandingRoot, result: ArchiveResult
) -> set[str]:
    """Landing-relative paths of the files committed batches took; refused paths go to ``result``.

    Reads the newest commit id, that batch's offsets file (the file source's ``logOffset``), then the
    file source log up to that offset. Sets ``result.committed_batch_id`` (``None``: nothing committed).
    """
    commits = list_batch_ids(ck_fs, join(ck_root, "commits"))
    if not commits:
        return set()
    result.committed_batch_id = commits[-1]
    offsets = read_offsets(ck_fs, ck_root, commits[-1])
    file_sources = [(s.source, s.file_log_offset) for s in offsets.sources if s.file_log_offset is not None]
    if not file_sources:
        raise ArchiveError(
            f"The query at {ck_root} has no file source in batch {commits[-1]}, so there is no list of "
            "processed files to archive. Check that this is the checkpoint of the file-reading job.",
            result,
        )
    committed: set[str] = set()
    for source, log_offset in file_sources:
        log_dir = join(ck_root, "sources", source)
        for entry in committed_file_entries(ck_fs, log_dir, log_offset):
            relative, refusal = landing.relative(entry.path)
            if relative is None:
                result.refused[entry.path] = refusal or "refused"
            else:
                committed.add(relative)
    result.committed_files = len(committed)
    return committed


def _overlaps(a: str, b: str) -> bool:
    a, b = a.rstrip("/") + "/", b.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)


def _mover(
    fs: AbstractFileSystem | None,
    landing_url: str,
    archive_url: str,
    landing: LandingRoot,
    arch_fs: AbstractFileSystem,
    arch_root: str,
    dry_run: bool,
) -> _FileMover | _BlobMover:
    """The Blob mover when both roots are Azure storage URLs (and no filesystem was forced)."""
    land_blob, arch_blob = BlobUrl.parse(landing_url), BlobUrl.parse(archive_url)
    if fs is None and land_blob is not None and arch_blob is not None:
        return _BlobMover(land_blob, arch_blob, dry_run)
    return _FileMover(landing, arch_fs, arch_root, dry_run)


class _FileMover:
    """Moves one file on a filesystem with renames: copy to a temporary name, rename, delete."""

    how = ""

    def __init__(
        self, landing: LandingRoot, arch_fs: AbstractFileSystem, arch_root: str, dry_run: bool
    ) -> None:
        self.landing = landing
        self.land_fs, self.land_root = landing.fs, landing.root
        self.arch_fs, self.arch_root = arch_fs, arch_root
        self.dry_run = dry_run

    def landing_files(self) -> set[str]:
        return self.landing.listing()

    def prepare(self, todo: list[str]) -> None:
        """Nothing to prepare: each file is looked at when it is moved."""

    def archive(self, relative: str) -> str:
        source = join(self.land_root, relative)
        target = join(self.arch_root, relative)
        if not self.landing.local:
            return self._archive(relative, source, target, None)
        try:
            planned = NoFollowFile(source)
        except FileNotFoundError:
            return "gone"  # removed since the listing (by another run or by hand)
        except UnplannedLink as exc:
            raise _Skipped(_not_planned(exc, copied=False)) from None
        with planned:
            try:
                return self._archive(relative, source, target, planned)
            except UnplannedLink as exc:  # its name was swapped after the copy
                raise _Skipped(_not_planned(exc, copied=True)) from None

    def _archive(self, relative: str, source: str, target: str, planned: NoFollowFile | None) -> str:
        """Move ``source`` (on a local disk: the file ``planned``, opened without following links)."""
        if planned is None and not self.land_fs.exists(source):
            return "gone"  # removed since the listing (by another run or by hand)
        if self.arch_fs.exists(target):
            return self._remove_landing_copy(source, target, planned)
        if self.dry_run:
            return "moved"
        parent, name = posixpath.split(target)
        # A name of this run's own: another run (a second DAG, a retry) moving the same file writes
        # its own copy, never into this one between its check and its rename.
        temporary = join(parent, f".{name}.{uuid.uuid4().hex[:12]}{TEMP_SUFFIX}")
        self.arch_fs.makedirs(parent, exist_ok=True)
        try:
            self._copy(source, temporary, planned)
            if not self._same_content(source, temporary, planned):
                self._forget(temporary)
                raise OSError(f"the copy of {relative} differs from the landing file; nothing removed")
            self._sync(temporary)
            # A rename over a copy another run put there meanwhile replaces it with the same bytes.
            self.arch_fs.mv(temporary, target)
        except FileNotFoundError:
            # Another run archived the file meanwhile: it moved the landing copy, or removed this
            # run's copy as a leftover once its own was in place.
            self._forget(temporary)
            return self._remove_landing_copy(source, target, planned)
        self._sync(parent)
        self._remove_leftovers(parent, name)
        if not self._remove_source(source, planned):
            return "landing-copy-removed"  # another run, which copied it too, removed it first
        return "moved"

    def _remove_landing_copy(self, source: str, target: str, planned: NoFollowFile | None) -> str:
        """The file is in the archive already: remove the landing copy when both hold the same bytes."""
        try:
            if not self.arch_fs.exists(target):
                if planned.still_named() if planned is not None else self.land_fs.exists(source):
                    raise OSError(f"{target} vanished while the file was moved; nothing removed")
                return "gone"
            if not self._same_content(source, target, planned):
                return "conflict"
            if not self.dry_run:
                if not self._remove_source(source, planned):
                    return "gone"
                self._remove_leftovers(*posixpath.split(target))
        except FileNotFoundError:
            return "gone"  # another run finished it meanwhile
        return "landing-copy-removed"

    def _remove_source(self, source: str, planned: NoFollowFile | None) -> bool:
        """Delete the landing copy: False when it was gone already. A local one only while its name
        still is the file that was read (:meth:`NoFollowFile.remove`)."""
        if planned is not None:
            return planned.remove()
        try:
            self.land_fs.rm_file(source)
        except FileNotFoundError:
            return False
        return True

    def _remove_leftovers(self, parent: str, name: str) -> None:
        """Temporary copies of ``name`` that killed runs left beside it (it is archived now).

        A concurrent run's copy may be among them; that run then renames nothing or finds its copy
        gone, and finishes as a run that found the file archived.
        """
        prefix = f".{name}."
        for path in self.arch_fs.ls(parent, detail=False):
            base = posixpath.basename(path.rstrip("/"))
            if base.startswith(prefix) and base.endswith(TEMP_SUFFIX):
                self._forget(path)

    def _forget(self, path: str) -> None:
        try:
            self.arch_fs.rm_file(path)
        except FileNotFoundError:
            pass

    def _sync(self, path: str) -> None:
        """On a local disk, flush ``path`` (a file, or a folder after a rename) to the device, so the
        landing copy is deleted only after its archive copy is durable."""
        if not isinstance(self.arch_fs, LocalFileSystem):
            return
        descriptor = os.open(self.arch_fs._strip_protocol(path), os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

    def _same_content(self, source: str, target: str, planned: NoFollowFile | None) -> bool:
        """Byte for byte (hashes of both), after the cheap size check."""
        size = planned.size if planned is not None else self.land_fs.size(source)
        if size != self.arch_fs.size(target):
            return False
        landing = _digest_of(planned.chunks()) if planned is not None else _digest(self.land_fs, source)
        return landing == _digest(self.arch_fs, target)

    def _copy(self, source: str, temporary: str, planned: NoFollowFile | None) -> None:
        if planned is not None:  # through the descriptor opened without following links
            with self.arch_fs.open(temporary, "wb") as writer:
                for chunk in planned.chunks():
                    writer.write(chunk)
            return
        if self.land_fs is self.arch_fs:
            self.arch_fs.cp_file(source, temporary)
            return
        with self.land_fs.open(source, "rb") as reader, self.arch_fs.open(temporary, "wb") as writer:
            shutil.copyfileobj(reader, writer, length=8 * 1024 * 1024)


class _Skipped(Exception):
    """A file left where it is because it is not the file that was planned; the message says why."""


def _not_planned(exc: UnplannedLink, copied: bool) -> str:
    """Why a file is skipped, and what to do about it."""
    if copied:
        done = "its bytes as they were planned are in the archive and what stands at its name now was left"
    else:
        done = "nothing was copied or removed"
    return (
        f"{exc.strerror}, not what the archive planned to move; archiving never follows a symbolic link "
        f"it did not plan, so {done}. Find out what replaced it, then restore or remove it by hand"
    )


def _digest_of(chunks: Iterator[bytes]) -> bytes:
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    return digest.digest()


def _digest(fs: AbstractFileSystem, path: str) -> bytes:
    with fs.open(path, "rb") as handle:
        return _digest_of(iter(lambda: handle.read(8 * 1024 * 1024), b""))


class _BlobMover:
    """Moves one blob: conditional server-side copy, then conditional delete (see the module docstring).

    Both roots are listed once (with ETags, Content-MD5 and metadata), so moving a file costs two
    requests: the copy and the delete.
    """

    how = " (server-side copies)"

    def __init__(self, landing: BlobUrl, archive: BlobUrl, dry_run: bool) -> None:
        self.landing_root, self.archive_root = landing, archive
        self.dry_run = dry_run
        self.blobs = BlobObjects()
        self.landing: dict[str, BlobInfo] = {}
        self.archived: dict[str, BlobInfo] = {}

    def _listing(self, root: BlobUrl) -> dict[str, BlobInfo]:
        prefix = f"{root.path}/" if root.path else ""
        return {info.url.path[len(prefix) :]: info for info in self.blobs.list(root)}

    def landing_files(self) -> set[str]:
        self.landing = self._listing(self.landing_root)
        return set(self.landing)

    def prepare(self, todo: list[str]) -> None:
        """List the archive once, so a file copied by an earlier (killed) run is known without a request."""
        self.archived = self._listing(self.archive_root) if todo else {}

    def archive(self, relative: str) -> str:
        source = self.landing.get(relative) or self.blobs.info(self.landing_root.child(relative))
        if source is None:
            return "gone"
        target_url = self.archive_root.child(relative)
        target = self.archived.get(relative)
        for _attempt in range(3):
            if target is not None:
                if not self.blobs.same_content(source, target):
                    return "conflict"
                if self.dry_run:
                    return "landing-copy-removed"
                if self.blobs.delete(source.url, if_etag=source.etag):
                    return "landing-copy-removed"
            elif self.dry_run:
                return "moved"
            elif self.blobs.copy(source, target_url) is not None:
                if self.blobs.delete(source.url, if_etag=source.etag):
                    return "moved"
            # A condition failed: the landing blob changed or went, or the target appeared since the
            # listing. Look again and decide on fresh facts.
            source = self.blobs.info(source.url)
            if source is None:
                return "gone"
            target = self.blobs.info(target_url)
        raise OSError(f"{relative} kept changing while it was archived; run the archive again later")


def purge_archive(
    archive_root: str,
    older_than: timedelta,
    *,
    dry_run: bool = False,
    now: datetime | None = None,
    log: Log = print,
    fs: AbstractFileSystem | None = None,
    storage_options: dict[str, Any] | None = None,
) -> PurgeResult:
    """Delete archived files last modified more than ``older_than`` ago (retention).

    Archiving writes a fresh copy, so a file's modification time is when it was archived. Leftover
    temporary copies from killed runs are purged by the same rule. Emptied folders are removed.
    """
    if older_than <= timedelta(0):
        raise ValueError(f"older_than must be a positive duration, got {older_than}")
    now = now or datetime.now(UTC)
    cutoff = now - older_than
    arch_fs, root = _open_fs(archive_root, fs, storage_options)
    root = root.rstrip("/")
    result = PurgeResult(dry_run=dry_run)
    try:
        found = arch_fs.find(root, detail=True)
    except FileNotFoundError:
        found = {}
    parents: set[str] = set()
    for path, info in sorted(found.items()):
        modified = info_time(info)
        if modified is None or modified >= cutoff:
            continue
        if not dry_run:
            arch_fs.rm_file(path)
        result.deleted.append(path[len(root) + 1 :] if path.startswith(root + "/") else path)
        result.bytes_deleted += int(info.get("size") or 0)
        parents.add(posixpath.dirname(path))
    if not dry_run:
        _remove_empty_dirs(arch_fs, root, parents)
    log(
        f"{'Dry run: would delete' if dry_run else 'Deleted'} {len(result.deleted)} archived file(s) "
        f"({result.bytes_deleted} bytes) older than {cutoff.isoformat()} from {archive_root}."
    )
    return result


def _remove_empty_dirs(fs: AbstractFileSystem, root: str, parents: set[str]) -> None:
    """Remove folders emptied by a purge, deepest first, never the archive root itself."""
    candidates: set[str] = set()
    for parent in parents:
        while parent.startswith(root + "/"):
            candidates.add(parent)
            parent = posixpath.dirname(parent)
    for folder in sorted(candidates, key=lambda p: p.count("/"), reverse=True):
        try:
            if not fs.ls(folder, detail=False):
                fs.rmdir(folder)
        except (FileNotFoundError, OSError, NotImplementedError):
            continue  # object stores have no real folders; a non-empty folder stays


def main(argv: list[str] | None = None) -> int:
    """Command line: archive the processed files of one query (``--dry-run`` to only list them).

    ``python -m hubflow.operations.archive CHECKPOINT LANDING_ROOT ARCHIVE_ROOT [--dry-run]``
    """
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m hubflow.operations.archive", description=main.__doc__.splitlines()[0]
    )
    parser.add_argument("checkpoint")
    parser.add_argument("landing_root")
    parser.add_argument("archive_root")
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--max-workers", type=int, default=8)
    args = parser.parse_args(argv)
    try:
        archive_processed_files(
            args.checkpoint,
            args.landing_root,
            args.archive_root,
            dry_run=args.dry_run,
            max_workers=args.max_workers,
        )
    except ArchiveError as exc:
        print(f"error: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
