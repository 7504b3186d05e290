"""A Spark job reaches its storage with each production identity, through hadoop-azure's real token
providers, against a storage that checks tokens: Azurite over HTTPS with ``--oauth basic``
(audience, issuer, expiry) and the local Entra ID (``eventhubs_emulator.token_issuer``) over HTTPS,
one CA for both (the JVM trusts it through a truststore named in ``JAVA_TOOL_OPTIONS``, Python
through ``REQUESTS_CA_BUNDLE``):

* a service principal - ``ClientCredsTokenProvider`` posts to the v1 endpoint
  ``<authority>/<tenant>/oauth2/token``; the Airflow connection holds the secret;
* a managed identity - ``MsiTokenProvider`` asks IMDS's form at ``msi_endpoint``
  (``fs.azure.account.oauth2.msi.endpoint``); the driver's Python side finds the same IMDS through
  ``AZURE_POD_IDENTITY_AUTHORITY_HOST``;
* a workload identity - ``WorkloadIdentityTokenProvider`` trades the federated token it reads from
  ``AZURE_FEDERATED_TOKEN_FILE`` at the v2 endpoint.

A files_to_lake job is spark-submitted the operators' way over ``abfss://``. hadoop-azure asks for a
new token when the one it has has less than 5 minutes left (``AccessTokenProvider.FIVE_MINUTES`` in
hadoop-azure 3.5.0), so tokens of ``LIFETIME`` = 5 min + 15 s are renewed every ~15 s of use: the
test waits until the issuer has handed the JVM (User-Agent ``Java/...``) a second token on the
identity's endpoint, then lands a second file, and every order lands in the lake exactly once. The
secret is on no command line of the job's processes, and Spark's environment page, the event log,
status.json and the driver log hold none.
"""

from __future__ import annotations

import io
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hubflow.invocation import JobInvocation
from hubflow.registry import load_registry
from hubflow.status import StatusFolder
from hubflow.storage.azure import AzureStorageAccess, forget_accesses
from hubflow_plugins.hooks.azure_storage import use_job_storage
from hubflow_plugins.hooks.spark_submit import build_submit_hook, driver_secrets
from tests.azure.submitted_jobs import REDACTED, files_job_registry, get_json, orders_json, session_cmdlines
from tests.support.azurite import ACCOUNT, ACCOUNT_KEY, Azurite, azurite_problem, start_azurite
from tests.support.processes import free_port, stop_process

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: hadoop-azure's renewal margin (5 minutes) plus 15 s: a token is renewed ~15 s after it is issued.
LIFETIME = 315
SECRET = "lake-sp-secret-never-shown-4Kd"
SUBJECT = "system:serviceaccount:lake:files-to-lake"
TRUSTSTORE_PASSWORD = "hubflow-ca"
#: The endpoint each identity's JVM token requests go to (server.py's names).
ROUTES = {"service-principal": "v1", "managed-identity": "imds", "workload-identity": "v2"}
CLIENT_IDS = {"service-principal": "lake-sp", "managed-identity": "lake-mi", "workload-identity": "lake-wi"}


