"""What one AMQP client may do to the emulator and no more, over raw sockets against the real server.

* the connection's state machine, as the service's AMQP stack (azure-amqp) keeps it: one open per
  connection (a second one, or any frame before the first, ends it with ``amqp:illegal-state``),
  SASL once (a second sasl-init is not taken for the AMQP header);
* an idle time-out below the floor (``limits.MIN_IDLE_TIMEOUT_MS``) is raised to it;
* a client that asks for deliveries and never reads them holds at most the high-water mark of the
  emulator's memory, and is dropped when it has read nothing for ``limits.SEND_STALL_TIMEOUT``
  (AMQP, a WebSocket client that pings, a Kafka client that fetches); one that reads slowly stays;
* a client that connects and stalls at any stage of its handshake (TLS, WebSocket upgrade, protocol
  headers, SASL, the open; Kafka's ApiVersions and SASL) is dropped after ``limits.HANDSHAKE_TIMEOUT``,
  and one that finished it may stay idle.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections.abc import Callable, Iterator

import pytest
from azure.eventhub import EventData, EventHubProducerClient

from eventhubs_emulator import Emulator, EmulatorConfig, frames, limits
from eventhubs_emulator.codec import Described, Symbol, UInt, UShort, decode, encode

from .test_raw_protocol import RawClient

pytestmark = pytest.mark.integration

OPEN_FIELDS = ["raw", "127.0.0.1", UInt(65536), UShort(8), UInt(1000), None, None, None, None, None]
BEGIN_FIELDS = [None, UInt(0), UInt(100), UInt(100), UInt(10), None, None, None]


def _frame(code: int, fields: list, frame_type: int = frames.FRAME_AMQP) -> bytes:
    body = encode(Described(code, fields))
    return struct.pack(">IBBH", 8 + len(body), 2, frame_type, 0) + body


def _read_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def _read_frame(sock: socket.socket) -> tuple[int | None, list]:
    size, doff, _type, _channel = struct.unpack(">IBBH", _read_exact(sock, 8))
    body = _read_exact(sock, size - 8)[doff * 4 - 8 :]
    if not body:
        return None, []
    value, _ = decode(body)
    return int(value.descriptor), value.value


def _closed(sock: socket.socket, within: float) -> bool:
    """Whether the server closes the socket within ``within`` seconds (what it sends first is read)."""
    sock.settimeout(within)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


def _connect(port: int, sasl: bool) -> socket.socket:
    """A raw connection up to the AMQP header (after SASL ANONYMOUS when ``sasl``)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    if sasl:
        sock.sendall(frames.SASL_HEADER)
        assert _read_exact(sock, 8) == frames.SASL_HEADER
        assert _read_frame(sock)[0] == frames.SASL_MECHANISMS
        sock.sendall(_frame(frames.SASL_INIT, [Symbol("ANONYMOUS"), b"", None], frames.FRAME_SASL))
        assert _read_frame(sock)[0] == frames.SASL_OUTCOME
    sock.sendall(frames.AMQP_HEADER)
    assert _read_exact(sock, 8) == frames.AMQP_HEADER
    return sock


def _wait_for_no_connections(emulator, within: float = 5.0) -> int:
    deadline = time.monotonic() + within
    while emulator.connection_count() and time.monotonic() < deadline:
        time.sleep(0.02)
    return emulator.connection_count()


# ------------------------------------------------------------------------------ the state machine


@pytest.mark.parametrize("sasl", [True, False], ids=["after-sasl", "without-sasl"])
def test_a_second_open_ends_the_connection_with_illegal_state(emulator, sasl):
    """The issue's 20,000 opens on one connection: the second one is answered with a close naming
    amqp:illegal-state (the service's "operation: R:OPEN, state: Opened") and the socket closes."""
    sock = _connect(emulator.port, sasl)
    try:
        sock.sendall(_frame(frames.OPEN, OPEN_FIELDS))
        assert _read_frame(sock)[0] == frames.OPEN
        sock.sendall(_frame(frames.OPEN, OPEN_FIELDS))
        code, fields = _read_frame(sock)
        assert code == frames.CLOSE, f"a second open was answered with 0x{code:02x}, not a close"
        condition, description = fields[0].value[:2]
        assert condition == "amqp:illegal-state"
        assert "R:OPEN" in description and "second open" in description
        assert _closed(sock, 5), "the socket stayed open after the close"
    finally:
        sock.close()
    assert _wait_for_no_connections(emulator) == 0


