"""Kafka record batches (magic 2): decode what producers send, encode what consumers fetch.

A batch is ``base_offset int64, batch_length int32, partition_leader_epoch int32, magic int8,
crc uint32, attributes int16, last_offset_delta int32, base_timestamp int64, max_timestamp int64,
producer_id int64, producer_epoch int16, base_sequence int32, records []record``; the CRC is CRC-32C
(Castagnoli) of everything after the crc field. A record is varint-framed: length, attributes,
timestamp delta, offset delta, key, value, headers.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from .wire import KafkaDecodeError, Reader, Writer

MAGIC = 2
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_LOG_APPEND = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20
COMPRESSION_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

_HEADER = struct.Struct(">qiibIhiqqqhii")  # base offset .. record count
_CRC_AT = 17  # the crc field's position in the batch header
_CRC_FROM = 21  # the CRC covers the batch from the attributes on


def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes | memoryview) -> int:
    """CRC-32C (Castagnoli) of ``data``."""
    crc = 0xFFFFFFFF
    table = _TABLE
    for byte in bytes(data):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


class UnsupportedCompression(KafkaDecodeError):
    """The batch is compressed with a codec the endpoint does not decode."""


@dataclass
class Record:
    """One Kafka record: key, value, headers (key, value bytes) and its timestamp in epoch ms."""

    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp_ms: int = -1


def decode_batches(data: bytes) -> list[list[Record]]:
    """The records of each batch in a Produce request's record set.

    Raises :class:`KafkaDecodeError` for a malformed batch or a CRC mismatch (the client's
    CORRUPT_MESSAGE), :class:`UnsupportedCompression` for a compressed one.
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
        if crc32c(memoryview(data)[pos + _CRC_FROM : end]) != crc:
            raise KafkaDecodeError("record batch CRC-32C mismatch")
        codec = attributes & COMPRESSION_MASK
        if codec:
            name = COMPRESSION_NAMES.get(codec, str(codec))
            raise UnsupportedCompression(f"compression {name} is not supported; send uncompressed batches")
        if attributes & CONTROL:
            batches.append([])  # transaction markers carry no events
            pos = end
            continue
        r = Reader(data, pos + _HEADER.size, end)
        batches.append([_decode_record(r, base_ts) for _ in range(count)])
        if r.pos != end:
            raise KafkaDecodeError("record batch has bytes after its last record")
        pos = end
    return batches


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


def _put_varbytes(w: Writer, value: bytes | None) -> None:
    if value is None:
        w.varint(-1)
    else:
        w.varint(len(value))
        w.out += value


def encode_batch(base_offset: int, records: list[Record], log_append_time_ms: int) -> bytes:
    """One uncompressed batch of ``records`` at consecutive offsets from ``base_offset``.

    The batch is stamped with log-append time (the events' enqueued time, as the service stamps
    them): consumers see ``log_append_time_ms`` as every record's timestamp.
    """
    body = Writer()
    for delta, rec in enumerate(records):
        w = Writer()
        w.fixed("int8", 0)
        w.varint(0)
        w.varint(delta)
        _put_varbytes(w, rec.key)
        _put_varbytes(w, rec.value)
        w.varint(len(rec.headers))
        for name, value in rec.headers:
            _put_varbytes(w, name.encode("utf-8"))
            _put_varbytes(w, value)
        body.varint(len(w.out))
        body.out += w.out
    header = _HEADER.pack(
        base_offset,
        _HEADER.size - 12 + len(body.out),
        0,
        MAGIC,
        0,
        TIMESTAMP_TYPE_LOG_APPEND,
        len(records) - 1,
        log_append_time_ms,
        log_append_time_ms,
        -1,
        -1,
        -1,
        len(records),
    )
    batch = bytearray(header) + body.out
    struct.pack_into(">I", batch, _CRC_AT, crc32c(memoryview(batch)[_CRC_FROM:]))
    return bytes(batch)
