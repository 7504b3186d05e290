"""Property-based fuzzing of the emulator's protocol stages over a raw socket (hypothesis).

Each example connects, walks the connection up to a stage (SASL, open, begin, attach, a link), sends
one frame whose performative has arbitrary fields (any AMQP value in any position, a valid frame
mutated, or arbitrary bytes as the body), closes its sending side and reads until the server
closes. The properties:

* the server answers with well-formed AMQP frames only and closes within a bound (nothing hangs);
* a frame it cannot take ends that connection with a named error (``amqp:decode-error``,
  ``amqp:invalid-field``, a framing error), never ``amqp:internal-error`` and never an exception
  traceback in its log: bad input is the peer's error, not a crash;
* the server keeps serving: after the examples, the unmodified SDK still sends and receives.

The suite runs a fixed, derandomized budget (the same inputs every run); ``-m slow`` runs a longer
random search.
"""

from __future__ import annotations

import logging
import socket
import struct
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventhubs_emulator import frames
from eventhubs_emulator.codec import (
    Described,
    Symbol,
    SymbolArray,
    Timestamp,
    UByte,
    UInt,
    ULong,
    UShort,
    decode,
    encode,
)

from .conftest import receive, send

pytestmark = pytest.mark.integration

CLOSE_WITHIN = 20.0  # seconds: a bound for a hang, not a speed
SUITE = settings(
    max_examples=60,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
LONG = settings(
    max_examples=2000,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# ------------------------------------------------------------------------------------------ values

_symbols = st.builds(Symbol, st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=24))
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.builds(UInt, st.integers(0, 2**32 - 1)),
    st.builds(ULong, st.integers(0, 2**64 - 1)),
    st.builds(UByte, st.integers(0, 255)),
    st.builds(UShort, st.integers(0, 2**16 - 1)),
    st.builds(Timestamp, st.integers(-(2**63), 2**63 - 1)),
    st.floats(allow_nan=False),
    st.text(max_size=24),
    st.binary(max_size=24),
    _symbols,
    st.builds(uuid.UUID, int=st.integers(0, 2**128 - 1)),
    st.builds(SymbolArray, st.lists(_symbols, max_size=3)),
)
_keys = st.one_of(_symbols, st.text(max_size=8), st.integers(-5, 5))
_descriptors = st.one_of(
    st.builds(ULong, st.sampled_from([0x1D, 0x24, 0x28, 0x29, 0x70, 0x73, 0x77]) | st.integers(0, 2**64 - 1)),
    st.sampled_from([Symbol("apache.org:selector-filter:string"), Symbol("com.microsoft:epoch")]),
)
amqp_values = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(_keys, children, max_size=3),
        st.builds(Described, _descriptors, children),
    ),
    max_leaves=10,
)

# A valid field list of each performative a client sends; examples replace, drop or add fields.
_SOURCE = Described(frames.SOURCE, ["hub1/ConsumerGroups/$Default/Partitions/0"] + [None] * 10)
VALID_FIELDS: dict[int, list[Any]] = {
    frames.SASL_INIT: [Symbol("ANONYMOUS"), b"", None],
    frames.OPEN: ["fuzz", "127.0.0.1", UInt(65536), UShort(8), None, None, None, None, None, None],
    frames.BEGIN: [None, UInt(0), UInt(100), UInt(100), UInt(10), None, None, None],
    frames.ATTACH: ["fuzz-link", UInt(0), True, None, None, _SOURCE, None, None, None, None, None, None],
    frames.FLOW: [UInt(0), UInt(100), UInt(0), UInt(100), UInt(0), UInt(0), UInt(10)],
    frames.TRANSFER: [UInt(0), UInt(0), b"tag", UInt(0), True],
    frames.DISPOSITION: [True, UInt(0), None, True, Described(frames.ACCEPTED, [])],
    frames.DETACH: [UInt(0), True, None],
    frames.END: [None],
    frames.CLOSE: [None],
}


@st.composite
def field_lists(draw: Any, code: int) -> list[Any]:
    """A field list for ``code``: the valid one with some positions replaced, cut or extended."""
    fields = list(VALID_FIELDS[code])
    for _ in range(draw(st.integers(1, 3))):
        position = draw(st.integers(0, len(fields) - 1))
        fields[position] = draw(amqp_values)
    how = draw(st.sampled_from(["as-is", "cut", "extend"]))
    if how == "cut":
        fields = fields[: draw(st.integers(0, len(fields)))]
    elif how == "extend":
        fields += draw(st.lists(amqp_values, max_size=4))
    return fields


