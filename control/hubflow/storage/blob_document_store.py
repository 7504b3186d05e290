"""The status folder's document store on Azure Blob: conditional writes the service itself enforces.

:class:`BlobStore` implements :class:`~hubflow.storage.document_stores.DocumentStore` for
``abfss://``/``abfs://``/``az://`` folders with :class:`~hubflow.storage.blob_api.BlobObjects`:

* ``create`` is a Put Blob with ``If-None-Match: *``: of N starters creating the lease at once, the
  service accepts exactly one;
* ``replace`` and ``delete`` carry ``If-Match: <ETag>``: a holder whose lease was taken over (its
  ETag is stale) fails to renew or release it;
* ``write`` is one Put Blob (a committed block list above 64 MiB): a reader gets the old document or
  the new one, never a half-written one - no temporary file and no rename, which Blob does not have;
* the version of a document is its ETag.

The driver log and progress history have one writer (the job holding the lease); ``append_line``
still appends with ``If-Match`` and retries, so a concurrent writer cannot lose a line silently.
No Spark and no Airflow import here.
"""

from __future__ import annotations

from pathlib import Path

from hubflow.storage.azure import BlobUrl
from hubflow.storage.blob_api import BlobObjects, as_url
from hubflow.storage.document_store import DocumentStore, Versioned, _read_tail_of_file, _tail_of

#: Attempts of one ``append_line`` against concurrent appenders before it gives up.
APPEND_ATTEMPTS = 20


class BlobStore(DocumentStore):
    """One folder (a name prefix) of an Azure Blob container; see the module docstring."""

    def __init__(self, url: str, objects: BlobObjects | None = None) -> None:
        super().__init__(url)
        self.folder: BlobUrl = as_url(self.url)
        self.objects = objects or BlobObjects()

    def _blob(self, name: str) -> BlobUrl:
        return self.folder.child(name)

    def read(self, name: str) -> Versioned | None:
        found = self.objects.read(self._blob(name))
        return None if found is None else Versioned(found[0], found[1])

    def create(self, name: str, data: bytes) -> str | None:
        return self.objects.create(self._blob(name), data)

    def replace(self, name: str, data: bytes, if_version: str) -> str | None:
        return self.objects.replace(self._blob(name), data, if_version)

    def delete(self, name: str, if_version: str) -> bool:
        return self.objects.delete(self._blob(name), if_etag=if_version)

    def write(self, name: str, data: bytes) -> None:
        self.objects.write(self._blob(name), data)

    def remove(self, name: str) -> None:
        self.objects.delete(self._blob(name))

    def names(self) -> set[str]:
        prefix = f"{self.folder.path}/" if self.folder.path else ""
        names = set()
        for info in self.objects.list(self.folder):
            relative = info.url.path[len(prefix) :]
            names.add(relative.split("/", 1)[0])
        return names

    def append_line(self, name: str, line: str, rotate_above: int) -> None:
        text = (line.rstrip("\n") + "\n").encode("utf-8")
        for _ in range(APPEND_ATTEMPTS):
            current = self.read(name)
            if current is None:
                if self.create(name, text) is not None:
                    return
                continue
            if len(current.data) > rotate_above:
                self.write(f"{name}.1", current.data)
                if self.replace(name, text, current.version) is not None:
                    return
                continue
            if self.replace(name, current.data + text, current.version) is not None:
                return
        raise TimeoutError(
            f"{self.url_of(name)}: {APPEND_ATTEMPTS} appends in a row lost to concurrent writers"
        )

    def upload(self, local_path: Path, name: str, max_bytes: int) -> None:
        self.write(name, _read_tail_of_file(Path(local_path), max_bytes))

    def size(self, name: str) -> int | None:
        info = self.objects.info(self._blob(name))
        return None if info is None else info.size

    def read_tail(self, name: str, max_bytes: int) -> bytes | None:
        from azure.core.exceptions import ResourceNotFoundError

        size = self.size(name)
        if size is None:
            return None
        blob = self._blob(name)
        client = self.objects.container(blob).get_blob_client(blob.path)
        start = _tail_of(size, max_bytes)
        try:
            return client.download_blob(offset=start, length=size - start).readall() if size else b""
        except ResourceNotFoundError:
            return None