@pytest.fixture
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Azurite, Any]]:
    """Azurite (HTTPS, OAuth) and the issuer (HTTPS authority and IMDS), both on the emulator's CA."""
    from eventhubs_emulator.tls import ensure_certificates
    from eventhubs_emulator.token_issuer import RegisteredClient, TokenIssuer

    problem = azurite_problem()
    if problem:
        pytest.skip(problem)
    tls = ensure_certificates(tmp_path / "tls")
    for name in (
        "AZURE_CLIENT_ID",
        "AZURE_TENANT_ID",
        "AZURE_CLIENT_SECRET",
        "AZURE_FEDERATED_TOKEN_FILE",
        "AZURE_AUTHORITY_HOST",
        "AZURE_POD_IDENTITY_AUTHORITY_HOST",
        "IDENTITY_ENDPOINT",
        "IDENTITY_HEADER",
        "HUBFLOW_AZURE_STORAGE",
    ):
        monkeypatch.delenv(name, raising=False)
    store = tmp_path / "truststore.p12"
    subprocess.run(
        ["keytool", "-importcert", "-noprompt", "-alias", "hubflow-ca", "-file", str(tls.ca_cert),
         "-keystore", str(store), "-storetype", "PKCS12", "-storepass", TRUSTSTORE_PASSWORD],
        check=True, capture_output=True,
    )  # fmt: skip
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tls.ca_cert))
    monkeypatch.setenv(
        "JAVA_TOOL_OPTIONS",
        f"-Djavax.net.ssl.trustStore={store} -Djavax.net.ssl.trustStoreType=PKCS12 "
        f"-Djavax.net.ssl.trustStorePassword={TRUSTSTORE_PASSWORD}",
    )
    azurite = start_azurite(tmp_path / "azurite", tls=(tls.server_cert, tls.server_key), oauth=True)
    issuer = TokenIssuer(
        tmp_path / "issuer",
        lifetime=LIFETIME,
        tls_dir=tmp_path / "tls",
        clients=[
            RegisteredClient("lake-sp", client_secret=SECRET),
            RegisteredClient("lake-wi", federated_subject=SUBJECT),
            RegisteredClient("lake-mi", managed=True),
        ],
    ).start()
    yield azurite, issuer
    issuer.stop()
    azurite.stop()


