"""Azurite, Microsoft's Azure Storage emulator, for tests that need the real Blob API.

``make test-tools`` installs it from npm into ``tests/support/azurite/node_modules`` at the version
``package-lock.json`` pins. :func:`start_azurite` runs its Blob service on a free port of 127.0.0.1
with its data in a temporary folder; :meth:`Azurite.stop` ends it. The emulator serves the
well-known development account ``devstoreaccount1`` (its key is public, published by Microsoft).

Tests reach it the way production reaches a storage account: an Airflow connection (its URI is in
:meth:`Azurite.airflow_connection_env`) or an :class:`~hubflow.storage.azure.AzureStorageAccess`
registered with the process, and ``abfs://<container>@devstoreaccount1.dfs.core.windows.net/...``
URLs (:meth:`Azurite.url`).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from tests.support.processes import free_port, start_background, stop_process

AZURITE_DIR = Path(__file__).resolve().parent / "azurite"
AZURITE_BLOB = AZURITE_DIR / "node_modules" / ".bin" / "azurite-blob"
ACCOUNT = "devstoreaccount1"
#: Azurite's published development key (https://learn.microsoft.com/azure/storage/common/storage-use-azurite).
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


class AzuriteMissing(RuntimeError):
    """Azurite cannot run here; the message says why and what to do."""


def azurite_problem() -> str | None:
    """Why Azurite cannot start here (Node.js missing, not installed), or None when it can."""
    if shutil.which("node") is None:
        return "Node.js is not installed, so Azurite (the Azure Blob emulator) cannot run"
    if not AZURITE_BLOB.exists():
        return (
            f"Azurite is not installed in {AZURITE_DIR}; run `make test-tools` "
            "(scripts/bootstrap.sh --with-test-tools installs it with npm ci)"
        )
    return None


@dataclass
class Azurite:
    """A running Azurite Blob service."""

    port: int
    location: Path
    process: subprocess.Popen
    #: ``https`` when started with a certificate (:func:`start_azurite` ``tls``).
    scheme: str = "http"

    @property
    def blob_endpoint(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}/{ACCOUNT}"

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
            f"BlobEndpoint={self.blob_endpoint};"
        )

    def access(self):  # -> AzureStorageAccess
        """The development account as a storage access (what a job's driver gets)."""
        from hubflow.storage.azure import AzureStorageAccess

        return AzureStorageAccess(connection_string=self.connection_string)

    def airflow_connection_env(self, conn_id: str) -> dict[str, str]:
        """``AIRFLOW_CONN_<ID>``: a ``wasb`` connection holding the account key in its password and
        the emulator's Blob endpoint in its extra, as an operator would define it."""
        document = {
            "conn_type": "wasb",
            "login": ACCOUNT,
            "password": ACCOUNT_KEY,
            "extra": {"blob_endpoint": self.blob_endpoint},
        }
        return {f"AIRFLOW_CONN_{conn_id.upper()}": json.dumps(document)}

    def new_container(self, prefix: str = "t") -> str:
        """A fresh, empty container (names are 3-63 lowercase letters, digits and dashes)."""
        from azure.storage.blob import BlobServiceClient

        name = f"{prefix}-{uuid.uuid4().hex[:20]}"
        BlobServiceClient.from_connection_string(self.connection_string).create_container(name)
        return name

    def url(self, container: str, path: str = "", protocol: str = "abfs") -> str:
        """``abfs://<container>@devstoreaccount1.dfs.core.windows.net/<path>`` (Spark's and adlfs's form)."""
        return f"{protocol}://{container}@{ACCOUNT}.dfs.core.windows.net/{path.lstrip('/')}".rstrip("/")

    def stop(self) -> None:
        stop_process(self.process)


def start_azurite(
    location: Path, timeout: float = 60.0, *, tls: tuple[Path, Path] | None = None, oauth: bool = False
) -> Azurite:
    """Start Azurite's Blob service on a free port with its data in ``location``; wait until it listens.

    ``tls`` (certificate, key PEM files) serves HTTPS; ``oauth`` makes it accept bearer tokens
    (``--oauth basic``: audience, issuer and expiry checked, not the signature; HTTPS only).
    """
    problem = azurite_problem()
    if problem:
        raise AzuriteMissing(problem)
    location.mkdir(parents=True, exist_ok=True)
    port = free_port()
    command = [
        str(AZURITE_BLOB),
        "--blobHost",
        "127.0.0.1",
        "--blobPort",
        str(port),
        "--location",
        str(location),
        "--silent",
        "--disableTelemetry",
        # The SDK in the lock may speak a newer REST API version than this Azurite knows; the
        # operations hubflow uses are the same in every version.
        "--skipApiVersionCheck",
    ]
    if tls is not None:
        command += ["--cert", str(tls[0]), "--key", str(tls[1])]
    if oauth:
        command += ["--oauth", "basic"]
    process = start_background(command, location / "azurite.log")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log = (location / "azurite.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"Azurite exited with code {process.returncode}:\n{log}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return Azurite(port, location, process, "https" if tls is not None else "http")
        except OSError:
            time.sleep(0.1)
    stop_process(process)
    raise TimeoutError(f"Azurite did not listen on 127.0.0.1:{port} within {timeout:.0f} s")
