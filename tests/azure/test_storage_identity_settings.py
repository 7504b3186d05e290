"""The Hadoop settings of each identity (what hadoop-azure 3.5.0 reads: AbfsConfiguration's keys), the
fields that say where tokens come from (``msi_endpoint``, ``federated_token_file``,
``authority_host``), and the errors for a field given to the wrong identity. The settings are run
against Azurite in test_job_storage_identities.py (slow)."""

from __future__ import annotations

import pytest

from hubflow.storage.azure import AzureStorageAccess, known_to_msal

HOST = "lakeacct.dfs.core.windows.net"
PROVIDERS = "org.apache.hadoop.fs.azurebfs.oauth2."


def test_a_managed_identity_names_its_imds_endpoint_and_authority() -> None:
    conf = AzureStorageAccess(
        account_name="lakeacct",
        client_id="mi-1",
        tenant_id="tenant-1",
        msi_endpoint="https://127.0.0.1:8443/metadata/identity/oauth2/token",
        authority_host="https://login.example.test/",
    ).hadoop_conf()
    assert conf[f"fs.azure.account.oauth.provider.type.{HOST}"] == PROVIDERS + "MsiTokenProvider"
    assert conf[f"fs.azure.account.oauth2.msi.endpoint.{HOST}"] == (
        "https://127.0.0.1:8443/metadata/identity/oauth2/token"
    )
    # hadoop-azure sends <msi.authority><tenant> as IMDS's authority parameter: the slash matters
    assert conf[f"fs.azure.account.oauth2.msi.authority.{HOST}"] == "https://login.example.test/"
    assert conf[f"fs.azure.account.oauth2.client.id.{HOST}"] == "mi-1"
    plain = AzureStorageAccess(account_name="lakeacct").hadoop_conf()
    assert f"fs.azure.account.oauth2.msi.endpoint.{HOST}" not in plain  # hadoop's default: IMDS


def test_a_workload_identity_reads_its_token_file_from_the_field_else_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AZURE_FEDERATED_TOKEN_FILE", "/var/run/secrets/azure/tokens/azure-identity-token")
    fields = {"account_name": "lakeacct", "workload_identity": True, "tenant_id": "t", "client_id": "wi"}
    from_env = AzureStorageAccess(**fields, authority_host="https://127.0.0.1:9443").hadoop_conf()
    assert from_env[f"fs.azure.account.oauth2.token.file.{HOST}"].endswith("azure-identity-token")
    assert from_env[f"fs.azure.account.oauth2.msi.authority.{HOST}"] == "https://127.0.0.1:9443/"
    named = AzureStorageAccess(**fields, federated_token_file="/tokens/wi").hadoop_conf()
    assert named[f"fs.azure.account.oauth2.token.file.{HOST}"] == "/tokens/wi"


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        (
            {"tenant_id": "t", "client_id": "c", "client_secret": "s", "msi_endpoint": "http://x/t"},
            "msi_endpoint (http://x/t) is for a managed identity",
        ),
        ({"msi_endpoint": "169.254.169.254/metadata"}, "is not an http(s) URL"),
        ({"federated_token_file": "/tokens/wi"}, "federated_token_file is for a workload identity"),
    ],
)
def test_a_field_for_another_identity_is_refused_by_name(fields: dict, words: str) -> None:
    with pytest.raises(ValueError) as refused:  # pydantic wraps the StorageAccessError
        AzureStorageAccess(account_name="lakeacct", **fields)
    assert words in str(refused.value)
    assert "'s'" not in str(refused.value)


def test_only_a_host_msal_does_not_know_skips_instance_discovery() -> None:
    assert known_to_msal("https://login.microsoftonline.com")
    assert known_to_msal("https://login.chinacloudapi.cn/")
    assert not known_to_msal("https://127.0.0.1:9443")
    credential = AzureStorageAccess(
        account_name="lakeacct",
        tenant_id="t",
        client_id="c",
        client_secret="s",
        authority_host="https://127.0.0.1:9443",
    ).credential()
    assert credential._instance_discovery is False  # azure-identity's MsalCredential keeps it so
