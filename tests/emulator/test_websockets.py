"""AMQP over WebSockets (``TransportType.AmqpOverWebsocket``), served on the AMQP port and on an extra port.

The SDK reaches ``ws://<custom endpoint>/$servicebus/websocket`` with subprotocol AMQPWSB10 (no TLS in
development-emulator mode); without a custom endpoint it ignores the connection string's port.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time

import pytest
import websocket as ws_client
from azure.eventhub import EventData, EventHubConsumerClient, EventHubProducerClient, TransportType
from azure.eventhub.aio import EventHubConsumerClient as AsyncConsumer
from azure.eventhub.aio import EventHubProducerClient as AsyncProducer

from eventhubs_emulator import Emulator, EmulatorConfig, frames
from eventhubs_emulator.websocket import accept_key

pytestmark = pytest.mark.integration

# A client's start-up includes the SDK's own waits (see docs/emulator.md): a generous "eventually".
STARTUP = 120.0


def _upgrades(caplog) -> int:
    ours = [r.getMessage() for r in caplog.records if r.name == "eventhubs_emulator"]
    return sum("WebSocket upgrade" in message for message in ours)


def test_sync_sdk_sends_and_receives_over_websockets(emulator, caplog):
    caplog.set_level(logging.DEBUG, logger="eventhubs_emulator")
    conn = emulator.connection_string("hub1")
    over_ws = {
        "transport_type": TransportType.AmqpOverWebsocket,
        "custom_endpoint_address": emulator.websocket_endpoint(),
    }
    bodies = [b"small", b"x" * 900_000, b"last"]  # the large one needs 64-bit WebSocket lengths both ways
    with EventHubProducerClient.from_connection_string(conn, **over_ws) as producer:
        assert producer.get_partition_ids() == ["0", "1"]
        producer.send_batch([EventData(b) for b in bodies[:2]], partition_id="0")
        producer.send_event(EventData(bodies[2]), partition_id="0")
    got: list[bytes] = []
    consumer = EventHubConsumerClient.from_connection_string(conn, consumer_group="$Default", **over_ws)
    thread = threading.Thread(
        target=lambda: consumer.receive(
            lambda _ctx, event: got.append(b"".join(event.body)), partition_id="0", starting_position="-1"
        ),
        daemon=True,
    )
    thread.start()
    deadline = time.monotonic() + STARTUP
    while len(got) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    consumer.close()
    thread.join(timeout=10)
    assert got == bodies
    assert _upgrades(caplog) >= 3  # management, producer and consumer connections all came over WebSockets


def test_async_sdk_over_the_extra_websocket_port(caplog):
    caplog.set_level(logging.DEBUG, logger="eventhubs_emulator")
    with Emulator(EmulatorConfig.single_hub("hub1", partition_count=2, websocket_port=0)) as emu:
        assert emu.websocket_port not in (None, 0, emu.port)
        conn = emu.connection_string("hub1")
        over_ws = {
            "transport_type": TransportType.AmqpOverWebsocket,
            "custom_endpoint_address": emu.websocket_endpoint(emu.websocket_port),
        }

        async def run() -> list[str]:
            async with AsyncProducer.from_connection_string(conn, **over_ws) as producer:
                await producer.send_batch([EventData(f"async-{i}") for i in range(3)], partition_id="1")
            got: list[str] = []
            consumer = AsyncConsumer.from_connection_string(conn, consumer_group="$Default", **over_ws)

            async def on_event(_ctx, event):
                got.append(event.body_as_str())

            task = asyncio.ensure_future(consumer.receive(on_event, partition_id="1", starting_position="-1"))
            try:
                deadline = time.monotonic() + STARTUP
                while len(got) < 3 and time.monotonic() < deadline and not task.done():
                    await asyncio.sleep(0.05)
            finally:
                await consumer.close()
                task.cancel()
            return got

        assert asyncio.run(run()) == ["async-0", "async-1", "async-2"]
        assert _upgrades(caplog) >= 2


def test_websocket_framing_with_a_plain_websocket_client(emulator):
    url = f"ws://127.0.0.1:{emulator.port}/$servicebus/websocket"
    conn = ws_client.create_connection(url, subprotocols=["AMQPWSB10"], timeout=10)
    try:
        assert conn.getsubprotocol().upper() == "AMQPWSB10"
        conn.ping(b"are-you-there")
        opcode, frame = conn.recv_data_frame(control_frame=True)
        assert (opcode, frame.data) == (ws_client.ABNF.OPCODE_PONG, b"are-you-there")
        # The AMQP SASL header, fragmented over two frames: the stream does not care about boundaries.
        abnf = ws_client.ABNF
        conn.send_frame(abnf.create_frame(frames.SASL_HEADER[:3], abnf.OPCODE_BINARY, fin=0))
        conn.send_frame(abnf.create_frame(frames.SASL_HEADER[3:], abnf.OPCODE_CONT, fin=1))
        received = b""
        while len(received) < 8 + len(frames.sasl_mechanisms(["ANONYMOUS", "PLAIN", "MSSBCBS"])):
            received += conn.recv()
        assert received.startswith(frames.SASL_HEADER)
        assert b"PLAIN" in received and b"ANONYMOUS" in received
        conn.send("text frames cannot carry AMQP")  # a text frame: the emulator closes with 1003
        opcode, frame = conn.recv_data_frame(control_frame=True)
        assert opcode == ws_client.ABNF.OPCODE_CLOSE and frame.data[:2] == (1003).to_bytes(2, "big")
    finally:
        conn.close()


def _http_upgrade(port: int, path: str, protocol: str | None) -> bytes:
    lines = [
        f"GET {path} HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version: 13",
    ]
    if protocol:
        lines.append(f"Sec-WebSocket-Protocol: {protocol}")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        answer = b""
        while True:  # the head; then, for a refusal, the body up to the emulator's close
            chunk = sock.recv(4096)
            answer += chunk
            if not chunk or (b"\r\n\r\n" in answer and answer.startswith(b"HTTP/1.1 101 ")):
                return answer


def test_upgrade_answers_and_refusals(emulator):
    assert accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="  # RFC 6455's example
    ok = _http_upgrade(emulator.port, "/$servicebus/websocket", "AMQPWSB10")
    assert ok.startswith(b"HTTP/1.1 101 ")
    assert b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" in ok
    assert b"Sec-WebSocket-Protocol: AMQPWSB10" in ok
    wrong_path = _http_upgrade(emulator.port, "/other", "AMQPWSB10")
    assert wrong_path.startswith(b"HTTP/1.1 404 ")
    assert b"no WebSocket endpoint /other; AMQP over WebSockets is at /$servicebus/websocket" in wrong_path
    no_protocol = _http_upgrade(emulator.port, "/$servicebus/websocket", None)
    assert no_protocol.startswith(b"HTTP/1.1 400 ") and b"subprotocol AMQPWSB10 is required" in no_protocol
    # plain AMQP still works on the same port
    with EventHubProducerClient.from_connection_string(emulator.connection_string("hub1")) as producer:
        assert producer.get_partition_ids() == ["0", "1"]


class _CountingReader(asyncio.StreamReader):
    """A socket's reader that counts what the WebSocket pump took from it."""

    taken = 0

    async def readexactly(self, n: int) -> bytes:
        data = await super().readexactly(n)
        self.taken += len(data)
        return data


