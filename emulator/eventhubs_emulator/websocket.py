"""AMQP over WebSockets, server side: the HTTP upgrade and RFC 6455 framing, stdlib only.

What the azure-eventhub SDK sends (``TransportType.AmqpOverWebsocket``): ``GET /$servicebus/websocket``
with the subprotocol ``AMQPWSB10``; after the upgrade, binary WebSocket messages carry the AMQP byte stream
(SASL header and frames, then AMQP frames) in both directions, with no relation between message and frame
boundaries. Python's standard library has no WebSocket server and the emulator installs nothing, so the
small part of RFC 6455 a server needs is written here: the handshake, masked client frames (any length,
fragmented or not), ping/pong and the close handshake.

``WebSocketStream`` gives ``Connection`` the same reader/writer surface as a plain TCP stream.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import struct
from typing import Any

from . import limits

AMQP_PATH = "/$servicebus/websocket"
SUBPROTOCOL = "AMQPWSB10"
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
MAX_REQUEST_HEAD = 64 * 1024
MAX_MESSAGE = 64 * 1024 * 1024

OP_CONTINUATION, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
CLOSE_NORMAL, CLOSE_PROTOCOL_ERROR, CLOSE_UNSUPPORTED, CLOSE_TOO_BIG = 1000, 1002, 1003, 1009


class UpgradeRefused(Exception):
    """The HTTP request is not a WebSocket upgrade the emulator serves; answered with ``status``."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def looks_like_http(first_bytes: bytes) -> bool:
    """Whether a connection's first bytes start an HTTP GET (a WebSocket upgrade) rather than AMQP."""
    return first_bytes.startswith(b"GET ")


def accept_key(client_key: str) -> str:
    """``Sec-WebSocket-Accept`` for a client's ``Sec-WebSocket-Key`` (RFC 6455 section 4.2.2)."""
    return base64.b64encode(hashlib.sha1(client_key.encode("ascii") + _GUID).digest()).decode()


