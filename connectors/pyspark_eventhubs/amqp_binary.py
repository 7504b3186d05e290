"""Tell AMQP *binary* application-property values from strings, which the SDK's decoder cannot.

azure-eventhub's pyamqp decodes AMQP ``binary``, ``string`` and ``symbol`` alike to ``bytes``. The
Scala connector (proton-j) sees the difference and writes them differently into the
``properties`` column: a string as itself, a binary value as the JSON array of its (signed) bytes
— ``[104,105]``. To write the same, each received message's encoded bytes are scanned once for
its application-properties section, and the values encoded as binary are re-wrapped as
:class:`AmqpBinary` (a ``bytes`` subclass, so nothing else changes).

The scan only reads type codes and lengths: every AMQP type code tells its own width (high
nibble 0x4 to 0x9: fixed 0 to 16 bytes; 0xa to 0xf: a 1- or 4-byte size, then that many bytes), so
sections before the properties are skipped without decoding them. A message whose properties
lie beyond the first transfer frame (a message larger than a frame) keeps its values untagged.
"""

from __future__ import annotations

import struct
from typing import Any

_APPLICATION_PROPERTIES = 0x74
_BINARY_CODES = (0xA0, 0xB0)
_UINT = struct.Struct(">I")


class AmqpBinary(bytes):
    """An application-property value that was AMQP ``binary`` on the wire."""


def _skip(buf: memoryview, pos: int) -> int:
    """The position after the encoded value at ``pos``."""
    code = buf[pos]
    pos += 1
    if code == 0x00:  # described: descriptor, then value
        return _skip(buf, _skip(buf, pos))
    high = code >> 4
    if high <= 0x9:
        return pos + (0, 1, 2, 4, 8, 16)[high - 4]
    if high in (0xA, 0xC, 0xE):
        return pos + 1 + buf[pos]
    return pos + 4 + _UINT.unpack_from(buf, pos)[0]


def binary_property_keys(payload: Any) -> set[bytes]:
    """Keys of the application properties encoded as AMQP binary in a message's bytes.

    Returns an empty set when the message has none or cannot be scanned (truncated, odd).
    """
    buf = memoryview(payload)
    pos = 0
    try:
        while pos < len(buf):
            if buf[pos] != 0x00 or buf[pos + 1] != 0x53:  # sections are smallulong-described
                return set()
            descriptor = buf[pos + 2]
            if descriptor != _APPLICATION_PROPERTIES:
                pos = _skip(buf, pos)
                continue
            pos += 3
            code = buf[pos]
            if code == 0xC1:
                count, pos = buf[pos + 2], pos + 3
            elif code == 0xD1:
                count, pos = _UINT.unpack_from(buf, pos + 5)[0], pos + 9
            else:
                return set()
            found: set[bytes] = set()
            for _ in range(count // 2):
                key_code = buf[pos]
                key_end = _skip(buf, pos)
                key_start = pos + (2 if key_code >> 4 == 0xA else 5)
                key = bytes(buf[key_start:key_end])
                if buf[key_end] in _BINARY_CODES:
                    found.add(key)
                pos = _skip(buf, key_end)
            return found
    except (IndexError, struct.error):
        return set()
    return set()


def tag_binary_properties(payload: Any, message: Any) -> None:
    """Re-wrap the binary-encoded application-property values of ``message`` as AmqpBinary."""
    props = message.application_properties
    if not props or not any(type(v) is bytes for v in props.values()):
        return
    for key in binary_property_keys(payload):
        value = props.get(key)
        if type(value) is bytes:
            props[key] = AmqpBinary(value)
