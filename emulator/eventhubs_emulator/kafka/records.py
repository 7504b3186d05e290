"""Kafka record batches (magic 2): decode what producers send, encode what consumers fetch.

A batch is ``base_offset int64, batch_length int32, partition_leader_epoch int32, magic int8,
crc uint32, attributes int16, last_offset_delta int32, base_timestamp int64, max_timestamp int64,
producer_id int64, producer_epoch int16, base_sequence int32, records []record``; the CRC is CRC-32C
(Castagnoli) of everything after the crc field. A record is varint-framed: length, attributes,
timestamp delta, offset delta, key, value, headers.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

import google_crc32c

from .wire import KafkaDecodeError, Reader

MAGIC = 2
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_LOG_APPEND = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20
GZIP = 1
COMPRESSION_NAMES = {0: "none", GZIP: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
#: A gzip batch's records may inflate to this much, no more (a hostile batch cannot exhaust memory).
MAX_INFLATED_BATCH = 16 * 1024 * 1024

_HEADER = struct.Struct(">qiibIhiqqqhii")  # base offset .. record count
_CRC_AT = 17  # the crc field's position in the batch header
_CRC_FROM = 21  # the CRC covers the batch from the attributes on


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC-32C (Castagnoli) of ``data``, in C (google-crc32c; a Python loop cost ~10 µs per event)."""
    return google_crc32c.value(bytes(data) if isinstance(data, memoryview) else data)


class UnsupportedCompression(KafkaDecodeError):
    """The batch is compressed with a codec the endpoint does not take; ``codec`` names it."""

    def __init__(self, codec: str) -> None:
        super().__init__(f"a {codec} batch")
        self.codec = codec


@dataclass
class Record:
    """One Kafka record: key, value, headers (key, value bytes) and its timestamp in epoch ms."""

    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp_ms: int = -1


def decode_batches(data: bytes, gzip: bool = False) -> list[list[Record]]:
    """The records of each batch in a Produce request's record set; gzip batches are inflated when
    ``gzip`` (the tiers that take them), as the service hands their events to AMQP readers inflated.

    Raises :class:`KafkaDecodeError` for a malformed batch or a CRC mismatch (the client's
    CORRUPT_MESSAGE), :class:`UnsupportedCompression` for a compressed one it does not take.
    """
    batches = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < _HEADER.size:
            raise KafkaDecodeError("truncated record batch header")
        (_, length, _, magic, crc, attributes, _, base_ts, _, _, _, _, count) = _HEADER.unpack_from(data, pos)
        end = pos + 12 + length
        if magic != MAGIC:
            raise KafkaDecodeError(f"record batch magic {magic}; only magic 2 (Kafka 0.11+) is supported")
        if length < _HEADER.size - 12 or end > len(data):
            raise KafkaDecodeError("record batch length runs past the record set")
        if crc32c(data[pos + _CRC_FROM : end]) != crc:
            raise KafkaDecodeError("record batch CRC-32C mismatch")
        codec = attributes & COMPRESSION_MASK
        if codec and not (gzip and codec == GZIP):
            raise UnsupportedCompression(COMPRESSION_NAMES.get(codec, f"codec {codec}"))
        if attributes & CONTROL:
            batches.append([])  # transaction markers carry no events
            pos = end
            continue
        if codec:
            body = _inflate(data[pos + _HEADER.size : end])
            r = Reader(body, 0, len(body))
        else:
            r = Reader(data, pos + _HEADER.size, end)
        batches.append([_decode_record(r, base_ts) for _ in range(count)])
        if r.pos != r.end:
            raise KafkaDecodeError("record batch has bytes after its last record")
        pos = end
    return batches


def _inflate(compressed: bytes) -> bytes:
    """A gzip batch's records (Kafka compresses them as one gzip stream), at most MAX_INFLATED_BATCH."""
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        body = inflater.decompress(compressed, MAX_INFLATED_BATCH + 1)
    except zlib.error as exc:
        raise KafkaDecodeError(f"gzip record batch does not inflate: {exc}") from None
    if len(body) > MAX_INFLATED_BATCH:
        raise KafkaDecodeError(f"gzip record batch inflates past {MAX_INFLATED_BATCH} bytes")
    if not inflater.eof:
        raise KafkaDecodeError("gzip record batch is truncated")
    return body


