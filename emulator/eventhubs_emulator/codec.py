"""A small AMQP 1.0 type codec (encode, decode, skip) written for this emulator.

Why our own: the SDK's decoder reads performative fields by position, so the server must write every
field (explicit nulls); and the emulator needs to slice batch messages into their events without
decoding the bodies. Python values map to AMQP types as follows when encoding: ``None`` → null,
``bool`` → boolean, ``int`` → long, ``float`` → double, ``str`` → string, ``bytes`` → binary,
``list`` → list, ``dict`` → map, ``uuid.UUID`` → uuid. The wrapper classes below (``Symbol``,
``UInt``, ``ULong``, ``UByte``, ``UShort``, ``Timestamp``, ``Described``, ``SymbolArray``) pick the
other AMQP types. Decoding returns the same wrappers for symbols, timestamps and described values,
so a decoded value re-encodes to the same AMQP types (used to echo link filters).
"""

from __future__ import annotations

import struct
import uuid
from typing import Any


class AmqpDecodeError(ValueError):
    """Raised when bytes are not valid AMQP 1.0 encoded data."""


class Symbol(str):
    """An AMQP symbol (ASCII name), as opposed to an AMQP string."""

    __slots__ = ()


class UByte(int):
    """An AMQP ubyte."""

    __slots__ = ()


class UShort(int):
    """An AMQP ushort."""

    __slots__ = ()


class UInt(int):
    """An AMQP uint."""

    __slots__ = ()


class ULong(int):
    """An AMQP ulong."""

    __slots__ = ()


class Timestamp(int):
    """An AMQP timestamp: milliseconds since the Unix epoch."""

    __slots__ = ()


class SymbolArray(list):
    """An AMQP array of symbols (how capability and mechanism lists are sent)."""

    __slots__ = ()


class Described:
    """An AMQP described value: a descriptor (ulong code or symbol) and the value it describes."""

    __slots__ = ("descriptor", "value")

    def __init__(self, descriptor: Any, value: Any) -> None:
        self.descriptor = descriptor
        self.value = value

    def __repr__(self) -> str:
        return f"Described({self.descriptor!r}, {self.value!r})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Described) and self.descriptor == other.descriptor and self.value == other.value
        )


_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
_F32 = struct.Struct(">f")
_F64 = struct.Struct(">d")
_B_U32 = struct.Struct(">BI")
_B_U64 = struct.Struct(">BQ")
_B_I64 = struct.Struct(">Bq")


# ---------------------------------------------------------------------------------------------- encoding


def encode(value: Any) -> bytes:
    """Encode one value to AMQP bytes."""
    out = bytearray()
    encode_into(out, value)
    return bytes(out)


def _encode_variable(out: bytearray, small: int, large: int, data: bytes) -> None:
    n = len(data)
    if n < 256:
        out.append(small)
        out.append(n)
    else:
        out += _B_U32.pack(large, n)
    out += data


def _encode_compound(out: bytearray, small: int, large: int, count: int, body: bytes) -> None:
    if len(body) + 1 < 256 and count < 256:
        out.append(small)
        out.append(len(body) + 1)
        out.append(count)
    else:
        out += _B_U32.pack(large, len(body) + 4)
        out += _U32.pack(count)
    out += body


def encode_into(out: bytearray, value: Any) -> None:
    """Append the AMQP encoding of ``value`` to ``out``."""
    if value is None:
        out.append(0x40)
    elif value is True:
        out.append(0x41)
    elif value is False:
        out.append(0x42)
    elif isinstance(value, Described):
        out.append(0x00)
        d = value.descriptor
        if isinstance(d, int) and not isinstance(d, bool):
            encode_into(out, ULong(d))
        else:
            encode_into(out, Symbol(d))
        encode_into(out, value.value)
    elif isinstance(value, int):
        cls = type(value)
        if cls is UInt:
            if value == 0:
                out.append(0x43)
            elif value < 256:
                out.append(0x52)
                out.append(value)
            else:
                out += _B_U32.pack(0x70, value)
        elif cls is ULong:
            if value == 0:
                out.append(0x44)
            elif value < 256:
                out.append(0x53)
                out.append(value)
            else:
                out += _B_U64.pack(0x80, value)
        elif cls is Timestamp:
            out += _B_I64.pack(0x83, value)
        elif cls is UByte:
            out.append(0x50)
            out.append(value)
        elif cls is UShort:
            out.append(0x60)
            out += _U16.pack(value)
        elif -128 <= value <= 127:
            out.append(0x55)
            out += struct.pack(">b", value)
        else:
            out += _B_I64.pack(0x81, value)
    elif isinstance(value, Symbol):
        _encode_variable(out, 0xA3, 0xB3, value.encode("ascii"))
    elif isinstance(value, str):
        _encode_variable(out, 0xA1, 0xB1, value.encode("utf-8"))
    elif isinstance(value, (bytes, bytearray, memoryview)):
        _encode_variable(out, 0xA0, 0xB0, bytes(value))
    elif isinstance(value, float):
        out.append(0x82)
        out += _F64.pack(value)
    elif isinstance(value, uuid.UUID):
        out.append(0x98)
        out += value.bytes
    elif isinstance(value, SymbolArray):
        _encode_symbol_array(out, value)
    elif isinstance(value, (list, tuple)):
        if not value:
            out.append(0x45)
            return
        body = bytearray()
        for item in value:
            encode_into(body, item)
        _encode_compound(out, 0xC0, 0xD0, len(value), bytes(body))
    elif isinstance(value, dict):
        body = bytearray()
        for k, v in value.items():
            encode_into(body, k)
            encode_into(body, v)
        _encode_compound(out, 0xC1, 0xD1, len(value) * 2, bytes(body))
    else:
        raise TypeError(f"cannot encode {type(value).__name__} as AMQP")