def test_many_opens_on_one_connection_end_it_at_the_second(emulator):
    """Opens sent back to back, each asking for a 1 s idle time-out: one open answered, then the
    close; the rest are not taken (no open or heartbeat task per frame)."""
    sock = _connect(emulator.port, sasl=False)
    try:
        sock.sendall(_frame(frames.OPEN, OPEN_FIELDS) * 200)
        codes = []
        sock.settimeout(1)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                code, _ = _read_frame(sock)
            except (ConnectionError, TimeoutError):
                break
            codes.append(code)
        assert [c for c in codes if c is not None][:3] == [frames.OPEN, frames.CLOSE]
        assert _closed(sock, 5)
    finally:
        sock.close()


def test_a_frame_before_the_open_ends_the_connection(emulator):
    sock = _connect(emulator.port, sasl=True)
    try:
        sock.sendall(_frame(frames.BEGIN, BEGIN_FIELDS))
        codes = []
        while (code := _read_frame(sock))[0] != frames.CLOSE:
            codes.append(code[0])
        assert codes == [frames.OPEN]  # AMQP wants our open before anything, the close too
        condition, description = code[1][0].value[:2]
        assert condition == "amqp:illegal-state" and "begin frame before the open" in description
        assert _closed(sock, 5)
    finally:
        sock.close()


def test_a_second_sasl_init_is_refused_not_taken_for_the_amqp_header(emulator, caplog):
    """SASL happens once: after the outcome the emulator expects the AMQP header; a second sasl-init
    there is a protocol header it does not serve (AMQP 1.0 2.2: it answers the one it serves and
    closes), logged as what it is."""
    caplog.set_level("WARNING", logger="eventhubs_emulator")
    sock = socket.create_connection(("127.0.0.1", emulator.port), timeout=5)
    try:
        sock.sendall(frames.SASL_HEADER)
        assert _read_exact(sock, 8) == frames.SASL_HEADER
        assert _read_frame(sock)[0] == frames.SASL_MECHANISMS
        init = _frame(frames.SASL_INIT, [Symbol("ANONYMOUS"), b"", None], frames.FRAME_SASL)
        sock.sendall(init + init)
        code, fields = _read_frame(sock)
        assert code == frames.SASL_OUTCOME and fields[0] == 0
        assert _read_exact(sock, 8) == frames.AMQP_HEADER
        assert _closed(sock, 5)
    finally:
        sock.close()
    assert any("a second SASL frame after the SASL outcome" in r.getMessage() for r in caplog.records)


def test_the_raw_client_still_opens_and_begins(emulator):
    """The happy path is untouched: open, begin, and a connection that stays."""
    client = RawClient(emulator.port)
    try:
        assert emulator.connection_count() == 1
    finally:
        client.close()


# ---------------------------------------------------------------------------------- idle time-out


def test_an_idle_time_out_below_the_floor_is_raised_to_it(emulator, caplog):
    """A client asking for 1 ms would have had an empty frame every 50 ms; it gets one at half the
    floor (2.5 s), and a warning says so once."""
    caplog.set_level("WARNING", logger="eventhubs_emulator")
    assert limits.MIN_IDLE_TIMEOUT_MS == 5000
    sock = _connect(emulator.port, sasl=True)
    try:
        fields = list(OPEN_FIELDS)
        fields[4] = UInt(1)
        sock.sendall(_frame(frames.OPEN, fields))
        started = time.monotonic()
        assert _read_frame(sock)[0] == frames.OPEN
        empty_at = []
        sock.settimeout(0.5)
        while time.monotonic() - started < 5.5:
            try:
                code, _ = _read_frame(sock)
            except TimeoutError:
                continue
            assert code is None, f"an unexpected 0x{code:02x}"
            empty_at.append(time.monotonic() - started)
        assert 1 <= len(empty_at) <= 2, f"empty frames at {empty_at}"
        assert empty_at[0] >= 2.0, f"the first empty frame came after {empty_at[0]:.2f} s, not 2.5 s"
    finally:
        sock.close()
    warnings = [r.getMessage() for r in caplog.records if "idle time-out of 1 ms" in r.getMessage()]
    assert len(warnings) == 1 and "raised to the emulator's floor of 5000 ms" in warnings[0]


