"""A job's storage connection (``storage_conn_id``): what its driver gets (the access in its
environment only, never on spark-submit's command line), the errors that name the registry key when
the connection is missing or unusable, and the Spark settings and redaction the driver derives.
Azurite-backed runs of the same path: tests/azure/test_job_storage_connection.py."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowNotFoundException

from hubflow.invocation import JobInvocation
from hubflow.registry import load_registry
from hubflow.storage.azure import SPARK_REDACTION_REGEX, STORAGE_ACCESS_ENV, AzureStorageAccess
from hubflow_jobs.runtime.session import storage_conf
from hubflow_plugins.hooks.azure_storage import job_storage_access
from hubflow_plugins.hooks.spark_submit import build_submit_hook, driver_secrets
from tests.dags.helpers import landing_job, write_registry

KEY = "c2VjcmV0LWtleS1vZi10aGUtbGFrZQ=="
HOST = "lakeacct.dfs.core.windows.net"
PROVIDERS = "org.apache.hadoop.fs.azurebfs.oauth2."
#: Where the workload identity webhook mounts the pod's federated token (AZURE_FEDERATED_TOKEN_FILE).
TOKEN_FILE = "/var/run/secrets/azure/tokens/azure-identity-token"


def _job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **entry: str):  # -> RegisteredJob
    path = write_registry(tmp_path, [landing_job(tmp_path, "orders", **entry)])
    monkeypatch.setenv("HUBFLOW_REGISTRY", str(path))
    return load_registry().job("orders")


def _connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, **document: object) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(document))


def test_a_job_without_storage_conn_id_gives_its_driver_no_storage_access(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _job(tmp_path, monkeypatch)
    assert job.storage_conn_id is None
    assert job_storage_access(job) is None and driver_secrets(job) == {}


def test_the_driver_gets_the_access_in_its_environment_and_never_on_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _job(tmp_path, monkeypatch, storage_conn_id="lake_storage")
    _connection(monkeypatch, "lake_storage", conn_type="wasb", login="lakeacct", password=KEY)
    _connection(monkeypatch, "spark_default", conn_type="spark", host="local[1]")

    secrets = driver_secrets(job)
    hook = build_submit_hook(job, JobInvocation.run(job, secrets=secrets))
    command = hook.command()

    assert AzureStorageAccess.model_validate_json(
        hook.driver_env()[STORAGE_ACCESS_ENV]
    ) == AzureStorageAccess(account_name="lakeacct", account_key=KEY)
    assert not any(KEY in part or "fs.azure" in part for part in command), command


def test_a_driver_in_the_cluster_is_refused_rather_than_given_the_key_on_its_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _job(tmp_path, monkeypatch, storage_conn_id="lake_storage")
    _connection(monkeypatch, "lake_storage", conn_type="wasb", login="lakeacct", password=KEY)
    _connection(
        monkeypatch,
        "spark_default",
        conn_type="spark",
        host="yarn",
        extra={"deploy-mode": "cluster"},
    )
    with pytest.raises(ValueError, match=f"deploy mode cluster.*{STORAGE_ACCESS_ENV}") as error:
        build_submit_hook(job, JobInvocation.run(job, secrets=driver_secrets(job)))
    assert KEY not in str(error.value)


def test_a_missing_connection_is_named_by_its_registry_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _job(tmp_path, monkeypatch, storage_conn_id="no_such_storage")
    monkeypatch.delenv("AIRFLOW_CONN_NO_SUCH_STORAGE", raising=False)
    with pytest.raises(
        AirflowNotFoundException,
        match=r"job orders: storage_conn_id 'no_such_storage' in the registry names no",
    ):
        driver_secrets(job)


def test_an_unusable_connection_is_named_without_its_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _job(tmp_path, monkeypatch, storage_conn_id="lake_storage")
    # a service principal (tenant_id: login is its client id) that names no account
    _connection(
        monkeypatch, "lake_storage", conn_type="adls", login="app-id", password=KEY, extra={"tenant_id": "t1"}
    )
    with pytest.raises(
        ValueError, match=r"job orders: storage_conn_id 'lake_storage'.*names no storage account"
    ) as error:
        job_storage_access(job)
    assert KEY not in str(error.value)


def test_the_providers_order_decides_between_credentials() -> None:
    """As WasbHook.get_conn: connection string, service principal, shared_access_key, SAS, password."""
    from hubflow_plugins.hooks.azure_storage import access_from_connection

    def read(**fields: object) -> AzureStorageAccess:
        base: dict = {"conn_type": "wasb", "host": None, "login": "lakeacct", "password": None, "extra": {}}
        return access_from_connection(**{**base, **fields})

    assert read(password=KEY, extra={"sas_token": "sv=1&sig=S"}).sas_token is not None
    assert read(password="other", extra={"shared_access_key": KEY}).account_key.get_secret_value() == KEY
    assert read(extra={"account_key": KEY}).account_key.get_secret_value() == KEY
    workload = read(
        login=None,
        host="lakeacct",
        extra={"workload_identity_tenant_id": "t1", "managed_identity_client_id": "c1"},
    )
    assert (workload.workload_identity, workload.tenant_id, workload.client_id) == (True, "t1", "c1")
    emulator = read(login=None, host="http://127.0.0.1:10000/devstoreaccount1", password=KEY)
    assert (emulator.account_name, emulator.blob_endpoint) == (
        "devstoreaccount1",
        "http://127.0.0.1:10000/devstoreaccount1",
    )
    url = read(login=None, host="https://lakeacct.blob.core.windows.net/", password=KEY)
    assert (url.account_name, url.blob_endpoint) == ("lakeacct", None)


@pytest.mark.parametrize(
    ("document", "settings"),
    [
        (
            {"conn_type": "wasb", "login": "lakeacct", "extra": {"sas_token": "?sv=2024&sig=S1G"}},
            {
                f"fs.azure.account.auth.type.{HOST}": "SAS",
                f"fs.azure.sas.fixed.token.{HOST}": "sv=2024&sig=S1G",
            },
        ),
        (
            {
                "conn_type": "adls",
                "host": "lakeacct",
                "login": "app-id",
                "password": "app-secret",
                "extra": {"tenant_id": "tenant-1", "account_name": "lakeacct"},
            },
            {
                f"fs.azure.account.auth.type.{HOST}": "OAuth",
                f"fs.azure.account.oauth.provider.type.{HOST}": (
                    "org.apache.hadoop.fs.azurebfs.oauth2.ClientCredsTokenProvider"
                ),
                f"fs.azure.account.oauth2.client.id.{HOST}": "app-id",
                f"fs.azure.account.oauth2.client.secret.{HOST}": "app-secret",
            },
        ),
        (
            {"conn_type": "wasb", "login": "lakeacct", "extra": {"managed_identity_client_id": "mi-1"}},
            {
                f"fs.azure.account.oauth.provider.type.{HOST}": PROVIDERS + "MsiTokenProvider",
                f"fs.azure.account.oauth2.client.id.{HOST}": "mi-1",
            },
        ),
        (
            {
                "conn_type": "adls",
                "host": "lakeacct",
                "extra": {"workload_identity_tenant_id": "tenant-1", "managed_identity_client_id": "wi-1"},
            },
            {
                f"fs.azure.account.oauth.provider.type.{HOST}": PROVIDERS + "WorkloadIdentityTokenProvider",
                f"fs.azure.account.oauth2.msi.tenant.{HOST}": "tenant-1",
                f"fs.azure.account.oauth2.client.id.{HOST}": "wi-1",
                f"fs.azure.account.oauth2.token.file.{HOST}": TOKEN_FILE,
            },
        ),
        (
            {
                "conn_type": "wasb",
                "login": "lakeacct",
                "extra": {"managed_identity_client_id": "mi-1", "msi_endpoint": "http://169.254.169.254/x"},
            },
            {
                f"fs.azure.account.oauth.provider.type.{HOST}": PROVIDERS + "MsiTokenProvider",
                f"fs.azure.account.oauth2.msi.endpoint.{HOST}": "http://169.254.169.254/x",
            },
        ),
        (
            {
                "conn_type": "wasb",
                "login": "lakeacct",
                "extra": {
                    "workload_identity_tenant_id": "tenant-1",
                    "managed_identity_client_id": "wi-1",
                    "federated_token_file": "/var/run/other/token",
                },
            },
            {
                f"fs.azure.account.oauth.provider.type.{HOST}": PROVIDERS + "WorkloadIdentityTokenProvider",
                f"fs.azure.account.oauth2.token.file.{HOST}": "/var/run/other/token",
            },
        ),
    ],
    ids=[
        "sas",
        "service-principal",
        "managed-identity",
        "workload-identity",
        "managed-identity-msi-endpoint",
        "workload-identity-token-file",
    ],
)
def test_each_credential_kind_reaches_the_drivers_hadoop_settings(
    document: dict, settings: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _job(tmp_path, monkeypatch, storage_conn_id="lake_storage")
    _connection(monkeypatch, "lake_storage", **document)
    monkeypatch.setenv("AZURE_FEDERATED_TOKEN_FILE", TOKEN_FILE)
    conf = storage_conf(driver_secrets(job))  # what the driver's session gets from its environment
    for key, value in settings.items():
        assert conf[f"spark.hadoop.{key}"] == value


def test_spark_redaction_masks_every_azure_secret_key_and_keeps_the_connectors_words() -> None:
    from pyspark_eventhubs.redaction import SPARK_REDACTION_REGEX as CONNECTOR_REGEX

    pattern = re.compile(SPARK_REDACTION_REGEX)
    for key in (
        f"spark.hadoop.fs.azure.account.key.{HOST}",
        f"spark.hadoop.fs.azure.sas.fixed.token.{HOST}",
        "spark.hadoop.fs.azure.sas.lake.lakeacct.blob.core.windows.net",  # the older per-container SAS
        f"spark.hadoop.fs.azure.account.oauth2.client.secret.{HOST}",
        f"spark.hadoop.fs.azure.account.oauth2.refresh.token.{HOST}",
        "spark.eventhubs.connectionString",
    ):
        assert pattern.search(key), key
    for key in (
        f"spark.hadoop.fs.azure.account.auth.type.{HOST}",
        f"spark.hadoop.fs.azure.account.oauth2.client.id.{HOST}",
    ):
        assert not pattern.search(key), f"{key} is no secret: it stays readable"
    # the session sets this one pattern last, over the connector's: it must mask all the connector does
    words = CONNECTOR_REGEX.removeprefix("(?i)").split("|")
    assert set(words) <= set(SPARK_REDACTION_REGEX.removeprefix("(?i)").split("|"))


SAS = "sv=2024-08-04&ss=b&srt=sco&sp=rwdlac&se=2030-01-01T00:00:00Z&sig=S1G"
#: Connections of every kind a user enters in the provider's form (or the CLI), each read by both the
#: provider's own get_conn() and hubflow's access(): they must pick the same credential and account.
PROVIDER_CASES = {
    "wasb-key-in-password": {"conn_type": "wasb", "login": "lakeacct", "password": KEY},
    "wasb-shared-access-key-beats-password": {
        "conn_type": "wasb",
        "login": "lakeacct",
        "password": "older-key",
        "extra": {"shared_access_key": KEY, "sas_token": SAS},
    },
    "wasb-sas-beats-password": {
        "conn_type": "wasb",
        "login": "lakeacct",
        "password": KEY,
        "extra": {"sas_token": SAS},
    },
    "wasb-sas-url": {
        "conn_type": "wasb",
        "login": "lakeacct",
        "extra": {"sas_token": f"https://lakeacct.blob.core.windows.net/?{SAS}"},
    },
    "wasb-extra-account-key": {"conn_type": "wasb", "login": "lakeacct", "extra": {"account_key": KEY}},
    "wasb-old-form-prefix": {
        "conn_type": "wasb",
        "login": "lakeacct",
        "extra": {"extra__wasb__sas_token": SAS},
    },
    "wasb-connection-string-beats-all": {
        "conn_type": "wasb",
        "login": "otheracct",
        "password": "older-key",
        "extra": {
            "connection_string": f"DefaultEndpointsProtocol=https;AccountName=lakeacct;AccountKey={KEY};"
            "EndpointSuffix=core.windows.net",
            "sas_token": SAS,
        },
    },
    "wasb-service-principal": {
        "conn_type": "wasb",
        "host": "https://lakeacct.blob.core.windows.net/",
        "login": "app-id",
        "password": "app-secret",
        "extra": {"tenant_id": "tenant-1", "shared_access_key": KEY},
    },
    "wasb-managed-identity": {
        "conn_type": "wasb",
        "login": "lakeacct",
        "extra": {"managed_identity_client_id": "mi-1"},
    },
    "wasb-workload-identity": {
        "conn_type": "wasb",
        "host": "lakeacct.blob.core.windows.net",
        "extra": {"managed_identity_client_id": "wi-1", "workload_identity_tenant_id": "tenant-1"},
    },
    "wasb-emulator-url": {
        "conn_type": "wasb",
        "host": "http://127.0.0.1:10000/devstoreaccount1",
        "login": "devstoreaccount1",
        "password": KEY,
    },
    "adls-key": {"conn_type": "adls", "host": "lakeacct", "password": KEY},
    "adls-service-principal": {
        "conn_type": "adls",
        "host": "lakeacct",
        "login": "app-id",
        "password": "app-secret",
        "extra": {"tenant_id": "tenant-1"},
    },
    # the provider's adls hook reads no SAS, shared_access_key or extra.account_key: without a password
    # it uses a managed identity, and so does hubflow
    "adls-no-sas": {
        "conn_type": "adls",
        "host": "lakeacct",
        "extra": {"sas_token": SAS, "shared_access_key": KEY, "account_key": KEY},
    },
}


def _providers_choice(client: object) -> tuple[str, str | None]:
    """The credential kind (and secret) the provider's client was built with."""
    from urllib.parse import unquote, urlsplit

    from azure.core.credentials import AzureSasCredential
    from azure.identity import ClientSecretCredential, DefaultAzureCredential

    credential = getattr(client, "credential", None)
    if getattr(credential, "account_key", None):
        return "key", credential.account_key
    if isinstance(credential, AzureSasCredential):
        return "sas", credential.signature
    if credential is None and "sig=" in client.url:  # a SAS URL: the token is the URL's query
        return "sas", unquote(urlsplit(client.url).query)  # the SDK quotes the SAS's ':'s
    if isinstance(credential, ClientSecretCredential):
        return "service principal", None
    assert isinstance(credential, DefaultAzureCredential), type(credential)
    return "identity", None


