"""Property-based fuzzing of the Kafka endpoint's decoders: any bytes given to a request schema of any
served version, and any mutation of a valid record batch (its CRC recomputed, so decoding goes past the
check), end in a decoded value or KafkaDecodeError, never in another exception."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from eventhubs_emulator.kafka.protocol import FLEXIBLE_FROM, SUPPORTED_VERSIONS
from eventhubs_emulator.kafka.records import (
    MAX_PRODUCE_RECORD_BYTES,
    OverBudget,
    Record,
    UnsupportedCompression,
    crc32c,
    decode_batches,
    encode_batch,
)
from eventhubs_emulator.kafka.schemas import SCHEMAS
from eventhubs_emulator.kafka.wire import KafkaDecodeError, Reader, read_struct

REQUESTS = [(api, version) for api, (lo, hi) in SUPPORTED_VERSIONS.items() for version in range(lo, hi + 1)]
VALID_BATCH = encode_batch(
    0, [Record(b"k", b"value", [("h", b"v")]), Record(None, b"", [])], 1_700_000_000_000
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(REQUESTS), st.binary(max_size=200))
def test_any_bytes_decode_as_a_request_or_raise_kafka_decode_error(request: tuple, data: bytes) -> None:
    api, version = request
    start = FLEXIBLE_FROM[api]
    try:
        read_struct(Reader(data), SCHEMAS[api][0], version, start is not None and version >= start)
    except KafkaDecodeError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(VALID_BATCH) - 1), st.integers(0, 255)), min_size=1, max_size=6))
def test_mutated_record_batches_decode_or_raise_kafka_decode_error(mutations: list[tuple[int, int]]) -> None:
    batch = bytearray(VALID_BATCH)
    for pos, value in mutations:
        batch[pos] = value
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    for gzip in (False, True):  # a Standard namespace, and a Premium one that inflates gzip batches
        try:
            decode_batches(bytes(batch), gzip=gzip)
        except KafkaDecodeError:
            pass


def test_a_batch_with_a_wrong_crc_is_refused() -> None:
    batch = bytearray(VALID_BATCH)
    batch[-1] ^= 0xFF
    try:
        decode_batches(bytes(batch))
    except KafkaDecodeError as exc:
        assert "CRC" in str(exc)
    else:
        raise AssertionError("a corrupted batch was accepted")


def _gzip_batch(records: list[tuple[bytes | None, bytes]]) -> bytes:
    """A gzip record batch as kafka-python's producer builds it (not the emulator's own encoder)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=1,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 24,
    )
    for offset, (key, value) in enumerate(records):
        builder.append(offset, timestamp=1_700_000_000_000, key=key, value=value, headers=[("h", b"1")])
    return bytes(builder.build())


def _with_codec(batch: bytes, codec: int) -> bytes:
    """``batch`` relabelled with another compression codec, its CRC recomputed."""
    out = bytearray(batch)
    attributes = struct.unpack_from(">h", out, 21)[0]
    struct.pack_into(">h", out, 21, (attributes & ~0x07) | codec)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def test_a_gzip_batch_is_inflated_only_where_the_tier_takes_it_and_other_codecs_never() -> None:
    batch = _gzip_batch([(b"k1", b"a" * 300), (None, b"b" * 5)])
    records = decode_batches(batch, gzip=True)[0]
    assert [(r.key, r.value, r.headers) for r in records] == [
        (b"k1", b"a" * 300, [("h", b"1")]),
        (None, b"b" * 5, [("h", b"1")]),
    ]
    with pytest.raises(UnsupportedCompression) as standard:
        decode_batches(batch)
    assert standard.value.codec == "gzip"
    for codec, name in ((2, "snappy"), (3, "lz4"), (4, "zstd")):
        with pytest.raises(UnsupportedCompression) as refused:
            decode_batches(_with_codec(batch, codec), gzip=True)
        assert refused.value.codec == name


def test_a_gzip_bomb_is_refused_before_it_inflates_past_the_bound() -> None:
    """A batch whose records would inflate past the request's budget (MAX_PRODUCE_RECORD_BYTES) ends in
    OverBudget (MESSAGE_TOO_LARGE) having inflated no more than the budget (a hostile producer cannot
    exhaust the emulator's memory); a cut gzip stream is refused as malformed."""
    bomb = _gzip_batch([(None, bytes(MAX_PRODUCE_RECORD_BYTES + 1024))])
    assert len(bomb) < 100_000
    with pytest.raises(OverBudget, match="more than"):
        decode_batches(bomb, gzip=True)
    truncated = bytearray(_gzip_batch([(None, bytes(100_000))])[:-40])
    struct.pack_into(">i", truncated, 8, len(truncated) - 12)  # batch length of the cut batch
    struct.pack_into(">I", truncated, 17, crc32c(bytes(truncated[21:])))
    with pytest.raises(KafkaDecodeError):
        decode_batches(bytes(truncated), gzip=True)