# ------------------------------------------------------------------------------ a client that never reads


def _fill(emulator, hub: str, partition: str, total_bytes: int, event_bytes: int) -> None:
    """Store ``total_bytes`` of events of ``event_bytes`` each in one partition (SDK producer)."""
    with EventHubProducerClient.from_connection_string(emulator.connection_string(hub)) as producer:
        batch = producer.create_batch(partition_id=partition)
        for i in range(total_bytes // event_bytes):
            event = EventData(bytes([i % 251]) * event_bytes)
            try:
                batch.add(event)
            except ValueError:
                producer.send_batch(batch)
                batch = producer.create_batch(partition_id=partition)
                batch.add(event)
        producer.send_batch(batch)


def _unsent_bytes(emulator) -> list[int]:
    """What each open AMQP connection of the emulator has queued and not yet sent (its loop's view)."""

    def sizes() -> list[int]:
        out = []
        for conn in emulator._server.connections:
            transport = conn.writer.transport
            out.append(transport.get_write_buffer_size() if transport is not None else 0)
        return out

    return emulator._call(sizes)


def _consumer_with_credit(emulator, credit: int) -> socket.socket:
    """A raw consumer on hub1 partition 0 (SASL PLAIN with the key: no $cbs) that has granted
    ``credit``, with a small receive buffer so that the kernel holds little of what is sent."""
    config = emulator.config
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(5)
    sock.connect(("127.0.0.1", emulator.port))
    sock.sendall(frames.SASL_HEADER)
    assert _read_exact(sock, 8) == frames.SASL_HEADER
    assert _read_frame(sock)[0] == frames.SASL_MECHANISMS
    plain = b"\0" + config.key_name.encode() + b"\0" + config.key.encode()
    sock.sendall(_frame(frames.SASL_INIT, [Symbol("PLAIN"), plain, None], frames.FRAME_SASL))
    code, fields = _read_frame(sock)
    assert code == frames.SASL_OUTCOME and fields[0] == 0
    sock.sendall(frames.AMQP_HEADER)
    assert _read_exact(sock, 8) == frames.AMQP_HEADER
    fields = list(OPEN_FIELDS)
    fields[2] = UInt(1024 * 1024)  # max frame size: one transfer frame per event
    fields[4] = None
    sock.sendall(_frame(frames.OPEN, fields) + _frame(frames.BEGIN, BEGIN_FIELDS))
    assert _read_frame(sock)[0] == frames.OPEN
    assert _read_frame(sock)[0] == frames.BEGIN
    source = Described(frames.SOURCE, ["hub1/ConsumerGroups/$Default/Partitions/0"] + [None] * 10)
    sock.sendall(_frame(frames.ATTACH, ["never-reads", UInt(0), True, None, None, source]))
    assert _read_frame(sock)[0] == frames.ATTACH
    flow = [UInt(0), UInt(100), UInt(0), UInt(100), UInt(0), UInt(0), UInt(credit)]
    sock.sendall(_frame(frames.FLOW, flow))
    return sock


def test_a_client_that_never_reads_holds_bounded_memory_and_is_dropped(emulator, monkeypatch, caplog):
    """A consumer that grants 1,000 credits on a partition holding 24 MB of events and then never
    reads: before, the emulator queued all of it at once (2,000 events a round) and kept the
    connection for ever; now it stops at the high-water mark (one pump round over at most) and drops
    the connection once the client has read nothing for the stall time-out."""
    caplog.set_level("WARNING", logger="eventhubs_emulator")
    monkeypatch.setattr(limits, "SEND_STALL_TIMEOUT", 1.5)
    _fill(emulator, "hub1", "0", total_bytes=24 * 1024 * 1024, event_bytes=200_000)
    sock = _consumer_with_credit(emulator, 1000)
    try:
        # from here on the client reads nothing
        peak = 0
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            unsent = _unsent_bytes(emulator)
            peak = max([peak, *unsent])
            if not unsent:
                break
            time.sleep(0.05)
        bound = limits.SEND_HIGH_WATER + limits.PUMP_ROUND_BYTES + 256 * 1024
        assert peak <= bound, f"the emulator queued {peak} bytes for a client that reads nothing"
        assert peak > limits.SEND_HIGH_WATER // 2, f"only {peak} bytes queued: the test sent too little"
        assert _wait_for_no_connections(emulator, within=1) == 0, "the connection was not dropped"
    finally:
        sock.close()
    assert any("the client does not read what it asked for" in r.getMessage() for r in caplog.records)


def test_a_client_that_reads_slowly_is_not_dropped(emulator, monkeypatch):
    """The stall time-out counts time without progress: a client reading 64 KiB every 0.2 s keeps
    its connection through several stall periods, with the emulator at its high-water mark (so it
    waits on the client all along)."""
    monkeypatch.setattr(limits, "SEND_STALL_TIMEOUT", 1.0)
    _fill(emulator, "hub1", "0", total_bytes=24 * 1024 * 1024, event_bytes=200_000)
    sock = _consumer_with_credit(emulator, 1000)
    try:
        received = 0
        started = time.monotonic()
        while time.monotonic() - started < 4:
            received += len(sock.recv(64 * 1024))
            time.sleep(0.2)
        assert emulator.connection_count() == 1, "a client that reads was dropped"
        assert received > 0
    finally:
        sock.close()


def test_a_websocket_client_that_pings_and_never_reads_is_held_back_and_dropped(emulator, monkeypatch):
    """Each ping is answered with a pong; before, the pongs of a client that never read them piled up
    in the emulator for as long as it sent (24 MB here); now the emulator stops reading the client's
    frames at the high-water mark and drops it once it has read nothing for the stall time-out."""
    monkeypatch.setattr(limits, "SEND_STALL_TIMEOUT", 1.5)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(5)
    sock.connect(("127.0.0.1", emulator.port))
    try:
        head = (
            "GET /$servicebus/websocket HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: AMQPWSB10\r\n\r\n"
        )
        sock.sendall(head.encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += sock.recv(1)
        assert answer.startswith(b"HTTP/1.1 101 ")
        ping = b"\x89\xfd" + b"\0\0\0\0" + b"p" * 125  # masked (with a zero key), 125 bytes
        pings = ping * 2000
        sock.settimeout(0.5)
        sent, peak = 0, 0
        while sent < 24 * 1024 * 1024:
            try:
                sock.sendall(pings)
            except TimeoutError:
                break  # the emulator reads no more of our frames
            sent += len(pings)
            peak = max([peak, *_unsent_bytes(emulator)])
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and (unsent := _unsent_bytes(emulator)):
            peak = max([peak, *unsent])
            time.sleep(0.05)
        bound = limits.SEND_HIGH_WATER + 256 * 1024
        assert peak <= bound, f"the emulator queued {peak} bytes of pongs for a client that reads nothing"
        assert _wait_for_no_connections(emulator, within=1) == 0, "the connection was not dropped"
    finally:
        sock.close()


def _kafka_request(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    """A classic (non-flexible) Kafka request: size, header v1 (client id 'raw'), body."""
    payload = struct.pack(">hhih", api_key, version, correlation_id, 3) + b"raw" + body
    return struct.pack(">i", len(payload)) + payload


def _kafka_string(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def _kafka_response(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", _read_exact(sock, 4))
    return _read_exact(sock, size)


def test_a_kafka_client_that_never_reads_its_fetch_is_dropped(monkeypatch, caplog):
    """Before, the endpoint waited for ever on a client that did not read its Fetch response."""
    caplog.set_level("WARNING", logger="eventhubs_emulator.kafka")
    monkeypatch.setattr(limits, "SEND_STALL_TIMEOUT", 1.5)
    with Emulator(EmulatorConfig.many_hubs({"hub1": 1}, kafka_port=0)) as emu:
        _fill(emu, "hub1", "0", total_bytes=24 * 1024 * 1024, event_bytes=200_000)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(5)
        sock.connect(("127.0.0.1", emu.kafka_port))
        try:
            sock.sendall(_kafka_request(17, 1, 1, _kafka_string("PLAIN")))  # SaslHandshake
            assert struct.unpack_from(">ih", _kafka_response(sock)) == (1, 0)
            token = b"\x00$ConnectionString\x00" + emu.kafka_password().encode()
            sock.sendall(_kafka_request(36, 0, 2, struct.pack(">i", len(token)) + token))
            assert struct.unpack_from(">ih", _kafka_response(sock)) == (2, 0)
            # Fetch v4: everything of hub1/0 from offset 0, up to 64 MB; then never read
            partition = struct.pack(">iqi", 0, 0, 64 * 1024 * 1024)
            topics = struct.pack(">i", 1) + _kafka_string("hub1") + struct.pack(">i", 1) + partition
            fetch = struct.pack(">iiiib", -1, 0, 1, 64 * 1024 * 1024, 0) + topics
            sock.sendall(_kafka_request(1, 4, 3, fetch))
            assert _closed_after_reading_nothing(sock, within=10), "the endpoint kept the connection"
        finally:
            sock.close()
    assert any("has read nothing of its response" in r.getMessage() for r in caplog.records)


def _closed_after_reading_nothing(sock: socket.socket, within: float) -> bool:
    """Wait (reading nothing) until the server has closed the socket, seen by a send failing."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        time.sleep(0.25)
        try:
            sock.send(b"\0\0\0\0")  # an empty-size frame, never a complete request
        except OSError:
            return True
    return False


# ----------------------------------------------------------------------------------- handshake time-out

HANDSHAKE = 0.5  # seconds: limits.HANDSHAKE_TIMEOUT for these tests


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    """An emulator with TLS, Kafka and Kafka-over-TLS ports whose handshake time-out is 0.5 s
    (lowered before it starts: the TLS listeners take it when they open)."""
    saved = limits.HANDSHAKE_TIMEOUT
    limits.HANDSHAKE_TIMEOUT = HANDSHAKE
    tls_dir = tmp_path_factory.mktemp("tls")
    config = EmulatorConfig.many_hubs(
        {"hub1": 1}, tls_port=0, tls_dir=str(tls_dir), kafka_port=0, kafka_tls_port=0
    )
    try:
        with Emulator(config) as emu:
            yield emu
    finally:
        limits.HANDSHAKE_TIMEOUT = saved


def _tls(emu: Emulator, port: int) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(emu.ca_certificate))
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    return context.wrap_socket(raw, server_hostname="localhost")


def _upgraded(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(
        b"GET /$servicebus/websocket HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        b"Sec-WebSocket-Protocol: AMQPWSB10\r\n\r\n"
    )
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += sock.recv(1)
    assert answer.startswith(b"HTTP/1.1 101 ")
    return sock


def _kafka_api_versions(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(_kafka_request(18, 0, 1, b""))
    assert struct.unpack_from(">ih", _kafka_response(sock)) == (1, 0)
    return sock


def _kafka_handshake_only(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(_kafka_request(17, 1, 1, _kafka_string("PLAIN")))
    assert struct.unpack_from(">ih", _kafka_response(sock)) == (1, 0)
    return sock  # SaslAuthenticate never comes


# Where a client stalls: how to get there (a socket after the last thing the client sent).
STALLS: dict[str, Callable[[Emulator], socket.socket]] = {
    "amqp: nothing at all": lambda emu: socket.create_connection(("127.0.0.1", emu.port), timeout=5),
    "amqp: half a protocol header": lambda emu: _sent(emu.port, b"AMQP"),
    "sasl: header, then no sasl-init": lambda emu: _sasl_header_only(emu.port),
    "sasl: outcome, then no amqp header": lambda emu: _sasl_without_amqp_header(emu.port),
    "amqp: headers, then no open": lambda emu: _connect(emu.port, sasl=True),
    "websocket: half an upgrade request": lambda emu: _sent(
        emu.port, b"GET /$servicebus/websocket HTTP/1.1\r\n"
    ),
    "websocket: upgraded, then nothing": lambda emu: _upgraded(emu.port),
    "tls: no client hello": lambda emu: socket.create_connection(("127.0.0.1", emu.tls_port), timeout=5),
    "tls: handshake, then nothing": lambda emu: _tls(emu, emu.tls_port),
    "kafka: nothing at all": lambda emu: socket.create_connection(("127.0.0.1", emu.kafka_port), timeout=5),
    "kafka: ApiVersions, then no SASL": lambda emu: _kafka_api_versions(emu.kafka_port),
    "kafka: SaslHandshake, then no SaslAuthenticate": lambda emu: _kafka_handshake_only(emu.kafka_port),
    "kafka tls: no client hello": lambda emu: socket.create_connection(
        ("127.0.0.1", emu.kafka_tls_port), timeout=5
    ),
}


def _sent(port: int, data: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(data)
    return sock


def _sasl_header_only(port: int) -> socket.socket:
    sock = _sent(port, frames.SASL_HEADER)
    assert _read_exact(sock, 8) == frames.SASL_HEADER
    assert _read_frame(sock)[0] == frames.SASL_MECHANISMS
    return sock


def _sasl_without_amqp_header(port: int) -> socket.socket:
    sock = _sasl_header_only(port)
    sock.sendall(_frame(frames.SASL_INIT, [Symbol("ANONYMOUS"), b"", None], frames.FRAME_SASL))
    assert _read_frame(sock)[0] == frames.SASL_OUTCOME
    return sock


def _dropped(sock: socket.socket, within: float) -> bytes | None:
    """What the server sent before closing the socket within ``within`` seconds, None if it did not."""
    sock.settimeout(within)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except TimeoutError:
        return None
    except (ConnectionResetError, ssl.SSLError):
        pass
    return data


@pytest.mark.parametrize("stage", STALLS)
def test_a_client_that_stalls_in_its_handshake_is_dropped(quick, stage, caplog):
    caplog.set_level("WARNING")
    sock = STALLS[stage](quick)
    try:
        started = time.monotonic()
        sent = _dropped(sock, within=HANDSHAKE + 5)
        assert sent is not None, f"{stage}: the connection was kept"
        assert time.monotonic() - started >= HANDSHAKE / 2, f"{stage}: dropped before the time-out"
    finally:
        sock.close()
    if stage == "amqp: headers, then no open":  # AMQP frames can say why: our open, then the close
        codes = []
        while sent:
            size, doff = struct.unpack_from(">IB", sent)
            value, _ = decode(sent[doff * 4 : size])
            codes.append((int(value.descriptor), value.value))
            sent = sent[size:]
        assert [c for c, _ in codes] == [frames.OPEN, frames.CLOSE]
        condition, description = codes[1][1][0].value[:2]
        assert condition == "amqp:connection:forced" and "no open frame within 0.5 s" in description
    if not stage.startswith("tls") and not stage.startswith("kafka tls"):
        assert any("handshake time-out" in r.getMessage() for r in caplog.records), stage


@pytest.mark.parametrize("protocol", ["amqp", "kafka"])
def test_a_client_that_finished_its_handshake_may_stay_idle(quick, protocol):
    if protocol == "amqp":
        sock = _connect(quick.port, sasl=True)
        fields = list(OPEN_FIELDS)
        fields[4] = None  # no heartbeats: a silent connection
        sock.sendall(_frame(frames.OPEN, fields))
        assert _read_frame(sock)[0] == frames.OPEN
    else:
        sock = socket.create_connection(("127.0.0.1", quick.kafka_port), timeout=5)
        sock.sendall(_kafka_request(17, 1, 1, _kafka_string("PLAIN")))
        assert struct.unpack_from(">ih", _kafka_response(sock)) == (1, 0)
        token = b"\x00$ConnectionString\x00" + quick.kafka_password().encode()
        sock.sendall(_kafka_request(36, 0, 2, struct.pack(">i", len(token)) + token))
        assert struct.unpack_from(">ih", _kafka_response(sock)) == (2, 0)
    try:
        assert _dropped(sock, within=HANDSHAKE * 4) is None, (
            "an idle connection past its handshake was dropped"
        )
    finally:
        sock.close()
