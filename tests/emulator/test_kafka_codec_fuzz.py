"""Property-based fuzzing of the Kafka endpoint's decoders: any bytes given to a request schema of any
served version, and any mutation of a valid record batch (its CRC recomputed, so decoding goes past the
check), end in a decoded value or KafkaDecodeError, never in another exception."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from eventhubs_emulator.kafka.protocol import FLEXIBLE_FROM, SUPPORTED_VERSIONS
from eventhubs_emulator.kafka.records import Record, crc32c, decode_batches, encode_batch
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
    try:
        decode_batches(bytes(batch))
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
