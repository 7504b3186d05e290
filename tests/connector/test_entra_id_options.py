"""The options that take the connector to a custom endpoint and CA (Entra ID against the emulator)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyspark_eventhubs.client import EventHubsClientError, consumer_client
from pyspark_eventhubs.errors import EventHubsOptionError
from pyspark_eventhubs.options import parse_options

AAD = {
    "eventhubs.useAadAuth": "true",
    "eventhubs.fullyQualifiedNamespace": "localhost",
    "eventhubs.name": "h",
}


def test_a_custom_endpoint_is_amqp_over_tls_unless_it_says_websocket(tmp_path: Path) -> None:
    from azure.eventhub import TransportType

    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    for address, transport in (
        ("sb://localhost:5671", TransportType.Amqp),
        ("wss://localhost:5671", TransportType.AmqpOverWebsocket),
    ):
        options = parse_options(
            {**AAD, "eventhubs.customEndpointAddress": address, "eventhubs.connectionVerify": str(ca)}
        )
        client = consumer_client(options)
        try:
            assert client._config.transport_type == transport
            assert client._config.connection_verify == str(ca)
        finally:
            client.close()


@pytest.mark.parametrize("address", ["localhost:5671", "http://localhost", "sb://"])
def test_a_custom_endpoint_without_a_known_scheme_and_host_is_refused_naming_the_option(address: str) -> None:
    with pytest.raises(EventHubsOptionError, match=r"'eventhubs\.customEndpointAddress' must be a URL"):
        parse_options({**AAD, "eventhubs.customEndpointAddress": address})


def test_a_ca_bundle_that_is_not_a_file_is_refused_naming_the_option(tmp_path: Path) -> None:
    options = parse_options({**AAD, "eventhubs.connectionVerify": str(tmp_path / "missing.pem")})
    with pytest.raises(EventHubsClientError, match=r"'eventhubs\.connectionVerify' names .*not a file"):
        consumer_client(options)
