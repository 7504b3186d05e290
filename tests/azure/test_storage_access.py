"""Storage credentials from an Airflow connection to every client, and the Blob primitives, on Azurite."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from hubflow.storage.azure import (
    STORAGE_ACCESS_ENV,
    AzureStorageAccess,
    BlobUrl,
    StorageAccessError,
    accesses_from_env,
    env_for,
    forget_accesses,
    url_to_fs,
    use_access,
)
from hubflow.storage.blob_api import SOURCE_ETAG_METADATA, BlobObjects
from tests.support.azurite import ACCOUNT, ACCOUNT_KEY, Azurite


def test_urls_name_account_container_and_path() -> None:
    url = BlobUrl.parse("abfss://lake@hubflowlake.dfs.core.windows.net/_checkpoints/orders/")
    assert (url.protocol, url.account, url.container, url.path) == (
        "abfss",
        "hubflowlake",
        "lake",
        "_checkpoints/orders",
    )
    assert (
        str(url.child("offsets", "7"))
        == "abfss://lake@hubflowlake.dfs.core.windows.net/_checkpoints/orders/offsets/7"
    )
    assert BlobUrl.parse("az://landing/a b/c.json").account is None
    assert BlobUrl.parse("/tmp/local") is None
    assert BlobUrl.parse("file:///tmp/x") is None
    with pytest.raises(StorageAccessError, match="names no container"):
        BlobUrl.parse("abfss://@acct.dfs.core.windows.net/x")


def test_a_connection_string_gives_every_client_the_same_account(azurite: Azurite) -> None:
    access = AzureStorageAccess(connection_string=azurite.connection_string)

    assert (access.account_name, access.blob_endpoint, access.is_emulator) == (
        ACCOUNT,
        azurite.blob_endpoint,
        True,
    )
    assert ACCOUNT_KEY not in repr(access)
    hadoop = access.hadoop_conf()
    assert hadoop[f"fs.azure.account.key.{ACCOUNT}.dfs.core.windows.net"] == ACCOUNT_KEY
    assert hadoop["fs.azure.abfs.endpoint"] == f"127.0.0.1:{azurite.port}"
    assert hadoop["fs.azure.always.use.https"] == "false"
    # The driver's environment carries it whole and back.
    [again] = accesses_from_env(env_for([access]))
    assert again == access


def test_production_accesses_map_to_abfs_oauth_and_never_to_the_emulator_settings() -> None:
    principal = AzureStorageAccess(account_name="prod", tenant_id="t", client_id="c", client_secret="s3cr3t")
    conf = principal.hadoop_conf()
    host = "prod.dfs.core.windows.net"
    assert conf[f"fs.azure.account.auth.type.{host}"] == "OAuth"
    assert conf[f"fs.azure.account.oauth2.client.endpoint.{host}"].endswith("/t/oauth2/token")
    assert "fs.azure.abfs.endpoint" not in conf and not principal.is_emulator
    credential = principal.fsspec_options()["credential"]  # adlfs gets the token credential itself
    assert type(credential).__name__ == "ClientSecretCredential"
    assert principal.fsspec_options()["credential"] is credential, "one credential renews for every client"
    managed = AzureStorageAccess(account_name="prod")
    assert managed.hadoop_conf()[f"fs.azure.account.oauth.provider.type.{host}"].endswith("MsiTokenProvider")
    assert managed.fsspec_options() == {"account_name": "prod", "anon": False}
    with pytest.raises(ValueError, match="give one credential"):
        AzureStorageAccess(account_name="prod", account_key="k", sas_token="s")


def test_a_bad_environment_value_is_named_without_its_secret() -> None:
    with pytest.raises(StorageAccessError, match=STORAGE_ACCESS_ENV) as error:
        accesses_from_env({STORAGE_ACCESS_ENV: json.dumps({"account_key": "TOPSECRET"})})
    assert "TOPSECRET" not in str(error.value) and "account_name" in str(error.value)


def test_the_airflow_connection_is_read_like_the_azure_provider_reads_it(
    azurite: Azurite, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hubflow_plugins.hooks.azure_storage import AzureStorageHook, access_from_connection

    for key, value in azurite.airflow_connection_env("lake_storage").items():
        monkeypatch.setenv(key, value)
    masked: list[str] = []
    monkeypatch.setattr("hubflow_plugins.hooks.azure_storage._mask", masked.extend)

    access = AzureStorageHook("lake_storage").access()

    assert access == azurite.access()
    assert ACCOUNT_KEY in masked  # registered with Airflow's masker before anything logs
    principal = access_from_connection(
        conn_type="adls",
        host=None,
        login="app-id",
        password="app-secret",
        extra={"tenant_id": "t", "account_name": "a"},
    )
    assert (principal.client_id, principal.client_secret.get_secret_value()) == ("app-id", "app-secret")
    with pytest.raises(StorageAccessError, match="names no storage account"):
        access_from_connection(conn_type="wasb", host=None, login=None, password=None, extra={})


def test_fsspec_urls_authenticate_with_the_registered_access(azurite: Azurite) -> None:
    container = azurite.new_container()
    url = azurite.url(container, "folder/file.json")
    forget_accesses()
    use_access(azurite.access())
    try:
        fs, path = url_to_fs(url)
        fs.pipe_file(path, b'{"a": 1}\n')
        az_fs, az_path = url_to_fs(f"az://{container}/folder/file.json")
        assert az_fs.cat_file(az_path) == b'{"a": 1}\n'
    finally:
        forget_accesses()


def test_conditional_writes_and_copies_hold_on_the_blob_api(blob_access: Any, azurite: Azurite) -> None:
    blobs = BlobObjects()
    hashed: list[Any] = []
    original_md5 = blobs.md5
    blobs.md5 = lambda url: hashed.append(url) or original_md5(url)  # type: ignore[method-assign]
    container = azurite.new_container()
    doc = azurite.url(container, "status/lease")

    first = blobs.create(doc, b"one")
    assert first is not None
    assert blobs.create(doc, b"two") is None  # If-None-Match: *
    second = blobs.replace(doc, b"three", if_etag=first)
    assert second is not None and second != first
    assert blobs.replace(doc, b"four", if_etag=first) is None  # stale ETag
    assert blobs.delete(doc, if_etag=first) is False
    assert blobs.read(doc) == (b"three", second)

    source = blobs.info(doc)
    copied = blobs.copy(source, azurite.url(container, "archive/lease"))
    copy = blobs.info(azurite.url(container, "archive/lease"))
    assert copied == copy.etag and copy.metadata[SOURCE_ETAG_METADATA] == source.etag.strip('"')
    assert copy.is_copy_of(source)
    assert blobs.same_content(source, copy) and hashed == []  # known from the copy's metadata
    assert blobs.copy(source, azurite.url(container, "archive/lease")) is None  # target exists
    blobs.write(doc, b"3hree")  # same size, other bytes, new ETag
    changed = blobs.info(doc)
    assert blobs.copy(source, azurite.url(container, "archive/other")) is None  # source changed
    assert not blobs.same_content(changed, copy)  # decided by content, not by size
    assert hashed == [] or len(hashed) == 2  # by Content-MD5 when both have one, else by hashing
    assert blobs.delete(doc, if_etag=changed.etag) is True
    assert blobs.info(doc) is None


def test_exactly_one_of_many_concurrent_creators_wins(blob_access: Any, azurite: Azurite) -> None:
    blobs = BlobObjects()
    doc = azurite.url(azurite.new_container(), "lease")
    barrier = threading.Barrier(12)
    results: list[str | None] = []

    def contend(index: int) -> None:
        barrier.wait()
        results.append(blobs.create(doc, f"holder {index}".encode()))

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    winners = [etag for etag in results if etag is not None]
    assert len(results) == 12 and len(winners) == 1
    assert blobs.read(doc)[1] == winners[0]
