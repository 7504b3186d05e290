"""The read schema (same columns as azure-event-hubs-spark) and SDK events → Arrow record batches.

``read()`` yields ``pyarrow.RecordBatch`` objects; Spark checks that their schema *equals* its own
Arrow form of the read schema (UTC timestamps, int64, map<string,string> with its field names),
so the Arrow schema is derived from the Spark schema with PySpark's own converter.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import pyarrow as pa
from pyspark.sql.types import (
    BinaryType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

EVENTHUBS_SCHEMA = StructType(
    [
        StructField("body", BinaryType()),
        StructField("partition", StringType()),
        StructField("offset", StringType()),
        StructField("sequenceNumber", LongType()),
        StructField("enqueuedTime", TimestampType()),
        StructField("publisher", StringType()),
        StructField("partitionKey", StringType()),
        StructField("properties", MapType(StringType(), StringType())),
        StructField("systemProperties", MapType(StringType(), StringType())),
    ]
)

# Annotations that already have their own column; left out of systemProperties (as in Scala).
_OWN_COLUMN_ANNOTATIONS = {b"x-opt-offset", b"x-opt-sequence-number", b"x-opt-enqueued-time"}
_PUBLISHER = b"x-opt-publisher"
_PARTITION_KEY = b"x-opt-partition-key"
_OFFSET = b"x-opt-offset"
_SEQUENCE_NUMBER = b"x-opt-sequence-number"
_ENQUEUED_TIME = b"x-opt-enqueued-time"
# AMQP message properties that the SDK lists among an event's system properties.
_MESSAGE_PROPERTY_KEYS = (
    (b"message-id", "message_id"),
    (b"user-id", "user_id"),
    (b"to", "to"),
    (b"subject", "subject"),
    (b"reply-to", "reply_to"),
    (b"correlation-id", "correlation_id"),
    (b"content-type", "content_type"),
    (b"content-encoding", "content_encoding"),
    (b"absolute-expiry-time", "absolute_expiry_time"),
    (b"creation-time", "creation_time"),
    (b"group-id", "group_id"),
    (b"group-sequence", "group_sequence"),
    (b"reply-to-group-id", "reply_to_group_id"),
)


@lru_cache(maxsize=1)
def arrow_schema() -> pa.Schema:
    """Spark's own Arrow form of :data:`EVENTHUBS_SCHEMA` (what ``read()`` must match)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(EVENTHUBS_SCHEMA, timezone="UTC")


def _text(value: Any) -> str | None:
    """A property value as Spark's map<string,string> holds it: strings as-is, else JSON."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return json.dumps(list(value))
    if isinstance(value, (bool, int, float)):
        return json.dumps(value)
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(_jsonable(value), default=str)
    return str(value)


def _jsonable(value: Any) -> Any:
    """Lists and maps as JSON can hold them: AMQP strings (``bytes`` from the SDK) as text."""
    if isinstance(value, bytes):
        return _text(value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {_key(k) if isinstance(k, bytes) else k: _jsonable(v) for k, v in value.items()}
    return value


def _key(key: Any) -> str:
    return key.decode("utf-8") if isinstance(key, bytes) else str(key)


def _body_bytes(message: Any) -> bytes:
    data = getattr(message, "data", None)
    if data is not None:
        if isinstance(data, (bytes, bytearray)):
            return bytes(data)
        return b"".join(data)
    value = getattr(message, "value", None)
    if value is None:
        sequence = getattr(message, "sequence", None)
        return json.dumps(_jsonable(sequence), default=str).encode() if sequence is not None else b""
    if isinstance(value, bytes):
        return value
    return (
        value.encode("utf-8")
        if isinstance(value, str)
        else json.dumps(_jsonable(value), default=str).encode()
    )


def _properties(app_props: Mapping | None) -> list[tuple[str, str | None]] | None:
    if not app_props:
        return []
    return [(_key(k), _text(v)) for k, v in app_props.items()]


def property_entries(props: Any) -> list[tuple[str, str | None]]:
    """systemProperties entries from an AMQP properties section (pyamqp ``Properties``): set fields only."""
    result: list[tuple[str, str | None]] = []
    if props is not None:
        for key, attr in _MESSAGE_PROPERTY_KEYS:
            value = getattr(props, attr, None)
            if value:
                result.append((key.decode(), _text(value)))
    return result


def _system_properties(message: Any, annotations: Mapping) -> list[tuple[str, str | None]]:
    result = property_entries(getattr(message, "properties", None))
    for key, value in annotations.items():
        if key not in _OWN_COLUMN_ANNOTATIONS:
            result.append((_key(key), _text(value)))
    return result


def message_row(message: Any) -> tuple:
    """One received AMQP message (pyamqp ``Message``) as the read schema's values, minus ``partition``.

    The one place that says how an event's AMQP parts become column values; the fast read path
    (``delivery_decoder``) falls back to it for messages it does not decode itself.
    """
    ann = message.message_annotations or {}
    offset = ann.get(_OFFSET)
    enqueued = ann.get(_ENQUEUED_TIME)
    return (
        _body_bytes(message),
        offset.decode() if isinstance(offset, bytes) else _text(offset),
        ann.get(_SEQUENCE_NUMBER),
        None if enqueued is None else int(enqueued) * 1000,
        _text(ann.get(_PUBLISHER)),
        _text(ann.get(_PARTITION_KEY)),
        _properties(message.application_properties),
        _system_properties(message, ann),
    )


def messages_to_record_batch(partition_id: str, messages: Sequence[Any]) -> pa.RecordBatch:
    """Build one record batch from received AMQP messages (pyamqp ``Message`` objects).

    Working on the raw messages instead of ``EventData`` wrappers keeps the hot loop short; the
    fields read are the same ones ``EventData`` exposes.
    """
    rows = [message_row(message) for message in messages]
    bodies, offsets, seqs, times, publishers, keys, props, sysprops = (
        list(zip(*rows, strict=True)) or [()] * 8
    )
    schema = arrow_schema()
    count = len(messages)
    columns = [
        pa.array(bodies, type=schema.field("body").type),
        pa.array([partition_id] * count, type=schema.field("partition").type),
        pa.array(offsets, type=schema.field("offset").type),
        pa.array(seqs, type=pa.int64()),
        pa.array(times, type=pa.int64()).cast(schema.field("enqueuedTime").type),
        pa.array(publishers, type=schema.field("publisher").type),
        pa.array(keys, type=schema.field("partitionKey").type),
        pa.array(props, type=schema.field("properties").type),
        pa.array(sysprops, type=schema.field("systemProperties").type),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)