def _decode_record(r: Reader, base_ts: int) -> Record:
    length = r.varint()
    if length < 0 or length > r.remaining():
        raise KafkaDecodeError("record length runs past its batch")
    body = Reader(r.data, r.pos, r.pos + length)
    r.pos += length
    body.fixed("int8")  # attributes (unused)
    ts_delta = body.varint()
    body.varint()  # offset delta: offsets are assigned by the log
    key = _varbytes(body)
    value = _varbytes(body)
    headers = []
    count = body.varint()
    if count < 0 or count > body.remaining():
        raise KafkaDecodeError("bad record header count")
    for _ in range(count):
        name = _varbytes(body)
        if name is None:
            raise KafkaDecodeError("record header with a null key")
        try:
            text = name.decode("utf-8")
        except UnicodeDecodeError:
            raise KafkaDecodeError("record header key is not UTF-8") from None
        headers.append((text, _varbytes(body)))
    if body.remaining():
        raise KafkaDecodeError("record has bytes after its headers")
    return Record(key, value, headers, base_ts + ts_delta)


def _varbytes(r: Reader) -> bytes | None:
    n = r.varint()
    if n < -1:
        raise KafkaDecodeError("negative record field length")
    return None if n == -1 else r.take(n)


def _varint(value: int) -> bytes:
    """A zig-zag signed varint's bytes."""
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL_VARINTS = [_varint(n) for n in range(-1, 1 << 14)]  # index n + 1: record lengths and deltas


def varint(value: int) -> bytes:
    """A zig-zag signed varint's bytes (the small ones from a table: one per record field)."""
    return _SMALL_VARINTS[value + 1] if -1 <= value < (1 << 14) - 1 else _varint(value)


def varbytes(value: bytes | None) -> bytes:
    """A record field: its varint length (-1 for null) and bytes."""
    return _SMALL_VARINTS[0] if value is None else varint(len(value)) + value


def encode_record_tail(
    key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]]
) -> bytes:
    """The part of a record that does not depend on its place in a batch: key, value and headers."""
    parts = [varbytes(key), varbytes(value), varint(len(headers))]
    for name, data in headers:
        parts.append(varbytes(name.encode("utf-8")))
        parts.append(varbytes(data))
    return b"".join(parts)


def encode_batch(base_offset: int, records: list[Record], log_append_time_ms: int) -> bytes:
    """One uncompressed batch of ``records`` at consecutive offsets from ``base_offset``.

    The batch is stamped with log-append time (the events' enqueued time, as the service stamps
    them): consumers see ``log_append_time_ms`` as every record's timestamp.
    """
    tails = [encode_record_tail(rec.key, rec.value, rec.headers) for rec in records]
    return encode_batch_of_tails(base_offset, tails, log_append_time_ms)


def encode_batch_of_tails(base_offset: int, tails: list[bytes], log_append_time_ms: int) -> bytes:
    """:func:`encode_batch` of records given by their :func:`encode_record_tail` bytes."""
    parts = []
    small = _SMALL_VARINTS
    for delta, tail in enumerate(tails):
        # attributes 0, timestamp delta 0 (log-append time: the batch's timestamp), offset delta
        head = b"\x00\x00" + (small[delta + 1] if delta < (1 << 14) - 1 else _varint(delta))
        n = len(head) + len(tail)
        parts.append(small[n + 1] if n < (1 << 14) - 1 else _varint(n))
        parts.append(head)
        parts.append(tail)
    body = b"".join(parts)
    header = bytearray(
        _HEADER.pack(
            base_offset,
            _HEADER.size - 12 + len(body),
            0,
            MAGIC,
            0,
            TIMESTAMP_TYPE_LOG_APPEND,
            len(tails) - 1,
            log_append_time_ms,
            log_append_time_ms,
            -1,
            -1,
            -1,
            len(tails),
        )
    )
    crc = google_crc32c.extend(google_crc32c.value(bytes(header[_CRC_FROM:])), body)
    struct.pack_into(">I", header, _CRC_AT, crc)
    return bytes(header) + body