def _encode_symbol_array(out: bytearray, items: list) -> None:
    body = bytearray()
    raw = [str(s).encode("ascii") for s in items]
    if all(len(r) < 256 for r in raw):
        body.append(0xA3)
        for r in raw:
            body.append(len(r))
            body += r
    else:
        body.append(0xB3)
        for r in raw:
            body += _U32.pack(len(r))
            body += r
    _encode_compound(out, 0xE0, 0xF0, len(items), bytes(body))


# ---------------------------------------------------------------------------------------------- decoding

# Fixed widths of the value after the constructor byte, for constructors without a size prefix.
_FIXED_WIDTH: dict[int, int] = {
    0x40: 0, 0x41: 0, 0x42: 0, 0x43: 0, 0x44: 0, 0x45: 0,
    0x50: 1, 0x51: 1, 0x52: 1, 0x53: 1, 0x54: 1, 0x55: 1, 0x56: 1,
    0x60: 2, 0x61: 2,
    0x70: 4, 0x71: 4, 0x72: 4, 0x73: 4, 0x74: 4,
    0x80: 8, 0x81: 8, 0x82: 8, 0x83: 8, 0x84: 8,
    0x94: 16, 0x98: 16,
}  # fmt: skip


def skip(buf: bytes | memoryview, pos: int) -> int:
    """Return the position just after the encoded value starting at ``pos`` (without decoding it)."""
    try:
        code = buf[pos]
        pos += 1
        if code == 0x00:
            pos = skip(buf, pos)
            return skip(buf, pos)
        width = _FIXED_WIDTH.get(code)
        if width is not None:
            end = pos + width
        elif code & 0xF0 in (0xA0, 0xC0, 0xE0):
            end = pos + 1 + buf[pos]
        elif code & 0xF0 in (0xB0, 0xD0, 0xF0):
            end = pos + 4 + _U32.unpack_from(buf, pos)[0]
        else:
            raise AmqpDecodeError(f"unknown AMQP constructor 0x{code:02x}")
    except (IndexError, struct.error) as exc:
        raise AmqpDecodeError("truncated AMQP value") from exc
    if end > len(buf):
        raise AmqpDecodeError("truncated AMQP value")
    return end


def decode(buf: bytes | memoryview, pos: int = 0) -> tuple[Any, int]:
    """Decode the value starting at ``pos``; return it and the position just after it."""
    try:
        return _decode(buf, pos)
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise AmqpDecodeError(f"malformed AMQP value: {exc}") from exc


def _decode_elements(buf: bytes | memoryview, pos: int, count: int, end: int) -> tuple[list, int]:
    items = []
    for _ in range(count):
        item, pos = _decode(buf, pos)
        items.append(item)
    if pos > end:
        raise AmqpDecodeError("compound value longer than its size")
    return items, end


