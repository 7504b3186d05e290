"""A real Spark file stream's checkpoint and landing files, moved onto Azurite.

Spark runs the query locally (fast); its checkpoint and landing files are then uploaded to a Blob
container and the file source log's ``file://`` paths rewritten to the ``abfs://`` URLs of the
uploaded files — what Spark itself writes when it reads that container through ABFS.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from tests.plugins.file_streams import FileStream, relative_files
from tests.support.azurite import Azurite

REPO_ROOT = Path(__file__).resolve().parents[2]


def start_child(azurite: Azurite, module: str, *args: str) -> subprocess.Popen:
    """``python -m <module> <args>`` with the repository importable and Azurite's account in the
    child's environment, the way a supervisor hands a storage access to a driver or a task."""
    from hubflow.storage.azure import env_for

    env = {
        **os.environ,
        **env_for([azurite.access()]),
        "PYTHONPATH": os.pathsep.join(str(REPO_ROOT / p) for p in ("", "jobs", "plugins")),
        "PYTHONUNBUFFERED": "1",
    }
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO_ROOT,
    )


@dataclass
class BlobStream:
    """URLs of a checkpoint, its landing folder and an archive folder in one container."""

    azurite: Azurite
    container: str
    checkpoint: str
    landing: str
    archive: str
    landed: dict[str, bytes] = field(default_factory=dict)
    #: landing files of a batch that is planned but not committed (they must stay)
    uncommitted: set[str] = field(default_factory=set)

    def container_client(self):
        from azure.storage.blob import ContainerClient

        return ContainerClient.from_connection_string(self.azurite.connection_string, self.container)

    def files(self, folder: str) -> dict[str, bytes]:
        """``{relative path: content}`` of the blobs below ``landing`` or ``archive`` (a folder name)."""
        client = self.container_client()
        prefix = f"{folder}/"
        found = {}
        for blob in client.list_blobs(name_starts_with=prefix, include=["metadata"]):
            if (blob.metadata or {}).get("hdi_isfolder") == "true":
                continue
            found[blob.name[len(prefix) :]] = client.download_blob(blob.name).readall()
        return found


def upload_stream(stream: FileStream, azurite: Azurite, container: str) -> BlobStream:
    """Put ``stream``'s landing files and checkpoint into ``container`` (``landing/``, ``checkpoint/``)."""
    client = BlobStream(azurite, container, "", "", "").container_client()
    landed = {}
    for name in relative_files(stream.landing):
        data = (stream.landing / name).read_bytes()
        client.upload_blob(f"landing/{name}", data)  # one Put Blob: the service records its MD5
        landed[name] = data
    landing_url = azurite.url(container, "landing")
    spark_prefix = "file://" + quote(str(stream.landing))
    for name in relative_files(stream.checkpoint):
        data = (stream.checkpoint / name).read_bytes()
        if name.startswith("sources/") and not Path(name).name.startswith("."):
            data = data.replace(spark_prefix.encode(), landing_url.encode())
        client.upload_blob(f"checkpoint/{name}", data)
    return BlobStream(
        azurite,
        container,
        checkpoint=azurite.url(container, "checkpoint"),
        landing=landing_url,
        archive=azurite.url(container, "archive"),
        landed=landed,
    )
