"""Documents in one folder with conditional writes: the storage under a job's status folder.

The job↔supervisor contract (:mod:`hubflow.status`) needs more than "write a file": the
lease is only safe if creating it fails when it exists, and renewing or releasing it fails when
someone else changed it since we read it. So every store offers the same small set of primitives:

==========================  ==========================================================================
``read(name)``              the document and its *version* (an opaque token), or None when absent
``create(name, data)``      create-if-absent; the new version, or None when the name exists
``replace(name, data, v)``  replace-if-unchanged: only when the current version is ``v``; else None
``delete(name, v)``         delete-if-unchanged: only when the current version is ``v``; else False
``write(name, data)``       atomic whole-document write (readers see the old or the new, never half)
``remove(name)``            unconditional delete, absent is fine
``names()``                 the names in the folder (one listing: the markers a job polls for)
``append_line``, ``upload``, ``read_tail``, ``size``  logs: progress history, the driver log
==========================  ==========================================================================

Implementations:

* :class:`LocalStore` for local paths and ``file://`` URLs: atomic writes by a temporary file and
  ``os.replace``; create-if-absent by ``os.link`` of a complete temporary file (fails with
  ``EEXIST``, so nobody ever sees a half-written lease); replace/delete-if-unchanged compare and
  swap under an exclusive ``flock`` on ``.storage.lock`` in the folder, which serialises every
  conditional write of every process on the host (and of containers sharing the volume: one
  kernel). The version is the SHA-256 of the content; the lease writes a new counter on every
  renewal, so content never repeats and the comparison is exact.
* :class:`FsspecStore`, the **generic fallback** for any other fsspec URL. Plain fsspec has no
  conditional writes, so its create/replace/delete check and then act: correct for one writer,
  *not* safe against concurrent starters. A warning says so once per protocol.
* :class:`~hubflow.storage.blob_document_store.BlobStore` for Azure Blob / ADLS Gen2
  (``abfs``/``abfss``/``az``):
  ``If-None-Match: *`` on create and ``If-Match: <ETag>`` on replace and delete, enforced by the
  service; the version is the ETag. Other stores plug in with :func:`register_store`.

:func:`store_for` picks the store of a URL. No Spark and no Airflow import here.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlparse

from hubflow.storage.document_store import (
    DocumentStore,
    Versioned,
    _read_tail_of_file,
    _tail_of,
    content_version,
)

log = logging.getLogger(__name__)


class LocalStore(DocumentStore):
    """A folder on a local (POSIX) filesystem; conditional writes are exact (see module docstring)."""

    is_local = True
    LOCK_FILE = ".storage.lock"
    #: A process frozen while it holds the lock (SIGSTOP, a paused container) must not hang every
    #: other writer: past this wait the conditional write fails like an unreachable storage.
    LOCK_TIMEOUT_SECONDS = 10.0

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.root = Path(urlparse(url).path if url.startswith("file:") else url)

    def url_of(self, name: str) -> str:
        return str(self.root / name)

    def _path(self, name: str) -> Path:
        return self.root / name

    def _temp(self, name: str) -> Path:
        return self.root / f".{name}.{uuid.uuid4().hex}.tmp"

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        """Hold the folder's compare-and-swap lock (an flock: released if the process dies)."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / self.LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            deadline = time.monotonic() + self.LOCK_TIMEOUT_SECONDS
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise TimeoutError(
                            f"{self.root / self.LOCK_FILE} has been locked by another process for "
                            f"{self.LOCK_TIMEOUT_SECONDS:.0f} s"
                        ) from None
                    time.sleep(0.005)
            yield
        finally:
            os.close(fd)  # closing releases the flock

    def _write_temp(self, name: str, data: bytes) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        temp = self._temp(name)
        with open(temp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        return temp

    def read(self, name: str) -> Versioned | None:
        try:
            data = self._path(name).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None
        return Versioned(data, content_version(data))

    def create(self, name: str, data: bytes) -> str | None:
        temp = self._write_temp(name, data)
        try:
            with self._exclusive():
                os.link(temp, self._path(name))  # atomic, and fails if the name exists
        except FileExistsError:
            return None
        finally:
            temp.unlink(missing_ok=True)
        return content_version(data)

    def replace(self, name: str, data: bytes, if_version: str) -> str | None:
        temp = self._write_temp(name, data)
        try:
            with self._exclusive():
                current = self.read(name)
                if current is None or current.version != if_version:
                    return None
                os.replace(temp, self._path(name))
        finally:
            temp.unlink(missing_ok=True)
        return content_version(data)

    def delete(self, name: str, if_version: str) -> bool:
        with self._exclusive():
            current = self.read(name)
            if current is None or current.version != if_version:
                return False
            self._path(name).unlink()
            return True

    def write(self, name: str, data: bytes) -> None:
        temp = self._write_temp(name, data)
        try:
            os.replace(temp, self._path(name))
        finally:
            temp.unlink(missing_ok=True)

    def remove(self, name: str) -> None:
        self._path(name).unlink(missing_ok=True)

    def names(self) -> set[str]:
        try:
            return {entry.name for entry in self.root.iterdir()}
        except (FileNotFoundError, NotADirectoryError):
            return set()

    def append_line(self, name: str, line: str, rotate_above: int) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        path = self._path(name)
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_size > rotate_above:
                os.replace(path, self._path(f"{name}.1"))
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(line.rstrip("\n") + "\n")

    def upload(self, local_path: Path, name: str, max_bytes: int) -> None:
        if Path(local_path).resolve() == self._path(name).resolve():
            return  # the file is already where it belongs
        self.write(name, _read_tail_of_file(Path(local_path), max_bytes))

    def size(self, name: str) -> int | None:
        try:
            return self._path(name).stat().st_size
        except (FileNotFoundError, NotADirectoryError):
            return None

    def read_tail(self, name: str, max_bytes: int) -> bytes | None:
        try:
            return _read_tail_of_file(self._path(name), max_bytes)
        except (FileNotFoundError, NotADirectoryError):
            return None


class FsspecStore(DocumentStore):
    """GENERIC FALLBACK for fsspec URLs without a store of their own.

    Reads and whole-document writes are fine; the conditional writes are check-then-act, so two
    processes racing can both succeed. Use it only where one writer at a time is guaranteed by
    other means, or register a store with real conditional writes (:func:`register_store`).
    """

    def __init__(self, url: str) -> None:
        import fsspec

        super().__init__(url)
        self.fs, self.root = fsspec.core.url_to_fs(self.url)
        self.root = self.root.rstrip("/")

    def _path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def read(self, name: str) -> Versioned | None:
        try:
            data = self.fs.cat_file(self._path(name))
        except FileNotFoundError:
            return None
        return Versioned(data, content_version(data))

    def create(self, name: str, data: bytes) -> str | None:
        self.fs.makedirs(self.root, exist_ok=True)
        if self.size(name) is not None:  # not every backend honours mode="create"
            return None
        try:
            self.fs.pipe_file(self._path(name), data, mode="create")
        except FileExistsError:
            return None
        current = self.read(name)  # best effort: did our document win?
        return current.version if current is not None and current.data == data else None

    def replace(self, name: str, data: bytes, if_version: str) -> str | None:
        current = self.read(name)
        if current is None or current.version != if_version:
            return None
        self.write(name, data)
        return content_version(data)

    def delete(self, name: str, if_version: str) -> bool:
        current = self.read(name)
        if current is None or current.version != if_version:
            return False
        self.remove(name)
        return True

    def write(self, name: str, data: bytes) -> None:
        self.fs.makedirs(self.root, exist_ok=True)
        temp = self._path(f".{name}.{uuid.uuid4().hex}.tmp")
        self.fs.pipe_file(temp, data)
        try:
            self.fs.mv(temp, self._path(name))
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm(temp)
            raise

    def remove(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self._path(name))

    def names(self) -> set[str]:
        try:
            entries = self.fs.ls(self.root, detail=False)
        except FileNotFoundError:
            return set()
        return {str(entry).rstrip("/").rsplit("/", 1)[-1] for entry in entries}

    def append_line(self, name: str, line: str, rotate_above: int) -> None:
        self.fs.makedirs(self.root, exist_ok=True)
        path = self._path(name)
        size = self.size(name)
        if size is not None and size > rotate_above:
            self.fs.mv(path, self._path(f"{name}.1"))
        with self.fs.open(path, "a") as handle:
            handle.write(line.rstrip("\n") + "\n")

    def upload(self, local_path: Path, name: str, max_bytes: int) -> None:
        self.write(name, _read_tail_of_file(Path(local_path), max_bytes))

    def size(self, name: str) -> int | None:
        try:
            return int(self.fs.size(self._path(name)))
        except FileNotFoundError:
            return None

    def read_tail(self, name: str, max_bytes: int) -> bytes | None:
        size = self.size(name)
        if size is None:
            return None
        try:
            return self.fs.cat_file(self._path(name), start=_tail_of(size, max_bytes))
        except FileNotFoundError:
            return None


def _blob_store(url: str) -> DocumentStore:
    """:class:`~hubflow.storage.blob_document_store.BlobStore` (imported on use: the Azure SDK is optional
    here)."""
    from hubflow.storage.blob_document_store import BlobStore

    return BlobStore(url)


StoreFactory = Callable[[str], DocumentStore]
_STORES: dict[str, StoreFactory] = {
    "": LocalStore,
    "file": LocalStore,
    "local": LocalStore,
    # Azure Blob / ADLS Gen2: If-None-Match / If-Match conditions enforced by the service.
    "abfs": _blob_store,
    "abfss": _blob_store,
    "az": _blob_store,
}
_WARNED: set[str] = set()


def register_store(protocols: tuple[str, ...] | list[str], factory: StoreFactory) -> None:
    """Use ``factory(url)`` for URLs of ``protocols`` (e.g. ``("abfs", "abfss", "az")``)."""
    for protocol in protocols:
        _STORES[protocol.lower()] = factory


def protocol_of(url: str) -> str:
    """``abfss`` for ``abfss://...``, ``""`` for a plain path."""
    return url.split("://", 1)[0].lower() if "://" in url else ""


def store_for(url: str) -> DocumentStore:
    """The store of the folder at ``url``: a registered one for its protocol, else the fallback."""
    protocol = protocol_of(url)
    factory = _STORES.get(protocol)
    if factory is not None:
        return factory(url)
    if protocol not in _WARNED:
        _WARNED.add(protocol)
        log.warning(
            "no store with conditional writes for %s:// URLs; using the generic fsspec fallback, which "
            "cannot guarantee a single lease holder when several instances start at once",
            protocol,
        )
    return FsspecStore(url)
