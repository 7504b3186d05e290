"""Hostile AMQP values over a raw socket end that connection only: at once, logged, the server serving on.

The values are arrays whose declared element count no input bytes back (the decoder refuses them
before allocating anything, see test_codec.py). They are sent at each stage of a connection: as a
SASL frame, inside sasl-init, as the first AMQP frame (with or without SASL before it), and inside an
attach once the connection is open.
"""

from __future__ import annotations

import logging
import socket
import struct
from collections.abc import Callable

import pytest

from eventhubs_emulator import frames
from eventhubs_emulator.codec import AmqpDecodeError, Described, Symbol, UInt, decode

from .conftest import receive, send
from .test_raw_protocol import RawClient

pytestmark = pytest.mark.integration

# 10 bytes each: array32, size 5 (the count and the element constructor), count, element constructor.
HOSTILE = {
    "million-nulls": b"\xf0\x00\x00\x00\x05\x00\x0f\x42\x40\x40",
    "2^32-1-empty-lists": b"\xf0\x00\x00\x00\x05\xff\xff\xff\xff\x45",
    "2^32-1-ubytes": b"\xf0\x00\x00\x00\x05\xff\xff\xff\xff\x50",
}
CLOSE_WITHIN = 60.0  # seconds: a bound for a hang (decoding 2**32 items took hours), not a speed


def _frame(body: bytes, frame_type: int = frames.FRAME_AMQP) -> bytes:
    return struct.pack(">IBBH", 8 + len(body), 2, frame_type, 0) + body


def _performative(code: int, *fields: bytes) -> bytes:
    """A performative whose fields are given already encoded (so they can be hostile)."""
    body = b"".join(fields)
    return b"\x00\x53" + bytes([code]) + b"\xd0" + struct.pack(">II", len(body) + 4, len(fields)) + body