def _hubflows_choice(access: AzureStorageAccess) -> tuple[str, str | None]:
    from urllib.parse import unquote

    if access.account_key is not None:
        return "key", access.account_key.get_secret_value()
    if access.sas_token is not None:
        return "sas", unquote(access.sas_token.get_secret_value())
    if access.client_secret is not None:
        return "service principal", None
    return "identity", None


@pytest.mark.parametrize("document", PROVIDER_CASES.values(), ids=PROVIDER_CASES.keys())
def test_the_hook_picks_the_credential_and_account_the_providers_own_client_uses(
    document: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hubflow_plugins.hooks.azure_storage import AzureStorageHook

    _connection(monkeypatch, "lake_storage", **document)
    hook = AzureStorageHook("lake_storage")
    client = hook.get_conn()  # the provider's: WasbHook's BlobServiceClient, or the ADLS hook's client
    expected = "DataLakeServiceClient" if document["conn_type"] == "adls" else "BlobServiceClient"
    assert type(client).__name__ == expected

    access = hook.access()

    assert _hubflows_choice(access) == _providers_choice(client)
    assert access.account_name == client.account_name
    if document["conn_type"] == "wasb":
        assert access.blob_account_url == client.primary_endpoint.split("?")[0].rstrip("/")


def test_parsing_the_dags_imports_none_of_the_azure_sdks() -> None:
    """The provider's hook module imports the Blob, Data Lake and identity SDKs (about a second on a
    loaded machine): the DAG files, the operators and the status page plugin import the hook only
    when a task runs."""
    import subprocess
    import sys

    code = (
        "import sys, hubflow_plugins.dag_factory, hubflow_status_plugin\n"
        "import hubflow_plugins.operators.cleanup, hubflow_plugins.operators.spark_job\n"
        "import hubflow_plugins.operators.streaming_job, hubflow_plugins.sensors.checkpoint_health\n"
        "import hubflow_plugins.triggers.checkpoint_health\n"
        "heavy = ('azure.', 'airflow.providers.microsoft.azure.hooks')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))"
    )
    root = Path(__file__).resolve().parents[3]
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": f"{root / 'plugins'}:{root / 'jobs'}:{root / 'dags'}"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"
