"""Checkpoint backups: set a checkpoint aside whole, list, restore and purge them. No Airflow import.

Spark owns the checkpoint; hubflow never edits it. Anything that would change where a job resumes (a
rewind, a restore) first sets the current checkpoint aside into
``<checkpoint_root>/_backups/<name>/<UTC time>/``. Object stores cannot rename a folder (Azure Blob
has no rename at all, and adlfs moves copy then delete even on ADLS Gen2), so a backup is made in
steps that can stop anywhere without leaving something that looks like a backup and is not one:

1. **copy** every file of the checkpoint into the backup folder — on Azure Blob a server-side copy
   conditional on the file's ETag (the version listed is the version copied), elsewhere a plain copy.
   Until step 3 the folder is a *staging* area: it is not a backup;
2. **verify** the copies against the listing taken in step 1: every file there, nothing else, each a
   copy of exactly the listed version (Blob: the ETag the copy recorded; elsewhere: SHA-256);
3. **publish** by writing the manifest ``_hubflow_backup.json`` into the folder, last and only if
   absent. A folder without its manifest is an unfinished backup: never listed, never restored, and
   removed by the next backup or purge;
4. **delete** the originals (Blob: each only if unchanged since it was copied), then the folder.

A run killed before step 3 leaves the checkpoint untouched and a staging folder that the next run
removes; killed during step 4, it leaves a published backup and part of the checkpoint, and the next
:func:`backup_checkpoint` recognises the rest as that backup's originals and finishes deleting them.

:func:`restore_checkpoint` is the way back (the job must be stopped): it sets aside whatever is at the
checkpoint location (same steps), copies the backup's files there, and verifies them against the
manifest. ``python -m hubflow.checkpoints.backups`` runs each step from a shell (see
docs/operations.md, "Restoring a checkpoint").
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from hubflow.storage.azure import BlobUrl, url_to_fs
from hubflow.storage.blob_api import BlobInfo, BlobObjects, bare_etag

BACKUPS_FOLDER = "_backups"
MANIFEST = "_hubflow_backup.json"
STAMP_FORMAT = "%Y%m%dT%H%M%SZ"
#: Copies and deletes run in parallel (they are requests to the storage service).
WORKERS = 16

Log = Callable[[str], Any]


class BackupError(RuntimeError):
    """A backup or restore cannot be made or trusted; nothing was deleted. The message says why."""


@dataclass(frozen=True)
class Backup:
    """One published backup: where it is, when it was taken, and the files its manifest lists."""

    url: str
    stamp: str
    taken_at: datetime
    source: str
    files: dict[str, dict[str, Any]]


def checkpoint_backups_root(checkpoint_location: str) -> str:
    """``<checkpoint_root>/_backups/<name>``: where a job's replaced checkpoints are kept."""
    root, name = checkpoint_location.rstrip("/").rsplit("/", 1)
    return f"{root}/{BACKUPS_FOLDER}/{name}"


def backup_checkpoint(
    checkpoint_location: str,
    now: datetime | None = None,
    *,
    log: Log = lambda line: None,
    status_dir: str | None = None,
) -> str | None:
    """Set the checkpoint aside, whole, into its backups folder; return the backup's URL.

    Returns None when there is no checkpoint. The job must be stopped (a rewind stops it first):
    given the job's ``status_dir``, a backup refuses (:class:`BackupError` naming the holder) while
    the job's lease is in use (:func:`hubflow.status.lease.lease_in_use`), since its driver may be
    writing the checkpoint. Safe to run again after a kill at any point (see the module docstring).
    """
    tree, root, originals = _stopped_checkpoint(checkpoint_location, status_dir)
    if not originals:
        tree.remove_folder(checkpoint_location)
        return None
    finished = _interrupted_backup(tree, root, checkpoint_location, originals)
    if finished is not None:
        log(f"finishing the backup {finished.url}: deleting the {len(originals)} original(s) left")
        _delete_originals(tree, checkpoint_location, originals, finished.files)
        return finished.url
    _remove_unfinished(tree, root, log)
    now = now or datetime.now(UTC)
    target = _free_stamp(tree, root, now)
    log(f"backing up {len(originals)} file(s) of {checkpoint_location} to {target}")
    manifest = _copy_verify_publish(tree, checkpoint_location, target, originals, now)
    _delete_originals(tree, checkpoint_location, originals, manifest["files"])
    log(f"checkpoint {checkpoint_location} set aside as {target}")
    return target


