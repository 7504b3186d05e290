"""Property-based fuzzing of the Kafka endpoint's request handling (hypothesis), like the AMQP one in
``test_protocol_fuzz.py``.

The frames: valid requests of every served API and version with arbitrary field values (built from
the endpoint's own schemas), the same with bytes mutated, cut short, or with a length field made huge;
Produce requests whose record sets are valid, gzip with garbage inside, gzip bombs, many batches at
once, or mutated batches with their CRC made right again (so decoding goes past the check); and
arbitrary bytes. Two levels:

* the decoder: each frame into ``KafkaServer._serve`` (header, body, the handler, the response) on a
  fresh in-memory Premium namespace (gzip taken). It answers with a response that reads back whole
  under the response schema with the request's correlation id, or refuses with the two protocol
  errors the listener turns into a logged close (``KafkaDecodeError``, ``ClosingConnection``): never
  another exception, never past a time bound, never allocating past the declared limits (the request
  itself, the Produce budget ``records.MAX_PRODUCE_RECORD_BYTES`` and the hub's event size);
* a real listener: each frame, with its size prefix (right, or huge, or negative), on a socket before
  or after SASL. The endpoint answers with well-formed frames carrying the request's correlation id,
  then closes when we close our side, within a bound; it logs no exception; and a client on another
  connection is answered after every example.

The suite runs a fixed, derandomized budget (the same inputs every run, no example database); ``-m
slow`` runs a longer random search.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import socket
import struct
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from eventhubs_emulator import Emulator, EmulatorConfig
from eventhubs_emulator.kafka import handlers, records
from eventhubs_emulator.kafka.groups import GroupCoordinator
from eventhubs_emulator.kafka.listener import ClosingConnection, KafkaServer
from eventhubs_emulator.kafka.protocol import FLEXIBLE_FROM, SUPPORTED_VERSIONS, ApiKey
from eventhubs_emulator.kafka.records import crc32c
from eventhubs_emulator.kafka.schemas import SCHEMAS
from eventhubs_emulator.kafka.wire import Field, KafkaDecodeError, Reader, Writer, read_struct, write_struct
from eventhubs_emulator.store import Broker
from tests.kafka.raw import read_frame, request

pytestmark = pytest.mark.integration

HANG_BOUND = 10.0  # seconds: a bound for a hang, not a speed
EVENT_SIZE = 256 * 1024  # the fuzzed namespace's largest event
BUDGET = 2 * 1024 * 1024  # the Produce budget while fuzzing (small, so that bombs stop fast)
#: What one example may allocate beyond the frame: the budget, a record being turned into an event
#: (its value and its event, both under the event size), two inflate chunks, and slack for the rest.
MEMORY_BOUND = BUDGET + 2 * EVENT_SIZE + 2 * 64 * 1024 + 1024 * 1024
HUBS = {"hub1": 2, "hub4": 4}

SUITE = settings(
    max_examples=500,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
SOCKET_SUITE = settings(SUITE, max_examples=200)
LONG = settings(SUITE, max_examples=3000, derandomize=False)

REQUESTS = [(api, version) for api, (lo, hi) in SUPPORTED_VERSIONS.items() for version in range(lo, hi + 1)]


def _flexible(api: ApiKey, version: int) -> bool:
    start = FLEXIBLE_FROM[api]
    return start is not None and version >= start


# --------------------------------------------------------------------------------------- record sets


def _batch(records: list[tuple[bytes | None, bytes | None, list]], codec: int) -> bytes:
    """A record batch as kafka-python's producer builds it (codec 0: none, 1: gzip)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for offset, (key, value, headers) in enumerate(records):
        builder.append(offset, timestamp=1_700_000_000_000, key=key, value=value, headers=headers)
    return bytes(builder.build())


def _gzip_batch_of(body: bytes, count: int, attributes: int = 1) -> bytes:
    """A batch whose records part is ``body`` gzip-compressed, saying it holds ``count`` records."""
    compressed = gzip.compress(body, compresslevel=9)
    header = bytearray(
        struct.pack(
            ">qiibIhiqqqhii", 0, 49 + len(compressed), 0, 2, 0, attributes, count - 1, 0, 0, -1, -1, -1, count
        )
    )
    return _with_crc(bytes(header) + compressed)


