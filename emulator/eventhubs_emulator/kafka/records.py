"""Kafka record batches (magic 2): decode what producers send, encode what consumers fetch.

A batch is ``base_offset int64, batch_length int32, partition_leader_epoch int32, magic int8,
crc uint32, attributes int16, last_offset_delta int32, base_timestamp int64, max_timestamp int64,
producer_id int64, producer_epoch int16, base_sequence int32, records []record``; the CRC is CRC-32C
(Castagnoli) of everything after the crc field. A record is varint-framed: length, attributes,
timestamp delta, offset delta, key, value, headers.

Decoding is bounded per Produce request (:class:`RecordBudget`): a gzip batch is inflated as far as
its records are read, a chunk at a time, and decoding stops as soon as the request's records pass
the budget or a record cannot fit the hub's event size, so a small request cannot make the emulator
inflate, copy or hold much more than the budget.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import google_crc32c

from .wire import KafkaDecodeError

MAGIC = 2
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_LOG_APPEND = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20
GZIP = 1
COMPRESSION_NAMES = {0: "none", GZIP: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

#: What one Produce request's records may take once decoded: their bytes, inflated where a batch is
#: gzip, summed over every batch of every partition (a hostile request of a few KiB of gzip cannot
#: make the emulator inflate or hold gigabytes).
MAX_PRODUCE_RECORD_BYTES = 32 * 1024 * 1024
#: Each record counts at least this much against the budget: a stored event costs the emulator about
#: 280 bytes beyond its payload, so a budget of tiny records would otherwise allow millions of them.
RECORD_COST_FLOOR = 256
#: How much a gzip batch is inflated at a time (the most it is inflated past the record being read).
INFLATE_CHUNK = 64 * 1024

_HEADER = struct.Struct(">qiibIhiqqqhii")  # base offset .. record count
_CRC_AT = 17  # the crc field's position in the batch header
_CRC_FROM = 21  # the CRC covers the batch from the attributes on
_ATTRIBUTES_AT = 21
_MIN_EVENT_BYTES = 5  # an event's AMQP message holds at least its data section's descriptor and size


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC-32C (Castagnoli) of ``data``, in C (google-crc32c; a Python loop cost ~10 µs per event)."""
    return google_crc32c.value(bytes(data) if isinstance(data, memoryview) else data)


class UnsupportedCompression(KafkaDecodeError):
    """The batch is compressed with a codec the endpoint does not take; ``codec`` names it."""

    def __init__(self, codec: str) -> None:
        super().__init__(f"a {codec} batch")
        self.codec = codec


class TooLarge(KafkaDecodeError):
    """Well-formed records that are refused for their size (Kafka's MESSAGE_TOO_LARGE)."""


class RecordTooLarge(TooLarge):
    """A record cannot fit the hub's event size: found while decoding, before its value is read."""


class OverBudget(TooLarge):
    """The request's records pass its :class:`RecordBudget`."""


