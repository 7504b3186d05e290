"""The Kafka endpoint's bounds on what one Produce request may inflate (``records.RecordBudget``).

On Premium and Dedicated the endpoint inflates gzip batches. A request's records may take
``MAX_PRODUCE_RECORD_BYTES`` once inflated, summed over all its batches; past that the request is
refused whole with MESSAGE_TOO_LARGE (what Kafka answers for a batch over ``max.message.bytes``,
and what makes Java's producer split its batches and retry) and nothing of it is stored. A record
that cannot fit the hub's event size is refused before its value is inflated. Inflation runs in
worker threads, so the other connections are served meanwhile.

The requests are built by hand over a raw socket (Kafka's classic encoding) with kafka-python's
batch builder, independent of the emulator's own codec: a client library would refuse to send them.
"""

from __future__ import annotations

import gzip
import socket
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from eventhubs_emulator import Emulator, EmulatorConfig
from eventhubs_emulator.kafka import records
from eventhubs_emulator.kafka.records import (
    INFLATE_CHUNK,
    MAX_PRODUCE_RECORD_BYTES,
    RECORD_COST_FLOOR,
    OverBudget,
    RecordBudget,
    RecordTooLarge,
    crc32c,
    decode_batches,
)
from tests.kafka.raw import read_frame, request

pytestmark = pytest.mark.integration

DEADLINE = 30.0  # seconds: a bound for waits on conditions, not a speed
MESSAGE_TOO_LARGE = 10
PRODUCE, METADATA = 0, 3


@pytest.fixture
def premium() -> Iterator[Emulator]:
    """A Premium namespace (gzip batches taken) with hub1 (2 partitions, 1 MiB events)."""
    config = EmulatorConfig.many_hubs({"hub1": 2}, kafka_port=0, tier="Premium")
    with Emulator(config) as emu:
        yield emu


