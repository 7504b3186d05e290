"""A job's storage reached with a managed identity, the Azure way, against a storage that checks
tokens: Azurite over HTTPS with ``--oauth basic`` (audience, issuer and expiry checked) and the
local Entra ID token issuer (``eventhubs_emulator.token_issuer``, the App Service managed-identity
endpoint azure-identity calls unmodified). The job's ``storage_conn_id`` names a ``wasb`` connection
with no secret; the Airflow side writes and reads the job's status folder through it, its tokens
renew when they lapse, and an expired token is refused (so the storage really checks them).

Spark's side of each identity (hadoop-azure's token providers, the issuer's IMDS form and authority)
is run in test_job_storage_identities.py.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hubflow.registry import load_registry
from hubflow.status import JobState, JobStatus, StatusFolder
from hubflow.storage.azure import forget_accesses
from hubflow_plugins.hooks.azure_storage import use_job_storage
from tests.dags.helpers import landing_job, write_registry
from tests.support.azurite import ACCOUNT, Azurite, azurite_problem, start_azurite

pytestmark = pytest.mark.integration

#: Token lifetime: short, so a test outlives its first token.
LIFETIME = 3.0


def _self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key (PEM files)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "azurite.pem", folder / "azurite-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


@pytest.fixture
def oauth_azurite(tmp_path: Path) -> Iterator[tuple[Azurite, Path]]:
    """Azurite over HTTPS accepting bearer tokens only as Azure checks them; and its certificate."""
    problem = azurite_problem()
    if problem:
        pytest.skip(problem)
    cert, key = _self_signed(tmp_path)
    server = start_azurite(tmp_path / "azurite", tls=(cert, key), oauth=True)
    yield server, cert
    server.stop()


def test_a_managed_identity_reaches_the_jobs_storage_and_renews_its_token(
    oauth_azurite: tuple[Azurite, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from azure.core.exceptions import ClientAuthenticationError, HttpResponseError
    from azure.storage.blob import BlobServiceClient

    from eventhubs_emulator.token_issuer import TokenIssuer

    azurite, cert = oauth_azurite
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))  # the SDK's HTTPS trusts Azurite's certificate
    for name in ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET", "AZURE_FEDERATED_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    container = "identity"
    # a connection with no secret at all: a managed identity (user-assigned: its client id)
    connection = {
        "conn_type": "wasb",
        "login": ACCOUNT,
        "extra": {
            "managed_identity_client_id": "emulator-managed-identity",
            "blob_endpoint": azurite.blob_endpoint,
        },
    }
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_IDENTITY", json.dumps(connection))
    status_root = azurite.url(container, "_status")
    job_entry = landing_job(tmp_path, "orders", storage_conn_id="lake_identity")
    config = Path(job_entry["config"])
    config.write_text(
        config.read_text().replace(
            f"status_root: {tmp_path / 'orders' / 'status'}", f"status_root: {status_root}"
        )
    )
    monkeypatch.setenv("HUBFLOW_REGISTRY", str(write_registry(tmp_path, [job_entry])))
    job = load_registry().job("orders")
    assert job.paths.status_dir.startswith("abfs://"), job.paths.status_dir

    with TokenIssuer(tmp_path / "issuer", lifetime=LIFETIME) as issuer:
        for key, value in issuer.environment().items():
            monkeypatch.setenv(key, value)
        forget_accesses()
        try:
            # the container, made with a token of the same identity (no key anywhere in this test)
            from azure.identity import ManagedIdentityCredential

            BlobServiceClient(
                azurite.blob_endpoint,
                credential=ManagedIdentityCredential(client_id="emulator-managed-identity"),
            ).create_container(container)
            use_job_storage(job)
            status = JobStatus(StatusFolder(job.paths.status_dir), job.name)
            status.update(state=JobState.RUNNING)
            assert (StatusFolder(job.paths.status_dir).status() or {})["state"] == "running"
            first = issuer.tokens_issued
            assert first >= 1

            # past the token's lifetime: the next request renews it by itself
            deadline = time.monotonic() + LIFETIME + 1.0
            while time.monotonic() < deadline:
                time.sleep(0.2)
            status.update(state=JobState.STOPPED)
            assert (StatusFolder(job.paths.status_dir).status() or {})["state"] == "stopped"
            assert issuer.tokens_issued > first, "the identity's token was renewed"

            # the storage checks the token: an expired one is refused
            issuer.fault = "expired"
            forget_accesses()
            use_job_storage(job)
            with pytest.raises((ClientAuthenticationError, HttpResponseError)) as refused:
                StatusFolder(job.paths.status_dir).status()
            assert getattr(refused.value, "status_code", None) in (401, 403), refused.value
        finally:
            forget_accesses()