class RecordBudget:
    """What one Produce request's records may still take (:data:`MAX_PRODUCE_RECORD_BYTES`): every
    record byte, inflated where compressed, and at least :data:`RECORD_COST_FLOOR` per record.
    ``spent`` is what was charged so far; charging past ``limit`` raises :class:`OverBudget`."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = MAX_PRODUCE_RECORD_BYTES if limit is None else limit
        self.spent = 0

    def room(self) -> int:
        """What is left."""
        return self.limit - self.spent

    def spend(self, n: int) -> None:
        """Charge ``n`` bytes; :class:`OverBudget` when that passes the limit."""
        self.spent += n
        if self.spent > self.limit:
            raise OverBudget(
                f"the request's records take more than {self.limit} bytes decoded (gzip inflated, each "
                f"record counted as at least {RECORD_COST_FLOOR} bytes); send fewer or smaller batches "
                "per request"
            )


@dataclass
class Record:
    """One Kafka record: key, value, headers (key, value bytes) and its timestamp in epoch ms."""

    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp_ms: int = -1


def whole_batches(data: bytes) -> tuple[int, int]:
    """How many whole batches the record set ``data`` starts with (by their length fields alone, as
    Kafka's batch iterator counts them: a cut or short tail is no batch), and the first one's magic
    (-1 when none)."""
    count = pos = 0
    while len(data) - pos >= 17:  # up to the magic byte
        length = struct.unpack_from(">i", data, pos + 8)[0]
        if length < 5 or pos + 12 + length > len(data):
            break
        count += 1
        pos += 12 + length
    return count, data[16] if count else -1


def has_compressed_batch(data: bytes) -> bool:
    """Whether any batch of the record set ``data`` says it is compressed (by its header alone)."""
    pos = 0
    while len(data) - pos >= _HEADER.size:
        if struct.unpack_from(">h", data, pos + _ATTRIBUTES_AT)[0] & COMPRESSION_MASK:
            return True
        length = struct.unpack_from(">i", data, pos + 8)[0]
        if length <= 0:
            break
        pos += 12 + length
    return False


def decode_batches(
    data: bytes, gzip: bool = False, max_event_size: int | None = None, budget: RecordBudget | None = None
) -> list[list[Record]]:
    """The records of each batch in a Produce request's record set (see :func:`iter_batches`)."""
    return [list(records) for records in iter_batches(data, gzip, max_event_size, budget)]


def iter_batches(
    data: bytes, gzip: bool = False, max_event_size: int | None = None, budget: RecordBudget | None = None
) -> Iterator[Iterator[Record]]:
    """Each batch of a Produce request's record set, as an iterator of its records, decoded as they
    are taken; gzip batches are inflated when ``gzip`` (the tiers that take them), as the service
    hands their events to AMQP readers inflated, and only as far as their records are taken.

    ``budget`` (one per request; a new :class:`RecordBudget` when None) is charged for every record;
    a record whose key and value alone exceed ``max_event_size`` raises :class:`RecordTooLarge` before
    its value is read or inflated. Raises :class:`KafkaDecodeError` for a malformed batch or a CRC
    mismatch (the client's CORRUPT_MESSAGE), :class:`UnsupportedCompression` for a compressed one it
    does not take, :class:`OverBudget` past the budget. Take each batch's records before the next batch.
    """
    budget = RecordBudget() if budget is None else budget
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
            yield iter(())  # transaction markers carry no events
        elif codec:
            src = _Inflating(memoryview(data)[pos + _HEADER.size : end], budget)
            yield _records(src, count, base_ts, max_event_size, budget)
        else:
            budget.spend(end - pos - _HEADER.size)
            yield _records(_Plain(data, pos + _HEADER.size, end), count, base_ts, max_event_size, budget)
        pos = end


def _records(
    src: _Plain | _Inflating, count: int, base_ts: int, max_event_size: int | None, budget: RecordBudget
) -> Iterator[Record]:
    for _ in range(count):
        start = src.next_record()
        record = _decode_record(src, base_ts, max_event_size)
        budget.spend(max(RECORD_COST_FLOOR - (src.pos - start), 0))
        yield record
    if not src.exhausted():
        raise KafkaDecodeError("record batch has bytes after its last record")


class _Plain:
    """The records of an uncompressed batch: ``data[pos:end]``."""

    __slots__ = ("data", "end", "limit", "pos")

    def __init__(self, data: bytes, pos: int, end: int) -> None:
        self.data = data
        self.pos = pos
        self.end = end
        self.limit = end  # where the record being read ends

    def next_record(self) -> int:
        """Start a record: where it starts."""
        self.limit = self.end
        return self.pos

    def fill(self, n: int) -> bool:
        """Whether ``n`` more bytes are there."""
        return self.pos + n <= self.end

    def exhausted(self) -> bool:
        """Whether no byte is left."""
        return self.pos >= self.end


class _Inflating:
    """The records of a gzip batch (Kafka compresses them as one gzip stream), inflated as far as
    they are read, :data:`INFLATE_CHUNK` at a time beyond what the record being read needs; every
    inflated byte is charged to the request's budget before it is kept."""

    __slots__ = ("_at", "_budget", "_inflater", "_input", "data", "end", "limit", "pos")

    def __init__(self, compressed: memoryview, budget: RecordBudget) -> None:
        self.data = bytearray()
        self.pos = 0
        self.end = 0
        self.limit = 0
        self._inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        self._input = compressed
        self._at = 0  # how much of the input zlib has consumed
        self._budget = budget

    def next_record(self) -> int:
        """Start a record (dropping the records read before it): where it starts."""
        if self.pos > INFLATE_CHUNK:
            del self.data[: self.pos]
            self.end -= self.pos
            self.pos = 0
        self.limit = 1 << 62
        return self.pos

    def fill(self, n: int) -> bool:
        """Inflate until ``n`` more bytes are there (True) or the stream ends first (False)."""
        z = self._inflater
        while self.end - self.pos < n:
            if z.eof:
                return False
            wanted = max(n - (self.end - self.pos), INFLATE_CHUNK)
            # zlib is given the input a chunk at a time: what it leaves (unconsumed_tail) is a copy
            piece = self._input[self._at : self._at + INFLATE_CHUNK]
            try:
                out = z.decompress(piece, min(wanted, self._budget.room() + 1))
            except zlib.error as exc:
                raise KafkaDecodeError(f"gzip record batch does not inflate: {exc}") from None
            consumed = len(piece) - len(z.unconsumed_tail)
            self._at += consumed
            if not out and not consumed and not z.eof:
                raise KafkaDecodeError("gzip record batch is truncated")
            self._budget.spend(len(out))
            self.data += out
            self.end += len(out)
        return True

    def exhausted(self) -> bool:
        """Whether the stream ends here (a stream cut before its end is refused)."""
        return not self.fill(1)


def _varint(src: _Plain | _Inflating) -> int:
    """A zig-zag signed varint (at most 10 bytes) within the record being read."""
    value = shift = 0
    for _ in range(10):
        if src.pos >= src.limit or (src.pos >= src.end and not src.fill(1)):
            raise KafkaDecodeError("truncated varint in a record")
        byte = src.data[src.pos]
        src.pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1)
        shift += 7
    raise KafkaDecodeError("varint longer than 10 bytes")