@st.composite
def frame_bodies(draw: Any, code: int) -> bytes:
    """One frame body for the performative ``code``: fields fuzzed, a payload, or raw bytes."""
    kind = draw(st.sampled_from(["fields", "fields", "descriptor", "raw", "mutated"]))
    if kind == "raw":
        return draw(st.binary(min_size=1, max_size=64))
    if kind == "descriptor":  # any value where the performative should be
        return encode(draw(amqp_values)) or b"\x40"
    body = encode(Described(ULong(code), draw(field_lists(code))))
    if code == frames.TRANSFER:
        body += draw(st.binary(max_size=40))
    if kind == "mutated":
        data = bytearray(body)
        for _ in range(draw(st.integers(1, 3))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        body = bytes(data)
    return body


# --------------------------------------------------------------------------------------- the wire


def _frame(body: bytes, frame_type: int = frames.FRAME_AMQP, channel: int = 0) -> bytes:
    return struct.pack(">IBBH", 8 + len(body), 2, frame_type, channel) + body


class Wire:
    """A raw connection to the emulator, walked up to a stage."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=CLOSE_WITHIN)

    def exact(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            assert chunk, "the server closed the connection during a valid handshake"
            data += chunk
        return data

    def performative(self) -> tuple[int, list]:
        size = struct.unpack(">I", self.exact(4))[0]
        rest = self.exact(size - 4)
        doff = rest[0]
        value, _ = decode(rest[doff * 4 - 4 :]) if size > 8 else (None, 0)
        assert isinstance(value, Described), f"a frame that is not a performative: {rest!r}"
        return int(value.descriptor), value.value

    def send(self, code: int, fields: list, frame_type: int = frames.FRAME_AMQP) -> None:
        self.sock.sendall(_frame(encode(Described(ULong(code), fields)), frame_type))

    def sasl_header(self) -> None:
        self.sock.sendall(frames.SASL_HEADER)
        assert self.exact(8) == frames.SASL_HEADER
        assert self.performative()[0] == frames.SASL_MECHANISMS

    def sasl_done(self) -> None:
        self.sasl_header()
        self.send(frames.SASL_INIT, VALID_FIELDS[frames.SASL_INIT], frames.FRAME_SASL)
        assert self.performative()[0] == frames.SASL_OUTCOME
        self.sock.sendall(frames.AMQP_HEADER)
        assert self.exact(8) == frames.AMQP_HEADER

    def opened(self) -> None:
        self.sasl_done()
        self.send(frames.OPEN, VALID_FIELDS[frames.OPEN])
        assert self.performative()[0] == frames.OPEN

    def begun(self) -> None:
        self.opened()
        self.send(frames.BEGIN, VALID_FIELDS[frames.BEGIN])
        assert self.performative()[0] == frames.BEGIN

    def attached(self) -> None:
        """A $cbs link pair: a receiver the client can flow and a sender it can transfer to."""
        self.begun()
        cbs = Described(frames.SOURCE, ["$cbs"] + [None] * 10)
        self.send(frames.ATTACH, ["cbs-receiver", UInt(0), True, None, None, cbs, None])
        assert self.performative()[0] == frames.ATTACH
        target = Described(frames.TARGET, ["$cbs"] + [None] * 6)
        self.send(
            frames.ATTACH, ["cbs-sender", UInt(1), False, None, None, None, target, None, None, UInt(0)]
        )
        assert self.performative()[0] == frames.ATTACH

    def replies_until_closed(self) -> bytes:
        """Close our sending side, then read everything until the server closes."""
        self.sock.shutdown(socket.SHUT_WR)
        data = b""
        try:
            while chunk := self.sock.recv(65536):
                data += chunk
        except TimeoutError:
            pytest.fail(f"the server kept the connection open {CLOSE_WITHIN} s after our end")
        except ConnectionResetError:
            pass
        finally:
            self.sock.close()
        return data


def _performatives(data: bytes) -> Iterator[tuple[int, list]]:
    """Each performative in ``data`` (which must be whole, well-formed frames)."""
    while data:
        size, doff = struct.unpack_from(">IB", data)
        assert 8 <= size <= len(data), f"a cut frame from the server: {data[:64]!r}"
        if size > doff * 4:
            value, _ = decode(data[doff * 4 : size])
            assert isinstance(value, Described)
            yield int(value.descriptor), value.value
        data = data[size:]


# Where a performative the server sends carries its error.
ERROR_FIELD = {frames.CLOSE: 0, frames.END: 0, frames.DETACH: 2}

# Stage: (walk the wire up to it, the performatives fuzzed there, the frame type they go in).
STAGES: dict[str, tuple[Callable[[Wire], None], list[int], int]] = {
    "sasl": (Wire.sasl_header, [frames.SASL_INIT], frames.FRAME_SASL),
    "open": (Wire.sasl_done, [frames.OPEN], frames.FRAME_AMQP),
    "begin": (Wire.opened, [frames.BEGIN, frames.CLOSE], frames.FRAME_AMQP),
    "attach": (Wire.begun, [frames.ATTACH, frames.END, frames.DETACH], frames.FRAME_AMQP),
    "link": (
        Wire.attached,
        [frames.FLOW, frames.TRANSFER, frames.DISPOSITION, frames.DETACH],
        frames.FRAME_AMQP,
    ),
}


class _Exceptions(logging.Handler):
    """Collects the emulator's log records that carry an exception (a crash, not a refusal)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or record.levelno >= logging.ERROR:
            self.records.append(record)


@pytest.fixture
def crashes() -> Iterator[_Exceptions]:
    handler = _Exceptions()
    logger = logging.getLogger("eventhubs_emulator")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def _one_example(port: int, stage: str, code: int, body: bytes, crashes: _Exceptions) -> None:
    walk, _, frame_type = STAGES[stage]
    wire = Wire(port)
    walk(wire)
    wire.sock.sendall(_frame(body, frame_type))
    replies = wire.replies_until_closed()
    conditions = [
        str(fields[at].value[0])
        for code_, fields in _performatives(replies)
        if (at := ERROR_FIELD.get(code_)) is not None
        and len(fields) > at
        and isinstance(fields[at], Described)
    ]
    assert "amqp:internal-error" not in conditions, (stage, hex(code), body)
    assert not crashes.records, (
        f"the emulator logged an exception for a {stage} frame 0x{code:02x} {body!r}: "
        + "; ".join(r.getMessage() for r in crashes.records)
    )


def _check_stage(emulator: Any, crashes: _Exceptions, stage: str, data: Any) -> None:
    code = data.draw(st.sampled_from(STAGES[stage][1]), label="performative")
    body = data.draw(frame_bodies(code), label="body")
    crashes.records.clear()
    _one_example(emulator.port, stage, code, body, crashes)


@pytest.mark.parametrize("stage", STAGES)
@SUITE
@given(data=st.data())
def test_a_fuzzed_frame_at_each_stage_is_refused_by_name_and_the_server_stays_up(
    emulator, crashes, stage, data
):
    _check_stage(emulator, crashes, stage, data)


@pytest.mark.slow
@pytest.mark.parametrize("stage", STAGES)
@LONG
@given(data=st.data())
def test_fuzzed_frames_long_run(emulator, crashes, stage, data):
    _check_stage(emulator, crashes, stage, data)


def test_the_sdk_still_sends_and_receives_after_a_fuzzing_run(emulator, crashes):
    conn = emulator.connection_string("hub1")
    send(conn, ["before"], partition_id="0")
    for stage, (_, codes, _) in STAGES.items():
        for code in codes:
            body = encode(Described(ULong(code), [Symbol("x")] * 3 + [-1] * 12))
            _one_example(emulator.port, stage, code, body, crashes)
    send(conn, ["after"], partition_id="0")
    assert [e.body_as_str() for e in receive(conn, "0", expected=2)] == ["before", "after"]


@pytest.mark.parametrize(
    ("stage", "code", "fields", "says"),
    [
        ("open", frames.OPEN, ["c", None, "big"], "open field 'max-frame-size' must be uint, got str 'big'"),
        ("attach", frames.ATTACH, ["l", "0", True], "attach field 'handle' must be uint, got str '0'"),
        ("attach", frames.ATTACH, [None, UInt(0), True], "attach field 'name' is mandatory"),
        (
            "link",
            frames.FLOW,
            [None, UInt(1), UInt(0), UInt(1), UInt(0), None, -5],
            "'link-credit' must be uint",
        ),
    ],
)
def test_a_field_of_the_wrong_type_ends_the_connection_naming_the_field(
    emulator, crashes, stage, code, fields, says
):
    walk, _, frame_type = STAGES[stage]
    wire = Wire(emulator.port)
    walk(wire)
    wire.send(code, fields, frame_type)
    closes = [f for c, f in _performatives(wire.replies_until_closed()) if c == frames.CLOSE]
    assert len(closes) == 1
    condition, description = closes[0][0].value[:2]
    assert condition == "amqp:invalid-field" and says in description
    assert not crashes.records