def copy_checkpoint(
    checkpoint_location: str,
    now: datetime | None = None,
    *,
    log: Log = lambda line: None,
    status_dir: str | None = None,
) -> str | None:
    """Back the checkpoint up, whole, and leave it in place; return the backup's URL (None: there is
    no checkpoint). Steps 1-3 of a backup (copy, verify, publish), for a job that goes on from the
    same checkpoint (an upgrade that may be rolled back). The job must be stopped, as for
    :func:`backup_checkpoint`."""
    tree, root, originals = _stopped_checkpoint(checkpoint_location, status_dir)
    if not originals:
        return None
    _remove_unfinished(tree, root, log)
    target = _free_stamp(tree, root, now or datetime.now(UTC))
    log(f"copying {len(originals)} file(s) of {checkpoint_location} to {target}")
    _copy_verify_publish(tree, checkpoint_location, target, originals, now or datetime.now(UTC))
    log(f"checkpoint {checkpoint_location} backed up as {target} (kept in place)")
    return target


def _stopped_checkpoint(location: str, status_dir: str | None) -> tuple[_Tree, str, dict[str, Any]]:
    """The checkpoint's tree, backups root and files, once no driver holds its lease (given
    ``status_dir``)."""
    if status_dir is not None:
        refuse_while_leased(location, status_dir)
    tree = _tree(location)
    return tree, checkpoint_backups_root(location), tree.files(location)


def refuse_while_leased(checkpoint_location: str, status_dir: str) -> None:
    """Raise :class:`BackupError` when a driver holds the job's lease (it may write the checkpoint)."""
    from hubflow.status import StatusFolder
    from hubflow.status.lease import lease_holder_text, live_lease_holder

    folder = StatusFolder(status_dir)
    holder = live_lease_holder(folder)
    if holder is not None:
        raise BackupError(
            f"checkpoint {checkpoint_location} is in use: {lease_holder_text(folder, holder)}, so its "
            "driver may be writing it; nothing was moved. Stop the job first (on-call stop), then "
            "back it up; a driver whose host is gone loses the lease after its lease_duration."
        )


def list_backups(checkpoint_location: str) -> list[Backup]:
    """The published backups of this checkpoint, oldest first."""
    tree = _tree(checkpoint_location)
    root = checkpoint_backups_root(checkpoint_location)
    backups = []
    for stamp in tree.folders(root):
        manifest = tree.read_manifest(_join(root, stamp))
        if manifest is not None:
            backups.append(
                Backup(
                    url=_join(root, stamp),
                    stamp=stamp,
                    taken_at=datetime.fromisoformat(manifest["taken_at"]),
                    source=manifest["source"],
                    files=manifest["files"],
                )
            )
    return sorted(backups, key=lambda b: (b.taken_at, b.stamp))


