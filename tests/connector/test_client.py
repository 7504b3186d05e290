"""Client construction from options: SAS key or Azure AD, without touching the network."""

from __future__ import annotations

from azure.identity import ClientSecretCredential, DefaultAzureCredential

from pyspark_eventhubs.client import consumer_client, producer_client
from pyspark_eventhubs.options import parse_options

AAD = {
    "eventhubs.useAadAuth": "true",
    "eventhubs.fullyQualifiedNamespace": "myns.servicebus.windows.net",
    "eventhubs.name": "hub1",
}


def test_service_principal_credential_is_used() -> None:
    opts = parse_options(
        {
            **AAD,
            "eventhubs.tenantId": "00000000-0000-0000-0000-000000000001",
            "eventhubs.clientId": "00000000-0000-0000-0000-000000000002",
            "eventhubs.clientSecret": "s",
        }
    )
    client = consumer_client(opts)
    try:
        assert isinstance(client._credential, ClientSecretCredential)
        assert client.eventhub_name == "hub1"
        assert client._address.hostname == "myns.servicebus.windows.net"
    finally:
        client.close()


def test_default_credential_chain_without_service_principal() -> None:
    client = producer_client(parse_options(AAD))
    try:
        assert isinstance(client._credential, DefaultAzureCredential)
    finally:
        client.close()


def test_sas_connection_string_client() -> None:
    opts = parse_options(
        {
            "eventhubs.connectionString": "Endpoint=sb://ns.servicebus.windows.net/;"
            "SharedAccessKeyName=R;SharedAccessKey=k;EntityPath=hub9",
            "eventhubs.consumerGroup": "cg",
        }
    )
    client = consumer_client(opts)
    try:
        assert client.eventhub_name == "hub9" and client._consumer_group == "cg"
    finally:
        client.close()