def _with_crc(batch: bytes) -> bytes:
    """``batch`` with its CRC-32C made right (so a decoder goes past the check)."""
    if len(batch) < 21:
        return batch
    out = bytearray(batch)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def _record(value: bytes) -> bytes:
    """One encoded record: no key, ``value``, no headers (attributes and deltas 0)."""
    body = b"\x00\x00\x00" + records.varint(-1) + records.varint(len(value)) + value + records.varint(0)
    return records.varint(len(body)) + body


# records of 1 MiB of zeros (over the event size), 8 MiB in one batch
_ZERO_RECORD = _record(bytes(1 << 20))
BOMBS = [
    _gzip_batch_of(bytes(24 << 20), 3),  # garbage records inflating to 24 MiB
    _gzip_batch_of(_ZERO_RECORD * 8, 8),  # records over the event size
    _batch([(None, bytes(200_000), [])] * 40, 1),  # events under the size, 8 MB in all
]
_small = st.binary(max_size=24)
_records = st.lists(
    st.tuples(
        st.none() | _small, st.none() | _small, st.lists(st.tuples(st.text(max_size=4), _small), max_size=2)
    ),
    max_size=4,
)


@st.composite
def record_sets(draw: Any) -> bytes | None:
    """A Produce partition's record set: valid, gzip, garbage in gzip, bombs, many, mutated, none."""
    kind = draw(
        st.sampled_from(
            ["valid", "gzip", "garbage-gzip", "gzip-of-garbage", "bomb", "many", "mutated", "raw", "none"]
        )
    )
    if kind == "none":
        return draw(st.sampled_from([None, b""]))
    if kind == "raw":
        return draw(st.binary(max_size=120))
    if kind == "bomb":
        return draw(st.sampled_from(BOMBS))
    if kind == "garbage-gzip":  # a gzip batch whose compressed bytes are garbage (or a cut gzip stream)
        body = draw(
            st.binary(max_size=80) | st.builds(lambda b, n: gzip.compress(b)[:n], _small, st.integers(0, 30))
        )
        header = bytearray(
            struct.pack(">qiibIhiqqqhii", 0, 49 + len(body), 0, 2, 0, 1, 0, 0, 0, -1, -1, -1, 1)
        )
        return _with_crc(bytes(header) + body)
    if kind == "gzip-of-garbage":
        return _gzip_batch_of(draw(st.binary(max_size=200)), draw(st.integers(-2, 50)))
    if kind == "many":
        one = _batch(draw(_records), draw(st.sampled_from([0, 1])))
        return one * draw(st.integers(2, 40))
    codec = 1 if kind == "gzip" else draw(st.sampled_from([0, 1, 2, 3, 4]))
    batch = _batch(draw(_records), min(codec, 1))
    if codec > 1:  # labelled snappy, lz4 or zstd (kafka-python may lack their libraries)
        data = bytearray(batch)
        struct.pack_into(">h", data, 21, (struct.unpack_from(">h", data, 21)[0] & ~0x07) | codec)
        batch = _with_crc(bytes(data))
    if kind == "mutated":
        data = bytearray(batch)
        for _ in range(draw(st.integers(1, 4))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        batch = _with_crc(bytes(data)) if draw(st.booleans()) else bytes(data)
    return batch


# ------------------------------------------------------------------------------------------ requests

_INT_RANGES = {"int8": 7, "int16": 15, "int32": 31, "int64": 63, "uint32": None}
_names = st.sampled_from(["hub1", "hub1", "HUB4", "hub4", "nohub", "", "g", "$Default"]) | st.text(max_size=6)
_partitions = st.sampled_from([0, 1, 0, 1, 3, -1, 4])
# fields whose values decide how deep a request goes: kept mostly meaningful
_FIELD_VALUES: dict[str, Any] = {
    "acks": st.sampled_from([-1, 0, 1, 2]),
    "records": record_sets(),
    "max_wait_ms": st.integers(-5, 50),  # Fetch's long poll, kept short (it is capped anyway)
    "index": _partitions,
    "partition": _partitions,
    "partition_index": _partitions,
    "fetch_offset": st.integers(-3, 3),
    "timestamp": st.integers(-3, 3) | st.integers(0, 2**62),
    "mechanism": st.sampled_from(["PLAIN", "OAUTHBEARER", "SCRAM-SHA-256", ""]),
    "key_type": st.integers(-1, 2),
    "session_timeout_ms": st.integers(-1, 60_000),
    "rebalance_timeout_ms": st.integers(-1, 60_000),
}


def _value(kind: str) -> st.SearchStrategy:
    if kind in _INT_RANGES:
        bits = _INT_RANGES[kind]
        lo, hi = (0, 2**32 - 1) if bits is None else (-(2**bits), 2**bits - 1)
        return st.integers(-3, 10) | st.sampled_from([lo, hi]) | st.integers(lo, hi)
    if kind == "bool":
        return st.booleans()
    if kind == "string":
        return _names | st.none()
    if kind in ("bytes", "records"):
        return st.none() | st.binary(max_size=40)
    if kind == "uuid":
        return st.binary(min_size=16, max_size=16)
    raise AssertionError(kind)


def _struct(schema: tuple[Field, ...], version: int) -> st.SearchStrategy:
    fields = {}
    for f in schema:
        if not f.present(version):
            continue
        if f.type != "array":
            fields[f.name] = _FIELD_VALUES.get(f.name, _value(f.type))
        else:
            items = st.lists(_struct(f.fields, version) if f.fields else _value(f.item or ""), max_size=3)
            fields[f.name] = st.one_of(items, items, items, st.just(None))  # null: now and then
    return st.fixed_dictionaries(fields)


def _frame(api: int, version: int, correlation_id: int, body: bytes, flexible: bool) -> bytes:
    """A request frame without its size: header v1 (v2 when flexible: with tagged fields), body."""
    w = Writer()
    w.fixed("int16", api)
    w.fixed("int16", version)
    w.fixed("int32", correlation_id)
    w.string("fuzz")
    if flexible:
        w.empty_tagged_fields()
    return bytes(w.out) + body


@st.composite
def request_frames(draw: Any) -> bytes:
    """One request frame (without its size prefix): see the module docstring."""
    kinds = ["produce", "produce", "valid", "valid", "mutated", "cut", "huge-length", "raw-body", "raw"]
    kind = draw(st.sampled_from(kinds))
    if kind == "produce":  # a Produce to partitions that exist: its record sets go through the decoder
        version = draw(st.integers(*SUPPORTED_VERSIONS[ApiKey.PRODUCE]))
        entries = draw(st.lists(st.tuples(st.sampled_from([0, 1]), record_sets()), min_size=1, max_size=4))
        acks = draw(st.sampled_from([-1, 1, 0]))
        return _produce(entries, version, acks, draw(st.sampled_from(["hub1", "HUB4"])))
    api, version = draw(st.sampled_from(REQUESTS))
    flexible = _flexible(api, version)
    correlation_id = draw(st.integers(-(2**31), 2**31 - 1))
    if kind == "raw":
        return draw(st.binary(min_size=0, max_size=80))
    if kind == "raw-body":
        return _frame(api, version, correlation_id, draw(st.binary(max_size=80)), flexible)
    w = Writer()
    write_struct(w, SCHEMAS[api][0], version, flexible, draw(_struct(SCHEMAS[api][0], version)))
    frame = _frame(api, version, correlation_id, bytes(w.out), flexible)
    if kind == "mutated":
        data = bytearray(frame)
        for _ in range(draw(st.integers(1, 4))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        frame = bytes(data)
    elif kind == "cut":
        frame = frame[: draw(st.integers(0, len(frame)))]
    elif kind == "huge-length":  # a length or count field (int16/int32/varint) claiming far more
        at = draw(st.integers(8, max(len(frame) - 1, 8)))
        huge = draw(
            st.sampled_from(
                [b"\x7f\xff", b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x08"]
            )
        )
        frame = frame[:at] + huge + frame[at + len(huge) :]
    return frame


def _produce(
    entries: list[tuple[int, bytes | None]], version: int = 3, acks: int = -1, topic: str = "hub1"
) -> bytes:
    """A Produce request of ``(partition, record set)`` entries to ``topic``."""
    flexible = _flexible(ApiKey.PRODUCE, version)
    w = Writer()
    partitions = [{"index": index, "records": data} for index, data in entries]
    value = {"transactional_id": None, "acks": acks, "timeout_ms": 30_000}
    value["topic_data"] = [{"name": topic, "partition_data": partitions}]
    write_struct(w, SCHEMAS[ApiKey.PRODUCE][0], version, flexible, value)
    return _frame(ApiKey.PRODUCE, version, 77, bytes(w.out), flexible)


#: Frames every run tries first: a gzip bomb, a gzip batch of records over the event size, six gzip
#: batches of events under it (48 MB in all) in one request, and a cut gzip batch.
EXAMPLES = [
    _produce([(0, BOMBS[0])]),
    _produce([(1, BOMBS[1])]),
    _produce([(i % 2, BOMBS[2]) for i in range(6)]),
    _produce([(0, BOMBS[2][:-10])]),
]
#: What this fuzzing found (each raised out of its handler: an internal error that closed the
#: connection): OffsetFetch v1 with a null topic name, and with a null array of partitions.
FOUND = [
    b"\x00\t\x00\x01\x00\x00\x00\x00\x00\x04fuzz\xff\xff\x00\x00\x00\x01\xff\xff\x00\x00\x00\x01\x00\x00\x00\x00",
    b"\x00\t\x00\x01\x00\x00\x00\x00\x00\x04fuzz\x00\x01g\x00\x00\x00\x01\x00\x04hub1\xff\xff\xff\xff",
]


# ------------------------------------------------------------------------------------ the decoder


def _config() -> EmulatorConfig:
    return EmulatorConfig.many_hubs(HUBS, kafka_port=0, tier="Premium", max_event_size=EVENT_SIZE)


@pytest.fixture
def limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fuzzed namespace's bounds: a small Produce budget, Fetch waits of at most 20 ms."""
    monkeypatch.setattr(records, "MAX_PRODUCE_RECORD_BYTES", BUDGET, raising=False)
    monkeypatch.setattr(handlers, "MAX_FETCH_WAIT_MS", 20)


@pytest.fixture
def bounded(limits: None) -> Iterator[None]:
    """:func:`limits`, and tracemalloc on, to measure each example's allocations."""
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()


def _check_response(frame: bytes, response: bytes) -> None:
    """The response carries the request's correlation id and reads back whole under its schema."""
    key, version = struct.unpack_from(">hh", frame)
    assert response[:4] == frame[4:8], "the response's correlation id is the request's"
    api = ApiKey(key)
    lo, hi = SUPPORTED_VERSIONS[api]
    if not lo <= version <= hi:  # ApiVersions answered in v0 so that the client can pick a version
        assert api is ApiKey.API_VERSIONS
        version = 0
    r = Reader(response, 4)
    flexible = _flexible(api, version)
    if flexible and api is not ApiKey.API_VERSIONS:
        r.skip_tagged_fields()
    read_struct(r, SCHEMAS[api][1], version, flexible)
    assert r.remaining() == 0, "the response has bytes after its body"


async def _serve_once(frame: bytes) -> bytes | None:
    server = KafkaServer(Broker(_config(), None), "127.0.0.1")
    server.groups = GroupCoordinator(initial_delay=0.0)
    state = handlers.ClientState(handshake_done=False, authenticated=True, mechanism="PLAIN")
    try:
        return await asyncio.wait_for(server._serve(frame, state, 9092), HANG_BOUND)
    finally:
        server.close()


def _check_decoder(frame: bytes) -> None:
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    started = time.monotonic()
    try:
        response = asyncio.run(_serve_once(frame))
    except (KafkaDecodeError, ClosingConnection):
        response = None  # the listener logs it and closes the connection
    except TimeoutError:
        pytest.fail(f"a request took over {HANG_BOUND} s: {frame[:200]!r}")
    took = time.monotonic() - started
    peak = tracemalloc.get_traced_memory()[1] - before
    assert peak <= MEMORY_BOUND + 4 * len(frame), f"{peak} bytes allocated for a {len(frame)}-byte request"
    assert took < HANG_BOUND
    if response is not None:
        _check_response(frame, response)


@SUITE
@given(frame=request_frames())
@example(frame=EXAMPLES[0])
@example(frame=EXAMPLES[1])
@example(frame=EXAMPLES[2])
@example(frame=EXAMPLES[3])
@example(frame=FOUND[0])
@example(frame=FOUND[1])
def test_any_request_frame_is_answered_or_refused_within_bounds(bounded: None, frame: bytes) -> None:
    _check_decoder(frame)


@pytest.mark.slow
@LONG
@given(frame=request_frames())
def test_request_frames_long_run(bounded: None, frame: bytes) -> None:
    _check_decoder(frame)


# --------------------------------------------------------------------------------- a real listener


class _Crashes(logging.Handler):
    """The emulator's and asyncio's log records that carry an exception (a crash, not a refusal)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or record.levelno >= logging.ERROR:
            self.records.append(record)


@pytest.fixture
def crashes() -> Iterator[_Crashes]:
    handler = _Crashes()
    loggers = [logging.getLogger("eventhubs_emulator"), logging.getLogger("asyncio")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


class Endpoint:
    """A running emulator's Kafka port, and a client on another connection that must stay served."""

    def __init__(self, emu: Emulator) -> None:
        self.emu = emu
        host, port = emu.kafka_bootstrap.rsplit(":", 1)  # type: ignore[union-attr]
        self.address = (host, int(port))
        self.bystander = self.connect(authenticated=True)
        self.asked = 0

    def connect(self, authenticated: bool) -> socket.socket:
        sock = socket.create_connection(self.address, timeout=HANG_BOUND)
        if authenticated:
            sock.sendall(request(17, 1, 1, struct.pack(">h", 5) + b"PLAIN"))
            assert read_frame(sock) is not None
            token = b"\x00$ConnectionString\x00" + self.emu.kafka_password().encode()
            sock.sendall(request(36, 0, 2, struct.pack(">i", len(token)) + token))
            answer = read_frame(sock)
            assert answer is not None and struct.unpack_from(">ih", answer) == (2, 0)
        return sock

    def bystander_is_served(self) -> None:
        self.asked += 1
        self.bystander.sendall(request(3, 1, self.asked, struct.pack(">i", 1) + b"\x00\x04hub1"))
        answer = read_frame(self.bystander)
        assert answer is not None and struct.unpack_from(">i", answer)[0] == self.asked


@pytest.fixture
def endpoint(limits: None) -> Iterator[Endpoint]:
    with Emulator(_config()) as emu:
        ep = Endpoint(emu)
        try:
            yield ep
        finally:
            ep.bystander.close()


def _replies_until_closed(sock: socket.socket) -> bytes:
    """Close our sending side, then read everything until the server closes."""
    sock.shutdown(socket.SHUT_WR)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except TimeoutError:
        pytest.fail(f"the server kept the connection open {HANG_BOUND} s after our end")
    except ConnectionResetError:
        pass
    finally:
        sock.close()
    return data


@st.composite
def size_prefixes(draw: Any, frame: bytes) -> bytes:
    """The frame's size prefix: right mostly, else huge, negative, or off by some bytes."""
    kind = draw(st.sampled_from(["right"] * 4 + ["huge", "negative", "off"]))
    size = {
        "right": len(frame),
        "huge": draw(st.sampled_from([2**31 - 1, 8 * 1024 * 1024 + 1, 512 * 1024 + 1])),
        "negative": draw(st.integers(-(2**31), -1)),
        "off": max(len(frame) + draw(st.integers(-8, 8)), 0),
    }[kind]
    return struct.pack(">i", size)


def _check_socket(ep: Endpoint, crashes: _Crashes, frame: bytes, prefix: bytes, authenticated: bool) -> None:
    crashes.records.clear()
    sock = ep.connect(authenticated)
    sock.sendall(prefix + frame)
    replies = _replies_until_closed(sock)
    while replies:  # whole frames only, each answering our request
        assert len(replies) >= 4
        (size,) = struct.unpack_from(">i", replies)
        assert 4 <= size <= len(replies) - 4, f"a cut frame from the server: {replies[:64]!r}"
        assert replies[4:8] == frame[4:8], "a response with another correlation id"
        replies = replies[4 + size :]
    ep.bystander_is_served()
    assert not crashes.records, "the emulator logged an exception: " + "; ".join(
        r.getMessage() for r in crashes.records
    )


@SOCKET_SUITE
@given(data=st.data())
def test_a_fuzzed_request_gets_an_answer_or_a_close_and_others_stay_served(
    endpoint: Endpoint, crashes: _Crashes, data: Any
) -> None:
    frame = data.draw(request_frames() | st.sampled_from(EXAMPLES), label="frame")
    prefix = data.draw(size_prefixes(frame), label="size prefix")
    authenticated = data.draw(st.booleans(), label="authenticated")
    _check_socket(endpoint, crashes, frame, prefix, authenticated)


@pytest.mark.slow
@settings(LONG, max_examples=1000)
@given(data=st.data())
def test_fuzzed_requests_over_a_socket_long_run(endpoint: Endpoint, crashes: _Crashes, data: Any) -> None:
    frame = data.draw(request_frames(), label="frame")
    _check_socket(endpoint, crashes, frame, data.draw(size_prefixes(frame)), data.draw(st.booleans()))