def restore_checkpoint(
    checkpoint_location: str,
    stamp: str,
    now: datetime | None = None,
    *,
    log: Log = lambda line: None,
    status_dir: str | None = None,
) -> str | None:
    """Put the backup ``stamp`` back at the checkpoint location; return where the replaced one went.

    The job must be stopped (given ``status_dir``, refused while its lease is in use). Whatever is
    at the location is first backed up (nothing is lost); then the backup's files are copied there
    and verified against its manifest. The backup itself stays. A restore killed half-way is
    finished by running it again: files already restored are recognised as copies of the backup.
    """
    if status_dir is not None:
        refuse_while_leased(checkpoint_location, status_dir)
    backups = {b.stamp: b for b in list_backups(checkpoint_location)}
    if stamp not in backups:
        known = ", ".join(backups) or "none"
        raise BackupError(
            f"no published backup {stamp!r} of {checkpoint_location} (published backups: {known}); "
            "list them with: python -m hubflow.checkpoints.backups list CHECKPOINT"
        )
    backup = backups[stamp]
    tree = _tree(checkpoint_location)
    present = tree.files(checkpoint_location)
    replaced = None
    if present and not _all_restored_from(tree, backup, checkpoint_location, present):
        replaced = backup_checkpoint(checkpoint_location, now, log=log, status_dir=status_dir)
        present = {}
    log(f"restoring {len(backup.files)} file(s) of {backup.url} to {checkpoint_location}")
    sources = tree.files(backup.url)
    missing = sorted(set(backup.files) - set(sources))
    if missing:
        raise BackupError(f"backup {backup.url} lacks {len(missing)} of its files (first: {missing[0]})")
    damaged = [name for name in sorted(backup.files) if not tree.is_copy(sources[name], backup.files[name])]
    if damaged:
        raise BackupError(
            f"backup {backup.url} does not match its manifest (first: {damaged[0]}); not restored"
        )
    todo = [name for name in backup.files if name not in present]
    _parallel(lambda name: tree.copy(backup.url, name, sources[name], checkpoint_location), todo)
    restored = tree.files(checkpoint_location)
    problems = tree.verify(restored, {name: tree.describe(sources[name]) for name in backup.files})
    if problems:
        raise BackupError(
            f"the restored checkpoint at {checkpoint_location} does not match backup {stamp}: "
            f"{problems[0]}; do not start the job, run the restore again"
        )
    log(f"checkpoint {checkpoint_location} restored from {backup.url}")
    return replaced


def purge_checkpoint_backups(
    checkpoint_location: str, older_than: timedelta, now: datetime | None = None
) -> list[str]:
    """Delete this job's backups taken more than ``older_than`` ago (and unfinished ones as old)."""
    now = now or datetime.now(UTC)
    tree = _tree(checkpoint_location)
    root = checkpoint_backups_root(checkpoint_location)
    deleted = []
    for stamp in tree.folders(root):
        taken = _stamp_time(stamp)
        if taken is None or now - taken <= older_than:
            continue
        tree.remove_folder(_join(root, stamp))
        deleted.append(_join(root, stamp))
    return deleted


# -- the steps ----------------------------------------------------------------------------------


def _copy_verify_publish(
    tree: _Tree, location: str, target: str, originals: dict[str, Any], now: datetime
) -> dict[str, Any]:
    _parallel(lambda name: tree.copy(location, name, originals[name], target), sorted(originals))
    copies = tree.files(target)
    expected = {name: tree.describe(info) for name, info in originals.items()}
    problems = tree.verify(copies, expected)
    if problems:
        raise BackupError(
            f"the copy of {location} in {target} is not exact ({problems[0]}); the checkpoint is "
            "untouched and the unfinished backup will be removed by the next run"
        )
    manifest = {
        "source": location,
        "taken_at": now.isoformat(),
        "files": expected,
    }
    if not tree.publish(target, json.dumps(manifest, indent=1, sort_keys=True).encode()):
        raise BackupError(f"{target} was published by another run at the same time; nothing deleted")
    return manifest


def _delete_originals(tree: _Tree, location: str, originals: dict[str, Any], files: dict[str, Any]) -> None:
    changed: list[str] = []

    def delete(name: str) -> None:
        if not tree.delete(location, name, originals[name]):
            changed.append(name)

    _parallel(delete, sorted(originals))
    left = sorted(set(tree.files(location)) - set(originals)) + changed
    if left:
        raise BackupError(
            f"{len(left)} file(s) of {location} changed or appeared while it was backed up (first: "
            f"{left[0]}): is the job still running? They were left in place; stop the job and run the "
            "backup again"
        )
    tree.remove_folder(location)


def _interrupted_backup(tree: _Tree, root: str, location: str, originals: dict[str, Any]) -> Backup | None:
    """The published backup whose originals these files are (a backup killed while deleting them)."""
    for backup in reversed(list_backups(location)):
        if backup.source.rstrip("/") != location.rstrip("/"):
            continue
        if set(originals) <= set(backup.files) and all(
            tree.matches(info, backup.files[name]) for name, info in originals.items()
        ):
            return backup
        return None  # only the newest backup can have been interrupted
    return None


