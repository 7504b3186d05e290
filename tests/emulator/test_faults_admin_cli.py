"""Fault injection (Python and HTTP), the admin API, the CLI, and malformed input."""

from __future__ import annotations

import json
import os
import re
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest
from azure.eventhub import EventData, EventHubConsumerClient, EventHubProducerClient, TransportType
from azure.eventhub.exceptions import EventHubError

from eventhubs_emulator import Emulator, EmulatorConfig, frames
from eventhubs_emulator.codec import Symbol
from tests.support.emulator import start_test_emulator
from tests.support.processes import wait_until

from .conftest import receive, send

pytestmark = pytest.mark.integration


def _http(url: str, body: dict | None = None, token: str | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method="POST" if body is not None else "GET")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


class Receiver:
    """A sync consumer on partition 0 that records events and errors in a background thread."""

    def __init__(self, conn: str, **kwargs) -> None:
        self.events: list[EventData] = []
        self.errors: list[Exception] = []
        self.client = EventHubConsumerClient.from_connection_string(conn, consumer_group="$Default")
        self.thread = threading.Thread(
            target=lambda: self.client.receive(
                lambda _c, e: self.events.append(e),
                partition_id="0",
                on_error=lambda _c, err: self.errors.append(err),
                **kwargs,
            ),
            daemon=True,
        )
        self.thread.start()

    def wait(self, count: int, timeout: float = 20) -> bool:
        deadline = time.monotonic() + timeout
        while len(self.events) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        return len(self.events) >= count

    def close(self) -> None:
        self.client.close()
        self.thread.join(timeout=10)


def test_drop_connections_consumer_resumes_without_loss_or_duplicates(emulator):
    conn = emulator.connection_string("hub1")
    send(conn, [f"d{i}" for i in range(5)], partition_id="0")
    receiver = Receiver(conn, starting_position="-1")
    try:
        assert receiver.wait(5)
        assert emulator.faults.drop_connections() >= 1
        send(conn, [f"d{i}" for i in range(5, 10)], partition_id="0")
        assert receiver.wait(10, timeout=30)
        time.sleep(0.5)
    finally:
        receiver.close()
    assert [e.body_as_str() for e in receiver.events] == [f"d{i}" for i in range(10)]


def test_refuse_connections_then_recover(emulator):
    conn = emulator.connection_string("hub1")
    emulator.faults.refuse_connections(3)
    with pytest.raises(EventHubError):
        with EventHubProducerClient.from_connection_string(conn, retry_total=0) as producer:
            producer.get_partition_ids()
    time.sleep(3.2)
    with EventHubProducerClient.from_connection_string(conn, retry_total=0) as producer:
        assert producer.get_partition_ids() == ["0", "1"]


def test_a_throttled_send_is_refused_as_the_service_does_and_stores_nothing(emulator):
    """``throttle``: a send is rejected with ``com.microsoft:server-busy`` (the SDK's error names
    the throttling), nothing of it is stored, and sends succeed again when it ends."""
    conn = emulator.connection_string("hub1")
    emulator.faults.throttle(30)
    with pytest.raises(EventHubError, match="throttled"):
        with EventHubProducerClient.from_connection_string(conn, retry_total=0) as producer:
            producer.send_batch([EventData("refused")], partition_id="0")
    emulator.faults.throttle(0)
    send(conn, ["after"], partition_id="0")
    assert [e.body_as_str() for e in receive(conn, "0", expected=1, settle=0.5)] == ["after"]


def test_slow_responses_delay_every_answer_and_lose_nothing(emulator):
    """``slow_responses``: every frame a client sends is handled that much later (an attach, a
    management request, the flow that asks for deliveries), and events still arrive once."""
    conn = emulator.connection_string("hub1")
    send(conn, [f"s{i}" for i in range(5)], partition_id="1")
    emulator.faults.slow_responses(250)
    try:
        with EventHubProducerClient.from_connection_string(conn) as producer:
            started = time.monotonic()
            assert producer.get_partition_ids() == ["0", "1"]
            assert time.monotonic() - started >= 0.25
        got = receive(conn, "1", expected=5, settle=0.5)
    finally:
        emulator.faults.clear()
    assert [e.body_as_str() for e in got] == [f"s{i}" for i in range(5)]


