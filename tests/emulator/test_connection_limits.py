"""What one AMQP client may do to the emulator and no more, over raw sockets against the real server.

* the connection's state machine, as the service's AMQP stack (azure-amqp) keeps it: one open per
  connection (a second one, or any frame before the first, ends it with ``amqp:illegal-state``),
  SASL once (a second sasl-init is not taken for the AMQP header);
* an idle time-out below the floor (``limits.MIN_IDLE_TIMEOUT_MS``) is raised to it;
"""

from __future__ import annotations

import socket
import struct
import time

import pytest

from eventhubs_emulator import frames, limits
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