def _identity(
    kind: str, azurite: Azurite, issuer: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[dict[str, Any], AzureStorageAccess | None, str | None]:
    """The job's Airflow connection for ``kind``, an access to hand the driver instead (when the
    connection cannot say it), and the secret that must stay out of sight."""
    extra: dict[str, Any] = {"blob_endpoint": azurite.blob_endpoint, "authority_host": issuer.base_url}
    if kind == "service-principal":
        extra.update(tenant_id=issuer.tenant_id, account_name=ACCOUNT)
        return {"conn_type": "wasb", "login": "lake-sp", "password": SECRET, "extra": extra}, None, SECRET
    if kind == "workload-identity":
        from eventhubs_emulator.token_issuer import federated_token

        token_file = tmp_path / "azure-identity-token"  # what the webhook projects into the pod
        federated = federated_token(issuer.folder, SUBJECT, lifetime=3600)
        token_file.write_text(federated)
        monkeypatch.setenv("AZURE_FEDERATED_TOKEN_FILE", str(token_file))
        extra.update(workload_identity_tenant_id=issuer.tenant_id, managed_identity_client_id="lake-wi")
        return {"conn_type": "wasb", "login": ACCOUNT, "extra": extra}, None, federated
    # a managed identity: IMDS on a VM; the Airflow side's azure-identity finds it by this variable
    monkeypatch.setenv("AZURE_POD_IDENTITY_AUTHORITY_HOST", issuer.base_url)
    extra = {
        "blob_endpoint": azurite.blob_endpoint,
        "managed_identity_client_id": "lake-mi",
        "msi_endpoint": issuer.imds_endpoint,  # hadoop-azure's IMDS address (a VM's is the default)
    }
    return {"conn_type": "wasb", "login": ACCOUNT, "extra": extra}, None, None


def _lake_orders(blobs: Any) -> list[int]:
    """The order ids in the files the lake's file sink committed (listed in its ``_spark_metadata``
    log; a file being written is not read)."""
    from urllib.parse import unquote, urlsplit

    import pyarrow.parquet as pq

    committed: set[str] = set()
    for entry in blobs.list_blobs(name_starts_with="lake/orders/_spark_metadata/"):
        for line in blobs.download_blob(entry.name).readall().decode().splitlines()[1:]:
            if line.strip():
                committed.add(unquote(urlsplit(json.loads(line)["path"]).path).lstrip("/"))
    ids: list[int] = []
    for name in sorted(committed):
        table = pq.read_table(io.BytesIO(blobs.download_blob(name).readall()))
        ids.extend(table.column("order_id").to_pylist())
    return sorted(ids)


@pytest.mark.parametrize("kind", ["service-principal", "managed-identity", "workload-identity"])
def test_a_spark_job_reaches_its_storage_with_an_identity_whose_tokens_renew(
    kind: str,
    stack: tuple[Azurite, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from azure.storage.blob import BlobServiceClient

    azurite, issuer = stack
    container = "lake"
    blobs = BlobServiceClient(
        azurite.blob_endpoint, credential={"account_name": ACCOUNT, "account_key": ACCOUNT_KEY}
    ).create_container(container)  # the test's own setup uses the account key
    blobs.upload_blob("landing/orders-1.json", orders_json(0, 5))
    document, access, secret = _identity(kind, azurite, issuer, tmp_path, monkeypatch)
    ui_port = free_port()
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_STORAGE", json.dumps(document))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    registry = files_job_registry(
        tmp_path,
        "lakejob",
        lambda path: f"abfss://{container}@{ACCOUNT}.dfs.core.windows.net/{path}",
        ui_port,
    )
    monkeypatch.setenv("HUBFLOW_REGISTRY", str(registry))
    forget_accesses()

    job = load_registry().job("lakejob")
    secrets = driver_secrets(job)
    if access is not None:
        secrets["HUBFLOW_AZURE_STORAGE"] = access.to_json()
    log_path = tmp_path / "driver.log"
    process = build_submit_hook(job, JobInvocation.run(job, secrets=secrets)).launch_detached(log_path)
    client_id, route = CLIENT_IDS[kind], ROUTES[kind]

    def jvm_tokens() -> int:
        return sum(
            1
            for c, r, agent in list(issuer.token_requests)
            if c == client_id and r == route and "Java" in agent
        )

    def wait_for(what: str, done: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert process.poll() is None, "the job died:\n" + log_path.read_text(errors="replace")[-4000:]
            assert time.monotonic() < deadline, f"{what}:\n" + log_path.read_text(errors="replace")[-4000:]
            time.sleep(0.5)

    try:
        use_job_storage(job)  # the Airflow side, through the same connection
        folder = StatusFolder(job.paths.status_dir)
        wait_for(
            "no batch with rows",
            lambda: ((folder.status() or {}).get("last_progress") or {}).get("num_input_rows"),
            240,
        )
        first = jvm_tokens()
        assert first >= 1, f"the JVM asked {route} for no token: {issuer.token_requests}"
        # hadoop-azure renews a token once it has less than 5 minutes left: ~15 s after it was issued
        wait_for("the JVM renewed no token", lambda: jvm_tokens() > first, 120)
        blobs.upload_blob("landing/orders-2.json", orders_json(5, 5))
        wait_for("the second file did not land", lambda: len(_lake_orders(blobs)) >= 10, 120)
        assert _lake_orders(blobs) == list(range(10)), "every order once"

        commands = session_cmdlines(process.pid)
        assert any("SparkSubmit" in c or "spark-submit" in c for c in commands.values()), commands
        for pid, command in commands.items():
            assert "fs.azure.account" not in command, command
            if secret:
                assert secret not in command, f"process {pid}'s command line holds the {kind}'s secret"
        base = f"http://127.0.0.1:{ui_port}/api/v1/applications"
        environment = get_json(f"{base}/{get_json(base)[0]['id']}/environment")
        spark = dict(environment["sparkProperties"])
        host = f"{ACCOUNT}.dfs.core.windows.net"
        assert spark[f"spark.hadoop.fs.azure.account.auth.type.{host}"] == "OAuth"
        if kind == "service-principal":
            assert spark[f"spark.hadoop.fs.azure.account.oauth2.client.secret.{host}"] == REDACTED
        if secret:
            assert secret not in json.dumps(environment)
        raw_status = blobs.download_blob("_status/lakejob/status.json").readall().decode()
        assert "fs.azure" not in raw_status and (not secret or secret not in raw_status)
    finally:
        stop_process(process)
        forget_accesses()
    if secret:
        assert secret not in log_path.read_text(errors="replace"), "the driver log holds the secret"
        text = "".join(p.read_text(errors="replace") for p in (tmp_path / "events").rglob("events_*"))
        assert text and secret not in text, "the event log holds the secret"
    # only the identity under test was asked for: no fallback to another credential
    assert {c for c, _, _ in issuer.token_requests} == {client_id}, issuer.token_requests
