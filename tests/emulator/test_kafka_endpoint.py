"""The emulator's Kafka endpoint with a real Kafka client (kafka-python) and the unmodified azure-eventhub
SDK on loopback: events cross between the protocols exactly once, with the documented mapping (hub =
topic, partition = partition, Kafka offset = sequence number, headers = application properties), SASL
PLAIN takes only the namespace's connection string, and hostile frames close only their connection.

Unknown-topic and hostile-frame checks talk to the port over a raw socket with hand-built frames
(Kafka's classic encoding), independent of the emulator's own codec.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import re
import socket
import ssl
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

import pytest
from azure.eventhub import EventData, EventHubProducerClient
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka import errors as kafka_errors

from eventhubs_emulator import Emulator
from eventhubs_emulator.config import ConfigError, EmulatorConfig, parse_config

from .conftest import receive, receive_all

pytestmark = pytest.mark.integration

DEADLINE = 30.0  # seconds: generous bounds for waits on conditions (2 loaded cores), not speeds


@pytest.fixture
def emu() -> Iterator[Emulator]:
    """An emulator with hub1 (2 partitions) and hub4 (4 partitions) and its Kafka endpoint on a free port."""
    with Emulator(EmulatorConfig.many_hubs({"hub1": 2, "hub4": 4}, kafka_port=0)) as running:
        yield running


def _client_config(emu: Emulator, **overrides: Any) -> dict[str, Any]:
    """What a Kafka client sets for Event Hubs: SASL PLAIN, user $ConnectionString, the connection string."""
    config: dict[str, Any] = {
        "bootstrap_servers": emu.kafka_bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "$ConnectionString",
        "sasl_plain_password": emu.kafka_password(),
        "request_timeout_ms": 20_000,
    }
    config.update(overrides)
    return config


def _consume(emu: Emulator, hub: str, partitions: list[int], expected: int, **overrides: Any) -> list[Any]:
    """Read ``partitions`` of ``hub`` from the beginning with manual assignment until ``expected`` records."""
    consumer = KafkaConsumer(**_client_config(emu, **overrides))
    try:
        tps = [TopicPartition(hub, p) for p in partitions]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        records: list[Any] = []
        deadline = time.monotonic() + DEADLINE
        while len(records) < expected and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend(batch)
        for batch in consumer.poll(timeout_ms=300).values():  # anything beyond: a duplicate
            records.extend(batch)
        return records
    finally:
        consumer.close()


def test_events_produced_through_kafka_are_consumed_through_amqp_exactly_once(emu: Emulator) -> None:
    producer = KafkaProducer(**_client_config(emu, acks="all"))
    sent: dict[str, int] = {}
    offsets: dict[str, int] = {}
    for i in range(12):
        ident = f"k2a-{i}"
        partition = i % 4
        meta = producer.send(
            "hub4",
            ident.encode(),
            key=f"key-{i}".encode(),
            partition=partition,
            headers=[("ident", ident.encode()), ("n", str(i).encode())],
        ).get(timeout=DEADLINE)
        assert (meta.topic, meta.partition) == ("hub4", partition)
        sent[ident] = partition
        offsets[ident] = meta.offset
    producer.close()

    got: dict[str, list[tuple[int, EventData]]] = {}
    for partition, event in receive_all(emu.connection_string("hub4"), expected=12):
        got.setdefault(event.body_as_str(), []).append((int(partition), event))
    assert sorted(got) == sorted(sent), "every event exactly once by identity"
    for ident, [(partition, event)] in got.items():
        assert partition == sent[ident]
        props = {(k.decode() if isinstance(k, bytes) else k): v for k, v in event.properties.items()}
        assert props == {"ident": ident.encode(), "n": ident.split("-")[1].encode()}
        assert event.sequence_number == offsets[ident], "the Kafka offset is the sequence number"


def test_events_sent_through_amqp_are_fetched_through_kafka_exactly_once(emu: Emulator) -> None:
    conn_str = emu.connection_string("hub1")
    with EventHubProducerClient.from_connection_string(conn_str) as producer:
        for partition in ("0", "1"):
            batch = producer.create_batch(partition_id=partition)
            for i in range(5):
                event = EventData(f"a2k-{partition}-{i}")
                event.properties = {"ident": f"a2k-{partition}-{i}", "count": i}
                batch.add(event)
            producer.send_batch(batch)
        info = {p: producer.get_partition_properties(p) for p in ("0", "1")}

    records = _consume(emu, "hub1", [0, 1], expected=10)
    by_ident: dict[str, list[Any]] = {}
    for rec in records:
        by_ident.setdefault(rec.value.decode(), []).append(rec)
    assert sorted(by_ident) == sorted(f"a2k-{p}-{i}" for p in "01" for i in range(5))
    for ident, [rec] in by_ident.items():
        partition = ident.split("-")[1]
        assert rec.partition == int(partition)
        headers = dict(rec.headers)
        assert headers["ident"] == ident.encode(), "string properties arrive as UTF-8 headers"
        assert set(headers) == {"ident", "count"}
        assert rec.timestamp_type == 1, "log-append time: the enqueued time"
    for partition in ("0", "1"):
        offsets = sorted(r.offset for r in records if r.partition == int(partition))
        assert offsets == list(range(5))
        assert offsets[-1] == info[partition]["last_enqueued_sequence_number"]


def test_a_waiting_fetch_gets_an_event_sent_through_amqp(emu: Emulator) -> None:
    consumer = KafkaConsumer(**_client_config(emu, fetch_max_wait_ms=5000))
    try:
        tp = TopicPartition("hub1", 0)
        consumer.assign([tp])
        consumer.seek_to_end(tp)
        assert consumer.poll(timeout_ms=300) == {}
        with EventHubProducerClient.from_connection_string(emu.connection_string("hub1")) as producer:
            batch = producer.create_batch(partition_id="0")
            batch.add(EventData("late"))
            producer.send_batch(batch)
        records: list[Any] = []
        deadline = time.monotonic() + DEADLINE
        while not records and time.monotonic() < deadline:
            records = [r for batch in consumer.poll(timeout_ms=500).values() for r in batch]
        assert [r.value for r in records] == [b"late"]
    finally:
        consumer.close()


def test_list_offsets_agree_with_the_amqp_partition_properties(emu: Emulator) -> None:
    producer = KafkaProducer(**_client_config(emu, acks=1))
    before = int(time.time() * 1000) - 1
    for i in range(6):
        producer.send("hub1", f"lo-{i}".encode(), partition=1).get(timeout=DEADLINE)
    producer.close()
    emu.truncate("hub1", "1", 2)

    consumer = KafkaConsumer(**_client_config(emu))
    try:
        tps = [TopicPartition("hub1", 0), TopicPartition("hub1", 1)]
        earliest = consumer.beginning_offsets(tps)
        latest = consumer.end_offsets(tps)
        by_time = consumer.offsets_for_times({tps[1]: before})
    finally:
        consumer.close()
    with EventHubProducerClient.from_connection_string(emu.connection_string("hub1")) as amqp:
        props = {p: amqp.get_partition_properties(p) for p in ("0", "1")}
    for tp in tps:
        p = props[str(tp.partition)]
        assert earliest[tp] == (p["beginning_sequence_number"] if not p["is_empty"] else latest[tp])
        assert latest[tp] == p["last_enqueued_sequence_number"] + 1
    assert (earliest[tps[1]], latest[tps[1]]) == (2, 6)
    assert latest[tps[0]] == 0
    assert by_time[tps[1]].offset == 2, "the first retained event enqueued at or after the time"


def test_a_standard_namespace_refuses_gzip_batches_with_the_message_format_error(emu: Emulator) -> None:
    """Kafka compression is Premium and Dedicated only (Microsoft's Kafka overview); a Standard namespace
    answers a compressed batch with the message-format error its troubleshooting guide names."""
    producer = KafkaProducer(**_client_config(emu, compression_type="gzip", retries=0))
    try:
        with pytest.raises(kafka_errors.UnsupportedForMessageFormatError):
            producer.send("hub1", b"zipped" * 100, partition=0).get(timeout=DEADLINE)
    finally:
        producer.close()
    assert emu.partition_info("hub1", "0")["last_enqueued_sequence_number"] == -1


def test_a_premium_namespace_takes_gzip_and_amqp_readers_get_the_events_inflated() -> None:
    """``--tier Premium``: a gzip producer's events reach an AMQP reader inflated, each once with its
    headers as properties, and a Kafka consumer reads them back at their offsets."""
    config = EmulatorConfig.many_hubs({"hub1": 2}, kafka_port=0, tier="Premium")
    with Emulator(config) as emu:
        producer = KafkaProducer(**_client_config(emu, compression_type="gzip", acks="all", linger_ms=50))
        futures = [
            producer.send("hub1", f"gz-{i}-".encode() * 40, partition=i % 2, headers=[("n", str(i).encode())])
            for i in range(30)
        ]
        producer.flush()
        assert sorted(f.get(timeout=DEADLINE).offset for f in futures) == sorted(list(range(15)) * 2)
        producer.close()
        got = receive_all(emu.connection_string("hub1"), expected=30)
        bodies = sorted(event.body_as_str() for _, event in got)
        assert bodies == sorted(f"gz-{i}-" * 40 for i in range(30)), "every event once, inflated"
        for partition, event in got:
            n = int(event.body_as_str().split("-")[1])
            assert (int(partition), event.properties) == (n % 2, {b"n": str(n).encode()})
        records = _consume(emu, "hub1", [0, 1], expected=30)
        assert sorted(r.value.decode() for r in records) == bodies


# ----------------------------------------------------------------------------------- raw socket checks
def _request(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    """A classic (non-flexible) request frame: size, header v1 (client id 'raw'), body."""
    payload = struct.pack(">hhih", api_key, version, correlation_id, 3) + b"raw" + body
    return struct.pack(">i", len(payload)) + payload


def _string(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def _read_response(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def _authenticated_socket(emu: Emulator) -> socket.socket:
    host, port = emu.kafka_bootstrap.rsplit(":", 1)  # type: ignore[union-attr]
    sock = socket.create_connection((host, int(port)), timeout=DEADLINE)
    sock.sendall(_request(17, 1, 1, _string("PLAIN")))
    assert struct.unpack_from(">ih", _read_response(sock)) == (1, 0)
    token = b"\x00$ConnectionString\x00" + emu.kafka_password().encode()
    sock.sendall(_request(36, 0, 2, struct.pack(">i", len(token)) + token))
    assert struct.unpack_from(">ih", _read_response(sock)) == (2, 0)
    return sock


def test_an_unknown_topic_is_unknown_topic_or_partition(emu: Emulator) -> None:
    sock = _authenticated_socket(emu)
    try:
        # Metadata v1: topics ["nohub"]
        sock.sendall(_request(3, 1, 3, struct.pack(">i", 1) + _string("nohub")))
        reply = _read_response(sock)
        # correlation id, brokers [node, host, port, rack], controller id, topics [error, name, ...]
        (correlation_id, brokers) = struct.unpack_from(">ii", reply)
        pos = 8
        for _ in range(brokers):
            pos += 4
            (n,) = struct.unpack_from(">h", reply, pos)
            pos += 2 + n + 4
            (n,) = struct.unpack_from(">h", reply, pos)
            pos += 2 + max(n, 0)
        pos += 4
        count, error = struct.unpack_from(">ih", reply, pos)
        assert (correlation_id, count, error) == (3, 1, 3)  # UNKNOWN_TOPIC_OR_PARTITION
    finally:
        sock.close()


def _closed_by_server(sock: socket.socket) -> bool:
    sock.settimeout(DEADLINE)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    return True


HOSTILE = {
    "size-over-the-pre-auth-limit": struct.pack(">i", 1024 * 1024) + b"\x00" * 64,
    "negative-size": struct.pack(">i", -5),
    "unknown-api-key": _request(0x7FF0, 0, 1, b"garbage"),
    "truncated-inside-the-header": struct.pack(">i", 10) + struct.pack(">hhih", 18, 0, 1, 900),
    "metadata-before-authentication": _request(3, 1, 1, struct.pack(">i", -1)),
    # ApiVersions v3 (flexible): header tagged fields, then a compact string 2**32-1 bytes long
    "string-longer-than-the-frame": _request(18, 3, 1, b"\x00\xff\xff\xff\xff\x0f"),
    "garbage": struct.pack(">i", 64) + bytes(range(64)),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_frames_close_only_their_connection(
    emu: Emulator, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="eventhubs_emulator.kafka")
    bystander = KafkaProducer(**_client_config(emu, acks="all"))
    bystander.send("hub1", b"before", partition=0).get(timeout=DEADLINE)
    host, port = emu.kafka_bootstrap.rsplit(":", 1)  # type: ignore[union-attr]
    with socket.create_connection((host, int(port)), timeout=DEADLINE) as sock:
        sock.sendall(HOSTILE[name])
        assert _closed_by_server(sock), "the server closed the hostile connection"
    bystander.send("hub1", b"after", partition=0).get(timeout=DEADLINE)
    bystander.close()
    assert [r.value for r in _consume(emu, "hub1", [0], expected=2)] == [b"before", b"after"]
    assert "closing the connection" in caplog.text


@pytest.mark.parametrize(
    "frame",
    [
        struct.pack(">i", 0x7FFFFFFF) + b"\x00" * 16,
        _request(3, 1, 9, struct.pack(">i", 0x7FFFFFFF) + _string("hub1")),  # a topic count no bytes back
    ],
    ids=["size-over-the-limit", "array-count-beyond-the-frame"],
)
def test_hostile_frames_after_authentication_close_the_connection(emu: Emulator, frame: bytes) -> None:
    sock = _authenticated_socket(emu)
    with sock:
        sock.sendall(frame)
        assert _closed_by_server(sock)


def _sasl_exchange(emu: Emulator, mechanism: str, token: bytes) -> tuple[int, int, str | None, bool]:
    """(handshake error, authenticate error, authenticate message, closed afterwards) over a raw socket."""
    host, port = emu.kafka_bootstrap.rsplit(":", 1)  # type: ignore[union-attr]
    with socket.create_connection((host, int(port)), timeout=DEADLINE) as sock:
        sock.sendall(_request(17, 1, 1, _string(mechanism)))
        (_, handshake_error) = struct.unpack_from(">ih", _read_response(sock))
        if handshake_error:
            return handshake_error, -1, None, _closed_by_server(sock)
        sock.sendall(_request(36, 0, 2, struct.pack(">i", len(token)) + token))
        reply = _read_response(sock)
        (_, error, n) = struct.unpack_from(">ihh", reply)
        message = reply[8 : 8 + n].decode() if n >= 0 else None
        return 0, error, message, error != 0 and _closed_by_server(sock)


def _plain(user: str, password: str) -> bytes:
    return b"\x00" + user.encode() + b"\x00" + password.encode()


@pytest.mark.parametrize(
    "user, password, wanted",
    [
        (
            "$ConnectionString",
            "Endpoint=sb://x/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=not-the-key",
            "do not match",
        ),
        (
            "$ConnectionString",
            "Endpoint=sb://x/;SharedAccessKeyName=other;SharedAccessKey=SAS_KEY_VALUE",
            "do not match",
        ),
        ("RootManageSharedAccessKey", "SAS_KEY_VALUE", "$ConnectionString"),
        ("$ConnectionString", "not-a-connection-string", "no Endpoint="),
    ],
    ids=["wrong-key", "wrong-key-name", "key-name-as-user", "not-a-connection-string"],
)
def test_sasl_plain_refuses_other_credentials_with_sasl_authentication_failed(
    emu: Emulator, user: str, password: str, wanted: str
) -> None:
    handshake, error, message, closed = _sasl_exchange(emu, "PLAIN", _plain(user, password))
    assert (handshake, error, closed) == (0, 58, True)  # SASL_AUTHENTICATION_FAILED, then closed
    assert message is not None and wanted in message
    assert "not-the-key" not in message and "SAS_KEY_VALUE" not in message, "secrets are never echoed"


def test_sasl_plain_takes_the_connection_string_and_refuses_a_sas_token_one(emu: Emulator) -> None:
    """A valid SAS token is still refused: the service's Kafka endpoint takes none (Microsoft's FAQ)."""
    assert _sasl_exchange(emu, "PLAIN", _plain("$ConnectionString", emu.kafka_password()))[:2] == (0, 0)
    expiry = int(time.time()) + 600
    resource = "sb://localhost/hub1"
    sig = base64.b64encode(
        hmac.new(b"SAS_KEY_VALUE", f"{resource}\n{expiry}".encode(), hashlib.sha256).digest()
    ).decode()
    token = (
        f"SharedAccessSignature sr={resource}&sig={quote_plus(sig)}&se={expiry}&skn=RootManageSharedAccessKey"
    )
    password = f"Endpoint=sb://localhost/;SharedAccessSignature={token}"
    handshake, error, message, closed = _sasl_exchange(emu, "PLAIN", _plain("$ConnectionString", password))
    assert (handshake, error, closed) == (0, 58, True)  # SASL_AUTHENTICATION_FAILED, then closed
    assert message is not None and "does not take a SharedAccessSignature token" in message
    assert quote_plus(sig) not in message and sig not in message, "the token is never echoed"


def test_sasl_mechanisms_other_than_plain_are_refused_with_unsupported_sasl_mechanism(emu: Emulator) -> None:
    handshake, _, _, closed = _sasl_exchange(emu, "SCRAM-SHA-256", b"")
    assert (handshake, closed) == (33, True)  # UNSUPPORTED_SASL_MECHANISM, then closed


def test_cli_kafka_port_prints_the_bootstrap_address_a_client_uses(tmp_path: Path) -> None:
    """``--kafka-port 0`` as docs/emulator.md shows it: the printed bootstrap address and a hub's printed
    connection string as the SASL password carry a Kafka producer."""
    config = EmulatorConfig.many_hubs({"eh1": 1})
    path = config.write(tmp_path / "Config.json")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "eventhubs_emulator",
            "--config",
            str(path),
            "--port",
            "0",
            "--kafka-port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = [proc.stdout.readline() for _ in range(4)]  # type: ignore[union-attr]
        (kafka_line,) = [line for line in lines if line.startswith("Kafka: ")]
        bootstrap = re.search(r"bootstrap servers (\S+) ", kafka_line).group(1)  # type: ignore[union-attr]
        conn = lines[-1].split(": ", 1)[1].strip()
        assert conn.startswith("Endpoint=sb://"), lines
        producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_plain_username="$ConnectionString",
            sasl_plain_password=conn,
        )
        meta = producer.send("eh1", b"via-cli", partition=0).get(timeout=DEADLINE)
        producer.close()
        assert (meta.partition, meta.offset) == (0, 0)
        assert [e.body_as_str() for e in receive(conn, "0", expected=1)] == ["via-cli"]
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "SAS_KEY_VALUE" not in err


def test_sasl_ssl_on_the_kafka_tls_port_with_the_emulator_ca(tmp_path: Path) -> None:
    """``KafkaTlsPort``: SASL PLAIN over TLS as on the service's 9093; the client verifies the emulator's
    certificate against ``<TlsDir>/ca.pem``, and the events meet AMQP consumers as on the plain port."""
    config = EmulatorConfig.many_hubs({"hub1": 1}, kafka_tls_port=0, tls_dir=str(tmp_path / "tls"))
    with Emulator(config) as emu:
        assert emu.kafka_bootstrap is None and emu.kafka_tls_bootstrap is not None
        tls = {
            "bootstrap_servers": emu.kafka_tls_bootstrap,
            "security_protocol": "SASL_SSL",
            "ssl_cafile": str(emu.ca_certificate),
        }
        producer = KafkaProducer(**_client_config(emu, acks="all", **tls))
        meta = producer.send("hub1", b"over-tls", partition=0, headers=[("via", b"9093")]).get(
            timeout=DEADLINE
        )
        producer.close()
        assert meta.offset == 0
        [event] = receive(emu.connection_string("hub1"), "0", expected=1, settle=0.3)
        assert event.body_as_str() == "over-tls"
        [record] = _consume(emu, "hub1", [0], expected=1, **tls)
        assert (record.value, record.headers) == (b"over-tls", [("via", b"9093")])
        # a client that does not trust the emulator's CA gets no connection
        host, port = emu.kafka_tls_bootstrap.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=DEADLINE) as raw:
            with pytest.raises(ssl.SSLCertVerificationError):
                ssl.create_default_context().wrap_socket(raw, server_hostname="localhost")


def test_kafka_ports_round_trip_through_config_json_and_tls_needs_a_tls_dir() -> None:
    config = EmulatorConfig.many_hubs({"hub1": 1}, kafka_port=9092, kafka_tls_port=9093, tls_dir="/tmp/x")
    extras = config.to_document()["UserConfig"]["EmulatorExtras"]
    assert (extras["KafkaPort"], extras["KafkaTlsPort"]) == (9092, 9093)
    again = parse_config(config.to_document())
    assert (again.kafka_port, again.kafka_tls_port) == (9092, 9093)
    assert "KafkaPort" not in EmulatorConfig.many_hubs({"hub1": 1}).to_document()["UserConfig"].get(
        "EmulatorExtras", {}
    ), "off by default"
    with pytest.raises(ConfigError, match="KafkaTlsPort needs TlsDir"):
        EmulatorConfig.many_hubs({"hub1": 1}, kafka_tls_port=0)
    with pytest.raises(ConfigError, match="KafkaPort: must be a port number"):
        EmulatorConfig.many_hubs({"hub1": 1}, kafka_port=70000)


def test_a_manually_assigned_consumer_commits_and_resumes_from_its_group_offsets(emu: Emulator) -> None:
    """FindCoordinator, OffsetCommit and OffsetFetch for a consumer group without membership (manual
    assignment, as Kafka serves it); a new consumer of the group resumes where the first committed."""
    producer = KafkaProducer(**_client_config(emu, acks="all"))
    for i in range(5):
        producer.send("hub1", f"g-{i}".encode(), partition=1).get(timeout=DEADLINE)
    producer.close()
    tp = TopicPartition("hub1", 1)
    first = KafkaConsumer(**_client_config(emu, group_id="g1", enable_auto_commit=False))
    try:
        first.assign([tp])
        assert first.committed(tp) is None, "nothing committed yet"
        first.seek_to_beginning(tp)
        read: list[Any] = []
        deadline = time.monotonic() + DEADLINE
        while len(read) < 3 and time.monotonic() < deadline:
            read.extend(
                r for batch in first.poll(timeout_ms=500, max_records=3 - len(read)).values() for r in batch
            )
        assert [r.value for r in read] == [b"g-0", b"g-1", b"g-2"]
        first.commit()
    finally:
        first.close()
    second = KafkaConsumer(**_client_config(emu, group_id="g1", enable_auto_commit=False))
    other = KafkaConsumer(**_client_config(emu, group_id="g2", enable_auto_commit=False))
    try:
        second.assign([tp])
        other.assign([tp])
        assert second.committed(tp) == 3
        assert other.committed(tp) is None, "groups keep their own offsets"
        rest: list[Any] = []
        deadline = time.monotonic() + DEADLINE
        while len(rest) < 2 and time.monotonic() < deadline:
            rest.extend(r for batch in second.poll(timeout_ms=500).values() for r in batch)
        assert [(r.offset, r.value) for r in rest] == [(3, b"g-3"), (4, b"g-4")]
    finally:
        second.close()
        other.close()


def test_acks_0_stores_without_an_answer_and_oversized_events_get_message_too_large() -> None:
    config = EmulatorConfig.many_hubs({"hub1": 1}, kafka_port=0, max_event_size=1024)
    with Emulator(config) as emu:
        fire_and_forget = KafkaProducer(**_client_config(emu, acks=0))
        for i in range(3):
            fire_and_forget.send("hub1", f"a0-{i}".encode(), partition=0)
        fire_and_forget.flush(timeout=DEADLINE)
        fire_and_forget.close()
        assert [r.value for r in _consume(emu, "hub1", [0], expected=3)] == [b"a0-0", b"a0-1", b"a0-2"]

        producer = KafkaProducer(**_client_config(emu, acks="all", retries=0))
        try:
            with pytest.raises(kafka_errors.MessageSizeTooLargeError):
                producer.send("hub1", b"x" * 2000, partition=0).get(timeout=DEADLINE)
            producer.send("hub1", b"x" * 500, partition=0).get(timeout=DEADLINE)  # under the limit
        finally:
            producer.close()
        assert emu.partition_info("hub1", "0")["last_enqueued_sequence_number"] == 3


def test_a_subscribed_consumer_joins_its_group_reads_and_commits_inside_the_generation(emu: Emulator) -> None:
    """JoinGroup/SyncGroup as a group of one: a subscribed consumer is given both partitions of hub1,
    reads what the AMQP side sent, and commits inside its generation; a consumer of the same group
    then finds those offsets."""
    with EventHubProducerClient.from_connection_string(emu.connection_string("hub1")) as producer:
        for partition in ("0", "1"):
            producer.send_batch([EventData(f"sub-{partition}-{i}") for i in range(2)], partition_id=partition)
    consumer = KafkaConsumer(
        **_client_config(emu, group_id="solo", enable_auto_commit=False, auto_offset_reset="earliest")
    )
    try:
        consumer.subscribe(["hub1"])
        records: list[Any] = []
        deadline = time.monotonic() + DEADLINE
        while len(records) < 4 and time.monotonic() < deadline:
            records.extend(r for batch in consumer.poll(timeout_ms=500).values() for r in batch)
        assert {tp.partition for tp in consumer.assignment()} == {0, 1}
        assert sorted(r.value for r in records) == [b"sub-0-0", b"sub-0-1", b"sub-1-0", b"sub-1-1"]
        consumer.commit()
    finally:
        consumer.close()
    check = KafkaConsumer(**_client_config(emu, group_id="solo", enable_auto_commit=False))
    try:
        tps = [TopicPartition("hub1", 0), TopicPartition("hub1", 1)]
        check.assign(tps)
        assert [check.committed(tp) for tp in tps] == [2, 2]
    finally:
        check.close()
