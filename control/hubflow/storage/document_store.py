"""The document-store interface every status-folder store implements, and the helpers they share.

:class:`DocumentStore` (the primitives are listed in :mod:`hubflow.storage.document_stores`), the
:class:`Versioned` document a read returns, and the byte-tail helpers. It lives apart from
:mod:`hubflow.storage.document_stores` (which picks a store for a URL and imports
:mod:`hubflow.storage.blob_document_store` on use) so that the Blob store can implement the
interface without importing ``document_stores`` back. No Spark and no Airflow import here.
"""

from __future__ import annotations

import hashlib
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Versioned:
    """A document as read, with the version a conditional write must name."""

    data: bytes
    version: str


def content_version(data: bytes) -> str:
    """The version of ``data`` for stores without server-side versions: its SHA-256."""
    return hashlib.sha256(data).hexdigest()


class DocumentStore(ABC):
    """One folder of named documents, local or remote (see the module docstring)."""

    #: True when the folder is a local path this process can open directly (e.g. to log into it).
    is_local: bool = False

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def url_of(self, name: str) -> str:
        """The URL (or local path) of ``name``, for messages and links."""
        return f"{self.url}/{name}"

    @abstractmethod
    def read(self, name: str) -> Versioned | None:
        """The document ``name`` and its version, or None when it does not exist."""

    @abstractmethod
    def create(self, name: str, data: bytes) -> str | None:
        """Create ``name`` holding ``data`` unless it exists; the new version, or None if it existed."""

    @abstractmethod
    def replace(self, name: str, data: bytes, if_version: str) -> str | None:
        """Replace ``name`` only if its version is still ``if_version``; the new version, or None."""

    @abstractmethod
    def delete(self, name: str, if_version: str) -> bool:
        """Delete ``name`` only if its version is still ``if_version``; whether it was deleted."""

    @abstractmethod
    def write(self, name: str, data: bytes) -> None:
        """Write ``name`` whole and atomically: a reader sees the old or the new document."""

    @abstractmethod
    def remove(self, name: str) -> None:
        """Delete ``name`` if it exists."""

    @abstractmethod
    def names(self) -> set[str]:
        """The names of the documents in the folder (empty when the folder does not exist)."""

    @abstractmethod
    def append_line(self, name: str, line: str, rotate_above: int) -> None:
        """Append one line to ``name``; past ``rotate_above`` bytes it is renamed to ``name.1`` first."""

    @abstractmethod
    def upload(self, local_path: Path, name: str, max_bytes: int) -> None:
        """Copy the local file ``local_path`` to ``name`` (its last ``max_bytes`` when longer)."""

    @abstractmethod
    def size(self, name: str) -> int | None:
        """The size of ``name`` in bytes, or None when it does not exist."""

    @abstractmethod
    def read_tail(self, name: str, max_bytes: int) -> bytes | None:
        """The last ``max_bytes`` of ``name``, or None when it does not exist."""

    def exists(self, name: str) -> bool:
        """Whether ``name`` exists."""
        return self.size(name) is not None


def _tail_of(path_size: int, max_bytes: int) -> int:
    return max(0, path_size - max_bytes)


def _read_tail_of_file(path: Path, max_bytes: int) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(_tail_of(os.fstat(handle.fileno()).st_size, max_bytes))
        return handle.read()