def _decode(buf: bytes | memoryview, pos: int) -> tuple[Any, int]:
    code = buf[pos]
    pos += 1
    if code == 0x00:
        descriptor, pos = _decode(buf, pos)
        value, pos = _decode(buf, pos)
        return Described(descriptor, value), pos
    if code == 0x40:
        return None, pos
    if code == 0x41:
        return True, pos
    if code == 0x42:
        return False, pos
    if code == 0x56:
        return buf[pos] != 0, pos + 1
    if code in (0x43, 0x44):
        return (UInt(0) if code == 0x43 else ULong(0)), pos
    if code == 0x45:
        return [], pos
    if code == 0x50:
        return UByte(buf[pos]), pos + 1
    if code == 0x51 or code == 0x54 or code == 0x55:
        v = buf[pos]
        return (v - 256 if v > 127 else v), pos + 1
    if code == 0x52:
        return UInt(buf[pos]), pos + 1
    if code == 0x53:
        return ULong(buf[pos]), pos + 1
    if code == 0x60:
        return UShort(_U16.unpack_from(buf, pos)[0]), pos + 2
    if code == 0x61:
        return struct.unpack_from(">h", buf, pos)[0], pos + 2
    if code == 0x70:
        return UInt(_U32.unpack_from(buf, pos)[0]), pos + 4
    if code == 0x71:
        return _I32.unpack_from(buf, pos)[0], pos + 4
    if code == 0x72:
        return _F32.unpack_from(buf, pos)[0], pos + 4
    if code == 0x73:
        return chr(_U32.unpack_from(buf, pos)[0]), pos + 4
    if code == 0x80:
        return ULong(_U64.unpack_from(buf, pos)[0]), pos + 8
    if code == 0x81:
        return _I64.unpack_from(buf, pos)[0], pos + 8
    if code == 0x82:
        return _F64.unpack_from(buf, pos)[0], pos + 8
    if code == 0x83:
        return Timestamp(_I64.unpack_from(buf, pos)[0]), pos + 8
    if code == 0x98:
        if pos + 16 > len(buf):
            raise AmqpDecodeError("truncated uuid")
        return uuid.UUID(bytes=bytes(buf[pos : pos + 16])), pos + 16
    if code in (0x74, 0x84, 0x94):  # decimals: keep the raw bytes
        width = _FIXED_WIDTH[code]
        return bytes(buf[pos : pos + width]), pos + width
    if code in (0xA0, 0xA1, 0xA3, 0xB0, 0xB1, 0xB3):
        if code & 0xF0 == 0xA0:
            n = buf[pos]
            pos += 1
        else:
            n = _U32.unpack_from(buf, pos)[0]
            pos += 4
        end = pos + n
        if end > len(buf):
            raise AmqpDecodeError("truncated string or binary")
        raw = bytes(buf[pos:end])
        low = code & 0x0F
        if low == 0:
            return raw, end
        if low == 1:
            return raw.decode("utf-8"), end
        return Symbol(raw.decode("ascii")), end
    if code in (0xC0, 0xC1, 0xD0, 0xD1):
        if code & 0xF0 == 0xC0:
            size, count = buf[pos], buf[pos + 1]
            end = pos + 1 + size
            pos += 2
        else:
            size, count = _U32.unpack_from(buf, pos)[0], _U32.unpack_from(buf, pos + 4)[0]
            end = pos + 4 + size
            pos += 8
        if end > len(buf):
            raise AmqpDecodeError("truncated list or map")
        items, pos = _decode_elements(buf, pos, count, end)
        if code & 0x0F == 0:
            return items, pos
        if count % 2:
            raise AmqpDecodeError("map with an odd number of elements")
        return {_hashable(items[i]): items[i + 1] for i in range(0, count, 2)}, pos
    if code in (0xE0, 0xF0):
        if code == 0xE0:
            size, count = buf[pos], buf[pos + 1]
            end = pos + 1 + size
            pos += 2
        else:
            size, count = _U32.unpack_from(buf, pos)[0], _U32.unpack_from(buf, pos + 4)[0]
            end = pos + 4 + size
            pos += 8
        if end > len(buf):
            raise AmqpDecodeError("truncated array")
        return _decode_array(buf, pos, count, end), end
    raise AmqpDecodeError(f"unknown AMQP constructor 0x{code:02x}")


def _decode_array(buf: bytes | memoryview, pos: int, count: int, end: int) -> list:
    if count == 0:
        return SymbolArray()
    element = buf[pos]
    pos += 1
    items: list = SymbolArray() if element in (0xA3, 0xB3) else []
    # Array elements are encoded without their own constructor: decode each from a copy of the tail
    # prefixed with the shared constructor. Arrays are rare and short here (capabilities, mechanisms).
    tail = bytes(buf[pos:end])
    off = 0
    for _ in range(count):
        value, used = _decode(bytes([element]) + tail[off:], 0)
        off += used - 1
        items.append(value)
    return items


def _hashable(key: Any) -> Any:
    if isinstance(key, list):
        return tuple(key)
    if isinstance(key, dict):
        return tuple(key.items())
    return key