def gzip_batch(values: list[bytes]) -> bytes:
    """A gzip record batch of ``values`` as kafka-python's producer builds it."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=1,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for offset, value in enumerate(values):
        builder.append(offset, timestamp=1_700_000_000_000, key=None, value=value, headers=[])
    return bytes(builder.build())


def _string(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def produce_v3(entries: list[tuple[int, bytes]], topic: str = "hub1") -> bytes:
    """Produce v3 (acks -1) body: one topic, a partition entry per ``(partition, record set)``."""
    body = struct.pack(">hhi", -1, -1, 30_000) + struct.pack(">i", 1) + _string(topic)
    body += struct.pack(">i", len(entries))
    for partition, data in entries:
        body += struct.pack(">ii", partition, len(data)) + data
    return body


def produce_errors(frame: bytes) -> list[int]:
    """The partition error codes of a Produce v3 response frame, in order."""
    pos = 4  # correlation id
    errors = []
    (topics,) = struct.unpack_from(">i", frame, pos)
    pos += 4
    for _ in range(topics):
        (n,) = struct.unpack_from(">h", frame, pos)
        pos += 2 + n
        (parts,) = struct.unpack_from(">i", frame, pos)
        pos += 4
        for _ in range(parts):
            _, error = struct.unpack_from(">ih", frame, pos)
            errors.append(error)
            pos += 4 + 2 + 8 + 8  # index, error, base offset, log append time
    return errors


def authenticated(emu: Emulator) -> socket.socket:
    """A raw connection past SASL PLAIN (SaslHandshake v1, SaslAuthenticate v0)."""
    host, port = emu.kafka_bootstrap.rsplit(":", 1)  # type: ignore[union-attr]
    sock = socket.create_connection((host, int(port)), timeout=DEADLINE)
    sock.sendall(request(17, 1, 1, _string("PLAIN")))
    handshake = read_frame(sock)
    assert handshake is not None and struct.unpack_from(">ih", handshake) == (1, 0)
    token = b"\x00$ConnectionString\x00" + emu.kafka_password().encode()
    sock.sendall(request(36, 0, 2, struct.pack(">i", len(token)) + token))
    answer = read_frame(sock)
    assert answer is not None and struct.unpack_from(">ih", answer) == (2, 0)
    return sock


def stored(emu: Emulator) -> int:
    return sum(emu.partition_info("hub1", p)["last_enqueued_sequence_number"] + 1 for p in ("0", "1"))


class _CountingInflater:
    """zlib's decompress object, counting what it inflates into ``total``."""

    def __init__(self, counter: _Inflated, inner: Any) -> None:
        self._counter = counter
        self._inner = inner

    def decompress(self, data: Any, max_length: int = 0) -> bytes:
        out = self._inner.decompress(data, max_length)
        self._counter.total += len(out)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _Inflated:
    """Stands in for the zlib module in ``records``: every inflater it makes counts into ``total``."""

    def __init__(self) -> None:
        self.total = 0

    def decompressobj(self, *args: Any, **kwargs: Any) -> _CountingInflater:
        return _CountingInflater(self, zlib.decompressobj(*args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(zlib, name)


@pytest.fixture
def inflated(monkeypatch: pytest.MonkeyPatch) -> _Inflated:
    """How many bytes the endpoint's gzip inflation produces (in every thread of this process)."""
    counter = _Inflated()
    monkeypatch.setattr(records, "zlib", counter)
    return counter


# ------------------------------------------------------------------------------------- the endpoint


def test_a_produce_of_many_gzip_batches_past_the_budget_is_refused_and_others_are_served(
    premium: Emulator, inflated: _Inflated
) -> None:
    """150 gzip batches of ~2 KB, each inflating to 2 MB of events under 1 MiB: 300 MB in one request
    of 300 KB. Every partition is answered MESSAGE_TOO_LARGE and nothing is stored, having inflated no
    more than the budget (and a chunk); a client on another connection is answered meanwhile, and can
    produce afterwards."""
    batch = gzip_batch([bytes(1_000_000), bytes(1_000_000)])
    entries = [(i % 2, batch) for i in range(150)]
    hostile = produce_v3(entries)
    assert len(hostile) < 400_000
    bystander = authenticated(premium)
    attacker = authenticated(premium)
    try:
        attacker.sendall(request(PRODUCE, 3, 7, hostile))
        time.sleep(0.05)  # the request is being decoded
        started = time.monotonic()
        bystander.sendall(request(METADATA, 1, 8, struct.pack(">i", 1) + _string("hub1")))
        answer = read_frame(bystander)
        waited = time.monotonic() - started
        assert answer is not None and struct.unpack_from(">i", answer)[0] == 8
        assert waited < 1.0, f"another connection waited {waited:.2f} s for its Metadata answer"

        refused = read_frame(attacker)
        assert refused is not None and struct.unpack_from(">i", refused)[0] == 7
        assert produce_errors(refused) == [MESSAGE_TOO_LARGE] * 150
        assert stored(premium) == 0, "nothing of a refused request is stored"
        assert inflated.total <= MAX_PRODUCE_RECORD_BYTES + INFLATE_CHUNK

        bystander.sendall(request(PRODUCE, 3, 9, produce_v3([(0, gzip_batch([b"fine"]))])))
        accepted = read_frame(bystander)
        assert accepted is not None and produce_errors(accepted) == [0]
        assert stored(premium) == 1
    finally:
        bystander.close()
        attacker.close()


def test_a_record_over_the_event_size_in_a_gzip_batch_is_refused_before_the_batch_is_inflated(
    premium: Emulator, inflated: _Inflated
) -> None:
    """The first record's value is 2 MiB (the hub takes 1 MiB events) and 10 MiB follow it in the same
    batch: MESSAGE_TOO_LARGE, after inflating no more than a chunk or two, not the 12 MiB."""
    batch = gzip_batch([bytes(2 * 1024 * 1024)] + [bytes(1024 * 1024 - 100)] * 10)
    sock = authenticated(premium)
    try:
        sock.sendall(request(PRODUCE, 3, 3, produce_v3([(0, batch)])))
        answer = read_frame(sock)
        assert answer is not None and produce_errors(answer) == [MESSAGE_TOO_LARGE]
    finally:
        sock.close()
    assert inflated.total <= 2 * INFLATE_CHUNK, f"inflated {inflated.total} bytes of a refused batch"
    assert stored(premium) == 0


def test_gzip_batches_under_the_budget_are_stored_whole(premium: Emulator) -> None:
    """Several partitions' gzip batches inflating to 10 MB in all (under the budget) are stored, in
    order, each record as one event."""
    values = [bytes([i]) * 900_000 for i in range(10)]
    entries = [(0, gzip_batch(values[:5])), (1, gzip_batch(values[5:])), (0, gzip_batch(values[:1]))]
    sock = authenticated(premium)
    try:
        sock.sendall(request(PRODUCE, 3, 4, produce_v3(entries)))
        answer = read_frame(sock)
        assert answer is not None and produce_errors(answer) == [0, 0, 0]
    finally:
        sock.close()
    assert [premium.partition_info("hub1", p)["last_enqueued_sequence_number"] for p in ("0", "1")] == [5, 4]


def test_the_endpoint_answers_while_two_connections_keep_inflating(premium: Emulator) -> None:
    """Two connections send budget-sized gzip requests back to back; a third connection's Metadata
    requests are each answered within a bound meanwhile (inflation holds no connection but its own)."""
    hostile = produce_v3([(i % 2, gzip_batch([bytes(1_000_000)] * 4)) for i in range(12)])
    stop = threading.Event()
    errors: list[BaseException] = []

    def keep_sending() -> None:
        sock = authenticated(premium)
        try:
            n = 100
            while not stop.is_set():
                sock.sendall(request(PRODUCE, 3, n, hostile))
                answer = read_frame(sock)
                assert answer is not None and set(produce_errors(answer)) == {MESSAGE_TOO_LARGE}
                n += 1
        except BaseException as exc:  # reported by the test
            errors.append(exc)
        finally:
            sock.close()

    senders = [threading.Thread(target=keep_sending, daemon=True) for _ in range(2)]
    for sender in senders:
        sender.start()
    bystander = authenticated(premium)
    try:
        time.sleep(0.2)
        worst = 0.0
        for cid in range(20):
            started = time.monotonic()
            bystander.sendall(request(METADATA, 1, cid, struct.pack(">i", 1) + _string("hub1")))
            assert read_frame(bystander) is not None
            worst = max(worst, time.monotonic() - started)
            time.sleep(0.02)
        assert worst < 1.0, f"a Metadata answer took {worst:.2f} s while others inflated"
    finally:
        stop.set()
        for sender in senders:
            sender.join(timeout=DEADLINE)
        bystander.close()
    assert not errors, errors
    assert stored(premium) == 0


# ------------------------------------------------------------------------------------- the decoder


def test_the_decoder_stops_at_the_first_record_over_the_event_size() -> None:
    batch = gzip_batch([b"small", bytes(5_000_000), bytes(5_000_000)])
    budget = RecordBudget()
    with pytest.raises(RecordTooLarge, match="exceeds the hub's limit of 1048576 bytes"):
        decode_batches(batch, gzip=True, max_event_size=1024 * 1024, budget=budget)
    assert budget.spent <= 2 * INFLATE_CHUNK


def _gzip_of(records_bytes: bytes, count: int) -> bytes:
    """A gzip batch whose records are ``records_bytes`` (encoded) and that says it holds ``count``."""
    compressed = gzip.compress(records_bytes)
    header = bytearray(
        struct.pack(">qiibIhiqqqhii", 0, 49 + len(compressed), 0, 2, 0, 1, count - 1, 0, 0, -1, -1, -1, count)
    )
    struct.pack_into(">I", header, 17, crc32c(bytes(header[21:]) + compressed))
    return bytes(header) + compressed


# an empty record: length 6, attributes, timestamp delta, offset delta, null key, null value, no headers
EMPTY_RECORD = bytes([12, 0, 0, 0, 1, 1, 0])


def test_every_record_counts_at_least_the_floor_against_the_budget() -> None:
    """200,000 empty records in a few KiB of gzip stop at budget / floor records."""
    assert decode_batches(_gzip_of(EMPTY_RECORD * 3, 3), gzip=True)[0][0].value is None
    tiny = _gzip_of(EMPTY_RECORD * 200_000, 200_000)
    assert len(tiny) < 10_000
    budget = RecordBudget(RECORD_COST_FLOOR * 1000)
    with pytest.raises(OverBudget):
        decode_batches(tiny, gzip=True, budget=budget)
    assert budget.spent <= RECORD_COST_FLOOR * 1001
    fits = _gzip_of(EMPTY_RECORD * 900, 900)
    assert len(decode_batches(fits, gzip=True, budget=RecordBudget(RECORD_COST_FLOOR * 1000))[0]) == 900