def test_a_partition_taken_offline_refuses_links_then_serves_again(emulator):
    """``take_partition_offline``: while a partition moves, links to it are detached with
    ``amqp:link:detach-forced`` (the SDK retries it) and nothing sent is lost."""
    conn = emulator.connection_string("hub1")
    send(conn, ["a0", "a1"], partition_id="1")
    emulator.faults.take_partition_offline("hub1", "1", 2)
    with pytest.raises(EventHubError):  # refused at attach: nothing of it is stored (below)
        with EventHubProducerClient.from_connection_string(conn, retry_total=0) as producer:
            producer.send_batch([EventData("refused")], partition_id="1")
    send(conn, ["elsewhere"], partition_id="0")  # the other partitions serve meanwhile
    time.sleep(2.2)
    send(conn, ["a2"], partition_id="1")
    assert [e.body_as_str() for e in receive(conn, "1", expected=3, settle=0.5)] == ["a0", "a1", "a2"]
    with pytest.raises(KeyError, match="no partition '7'"):
        emulator.faults.take_partition_offline("hub1", "7", 1)


def test_delay_deliveries_holds_events_back(emulator):
    conn = emulator.connection_string("hub1")
    receiver = Receiver(conn, starting_position="@latest")
    try:
        wait_until(lambda: emulator.consumer_count("hub1", "0") == 1, 60, "the receiver to attach")
        emulator.faults.delay_deliveries(1.5)
        sent = time.monotonic()
        send(conn, ["late"], partition_id="0")
        assert receiver.wait(1, timeout=15)
        arrived = time.monotonic()
    finally:
        emulator.faults.clear()
        receiver.close()
    assert arrived - sent >= 1.5
    assert [e.body_as_str() for e in receiver.events] == ["late"]


def test_admin_http_health_faults_partitions_truncate():
    with start_test_emulator(admin=True, hub1=2) as emu:
        base = emu.admin_url
        assert _http(f"{base}/health") == (200, {"status": "healthy"})
        send(emu.connection_string("hub1"), [f"h{i}" for i in range(6)], partition_id="1")
        status, body = _http(f"{base}/hubs/hub1/partitions/1/truncate", {"before_sequence_number": 2})
        assert (status, body) == (200, {"dropped": 2})
        assert _http(f"{base}/hubs/hub1/partitions", {"count": 3}) == (
            200,
            {"partition_ids": ["0", "1", "2"]},
        )
        status, info = _http(f"{base}/hubs")
        assert info["hubs"][0]["partitions"]["1"]["beginning_sequence_number"] == 2
        assert _http(f"{base}/faults/delay-deliveries", {"seconds": 0.5})[1]["delivery_delay_seconds"] == 0.5
        assert _http(f"{base}/faults/refuse-connections", {"seconds": 1})[1]["refusing_for_seconds"] > 0
        assert _http(f"{base}/faults/clock", {"offset_seconds": -60})[1]["clock_offset_seconds"] == -60
        assert _http(f"{base}/faults/throttle", {"seconds": 1})[1]["throttling_for_seconds"] > 0
        assert _http(f"{base}/faults/slow-responses", {"milliseconds": 50})[1]["response_delay_ms"] == 50
        offline = _http(f"{base}/hubs/hub1/partitions/0/offline", {"seconds": 5})
        assert offline == (200, {"detached": 0})
        assert _http(f"{base}/hubs")[1]["faults"]["offline_partitions"] == ["hub1/0"]
        assert _http(f"{base}/hubs/hub1/partitions/9/offline", {"seconds": 5})[0] == 404
        assert _http(f"{base}/faults/clear", {})[1] == {
            "refusing_for_seconds": 0.0,
            "throttling_for_seconds": 0.0,
            "response_delay_ms": 0.0,
            "offline_partitions": [],
            "delivery_delay_seconds": 0.0,
            "clock_offset_seconds": 0.0,
        }
        assert _http(f"{base}/faults/drop-connections", {}) == (200, {"dropped": 0})
        assert _http(f"{base}/hubs/nohub/partitions", {"count": 3})[0] == 404
        assert _http(f"{base}/faults/refuse-connections", {"seconds": "x"})[0] == 400
        assert _http(f"{base}/nothing")[0] == 404


def test_a_shifted_clock_enqueues_events_in_the_past_and_positions_by_time_follow_it():
    """Events sent while the clock is two hours back carry that enqueued time (a backfill's past
    interval without waiting for it); undoing the shift never moves a partition's times backwards."""
    with start_test_emulator(admin=True, hub1=1) as emu:
        conn = emu.connection_string("hub1")
        two_hours = 2 * 3600
        status, body = _http(f"{emu.admin_url}/faults/clock", {"offset_seconds": -two_hours})
        assert (status, body["clock_offset_seconds"]) == (200, -two_hours)
        before = time.time()
        send(conn, ["past"])
        emu.faults.shift_clock(0)
        send(conn, ["now"])
        events = receive(conn, "0", 2)
        past, now = (e.enqueued_time.timestamp() for e in events)
        assert before - two_hours - 5 < past < time.time() - two_hours + 5
        assert before - 5 < now < time.time() + 5
        later = receive(conn, "0", 1, starting_position=datetime.fromtimestamp(before - 60, UTC))
        assert [e.body_as_str() for e in later] == ["now"]
        emu.faults.shift_clock(-two_hours)  # back again: the partition's times do not go backwards
        send(conn, ["clamped"])
        clamped = receive(conn, "0", 3)[2]
        assert clamped.enqueued_time.timestamp() >= now
        assert _http(f"{emu.admin_url}/faults/clock", {"offset_seconds": "x"})[0] == 400


