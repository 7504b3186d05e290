"""The Event Hubs hook's connection: the hub named by the extra ``eventhub_name`` (the old key
``eventhub`` with a deprecation warning), and a clear error for a connection without a string."""

from __future__ import annotations

import json

import pytest

from hubflow_plugins.hooks.eventhubs import EventHubsHook

pytestmark = pytest.mark.integration

STRING = "Endpoint=sb://127.0.0.1;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE"


def _connection(monkeypatch: pytest.MonkeyPatch, password: str, extra: dict) -> EventHubsHook:
    conn = {"conn_type": "generic", "password": password, "extra": extra}
    monkeypatch.setenv("AIRFLOW_CONN_HUB_TEST", json.dumps(conn))
    return EventHubsHook("hub_test")


def test_the_extra_eventhub_name_becomes_the_entity_path(monkeypatch: pytest.MonkeyPatch) -> None:
    hook = _connection(monkeypatch, STRING, {"eventhub_name": "telemetry"})
    assert hook.connection_string() == STRING + ";EntityPath=telemetry"
    with_path = _connection(monkeypatch, STRING + ";EntityPath=orders", {"eventhub_name": "telemetry"})
    assert with_path.connection_string().endswith(";EntityPath=orders"), "the string's own hub wins"


def test_the_old_extra_key_still_works_with_a_deprecation_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    hook = _connection(monkeypatch, STRING, {"eventhub": "telemetry"})
    with pytest.warns(
        DeprecationWarning, match="'hub_test': the extra key 'eventhub' is deprecated; rename it"
    ):
        assert hook.connection_string() == STRING + ";EntityPath=telemetry"
    both = _connection(monkeypatch, STRING, {"eventhub": "a", "eventhub_name": "b"})
    with pytest.raises(ValueError, match="sets both 'eventhub_name' and the deprecated 'eventhub'"):
        both.connection_string()


def test_a_connection_without_a_connection_string_is_refused_without_echoing_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hook = _connection(monkeypatch, "SharedAccessKey=oops-not-a-string", {})
    with pytest.raises(ValueError, match="'hub_test' must hold the Event Hubs connection string") as error:
        hook.connection_string()
    assert "oops" not in str(error.value)


def test_an_entra_id_connection_gives_a_secret_free_string_and_its_identity_by_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    namespace = {"fully_qualified_namespace": "ns.servicebus.windows.net", "eventhub_name": "orders"}
    managed = _connection(monkeypatch, "", {**namespace, "managed_identity_client_id": "mi-client"})
    assert managed.uses_credential()
    assert managed.connection_string() == "Endpoint=sb://ns.servicebus.windows.net/;EntityPath=orders"
    assert managed.credential_environment() == {"AZURE_CLIENT_ID": "mi-client"}

    conn = {
        "conn_type": "generic",
        "login": "sp-client",
        "password": "sp-secret",
        "extra": {**namespace, "tenant_id": "t1"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_HUB_TEST", json.dumps(conn))
    principal = EventHubsHook("hub_test")
    assert "sp-secret" not in principal.connection_string()
    assert principal.credential_environment() == {
        "AZURE_TENANT_ID": "t1",
        "AZURE_CLIENT_ID": "sp-client",
        "AZURE_CLIENT_SECRET": "sp-secret",
    }
    no_tenant = _connection(monkeypatch, "sp-secret", namespace)
    with pytest.raises(ValueError, match=r"'hub_test': a service principal needs .*'tenant_id'") as error:
        no_tenant.credential_environment()
    assert "sp-secret" not in str(error.value)
    no_hub = _connection(monkeypatch, "", {"fully_qualified_namespace": "ns.servicebus.windows.net"})
    with pytest.raises(ValueError, match="must name the hub in its extra 'eventhub_name'"):
        no_hub.connection_string()
    assert _connection(monkeypatch, STRING, namespace).credential_environment() == {}, "a string wins"