class _NullWriter:
    def write(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_client_faster_than_the_amqp_side_is_held_back_not_buffered():
    """The pump stops taking the client's frames while the AMQP side has more than twice READ_LIMIT
    unread (TCP then holds the client back), and takes the rest once it has read: nothing lost."""
    from eventhubs_emulator import websocket

    message = bytes(range(256)) * 4096  # 1 MiB per binary message
    count = 40

    async def scenario() -> None:
        raw = _CountingReader(limit=2**26)
        for _ in range(count):  # masked frames with a zero mask: the payload as it is
            raw.feed_data(bytes([0x82, 0xFF]) + len(message).to_bytes(8, "big") + b"\0\0\0\0" + message)
        raw.feed_eof()
        stream = websocket.WebSocketStream(raw, _NullWriter())  # type: ignore[arg-type]
        pump = asyncio.ensure_future(stream.pump())
        await asyncio.sleep(0.5)  # the AMQP side reads nothing yet
        held = raw.taken
        assert held <= 2 * websocket.READ_LIMIT + 2 * len(message), held
        assert not pump.done()
        received = bytearray()
        while len(received) < count * len(message):
            received += await stream.reader.read(1 << 20)
        await asyncio.wait_for(pump, 5)
        assert bytes(received) == message * count
        assert raw.taken > held

    asyncio.run(scenario())