def _raw_connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(b"AMQP\x03\x01\x00\x00")
    return sock


def _recv_all(sock: socket.socket, seconds: float = 2.0) -> bytes:
    sock.settimeout(seconds)
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except TimeoutError:
        pass
    return data


def test_malformed_frame_closes_only_that_connection(emulator):
    conn = emulator.connection_string("hub1")
    receiver = Receiver(conn, starting_position="-1")
    try:
        send(conn, ["before"], partition_id="0")
        assert receiver.wait(1)
        sock = _raw_connect(emulator.port)
        _recv_all(sock, 0.5)  # header + mechanisms
        sock.sendall(frames.frame(0, frames.SASL_INIT, [Symbol("ANONYMOUS"), b"", None], frame_type=1))
        _recv_all(sock, 0.5)  # sasl outcome
        sock.sendall(b"AMQP\x00\x01\x00\x00")
        garbage = b"\x00\x53\x10\xc0\xff\x09\xa1"  # an open whose list claims more bytes than it has
        sock.sendall(struct.pack(">IBBH", 8 + len(garbage), 2, 0, 0) + garbage)
        reply = _recv_all(sock)
        sock.close()
        assert b"amqp:decode-error" in reply
        bad = _raw_connect(emulator.port)
        bad.sendall(b"GET / HTTP/1.1\r\n\r\n")
        bad.close()
        send(conn, ["after"], partition_id="0")
        assert receiver.wait(2)
    finally:
        receiver.close()
    assert [e.body_as_str() for e in receiver.events] == ["before", "after"]
    with EventHubProducerClient.from_connection_string(conn) as producer:
        assert producer.get_partition_properties("0")["last_enqueued_sequence_number"] == 1


def _config_file(tmp_path: Path, entities: list) -> Path:
    path = tmp_path / "Config.json"
    path.write_text(
        json.dumps(
            {
                "UserConfig": {
                    "NamespaceConfig": [{"Type": "EventHub", "Name": "emulatorNs1", "Entities": entities}],
                    "LoggingConfig": {"Type": "File"},
                }
            }
        )
    )
    return path


