"""Kafka record <-> stored event: the cross-protocol mapping.

An event is stored once, as the AMQP message a consumer receives (``store.PartitionLog``). A Kafka
record becomes a message with the value as one data section, each header as an application property
(binary value; the last one wins when a name repeats) and the key, when set, in the
``x-opt-kafka-key`` message annotation. Read back through Kafka, the value is the body (data sections
joined; an amqp-value's string or binary, otherwise its AMQP encoding), headers are the application
properties (strings as UTF-8, binary as is, other types in their AMQP encoding, null as a null
header), and the key is ``x-opt-kafka-key``, else the partition key as UTF-8, else null.
"""

from __future__ import annotations

import struct
from typing import Any

from ..codec import AmqpDecodeError, Described, Symbol, decode, encode, skip
from ..messages import (
    AMQP_VALUE,
    APPLICATION_PROPERTIES,
    DATA,
    MESSAGE_ANNOTATIONS,
    PARTITION_KEY,
    split_sections,
)
from .records import Record, encode_record_tail, varbytes, varint

KAFKA_KEY = Symbol("x-opt-kafka-key")


def record_to_message(record: Record) -> bytes:
    """The AMQP message (before the broker stamps it) for one produced Kafka record."""
    out = bytearray()
    if record.key is not None:
        out += encode(Described(MESSAGE_ANNOTATIONS, {KAFKA_KEY: record.key}))
    if record.headers:
        out += encode(Described(APPLICATION_PROPERTIES, dict(record.headers)))
    out += encode(Described(DATA, record.value if record.value is not None else b""))
    return bytes(out)


def _as_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return encode(value)


def message_to_record(message: bytes, enqueued_ms: int) -> Record:
    """The Kafka record a consumer fetches for one stored event."""
    view = memoryview(message)
    key: bytes | None = None
    partition_key: bytes | None = None
    headers: list[tuple[str, bytes | None]] = []
    body = bytearray()
    for s in split_sections(view):
        if s.code == MESSAGE_ANNOTATIONS:
            annotations = decode(view, s.value_start)[0]
            if isinstance(annotations, dict):
                key = _as_bytes(annotations.get(KAFKA_KEY))
                partition_key = _as_bytes(annotations.get(PARTITION_KEY))
        elif s.code == APPLICATION_PROPERTIES:
            props = decode(view, s.value_start)[0]
            if isinstance(props, dict):
                headers = [(str(k), _as_bytes(v)) for k, v in props.items()]
        elif s.code == DATA:
            body += decode(view, s.value_start)[0]
        elif s.code == AMQP_VALUE:
            value = decode(view, s.value_start)[0]
            body += _as_bytes(value) or b""
        elif s.code == 0x76:  # amqp-sequence: its encoding
            body += bytes(view[s.value_start : s.end])
    return Record(key if key is not None else partition_key, bytes(body), headers, enqueued_ms)


_U32 = struct.Struct(">I")
_KEY_NAMES = (b"x-opt-kafka-key", b"x-opt-partition-key")


class _Unusual(Exception):
    """The message has something :func:`record_tail` leaves to :func:`message_to_record`."""


def _header_value(message: bytes, pos: int) -> tuple[bytes, int]:
    """An application property's value as a Kafka header value (with its varint length), and the
    position after it."""
    code = message[pos]
    if code == 0xA1 or code == 0xA0:  # str8 (its UTF-8 bytes), vbin8
        end = pos + 2 + message[pos + 1]
        return varint(end - pos - 2) + message[pos + 2 : end], end
    if code == 0x40:
        return varbytes(None), pos + 1
    if code == 0xB1 or code == 0xB0:
        end = pos + 5 + _U32.unpack_from(message, pos + 1)[0]
        return varbytes(message[pos + 5 : end]), end
    value, end = decode(message, pos)  # other types: their AMQP encoding, as message_to_record
    return varbytes(_as_bytes(value)), end


def _headers(message: bytes, pos: int, end: int) -> list[bytes]:
    """The application-properties map at ``pos`` as encoded Kafka headers, in order."""
    code = message[pos]
    if code == 0xC1:
        p, count = pos + 3, message[pos + 2]
    elif code == 0xD1:
        p, count = pos + 9, _U32.unpack_from(message, pos + 5)[0]
    else:
        raise _Unusual
    if count % 2:
        raise _Unusual
    parts = [varint(count // 2)]
    names = set()
    for _ in range(count // 2):
        if message[p] != 0xA1:
            raise _Unusual  # a long or non-string name
        name_end = p + 2 + message[p + 1]
        name = message[p + 2 : name_end]
        names.add(name)
        value, p = _header_value(message, name_end)
        parts.append(varint(len(name)) + name)
        parts.append(value)
    if p != end or len(names) != count // 2:
        raise _Unusual  # a repeated name: message_to_record keeps the last value, at the first place
    return parts


def _fast_tail(message: bytes) -> bytes:
    key: bytes | None = None
    pos = 0
    body: list[bytes] = []
    headers = [varint(0)]  # no headers
    n = len(message)
    while pos < n:
        if message[pos] != 0x00 or message[pos + 1] != 0x53:
            raise _Unusual  # a symbolic descriptor
        code = message[pos + 2]
        pos += 3
        if code == 0x75:  # data
            kind = message[pos]
            if kind == 0xA0:
                end = pos + 2 + message[pos + 1]
                body.append(message[pos + 2 : end])
            elif kind == 0xB0:
                end = pos + 5 + _U32.unpack_from(message, pos + 1)[0]
                body.append(message[pos + 5 : end])
            else:
                raise _Unusual
            pos = end
        elif code == 0x74:  # application-properties
            end = skip(message, pos)
            headers = _headers(message, pos, end)
            pos = end
        elif code == 0x72:  # message annotations: decoded only when they may hold a key
            end = skip(message, pos)
            if message.find(_KEY_NAMES[0], pos, end) >= 0 or message.find(_KEY_NAMES[1], pos, end) >= 0:
                annotations = decode(message, pos)[0]
                if isinstance(annotations, dict):
                    kafka_key = _as_bytes(annotations.get(KAFKA_KEY))
                    key = kafka_key if kafka_key is not None else _as_bytes(annotations.get(PARTITION_KEY))
            pos = end
        elif code == 0x70 or code == 0x73 or code == 0x78:  # header, properties, footer: not in the record
            pos = skip(message, pos)
        else:
            raise _Unusual  # an amqp-value or amqp-sequence body, delivery annotations, unknown
    value = body[0] if len(body) == 1 else b"".join(body)
    return b"".join([varbytes(key), varint(len(value)), value, *headers])


def record_tail(message: bytes) -> bytes:
    """The Kafka record of one stored event, as :func:`records.encode_record_tail` bytes (key, value,
    headers): what :func:`message_to_record` maps, read straight from the bytes where it can be."""
    try:
        return _fast_tail(message)
    except (_Unusual, IndexError, struct.error, AmqpDecodeError):
        record = message_to_record(message, -1)
        return encode_record_tail(record.key, record.value, record.headers)
