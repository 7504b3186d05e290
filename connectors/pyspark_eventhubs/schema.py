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

from . import amqp_names
from .amqp_binary import AmqpBinary
from .arrow_columns import binary_column, int64_column, repeated_string, string_map_column

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


def _json(value: Any) -> str:
    """Compact JSON, as json4s (the Scala connector's serializer) writes it."""
    return json.dumps(value, separators=(",", ":"), default=str)


def _signed(data: bytes) -> list[int]:
    return [b - 256 if b > 127 else b for b in data]


def _text(value: Any) -> str | None:
    """A property value as the Scala connector puts it in a map<string,string>.

    Strings (and symbols) as they are; AMQP binary values (:class:`AmqpBinary`) as the JSON array
    of their signed bytes, e.g. ``[104,-1]``; anything else as compact JSON.
    """
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, AmqpBinary):
        return _json(_signed(value))
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return _json(_signed(value))
    if isinstance(value, (bool, int, float)):
        return _json(value)
    if isinstance(value, (list, tuple, dict)):
        return _json(_jsonable(value))
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
    if isinstance(value, str):
        return value.encode("utf-8")
    return json.dumps(_jsonable(value), default=str).encode()


def _properties(app_props: Mapping | None) -> list[tuple[str, str | None]]:
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
        if key not in amqp_names.OWN_COLUMN_ANNOTATIONS:
            result.append((_key(key), _text(value)))
    return result


def message_row(message: Any) -> tuple:
    """One received AMQP message (pyamqp ``Message``) as the read schema's values, minus ``partition``.

    The one place that says how an event's AMQP parts become column values; the fast read path
    (``delivery_decoder``) falls back to it for messages it does not decode itself.
    """
    ann = message.message_annotations or {}
    offset = ann.get(amqp_names.OFFSET)
    seq = ann.get(amqp_names.SEQUENCE_NUMBER)
    enqueued = ann.get(amqp_names.ENQUEUED_TIME)
    return (
        _body_bytes(message),
        offset.decode() if isinstance(offset, bytes) else _text(offset),
        None if seq is None else int(seq),
        None if enqueued is None else int(enqueued) * 1000,
        _text(ann.get(amqp_names.PUBLISHER)),
        _text(ann.get(amqp_names.PARTITION_KEY)),
        _properties(message.application_properties),
        _system_properties(message, ann),
    )


def messages_to_record_batch(partition_id: str, messages: Sequence[Any]) -> pa.RecordBatch:
    """Build one record batch from received AMQP messages (pyamqp ``Message`` objects).

    Working on the raw messages instead of ``EventData`` wrappers keeps the hot loop short; the
    fields read are the same ones ``EventData`` exposes. Columns are built from buffers
    (``arrow_columns.py``), which keeps pandas out of the worker.
    """
    rows = [message_row(message) for message in messages]
    bodies, offsets, seqs, times, publishers, keys, props, sysprops = (
        list(zip(*rows, strict=True)) or [()] * 8
    )
    schema = arrow_schema()
    count = len(messages)
    columns = [
        binary_column(bodies, schema.field("body").type),
        repeated_string(partition_id, count),
        binary_column(offsets, schema.field("offset").type),
        int64_column(seqs),
        int64_column(times, schema.field("enqueuedTime").type),  # microseconds, as the type says
        binary_column(publishers, schema.field("publisher").type),
        binary_column(keys, schema.field("partitionKey").type),
        string_map_column(props, schema.field("properties").type),
        string_map_column(sysprops, schema.field("systemProperties").type),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)
