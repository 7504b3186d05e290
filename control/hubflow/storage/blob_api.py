"""Blobs by URL with the Blob API's own guarantees: ETags, conditional writes, server-side copies.

The Blob API has no rename and no directories; what it has is exact: every blob carries an ETag that
changes on every write, a write can be made conditional on it (``If-Match``) or on the blob's
absence (``If-None-Match: *``), a delete likewise, and a copy runs inside the service
(``Copy Blob``), may be conditional on the source's ETag and appears at its target whole. The
archive, the checkpoint backups and the status folder's document store are built on these
operations (:class:`BlobObjects`); anything that has to be atomic on Blob is one of them.

Every method takes ``abfss://``/``abfs://``/``az://`` URLs (or :class:`~hubflow.storage.azure.BlobUrl`)
and authenticates through :mod:`hubflow.storage.azure`. A condition that does not hold is a
normal answer (``None``/``False``), not an exception; other errors (network, auth) raise.
No Spark and no Airflow import here.
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hubflow.storage.azure import BlobUrl, StorageAccessError, blob_service_for

#: Metadata a hubflow copy leaves on its target: the ETag of the source version it copied.
SOURCE_ETAG_METADATA = "hubflow_source_etag"
#: How long a copy the service runs in the background (cross-account, large blobs) may take.
COPY_TIMEOUT_SECONDS = 600.0


class CopyFailedError(OSError):
    """The service reported a server-side copy as failed or aborted; the target was removed."""


@dataclass(frozen=True)
class BlobInfo:
    """What the service says about one blob (its properties, no content)."""

    url: BlobUrl
    size: int
    etag: str
    content_md5: bytes | None
    last_modified: datetime | None
    metadata: dict[str, str] = field(default_factory=dict)
    copy_status: str | None = None

    @property
    def source_etag(self) -> str | None:
        """The ETag of the source a hubflow copy made this blob from (None: not such a copy)."""
        value = self.metadata.get(SOURCE_ETAG_METADATA)
        return bare_etag(value) if value else None

    def is_copy_of(self, other: BlobInfo) -> bool:
        """Whether this blob is a hubflow copy of exactly ``other``'s current version."""
        return self.source_etag is not None and self.source_etag == bare_etag(other.etag)


def bare_etag(etag: str) -> str:
    """An ETag without the double quotes HTTP puts around it (metadata values cannot keep them)."""
    return etag.strip().strip('"')


def as_url(url: str | BlobUrl) -> BlobUrl:
    """``url`` parsed; a clear error when it is not an Azure storage URL."""
    if isinstance(url, BlobUrl):
        return url
    parsed = BlobUrl.parse(url)
    if parsed is None:
        raise StorageAccessError(f"{url} is not an Azure storage URL (abfss://, abfs:// or az://)")
    return parsed


def _info(url: BlobUrl, properties: Any) -> BlobInfo:
    settings = getattr(properties, "content_settings", None)
    md5 = getattr(settings, "content_md5", None) if settings is not None else None
    copy = getattr(properties, "copy", None)
    return BlobInfo(
        url=url,
        size=int(properties.size or 0),
        etag=str(properties.etag),
        content_md5=bytes(md5) if md5 else None,
        last_modified=properties.last_modified,
        metadata=dict(properties.metadata or {}),
        copy_status=getattr(copy, "status", None) if copy is not None else None,
    )


