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

from typing import Any

from ..codec import Described, Symbol, decode, encode
from ..messages import (
    AMQP_VALUE,
    APPLICATION_PROPERTIES,
    DATA,
    MESSAGE_ANNOTATIONS,
    PARTITION_KEY,
    split_sections,
)
from .records import Record

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