def encode_frame(opcode: int, payload: bytes) -> bytes:
    """One final, unmasked server frame."""
    n = len(payload)
    if n < 126:
        head = struct.pack(">BB", 0x80 | opcode, n)
    elif n < 1 << 16:
        head = struct.pack(">BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack(">BBQ", 0x80 | opcode, 127, n)
    return head + payload


def _unmask(payload: bytes, mask: bytes) -> bytes:
    n = len(payload)
    if n == 0:
        return payload
    key = int.from_bytes((mask * (n // 4 + 1))[:n], "little")
    return (int.from_bytes(payload, "little") ^ key).to_bytes(n, "little")


def _check_upgrade(head: bytes) -> str:
    """Validate the upgrade request; return the client's key (raises UpgradeRefused)."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split()
    if len(parts) != 3 or parts[0] != "GET" or not parts[2].startswith("HTTP/1."):
        raise UpgradeRefused(400, "expected 'GET <path> HTTP/1.1'")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            key = name.strip().lower()
            headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
    path = parts[1].split("?", 1)[0]
    if path != AMQP_PATH:
        raise UpgradeRefused(404, f"no WebSocket endpoint {path}; AMQP over WebSockets is at {AMQP_PATH}")
    upgrade_header = headers.get("upgrade", "").lower()
    if upgrade_header != "websocket" or "upgrade" not in headers.get("connection", "").lower():
        raise UpgradeRefused(400, "not a WebSocket upgrade ('Upgrade: websocket', 'Connection: Upgrade')")
    if headers.get("sec-websocket-version") != "13":
        raise UpgradeRefused(400, "only WebSocket version 13 is supported")
    offered = [p.strip() for p in headers.get("sec-websocket-protocol", "").split(",")]
    if SUBPROTOCOL not in offered:
        raise UpgradeRefused(400, f"the WebSocket subprotocol {SUBPROTOCOL} is required")
    client_key = headers.get("sec-websocket-key", "")
    try:
        if len(base64.b64decode(client_key, validate=True)) != 16:
            raise ValueError
    except ValueError:
        raise UpgradeRefused(400, "missing or malformed Sec-WebSocket-Key") from None
    return client_key


async def upgrade(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, prefix: bytes
) -> WebSocketStream:
    """Answer the HTTP upgrade whose first bytes (``prefix``) were already read; return the stream.

    Raises UpgradeRefused after answering a request the emulator does not serve with an HTTP error.
    """
    try:
        head = prefix + await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise UpgradeRefused(400, "request head too large") from None
    if len(head) > MAX_REQUEST_HEAD:
        raise UpgradeRefused(400, "request head too large")
    try:
        client_key = _check_upgrade(head)
    except UpgradeRefused as exc:
        body = f"{exc}\n".encode()
        reason = {400: "Bad Request", 404: "Not Found"}.get(exc.status, "Error")
        writer.write(
            f"HTTP/1.1 {exc.status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n".encode()
            + body
        )
        raise
    writer.write(
        (
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Accept: {accept_key(client_key)}\r\nSec-WebSocket-Protocol: {SUBPROTOCOL}\r\n\r\n"
        ).encode()
    )
    return WebSocketStream(reader, writer)


#: Unread payload the AMQP side may have before the pump stops reading the socket (asyncio's
#: StreamReader pauses its transport at twice its limit and resumes it below the limit).
READ_LIMIT = 4 * 1024 * 1024


class _ReadGate:
    """The flow control a StreamReader asks of its transport, for the pump: ``reader`` pauses it when
    the AMQP side falls behind and resumes it when that side has read, so a client that sends faster
    than the emulator processes is held back by TCP instead of growing the emulator's memory."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.open.set()

    def pause_reading(self) -> None:
        self.open.clear()

    def resume_reading(self) -> None:
        self.open.set()


class WebSocketStream:
    """An upgraded connection as a byte stream: ``reader`` yields the payload of the client's binary
    messages; ``write`` sends bytes as one binary message. ``pump()`` must run while it is in use."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._raw_reader = reader
        self._raw_writer = writer
        self.reader = asyncio.StreamReader(limit=READ_LIMIT)
        self._gate = _ReadGate()
        self.reader.set_transport(self._gate)  # type: ignore[arg-type]  # only the pause/resume calls
        self._close_sent = False

    # ---------------------------------------------------------------- the writer surface Connection uses
    @property
    def transport(self) -> asyncio.WriteTransport:
        """The TCP transport (for its send-buffer size and for aborting)."""
        return self._raw_writer.transport

    def write(self, data: bytes) -> None:
        """Send ``data`` as one binary message."""
        if not self._close_sent:
            self._raw_writer.write(encode_frame(OP_BINARY, data))

    async def drain(self) -> None:
        """Wait until the TCP send buffer has drained."""
        await self._raw_writer.drain()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """The TCP transport's extra info."""
        return self._raw_writer.get_extra_info(name, default)

    def close(self, code: int = CLOSE_NORMAL) -> None:
        """Send a close frame (once) and close the TCP connection."""
        self._send_close(code)
        self._raw_writer.close()

    def _send_close(self, code: int) -> None:
        if not self._close_sent:
            self._close_sent = True
            self._raw_writer.write(encode_frame(OP_CLOSE, struct.pack(">H", code)))

    async def _drain_if_congested(self) -> bool:
        """Above the high-water mark, read no more of the client's frames until it has read ours (a
        client that pings and never reads cannot grow the send buffer); a client that reads nothing
        for ``limits.SEND_STALL_TIMEOUT`` seconds is dropped. Whether the connection is still up."""
        transport = self._raw_writer.transport
        if transport is None or transport.get_write_buffer_size() <= limits.SEND_HIGH_WATER:
            return True
        if not await limits.wait_until_read(self._raw_writer):
            transport.abort()
            return False
        return True

    # ---------------------------------------------------------------------------------- reading frames
    async def pump(self) -> None:
        """Read the client's frames until it closes: data into ``reader``, answer pings and the close."""
        try:
            await self._read_frames()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.reader.feed_eof()

    async def _read_frames(self) -> None:
        message_size = 0
        while True:
            await self._gate.open.wait()  # the AMQP side has read enough of what came before
            first, second = await self._raw_reader.readexactly(2)
            opcode, masked, length = first & 0x0F, second & 0x80, second & 0x7F
            if length == 126:
                (length,) = struct.unpack(">H", await self._raw_reader.readexactly(2))
            elif length == 127:
                (length,) = struct.unpack(">Q", await self._raw_reader.readexactly(8))
            if not masked:  # RFC 6455 5.1: a server must close on an unmasked client frame
                self.close(CLOSE_PROTOCOL_ERROR)
                return
            mask = await self._raw_reader.readexactly(4)
            if opcode >= OP_CLOSE and (length > 125 or not first & 0x80):
                self.close(CLOSE_PROTOCOL_ERROR)
                return
            message_size = length if opcode != OP_CONTINUATION else message_size + length
            if message_size > MAX_MESSAGE:
                self.close(CLOSE_TOO_BIG)
                return
            payload = _unmask(await self._raw_reader.readexactly(length), mask)
            if opcode in (OP_BINARY, OP_CONTINUATION):
                if payload:
                    self.reader.feed_data(payload)
            elif opcode == OP_PING:
                if not self._close_sent:
                    self._raw_writer.write(encode_frame(OP_PONG, payload))
                    if not await self._drain_if_congested():
                        return
            elif opcode == OP_PONG:
                pass
            elif opcode == OP_CLOSE:
                self._send_close(CLOSE_NORMAL)
                with contextlib.suppress(ConnectionError):
                    await self._raw_writer.drain()
                self._raw_writer.close()
                return
            else:  # text frames cannot carry AMQP
                self.close(CLOSE_UNSUPPORTED)
                return