def _read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (fails if it stays open)."""
    sock.settimeout(CLOSE_WITHIN)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except TimeoutError:
        pytest.fail(f"the server kept the connection open {CLOSE_WITHIN} s after a hostile frame")
    except ConnectionResetError:
        pass
    return data


def _performatives(data: bytes) -> list[tuple[int, list]]:
    """The (code, fields) of each frame in ``data``."""
    out = []
    while data:
        size, doff = struct.unpack_from(">IB", data)
        value, _ = decode(data[doff * 4 : size])
        out.append((int(value.descriptor), value.value))
        data = data[size:]
    return out


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=CLOSE_WITHIN)


def _read_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "connection closed early"
        data += chunk
    return data


def _read_frame(sock: socket.socket) -> bytes:
    size = struct.unpack(">I", _read_exact(sock, 4))[0]
    return _read_exact(sock, size - 4)


def _sasl_done(sock: socket.socket) -> None:
    """SASL ANONYMOUS up to the outcome, then the AMQP header both ways."""
    sock.sendall(frames.SASL_HEADER)
    assert _read_exact(sock, 8) == frames.SASL_HEADER
    _read_frame(sock)  # sasl-mechanisms
    sock.sendall(frames.frame(0, frames.SASL_INIT, [Symbol("ANONYMOUS"), b"", None], frame_type=1))
    _read_frame(sock)  # sasl-outcome
    sock.sendall(frames.AMQP_HEADER)
    assert _read_exact(sock, 8) == frames.AMQP_HEADER


def _as_sasl_frame(port: int, hostile: bytes) -> bytes:
    sock = _connect(port)
    sock.sendall(frames.SASL_HEADER)
    assert _read_exact(sock, 8) == frames.SASL_HEADER
    _read_frame(sock)  # sasl-mechanisms
    sock.sendall(_frame(hostile, frames.FRAME_SASL))
    return _read_until_closed(sock)


def _in_sasl_init(port: int, hostile: bytes) -> bytes:
    sock = _connect(port)
    sock.sendall(frames.SASL_HEADER)
    assert _read_exact(sock, 8) == frames.SASL_HEADER
    _read_frame(sock)
    sock.sendall(_frame(_performative(frames.SASL_INIT, hostile, b"\xa0\x00"), frames.FRAME_SASL))
    return _read_until_closed(sock)


def _first_amqp_frame_without_sasl(port: int, hostile: bytes) -> bytes:
    sock = _connect(port)
    sock.sendall(frames.AMQP_HEADER)
    assert _read_exact(sock, 8) == frames.AMQP_HEADER
    sock.sendall(_frame(hostile))
    return _read_until_closed(sock)


def _open_after_sasl(port: int, hostile: bytes) -> bytes:
    sock = _connect(port)
    _sasl_done(sock)
    sock.sendall(_frame(_performative(frames.OPEN, b"\xa1\x03raw", hostile)))
    return _read_until_closed(sock)


def _attach_after_open(port: int, hostile: bytes) -> bytes:
    client = RawClient(port)
    fields = [b"\xa1\x04evil", b"\x43", b"\x41", b"\x40", b"\x40", hostile]
    client.sock.sendall(_frame(_performative(frames.ATTACH, *fields)))
    return client.buffer + _read_until_closed(client.sock)


# Stage → (how to send the value there, whether AMQP frames can say why: not in the SASL layer).
STAGES: dict[str, tuple[Callable[[int, bytes], bytes], bool]] = {
    "sasl-frame": (_as_sasl_frame, False),
    "sasl-init": (_in_sasl_init, False),
    "amqp-without-sasl": (_first_amqp_frame_without_sasl, True),
    "open-after-sasl": (_open_after_sasl, True),
    "attach-after-open": (_attach_after_open, True),
}


def _check_refused(emulator, caplog, stage: str, hostile: bytes) -> None:
    send_hostile, says_why = STAGES[stage]
    caplog.clear()
    replies = send_hostile(emulator.port, hostile)
    if not says_why:
        assert replies == b""  # dropped: the SASL layer has no frame for it
    else:
        performatives = _performatives(replies)
        # An error before the open goes out after our open, as AMQP wants the open first.
        expected = [frames.CLOSE] if stage == "attach-after-open" else [frames.OPEN, frames.CLOSE]
        assert [code for code, _ in performatives] == expected
        condition, description = performatives[-1][1][0].value[:2]
        assert condition == "amqp:decode-error"
        assert "array declares" in description
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.name == "eventhubs_emulator" and r.levelno >= logging.WARNING
    ]
    assert len(warnings) == 1 and "malformed frame: array declares" in warnings[0], warnings
    assert "\n" not in warnings[0]


@pytest.mark.parametrize("name", HOSTILE)
@pytest.mark.parametrize("stage", STAGES)
def test_a_hostile_array_ends_only_its_connection(emulator, caplog, stage, name):
    caplog.set_level(logging.WARNING, logger="eventhubs_emulator")
    with pytest.raises(AmqpDecodeError):
        decode(HOSTILE[name])
    _check_refused(emulator, caplog, stage, HOSTILE[name])


def test_the_server_serves_on_after_hostile_frames(emulator, caplog):
    caplog.set_level(logging.WARNING, logger="eventhubs_emulator")
    conn = emulator.connection_string("hub1")
    send(conn, ["before"], partition_id="0")
    bystander = RawClient(emulator.port)  # open through it all
    try:
        for stage in STAGES:
            for hostile in HOSTILE.values():
                _check_refused(emulator, caplog, stage, hostile)
        source = Described(frames.SOURCE, ["$cbs"] + [None] * 10)
        bystander.send(frames.ATTACH, ["cbs-receiver", UInt(0), True, None, None, source])
        code, fields = bystander.read_frame()
        assert code == frames.ATTACH and fields[0] == "cbs-receiver"
    finally:
        bystander.close()
    send(conn, ["after"], partition_id="0")
    events = receive(conn, "0", expected=2)
    assert [e.body_as_str() for e in events] == ["before", "after"]