def _all_restored_from(tree: _Tree, backup: Backup, location: str, present: dict[str, Any]) -> bool:
    return all(
        name in backup.files and tree.is_restored(info, backup, name) for name, info in present.items()
    )


def _remove_unfinished(tree: _Tree, root: str, log: Log) -> None:
    for stamp in tree.folders(root):
        folder = _join(root, stamp)
        if tree.read_manifest(folder) is None:
            log(f"removing the unfinished backup {folder} left by an interrupted run")
            tree.remove_folder(folder)


def _free_stamp(tree: _Tree, root: str, now: datetime) -> str:
    existing = set(tree.folders(root))
    stamp = now.strftime(STAMP_FORMAT)
    candidate, n = stamp, 1
    while candidate in existing:
        candidate, n = f"{stamp}-{n}", n + 1
    return _join(root, candidate)


def _stamp_time(stamp: str) -> datetime | None:
    try:
        return datetime.strptime(stamp.split("-", 1)[0], STAMP_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None  # not one of ours


def _join(base: str, *names: str) -> str:
    return "/".join([base.rstrip("/"), *(n.strip("/") for n in names)])


def _parallel(work: Callable[[str], Any], names: list[str]) -> None:
    with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="backup") as pool:
        for _ in pool.map(work, names):
            pass


# -- storages -----------------------------------------------------------------------------------


class _Tree:
    """The file operations a backup needs, on one kind of storage."""

    def files(self, folder: str) -> dict[str, Any]:
        """Relative path -> what the storage says of each file below ``folder`` (recursively)."""
        raise NotImplementedError

    def folders(self, folder: str) -> list[str]:
        """Names of the sub-folders of ``folder`` (the backups' stamps)."""
        raise NotImplementedError

    def describe(self, info: Any) -> dict[str, Any]:
        """What the manifest keeps of one original: its size and its identity."""
        raise NotImplementedError

    def copy(self, folder: str, name: str, info: Any, target: str) -> None:
        raise NotImplementedError

    def verify(self, copies: dict[str, Any], expected: dict[str, dict[str, Any]]) -> list[str]:
        """Problems of ``copies`` against the :meth:`describe` of their sources (empty: exact)."""
        problems = [f"{name} is missing" for name in sorted(set(expected) - set(copies))]
        problems += [f"{name} is not part of it" for name in sorted(set(copies) - set(expected) - {MANIFEST})]
        for name in sorted(set(expected) & set(copies)):
            if not self.is_copy(copies[name], expected[name]):
                problems.append(f"{name} differs from the original")
        return problems

    def is_copy(self, copy: Any, source: dict[str, Any]) -> bool:
        """Whether ``copy`` holds exactly the file :meth:`describe` described as ``source``."""
        raise NotImplementedError

    def matches(self, info: Any, expected: dict[str, Any]) -> bool:
        """Whether an original is still the version the manifest describes."""
        raise NotImplementedError

    def is_restored(self, info: Any, backup: Backup, name: str) -> bool:
        raise NotImplementedError

    def publish(self, folder: str, manifest: bytes) -> bool:
        raise NotImplementedError

    def read_manifest(self, folder: str) -> dict[str, Any] | None:
        raise NotImplementedError

    def delete(self, folder: str, name: str, info: Any) -> bool:
        raise NotImplementedError

    def remove_folder(self, folder: str) -> None:
        raise NotImplementedError