def _cli(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "eventhubs_emulator", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_cli_serves_prints_connection_strings_and_stops_cleanly(tmp_path):
    config = _config_file(
        tmp_path, [{"Name": "eh1", "PartitionCount": 2, "ConsumerGroups": [{"Name": "cg1"}]}]
    )
    proc = _cli(
        "--config",
        str(config),
        "--port",
        "0",
        "--admin-port",
        "0",
        "--websocket-port",
        "0",
        "--data-dir",
        str(tmp_path / "d"),
    )
    try:
        lines = [proc.stdout.readline() for _ in range(4)]
        conn = lines[3].split(": ", 1)[1].strip()
        assert lines[3].startswith("eh1: Endpoint=sb://127.0.0.1:")
        assert conn.endswith(";EntityPath=eh1;UseDevelopmentEmulator=true")
        assert "SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE" in conn
        admin = lines[2].split()[2]
        assert _http(f"{admin}/health") == (200, {"status": "healthy"})
        assert lines[1].startswith("AMQP over WebSockets: ws://127.0.0.1:"), lines[1]
        ws_urls = re.findall(r"ws://127\.0\.0\.1:(\d+)/\$servicebus/websocket", lines[1])
        amqp_port = int(conn.split("sb://127.0.0.1:", 1)[1].split(";", 1)[0])
        assert len(ws_urls) == 2 and int(ws_urls[0]) == amqp_port and int(ws_urls[1]) != amqp_port
        # the extra WebSocket port from --websocket-port carries a producer
        with EventHubProducerClient.from_connection_string(
            conn,
            transport_type=TransportType.AmqpOverWebsocket,
            custom_endpoint_address=f"sb://127.0.0.1:{ws_urls[1]}",
        ) as producer:
            producer.send_batch([EventData("via-cli")], partition_id="1")
        assert [e.body_as_str() for e in receive(conn, "1", expected=1, consumer_group="cg1")] == ["via-cli"]
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert (tmp_path / "d" / "eh1" / "1.log").stat().st_size > 0


def test_cli_tls_port_prints_what_a_client_passes_and_serves_amqps(tmp_path):
    """``--tls-port 0 --tls-dir DIR`` as docs/emulator.md shows it: the printed line names the
    endpoint and the CA, and a producer given exactly those sends over TLS."""
    config = _config_file(tmp_path, [{"Name": "eh1", "PartitionCount": 1}])
    tls_dir = tmp_path / "eh-tls"
    proc = _cli("--config", str(config), "--port", "0", "--tls-port", "0", "--tls-dir", str(tls_dir))
    try:
        lines = [proc.stdout.readline() for _ in range(4)]
        (line,) = [line for line in lines if line.startswith("AMQPS and WSS: ")]
        endpoint = re.search(r"custom_endpoint_address='([^']+)'", line).group(1)
        ca = re.search(r"connection_verify='([^']+)'", line).group(1)
        assert ca == str(tls_dir / "ca.pem") and (tls_dir / "ca.pem").exists()
        conn = lines[-1].split(": ", 1)[1].strip().replace(";UseDevelopmentEmulator=true", "")
        with EventHubProducerClient.from_connection_string(
            conn, custom_endpoint_address=endpoint, connection_verify=ca
        ) as producer:
            producer.send_batch([EventData("via-tls")], partition_id="0")
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert (
        "--tls-port needs --tls-dir"
        in _cli("--config", str(config), "--tls-port", "0").communicate(timeout=30)[1]
    )


def test_cli_invalid_config_names_the_field_and_exits_2(tmp_path):
    config = _config_file(tmp_path, [{"Name": "eh1", "PartitionCount": 0}])
    proc = _cli("--config", str(config), "--port", "0")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert "Entities[0].PartitionCount" in err


def test_cli_bad_websocket_port_names_the_option_and_exits_2(tmp_path):
    config = _config_file(tmp_path, [{"Name": "eh1", "PartitionCount": 1}])
    proc = _cli("--config", str(config), "--port", "0", "--websocket-port", "70000")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert "--websocket-port must be a port number 0-65535 (got 70000)" in err


def test_cli_refuses_an_admin_api_beyond_loopback_without_a_token(tmp_path):
    config = _config_file(tmp_path, [{"Name": "eh1", "PartitionCount": 1}])
    proc = _cli("--config", str(config), "--port", "0", "--admin-port", "0", "--admin-host", "0.0.0.0")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert "admin API would listen on 0.0.0.0, beyond loopback, without a token" in err
    assert "--admin-token" in err and "EVENTHUBS_EMULATOR_ADMIN_TOKEN" in err


def test_an_admin_api_with_a_token_answers_only_requests_that_carry_it():
    config = EmulatorConfig.many_hubs({"hub1": 1})
    with Emulator(config, admin_port=0, admin_host="0.0.0.0", admin_token="s3cret").start() as emu:
        base = emu.admin_url
        assert _http(f"{base}/health") == (200, {"status": "healthy"})  # the health check needs none
        status, body = _http(f"{base}/hubs")
        assert status == 401 and "Authorization: Bearer" in body["error"]
        assert _http(f"{base}/faults/drop-connections", {}, token="wrong")[0] == 401
        assert _http(f"{base}/faults/drop-connections", {}, token="s3cret") == (200, {"dropped": 0})
        assert "s3cret" not in json.dumps(_http(f"{base}/hubs", token="s3cret")[1])


def test_admin_requests_are_bounded_in_size_and_time(monkeypatch):
    from eventhubs_emulator import admin

    monkeypatch.setattr(admin, "REQUEST_SECONDS", 1.0)
    with start_test_emulator(admin=True, hub1=1) as emu:
        port = emu.admin_port

        def raw(request: bytes) -> bytes:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(request)
                return sock.recv(65536)

        huge = raw(b"POST /faults/clear HTTP/1.1\r\nContent-Length: 100000000\r\n\r\n")
        assert huge.startswith(b"HTTP/1.1 413") and b"65536 bytes" in huge
        many = raw(b"GET /hubs HTTP/1.1\r\n" + b"X-A: b\r\n" * 200 + b"\r\n")
        assert many.startswith(b"HTTP/1.1 431")
        with socket.create_connection(("127.0.0.1", port), timeout=10) as slow:
            slow.sendall(b"GET /hubs HTTP/1.1\r\n")  # and nothing more
            started = time.monotonic()
            answer = slow.recv(65536)
        assert answer.startswith(b"HTTP/1.1 408") and time.monotonic() - started < 5
        assert _http(f"{emu.admin_url}/health") == (200, {"status": "healthy"})  # still serving


def test_cli_port_in_use_is_a_clear_error(tmp_path):
    config = _config_file(tmp_path, [{"Name": "eh1", "PartitionCount": 1}])
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _cli("--config", str(config), "--port", str(port))
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert f"port {port}" in err and "already in use" in err
