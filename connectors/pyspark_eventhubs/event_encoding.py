"""One event's AMQP message, encoded straight into the sink's ``EventDataBatch``.

``EventDataBatch.add`` builds an ``EventData``, an ``AmqpAnnotatedMessage`` and a ``Message`` per
event and encodes the message twice (once to measure it, once to keep it): about 28 µs an event,
most of a micro-batch's packing (docs/benchmarks.md). The sink's events are all alike (a body, and
string application properties), so :func:`encode_event` writes their two sections directly (AMQP
1.0 part 3: the ``application-properties`` map, then one ``data`` section) and :func:`add_encoded`
puts the bytes where ``add`` would, under the same size rule. The bytes are the SDK's own for
``EventData(body)`` with those properties, byte for byte (``tests/connector/test_event_encoding.py``
compares them).

Used only where the SDK would add nothing else to the message: not for partition-key batches (the
SDK stamps each message with the key), nor when azure-core tracing is configured (the SDK stamps
each message with a trace id and links the batch's events to its span). Runs in executor Python
workers.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

_DATA = b"\x00\x53\x75"  # described by ulong 0x75: amqp:data:binary
_APPLICATION_PROPERTIES = b"\x00\x53\x74"  # described by ulong 0x74: amqp:application-properties:map
_U8 = struct.Struct(">B").pack
_U32 = struct.Struct(">L").pack
# What ``EventDataBatch.add`` counts per message beside its own bytes: the binary that wraps it in
# the batch's data section, 5 bytes below 256 bytes of message, 8 from there on.
_SMALL_OVERHEAD, _LARGE_OVERHEAD = 5, 8


def _variable(small: int, large: int, value: bytes) -> bytes:
    """A string or binary value, in its smallest width (as the SDK encodes them)."""
    if len(value) <= 255:
        return bytes((small, len(value))) + value
    return bytes((large,)) + _U32(len(value)) + value


def _string(value: str) -> bytes:
    return _variable(0xA1, 0xB1, value.encode("utf-8"))


def encode_event(body: bytes | str, properties: Mapping[str, str] | None = None) -> bytes:
    """The message of one event: its string ``properties`` (if any), then ``body`` (a str as UTF-8)."""
    data = body.encode("utf-8") if isinstance(body, str) else bytes(body)
    head = b""
    if properties:
        entries = b"".join(_string(key) + _string(value) for key, value in properties.items())
        count = 2 * len(properties)
        if count <= 255 and len(entries) < 255:
            head = _APPLICATION_PROPERTIES + b"\xc1" + _U8(len(entries) + 1) + _U8(count) + entries
        else:
            head = _APPLICATION_PROPERTIES + b"\xd1" + _U32(len(entries) + 4) + _U32(count) + entries
    return head + _DATA + _variable(0xA0, 0xB0, data)


def add_encoded(batch: Any, message: bytes) -> bool:
    """Put an encoded message into ``batch`` (an ``EventDataBatch``) as ``add`` would; False, with
    the batch unchanged, when it would exceed the batch's maximum size."""
    size = batch._size + len(message) + (_SMALL_OVERHEAD if len(message) < 256 else _LARGE_OVERHEAD)
    if size > batch.max_size_in_bytes:
        return False
    batch._message[5].append(message)
    batch._size = size
    batch._count += 1
    return True


def direct_encoding(batch: Any) -> bool:
    """Whether events may go into ``batch`` through :func:`add_encoded`: a batch of the SDK's pure
    Python AMQP stack, with no partition key, and no azure-core tracing configured."""
    from azure.core.settings import settings
    from azure.eventhub._transport._pyamqp_transport import PyamqpTransport

    return (
        batch._amqp_transport is PyamqpTransport
        and not batch._partition_key
        and settings.tracing_implementation() is None
    )