class _BlobTree(_Tree):
    """Azure Blob: server-side copies conditional on ETags, conditional deletes, manifest if absent."""

    def __init__(self) -> None:
        self.blobs = BlobObjects()

    def files(self, folder: str) -> dict[str, BlobInfo]:
        url = _blob(folder)
        prefix = f"{url.path}/" if url.path else ""
        return {info.url.path[len(prefix) :]: info for info in self.blobs.list(url)}

    def folders(self, folder: str) -> list[str]:
        url = _blob(folder)
        prefix = f"{url.path}/" if url.path else ""
        names = set()
        for item in self.blobs.container(url).walk_blobs(name_starts_with=prefix, delimiter="/"):
            name = item.name[len(prefix) :].strip("/")
            if name and item.name.endswith("/"):
                names.add(name)
        return sorted(names)

    def describe(self, info: BlobInfo) -> dict[str, Any]:
        return {"size": info.size, "etag": info.etag}

    def copy(self, folder: str, name: str, info: BlobInfo, target: str) -> None:
        if self.blobs.copy(info, _blob(target).child(name)) is None:
            existing = self.blobs.info(_blob(target).child(name))
            if existing is None or not existing.is_copy_of(info):
                raise BackupError(
                    f"cannot copy {name} to {target}: the original changed or the target is taken"
                )

    def is_copy(self, copy: BlobInfo, source: dict[str, Any]) -> bool:
        return copy.size == source["size"] and copy.source_etag == bare_etag(source["etag"])

    def matches(self, info: BlobInfo, expected: dict[str, Any]) -> bool:
        return info.etag == expected["etag"]

    def is_restored(self, info: BlobInfo, backup: Backup, name: str) -> bool:
        source = self.blobs.info(_blob(backup.url).child(name))
        return source is not None and info.is_copy_of(source)

    def publish(self, folder: str, manifest: bytes) -> bool:
        return self.blobs.create(_blob(folder).child(MANIFEST), manifest) is not None

    def read_manifest(self, folder: str) -> dict[str, Any] | None:
        found = self.blobs.read(_blob(folder).child(MANIFEST))
        return json.loads(found[0]) if found else None

    def delete(self, folder: str, name: str, info: BlobInfo) -> bool:
        return (
            self.blobs.delete(_blob(folder).child(name), if_etag=info.etag)
            or self.blobs.info(info.url) is None
        )

    def remove_folder(self, folder: str) -> None:
        url = _blob(folder)
        prefix = f"{url.path}/" if url.path else ""
        container = self.blobs.container(url)
        # Everything below, Hadoop's zero-byte folder markers included, then the folder's own marker.
        names = [item.name for item in container.list_blobs(name_starts_with=prefix)]
        _parallel(
            lambda name: self.blobs.delete(BlobUrl(url.protocol, url.account, url.container, name)), names
        )
        if url.path:
            self.blobs.delete(url)


class _FsspecTree(_Tree):
    """Any other filesystem (local disk...): plain copies, identity by SHA-256."""

    def __init__(self, location: str) -> None:
        self.fs, _ = url_to_fs(location)

    def _path(self, url: str) -> str:
        return self.fs._strip_protocol(url).rstrip("/")

    def files(self, folder: str) -> dict[str, dict[str, Any]]:
        root = self._path(folder)
        try:
            found = self.fs.find(root, detail=True)
        except FileNotFoundError:
            return {}
        return {
            path[len(root) + 1 :]: {
                "path": path,
                "size": int(info.get("size") or 0),
                "mtime": info.get("mtime"),
            }
            for path, info in found.items()
            if path.startswith(root + "/")
        }

    def folders(self, folder: str) -> list[str]:
        try:
            entries = self.fs.ls(self._path(folder), detail=True)
        except FileNotFoundError:
            return []
        return sorted(
            posixpath.basename(e["name"].rstrip("/")) for e in entries if e.get("type") == "directory"
        )

    def _sha256(self, path: str) -> str:
        digest = hashlib.sha256()
        with self.fs.open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(4 * 1024 * 1024), b""):
                digest.update(chunk)
        return digest.hexdigest()

    def describe(self, info: dict[str, Any]) -> dict[str, Any]:
        return {"size": info["size"], "mtime": info["mtime"], "sha256": self._sha256(info["path"])}

    def copy(self, folder: str, name: str, info: dict[str, Any], target: str) -> None:
        destination = f"{self._path(target)}/{name}"
        self.fs.makedirs(posixpath.dirname(destination), exist_ok=True)
        self.fs.cp_file(info["path"], destination)

    def is_copy(self, copy: dict[str, Any], source: dict[str, Any]) -> bool:
        return copy["size"] == source["size"] and self._sha256(copy["path"]) == source["sha256"]

    def matches(self, info: dict[str, Any], expected: dict[str, Any]) -> bool:
        # The same file, not merely the same bytes: an untouched original keeps its modification time.
        return (
            info["size"] == expected["size"]
            and info["mtime"] == expected.get("mtime")
            and self._sha256(info["path"]) == expected["sha256"]
        )

    def is_restored(self, info: dict[str, Any], backup: Backup, name: str) -> bool:
        expected = backup.files[name]
        return info["size"] == expected["size"] and self._sha256(info["path"]) == expected["sha256"]

    def publish(self, folder: str, manifest: bytes) -> bool:
        path = f"{self._path(folder)}/{MANIFEST}"
        if self.fs.exists(path):
            return False
        temporary = f"{self._path(folder)}/.{MANIFEST}.tmp"
        self.fs.pipe_file(temporary, manifest)
        self.fs.mv(temporary, path)
        return True

    def read_manifest(self, folder: str) -> dict[str, Any] | None:
        try:
            return json.loads(self.fs.cat_file(f"{self._path(folder)}/{MANIFEST}"))
        except FileNotFoundError:
            return None

    def delete(self, folder: str, name: str, info: dict[str, Any]) -> bool:
        try:
            self.fs.rm_file(info["path"])
        except FileNotFoundError:
            pass
        return True

    def remove_folder(self, folder: str) -> None:
        try:
            self.fs.rm(self._path(folder), recursive=True)
        except FileNotFoundError:
            pass


