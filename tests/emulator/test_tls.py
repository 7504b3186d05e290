"""The emulator's TLS port (AMQPS and WSS) with the CA it makes on first use, through the unmodified
SDK as it talks to the service: no ``UseDevelopmentEmulator``, the CA trusted by
``connection_verify``. A client that does not trust the CA is refused; the plain port still serves."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from azure.eventhub import TransportType

from eventhubs_emulator import Emulator
from eventhubs_emulator.config import ConfigError, EmulatorConfig
from tests.emulator.conftest import receive, send

pytestmark = pytest.mark.integration


@pytest.fixture
def emulator(tmp_path: Path):
    config = EmulatorConfig.single_hub("tls", tls_port=0, tls_dir=str(tmp_path / "tls"))
    with Emulator(config, port=0) as emu:
        yield emu


def test_the_sdk_sends_and_receives_over_amqps_and_wss_trusting_the_emulators_ca(emulator: Emulator) -> None:
    conn = emulator.tls_connection_string("tls")
    assert "UseDevelopmentEmulator" not in conn
    tls = {
        "custom_endpoint_address": emulator.tls_endpoint(),
        "connection_verify": str(emulator.ca_certificate),
    }
    send(conn, ["over-amqps-1", "over-amqps-2"], client=tls, partition_id="0")
    send(
        conn,
        ["over-wss"],
        client={**tls, "transport_type": TransportType.AmqpOverWebsocket},
        partition_id="0",
    )
    bodies = ["over-amqps-1", "over-amqps-2", "over-wss"]
    assert [e.body_as_str() for e in receive(conn, "0", 3, client=tls)] == bodies
    # The plain port serves the same hub, as before.
    assert [e.body_as_str() for e in receive(emulator.connection_string("tls"), "0", 3)] == bodies


def test_a_client_that_does_not_trust_the_ca_is_refused(emulator: Emulator) -> None:
    conn = emulator.tls_connection_string("tls")
    with pytest.raises(Exception, match=r"(?i)certificate|ssl"):
        send(conn, ["x"], client={"custom_endpoint_address": emulator.tls_endpoint(), "retry_total": 0})


def test_the_ca_is_made_once_kept_owner_only_and_reused(tmp_path: Path) -> None:
    from eventhubs_emulator.tls import ensure_certificates

    first = ensure_certificates(tmp_path / "tls")
    assert stat.S_IMODE((tmp_path / "tls" / "ca-key.pem").stat().st_mode) == 0o600
    assert stat.S_IMODE(first.server_key.stat().st_mode) == 0o600
    ca = first.ca_cert.read_bytes()
    assert ensure_certificates(tmp_path / "tls").ca_cert.read_bytes() == ca, "clients keep trusting it"


def test_a_tls_port_without_its_folder_is_refused_naming_both_keys() -> None:
    with pytest.raises(ConfigError, match="TlsPort needs TlsDir"):
        EmulatorConfig.single_hub("tls", partition_count=1, tls_port=0)


def test_the_tls_keys_are_read_from_config_json_as_written(tmp_path: Path) -> None:
    from eventhubs_emulator.config import parse_config

    config = EmulatorConfig.single_hub("tls", tls_port=5671, tls_dir=str(tmp_path / "tls"))
    extras = config.to_document()["UserConfig"]["EmulatorExtras"]
    assert extras["TlsPort"] == 5671 and extras["TlsDir"] == str(tmp_path / "tls")
    again = parse_config(config.to_document())
    assert (again.tls_port, again.tls_dir) == (5671, str(tmp_path / "tls"))
