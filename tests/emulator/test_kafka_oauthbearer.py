"""SASL OAUTHBEARER on the emulator's Kafka endpoint: an Entra ID access token of the trusted local
issuer (``eventhubs_emulator.token_issuer``) for ``https://<namespace host>/.default`` lets a Kafka
client in; a token for another namespace, an expired one or one signed by another key is refused
with SASL_AUTHENTICATION_FAILED and the service's reason (no token echoed), and the connection
closes. SaslAuthenticate v1 tells the client the session lasts as long as the token; a connection
that does not re-authenticate in time is closed at its next request, one that does goes on.

kafka-python is the real client; the session checks use raw frames (Kafka's classic encoding)."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.eventhub import EventData, EventHubProducerClient
from kafka import KafkaConsumer, TopicPartition
from kafka.net.sasl.oauth import AbstractTokenProvider

from eventhubs_emulator import Emulator
from eventhubs_emulator.config import EmulatorConfig

from .test_kafka_endpoint import DEADLINE, _closed_by_server, _read_response, _request, _string

pytestmark = pytest.mark.integration


@pytest.fixture
def emu_and_keys(tmp_path: Path) -> Iterator[tuple[Emulator, Any]]:
    """An emulator (hub1, 2 partitions, a Kafka port) trusting the issuer whose keys are returned."""
    from eventhubs_emulator.token_issuer import ensure_issuer_keys

    keys = ensure_issuer_keys(tmp_path / "issuer")
    config = EmulatorConfig.many_hubs({"hub1": 2}, kafka_port=0, entra_id_issuer_dir=str(tmp_path / "issuer"))
    with Emulator(config) as running:
        yield running, keys


def _audience(emu: Emulator) -> str:
    """The resource Microsoft documents for Kafka clients: ``https://<the host they connect to>``."""
    return f"https://{emu.kafka_bootstrap.rsplit(':', 1)[0]}"  # type: ignore[union-attr]


def _oauth_message(token: str) -> bytes:
    """RFC 7628's client initial response, as Kafka's OAuthBearerSaslClient sends it."""
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


def _handshake_and_authenticate(
    sock: socket.socket, message: bytes, correlation: int = 1
) -> tuple[int, int, str | None, int]:
    """(handshake error, authenticate error, its message, session_lifetime_ms) with SaslAuthenticate v1."""
    sock.sendall(_request(17, 1, correlation, _string("OAUTHBEARER")))
    (_, handshake_error, _count) = struct.unpack_from(">ihi", _read_response(sock))
    if handshake_error:
        return handshake_error, -1, None, 0
    sock.sendall(_request(36, 1, correlation + 1, struct.pack(">i", len(message)) + message))
    reply = _read_response(sock)
    (_, error, n) = struct.unpack_from(">ihh", reply)
    pos = 8 + max(n, 0)
    text = reply[8:pos].decode() if n >= 0 else None
    (auth_len,) = struct.unpack_from(">i", reply, pos)
    (lifetime_ms,) = struct.unpack_from(">q", reply, pos + 4 + max(auth_len, 0))
    return 0, error, text, lifetime_ms


def _connect(emu: Emulator) -> socket.socket:
    host, port = emu.kafka_bootstrap.rsplit(":", 1)  # type: ignore[union-attr]
    return socket.create_connection((host, int(port)), timeout=DEADLINE)


def _metadata_answered(sock: socket.socket, correlation: int) -> bool:
    """Whether a Metadata v1 request (all topics) is answered on ``sock`` (False: the server closed it)."""
    try:
        sock.sendall(_request(3, 1, correlation, struct.pack(">i", -1)))
        return struct.unpack_from(">i", _read_response(sock))[0] == correlation
    except ConnectionError:
        return False


class _IssuerTokens(AbstractTokenProvider):
    def __init__(self, keys: Any, audience: str) -> None:
        self.keys, self.audience = keys, audience

    def token(self) -> str:
        return self.keys.mint(self.audience, 300, subject="kafka-sp")[0]