def _take(src: _Plain | _Inflating, n: int) -> bytes:
    if src.pos + n > src.limit:
        raise KafkaDecodeError("record field runs past its record")
    if src.pos + n > src.end and not src.fill(n):
        raise KafkaDecodeError("record runs past its batch")
    out = bytes(src.data[src.pos : src.pos + n])
    src.pos += n
    return out


def _length(src: _Plain | _Inflating) -> int:
    n = _varint(src)
    if n < -1:
        raise KafkaDecodeError("negative record field length")
    return n


def _decode_record(src: _Plain | _Inflating, base_ts: int, max_event_size: int | None) -> Record:
    length = _varint(src)
    if length < 0:
        raise KafkaDecodeError("negative record length")
    limit = src.pos + length
    if limit > src.end and isinstance(src, _Plain):
        raise KafkaDecodeError("record length runs past its batch")
    src.limit = limit
    if src.pos >= limit or (src.pos >= src.end and not src.fill(1)):
        raise KafkaDecodeError("truncated record")
    src.pos += 1  # attributes (unused)
    ts_delta = _varint(src)
    _varint(src)  # offset delta: offsets are assigned by the log
    key_length = _length(src)
    least = _MIN_EVENT_BYTES + max(key_length, 0)
    if max_event_size is not None and least > max_event_size:
        raise _too_large(least, max_event_size)
    key = None if key_length == -1 else _take(src, key_length)
    value_length = _length(src)
    least += max(value_length, 0)
    if max_event_size is not None and least > max_event_size:
        raise _too_large(least, max_event_size)
    value = None if value_length == -1 else _take(src, value_length)
    headers = []
    count = _varint(src)
    if count < 0 or count > src.limit - src.pos:
        raise KafkaDecodeError("bad record header count")
    for _ in range(count):
        name = _length(src)
        if name == -1:
            raise KafkaDecodeError("record header with a null key")
        try:
            text = _take(src, name).decode("utf-8")
        except UnicodeDecodeError:
            raise KafkaDecodeError("record header key is not UTF-8") from None
        size = _length(src)
        headers.append((text, None if size == -1 else _take(src, size)))
    if src.pos != limit:
        raise KafkaDecodeError("record has bytes after its headers")
    return Record(key, value, headers, base_ts + ts_delta)


def _too_large(least: int, limit: int) -> RecordTooLarge:
    return RecordTooLarge(
        f"a record of at least {least} bytes as an event exceeds the hub's limit of {limit} bytes"
    )


def _encode_varint(value: int) -> bytes:
    """A zig-zag signed varint's bytes."""
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL_VARINTS = [_encode_varint(n) for n in range(-1, 1 << 14)]  # index n + 1: record lengths and deltas


def varint(value: int) -> bytes:
    """A zig-zag signed varint's bytes (the small ones from a table: one per record field)."""
    return _SMALL_VARINTS[value + 1] if -1 <= value < (1 << 14) - 1 else _encode_varint(value)


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
        head = b"\x00\x00" + (small[delta + 1] if delta < (1 << 14) - 1 else _encode_varint(delta))
        n = len(head) + len(tail)
        parts.append(small[n + 1] if n < (1 << 14) - 1 else _encode_varint(n))
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
