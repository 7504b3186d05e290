"""The Kafka Fetch path reads records straight from the stored AMQP bytes (``events.record_tail``) and
frames them without Python objects (``records.encode_batch_of_tails``): these tests hold that fast path
to the mapping ``events.message_to_record`` defines, and a Fetch's answer to Kafka's semantics (every
record from the fetch offset on, at its sequence number, stamped with its enqueued time, one batch per
run of one enqueued time, the CRC-32C right, the size limit kept)."""

from __future__ import annotations

import itertools
import struct
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords

from eventhubs_emulator import EmulatorConfig
from eventhubs_emulator.codec import Described, Symbol, Timestamp, encode
from eventhubs_emulator.kafka import handlers
from eventhubs_emulator.kafka.events import KAFKA_KEY, message_to_record, record_tail
from eventhubs_emulator.kafka.groups import GroupCoordinator
from eventhubs_emulator.kafka.protocol import ErrorCode
from eventhubs_emulator.kafka.records import encode_record_tail
from eventhubs_emulator.messages import (
    AMQP_VALUE,
    APPLICATION_PROPERTIES,
    DATA,
    HEADER,
    MESSAGE_ANNOTATIONS,
    PROPERTIES,
)
from eventhubs_emulator.store import Broker, PartitionLog

_VALUES = st.one_of(
    st.text(max_size=300),
    st.binary(max_size=300),
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.builds(Symbol, st.text(alphabet="abc-", max_size=5)),
    st.builds(Timestamp, st.integers(0, 2**40)),
)


def _raw_map(pairs: list[tuple[str, Any]]) -> bytes:
    """An AMQP map of ``pairs`` as given (a repeated name stays repeated, as a dict could not)."""
    body = b"".join(encode(k) + encode(v) for k, v in pairs)
    if len(body) < 255:
        return b"\xc1" + bytes([len(body) + 1, 2 * len(pairs)]) + body
    return b"\xd1" + struct.pack(">II", len(body) + 4, 2 * len(pairs)) + body


@st.composite
def messages(draw: st.DrawFn) -> tuple[bytes, str | None]:
    """A message as a producer sends it (any of the sections producers use) and a partition key."""
    out = b""
    if draw(st.booleans()):
        out += encode(Described(HEADER, [True]))
    kafka_key = draw(st.one_of(st.none(), st.binary(max_size=20), st.text(max_size=20)))
    if kafka_key is not None:
        out += encode(Described(MESSAGE_ANNOTATIONS, {KAFKA_KEY: kafka_key}))
    if draw(st.booleans()):
        out += encode(Described(PROPERTIES, ["message-id", None, None, "to"]))
    names = st.text(max_size=draw(st.sampled_from([8, 300])))
    pairs = draw(st.lists(st.tuples(names, _VALUES), max_size=4))
    if pairs:
        out += (
            b"\x00\x53\x74" + _raw_map(pairs)
            if draw(st.booleans())
            else encode(Described(APPLICATION_PROPERTIES, dict(pairs)))
        )
    if draw(st.integers(0, 4)) == 0:
        out += encode(Described(AMQP_VALUE, draw(_VALUES)))
    else:
        for data in draw(st.lists(st.binary(max_size=300), min_size=1, max_size=3)):
            out += encode(Described(DATA, data))
    return out, draw(st.one_of(st.none(), st.text(min_size=1, max_size=10)))


@settings(max_examples=300, deadline=None)
@given(messages())
def test_the_fast_path_maps_a_stored_event_as_message_to_record_does(sent: tuple[bytes, str | None]) -> None:
    message, partition_key = sent
    log = PartitionLog("hub", "0")
    log.append([message], partition_key)
    stored = log.events[0][3]
    record = message_to_record(stored, -1)
    assert record_tail(stored) == encode_record_tail(record.key, record.value, record.headers)


def _fetched(data: bytes) -> list[tuple[int, int, int, tuple]]:
    """(base offset, timestamp type, records) per batch, by kafka-python's decoder (the CRC checked),
    each record as (offset, timestamp, key, value, headers)."""
    out = []
    records = MemoryRecords(data)
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        out.append(
            (
                batch.base_offset,
                batch.timestamp_type,
                tuple((r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch),
            )
        )
    return out


def _fetch(broker: Broker, offset: int, max_bytes: int) -> dict:
    """One partition's answer to a Fetch of partition 0 of hub ``h`` from ``offset``."""
    ctx = handlers.Context(
        broker, "127.0.0.1", 0, handlers.ClientState(), itertools.count(), {}, GroupCoordinator()
    )
    part = {"partition": 0, "fetch_offset": offset, "partition_max_bytes": max_bytes}
    request = {"max_bytes": 50 << 20, "topics": [{"topic": "h", "partitions": [part]}]}
    return handlers._fetch_once(ctx, request)[0]["responses"][0]["partitions"][0]


def _broker() -> tuple[Broker, PartitionLog]:
    broker = Broker(EmulatorConfig.single_hub("h", partition_count=1), None)
    hub = broker.hub("h")
    assert hub is not None
    return broker, hub.partitions["0"]


def test_a_fetch_returns_every_record_from_its_offset_in_one_batch_per_enqueued_time() -> None:
    broker, log = _broker()
    props = encode(Described(APPLICATION_PROPERTIES, {"n": "v", "i": 7}))
    # enqueued times T0 < T1 = T1 (the clock set back: a partition's times never go back) < T2
    for run, shift_ms in enumerate([0, 10_000, -(10**9), 20_000]):
        broker.clock.offset_ms = shift_ms
        log.append([props + encode(Described(DATA, f"{run}-{i}".encode())) for i in range(3)], None)
    times = [enq for _, _, enq, _, _ in log.events]
    assert times[0] < times[3] == times[8] < times[9]
    log.truncate_before(1)  # retention: offsets 1..11 are left

    for offset in range(1, 13):  # from each offset, at a run's start or inside it, to the end
        answer = _fetch(broker, offset, 1 << 20)
        assert (answer["error_code"], answer["log_start_offset"], answer["high_watermark"]) == (0, 1, 12)
        batches = _fetched(answer["records"])
        records = [rec for _, _, recs in batches for rec in recs]
        want = []
        for seq, _, enq, payload, _ in log.events[offset - 1 :]:
            rec = message_to_record(payload, enq)
            want.append((seq, enq, rec.key, rec.value, rec.headers))
        assert records == want
        assert [base for base, _, _ in batches] == [
            seq for seq in range(offset, 12) if seq == offset or times[seq] != times[seq - 1]
        ]
        assert {kind for _, kind, _ in batches} <= {1}  # LogAppendTime
    assert _fetch(broker, 0, 1 << 20)["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE


def test_a_fetch_keeps_its_size_limit_but_always_returns_the_first_event() -> None:
    broker, log = _broker()
    log.append([encode(Described(DATA, bytes(1000))) for _ in range(10)], None)
    three = sum(len(payload) for _, _, _, payload, _ in log.events[2:5])  # the limit counts stored bytes
    [(base, _, records)] = _fetched(_fetch(broker, 2, three)["records"])
    assert (base, [r[0] for r in records]) == (2, [2, 3, 4])
    [(base, _, records)] = _fetched(_fetch(broker, 2, three - 1)["records"])
    assert (base, [r[0] for r in records]) == (2, [2, 3])
    [(base, _, records)] = _fetched(_fetch(broker, 9, 1)["records"])
    assert (base, [r[0] for r in records]) == (9, [9])
    assert _fetch(broker, 10, 1 << 20)["records"] == b""  # at the high watermark: nothing yet