def test_a_kafka_client_with_an_entra_id_token_reads_events_sent_over_amqp_exactly_once(
    emu_and_keys: tuple[Emulator, Any],
) -> None:
    emu, keys = emu_and_keys
    producer = EventHubProducerClient.from_connection_string(emu.connection_string("hub1"))
    sent = [f"oauth-{n}" for n in range(20)]
    with producer:
        for partition in ("0", "1"):
            batch = producer.create_batch(partition_id=partition)
            for body in sent[int(partition) :: 2]:
                batch.add(EventData(body))
            producer.send_batch(batch)
    consumer = KafkaConsumer(
        bootstrap_servers=emu.kafka_bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token_provider=_IssuerTokens(keys, _audience(emu)),
        request_timeout_ms=20_000,
    )
    try:
        partitions = [TopicPartition("hub1", 0), TopicPartition("hub1", 1)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        received: list[str] = []
        deadline = time.monotonic() + DEADLINE
        while len(received) < len(sent) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                received.extend(r.value.decode() for r in records)
        for records in consumer.poll(timeout_ms=300).values():  # anything more: a duplicate
            received.extend(r.value.decode() for r in records)
    finally:
        consumer.close()
    assert sorted(received) == sorted(sent), "every event exactly once"


def _refusals(keys: Any, audience: str) -> dict[str, tuple[str, str]]:
    """Token messages the endpoint must refuse, with the reason each answer names."""
    from eventhubs_emulator.token_issuer.keys import _throwaway_keys

    other_ns = keys.mint("https://otherns.servicebus.windows.net", 300)[0]
    expired = keys.mint(audience, 60, now=time.time() - 3600)[0]
    foreign = _throwaway_keys().mint(audience, 300, issuer=keys.issuer)[0]
    return {
        "another-namespace": (other_ns, "InvalidAudience"),
        "expired": (expired, "ExpiredToken"),
        "signed-by-another-key": (foreign, "InvalidSignature"),
        "not-a-jwt": ("not-a-token", "MalformedToken"),
    }


@pytest.mark.parametrize("case", ["another-namespace", "expired", "signed-by-another-key", "not-a-jwt"])
def test_tokens_the_namespace_does_not_trust_are_refused_with_sasl_authentication_failed(
    emu_and_keys: tuple[Emulator, Any], case: str
) -> None:
    emu, keys = emu_and_keys
    token, reason = _refusals(keys, _audience(emu))[case]
    with _connect(emu) as sock:
        handshake, error, message, _ = _handshake_and_authenticate(sock, _oauth_message(token))
        assert (handshake, error) == (0, 58), message  # SASL_AUTHENTICATION_FAILED
        assert message is not None and reason in message
        assert token not in message, "the token is never echoed"
        assert _closed_by_server(sock)


def test_a_malformed_oauthbearer_message_is_refused_and_the_handshake_offers_both_mechanisms(
    emu_and_keys: tuple[Emulator, Any],
) -> None:
    emu, _ = emu_and_keys
    with _connect(emu) as sock:
        sock.sendall(_request(17, 1, 1, _string("OAUTHBEARER")))
        reply = _read_response(sock)
        assert reply[4:6] == b"\x00\x00" and b"PLAIN" in reply and b"OAUTHBEARER" in reply
        sock.sendall(_request(36, 1, 2, struct.pack(">i", 9) + b"auth=none"))
        (_, error) = struct.unpack_from(">ih", _read_response(sock))
        assert error == 58
        assert _closed_by_server(sock)


def test_the_session_lasts_as_long_as_the_token_and_a_reauthentication_extends_it(
    emu_and_keys: tuple[Emulator, Any],
) -> None:
    emu, keys = emu_and_keys
    audience = _audience(emu)
    with _connect(emu) as stays, _connect(emu) as lapses:
        for sock in (stays, lapses):
            token, expires = keys.mint(audience, 3)
            handshake, error, message, lifetime_ms = _handshake_and_authenticate(sock, _oauth_message(token))
            assert (handshake, error) == (0, 0), message
            assert 0 < lifetime_ms <= 3000 and abs(lifetime_ms - (expires - time.time()) * 1000) < 1500
            assert _metadata_answered(sock, 3)
        # KIP-368: the client re-authenticates on the same connection with a new token
        token, _ = keys.mint(audience, 300)
        assert _handshake_and_authenticate(stays, _oauth_message(token), correlation=4)[:2] == (0, 0)
        time.sleep(3.5)
        assert _metadata_answered(stays, 6), "re-authenticated: the connection goes on"
        assert not _metadata_answered(lapses, 6), "the session lapsed with its token: closed"