def _blob(url: str) -> BlobUrl:
    parsed = BlobUrl.parse(url)
    if parsed is None:
        raise BackupError(f"{url} is not an Azure storage URL")
    return parsed


def _tree(location: str) -> _Tree:
    return _BlobTree() if BlobUrl.parse(location) is not None else _FsspecTree(location)


def main(argv: list[str] | None = None) -> int:
    """Command line: list, make, restore or purge the backups of one checkpoint.

    ``python -m hubflow.checkpoints.backups list|backup|restore STAMP|purge DAYS CHECKPOINT``
    (``backup`` and ``restore`` need ``--status-dir``: refuse while the job's lease is in use; or
    ``--no-lease-check`` for a checkpoint whose job has no status folder).
    Azure credentials come from ``HUBFLOW_AZURE_STORAGE`` or DefaultAzureCredential.
    """
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m hubflow.checkpoints.backups",
        description=(main.__doc__ or "").splitlines()[0],
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list").add_argument("checkpoint")
    backup = commands.add_parser("backup")
    backup.add_argument("checkpoint")
    restore = commands.add_parser("restore")
    restore.add_argument("checkpoint")
    restore.add_argument("stamp", help="the backup to restore, as printed by 'list'")
    for command in (backup, restore):
        guard = command.add_mutually_exclusive_group(required=True)
        guard.add_argument(
            "--status-dir", help="the job's status folder: refuse while a driver holds its lease"
        )
        guard.add_argument(
            "--no-lease-check",
            action="store_true",
            help="move the checkpoint without asking whether a driver writes it (you stopped it yourself)",
        )
    purge = commands.add_parser("purge")
    purge.add_argument("checkpoint")
    purge.add_argument("days", type=float)
    args = parser.parse_args(argv)
    try:
        if args.command == "list":
            for backup in list_backups(args.checkpoint):
                print(f"{backup.stamp}  {len(backup.files)} file(s)  {backup.url}")
        elif args.command == "backup":
            backed_up = backup_checkpoint(args.checkpoint, log=print, status_dir=args.status_dir)
            print(backed_up or "no checkpoint there; nothing to back up")
        elif args.command == "restore":
            replaced = restore_checkpoint(args.checkpoint, args.stamp, log=print, status_dir=args.status_dir)
            if replaced:
                print(f"the checkpoint that was there is kept as {replaced}")
        else:
            for url in purge_checkpoint_backups(args.checkpoint, timedelta(days=args.days)):
                print(f"deleted {url}")
    except BackupError as exc:
        print(f"error: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