class BlobObjects:
    """Conditional reads, writes, deletes and server-side copies of blobs (see the module docstring)."""

    def _client(self, url: BlobUrl) -> Any:
        return blob_service_for(url).get_blob_client(url.container, url.path)

    def container(self, url: str | BlobUrl) -> Any:
        """The SDK's ``ContainerClient`` of ``url``'s container."""
        parsed = as_url(url)
        return blob_service_for(parsed).get_container_client(parsed.container)

    def info(self, url: str | BlobUrl) -> BlobInfo | None:
        """The blob's properties, or None when it does not exist."""
        from azure.core.exceptions import ResourceNotFoundError

        parsed = as_url(url)
        try:
            return _info(parsed, self._client(parsed).get_blob_properties())
        except ResourceNotFoundError:
            return None

    def list(self, prefix: str | BlobUrl) -> Iterator[BlobInfo]:
        """Every blob below the folder ``prefix`` (recursively), with metadata; zero-byte folder
        markers that Hadoop's ABFS driver leaves on flat-namespace accounts are skipped."""
        parsed = as_url(prefix)
        start = f"{parsed.path}/" if parsed.path else ""
        for item in self.container(parsed).list_blobs(name_starts_with=start, include=["metadata"]):
            metadata = item.metadata or {}
            if str(metadata.get("hdi_isfolder", "")).lower() == "true":
                continue
            yield _info(BlobUrl(parsed.protocol, parsed.account, parsed.container, item.name), item)

    def read(self, url: str | BlobUrl) -> tuple[bytes, str] | None:
        """``(content, etag)`` of one consistent version, or None when the blob does not exist."""
        from azure.core.exceptions import ResourceNotFoundError

        parsed = as_url(url)
        try:
            downloader = self._client(parsed).download_blob()
            return downloader.readall(), str(downloader.properties.etag)
        except ResourceNotFoundError:
            return None

    def create(self, url: str | BlobUrl, data: bytes, metadata: dict[str, str] | None = None) -> str | None:
        """Write ``data`` only if no blob exists there (``If-None-Match: *``); its ETag, or None."""
        from azure.core.exceptions import ResourceExistsError, ResourceModifiedError

        parsed = as_url(url)
        try:
            result = self._client(parsed).upload_blob(data, overwrite=False, metadata=metadata)
        except (ResourceExistsError, ResourceModifiedError):
            return None
        return str(result["etag"])

    def replace(self, url: str | BlobUrl, data: bytes, if_etag: str) -> str | None:
        """Replace the blob only if its ETag is still ``if_etag`` (``If-Match``); new ETag, or None."""
        from azure.core import MatchConditions
        from azure.core.exceptions import ResourceModifiedError, ResourceNotFoundError

        parsed = as_url(url)
        try:
            result = self._client(parsed).upload_blob(
                data, overwrite=True, etag=if_etag, match_condition=MatchConditions.IfNotModified
            )
        except (ResourceModifiedError, ResourceNotFoundError):
            return None
        return str(result["etag"])

    def write(self, url: str | BlobUrl, data: bytes) -> str:
        """Write ``data`` whole, replacing any blob there; its ETag.

        One Put Blob request up to the SDK's single-upload size (64 MiB), a committed block list
        above it: either way readers see the previous content or the new one, never a mix.
        """
        parsed = as_url(url)
        return str(self._client(parsed).upload_blob(data, overwrite=True)["etag"])

    def delete(self, url: str | BlobUrl, if_etag: str | None = None) -> bool:
        """Delete the blob (only if its ETag is still ``if_etag`` when given); whether it was deleted."""
        from azure.core import MatchConditions
        from azure.core.exceptions import ResourceModifiedError, ResourceNotFoundError

        parsed = as_url(url)
        conditions: dict[str, Any] = {}
        if if_etag is not None:
            conditions = {"etag": if_etag, "match_condition": MatchConditions.IfNotModified}
        try:
            self._client(parsed).delete_blob(**conditions)
        except (ResourceModifiedError, ResourceNotFoundError):
            return False
        return True

    def copy(
        self, source: BlobInfo, target: str | BlobUrl, metadata: dict[str, str] | None = None
    ) -> str | None:
        """Copy ``source`` inside the service to ``target`` if nothing is there yet; the target's ETag.

        The copy takes exactly the version ``source`` describes (``x-ms-source-if-match`` on its
        ETag) and records that ETag in the target's metadata (:data:`SOURCE_ETAG_METADATA`), so a
        later look at the two blobs can tell the target is a complete copy of that very version.
        Returns None when the target already exists (``If-None-Match: *``) or the source changed or
        vanished since ``source`` was read. A copy the service finishes in the background is waited
        for; one that fails is removed and raises :class:`CopyFailedError`. No read-back is needed to
        trust a successful copy: the service copied the version whose ETag the condition named.
        """
        from azure.core import MatchConditions
        from azure.core.exceptions import ResourceExistsError, ResourceModifiedError, ResourceNotFoundError

        parsed = as_url(target)
        client = self._client(parsed)
        source_client = self._client(source.url)
        try:
            result = client.start_copy_from_url(
                source_client.url,
                metadata={**(metadata or {}), SOURCE_ETAG_METADATA: bare_etag(source.etag)},
                source_etag=source.etag,
                source_match_condition=MatchConditions.IfNotModified,
                match_condition=MatchConditions.IfMissing,
            )
        except (ResourceExistsError, ResourceModifiedError, ResourceNotFoundError):
            return None
        if result.get("copy_status") != "success":
            return self._wait_for_copy(parsed)
        return str(result["etag"])

    def _wait_for_copy(self, url: BlobUrl) -> str:
        deadline = time.monotonic() + COPY_TIMEOUT_SECONDS
        delay = 0.05
        while True:
            info = self.info(url)
            status = info.copy_status if info else None
            if status == "success" and info is not None:
                return info.etag
            if status in ("failed", "aborted") or info is None:
                if info is not None:
                    self.delete(url, if_etag=info.etag)
                raise CopyFailedError(f"the service's copy to {url} ended {status or 'with the target gone'}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the copy to {url} is still {status} after {COPY_TIMEOUT_SECONDS:.0f} s")
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def md5(self, url: str | BlobUrl) -> bytes | None:
        """The MD5 of the blob's content, computed by reading it (None when it does not exist)."""
        from azure.core.exceptions import ResourceNotFoundError

        parsed = as_url(url)
        digest = hashlib.md5(usedforsecurity=False)
        try:
            for chunk in self._client(parsed).download_blob().chunks():
                digest.update(chunk)
        except ResourceNotFoundError:
            return None
        return digest.digest()

    def same_content(self, a: BlobInfo, b: BlobInfo) -> bool:
        """Whether two blobs hold the same bytes, decided by content identity, never by size alone.

        In order of cost: ``b`` is a hubflow copy of exactly ``a``'s version (its recorded source
        ETag is ``a``'s ETag), or the reverse; both carry a Content-MD5 (set by the service on
        single-request uploads and kept by copies) and they match; else both are read and hashed.
        """
        if a.size != b.size:
            return False
        if b.is_copy_of(a) or a.is_copy_of(b):
            return True
        if a.content_md5 and b.content_md5:
            return a.content_md5 == b.content_md5
        return self.md5(a.url) == self.md5(b.url)


def md5_base64(digest: bytes | None) -> str | None:
    """An MD5 digest as the base64 text the Blob API shows (``Content-MD5``)."""
    return base64.b64encode(digest).decode("ascii") if digest else None
