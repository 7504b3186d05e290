"""A small AMQP 1.0 type codec (encode, decode, skip) written for this emulator.

Why our own: the SDK's decoder reads performative fields by position, so the server must write every
field (explicit nulls); and the emulator needs to slice batch messages into their events without
decoding the bodies. Python values map to AMQP types as follows when encoding: ``None`` → null,
``bool`` → boolean, ``int`` → long, ``float`` → double, ``str`` → string, ``bytes`` → binary,
``list`` → list, ``dict`` → map, ``uuid.UUID`` → uuid. The wrapper classes below (``Symbol``,
``Int``, ``UInt``, ``ULong``, ``UByte``, ``UShort``, ``Timestamp``, ``Described``, ``SymbolArray``,
``StringArray``) pick the other AMQP types. Decoding returns the same wrappers for symbols, timestamps
and described values, so a decoded value re-encodes to the same AMQP types (used to echo link filters).
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


class Int(int):
    """An AMQP int (32-bit): the service's type for ``status-code`` and ``partition_count``, which the
    Java SDK (proton-j) casts to ``Integer`` (a long there is a ClassCastException)."""

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


class StringArray(list):
    """An AMQP array of strings: the service's ``partition_ids``, which the Java SDK casts to ``String[]``."""

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
_I16 = struct.Struct(">h")
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
        elif cls is Int:
            if -128 <= value <= 127:
                out += struct.pack(">Bb", 0x54, value)
            else:
                out += struct.pack(">Bi", 0x71, value)
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
    elif isinstance(value, StringArray):
        _encode_symbol_array(out, value, small=0xA1, large=0xB1, encoding="utf-8")
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


def _encode_symbol_array(
    out: bytearray, items: list, small: int = 0xA3, large: int = 0xB3, encoding: str = "ascii"
) -> None:
    body = bytearray()
    raw = [str(s).encode(encoding) for s in items]
    if all(len(r) < 256 for r in raw):
        body.append(small)
        for r in raw:
            body.append(len(r))
            body += r
    else:
        body.append(large)
        for r in raw:
            body += _U32.pack(len(r))
            body += r
    _encode_compound(out, 0xE0, 0xF0, len(items), bytes(body))


# ---------------------------------------------------------------------------------------------- decoding
#
# Decoding reads its input once and in place (array elements too), and refuses hostile input before
# doing the work it declares: every size and element count is checked against the bytes that remain,
# a compound value must use exactly the bytes its size declares, an array's element constructor carries
# one descriptor at most, and the two things input bytes do not bound are capped below.

# Deepest nesting of lists, maps, arrays and described values: AMQP traffic nests fewer than ten levels,
# and the cap keeps the recursive decoder far from Python's recursion limit.
MAX_DEPTH = 64
# Most elements of zero-width types (null, true, false, uint0, ulong0, list0) in the arrays of one decoded
# value: they take no bytes, so without this a 10-byte array could declare 2^32 - 1 of them.
MAX_ZERO_WIDTH_ELEMENTS = 65536

# Fixed widths of the value after the constructor byte, for constructors without a size prefix.
_FIXED_WIDTH: dict[int, int] = {
    0x40: 0, 0x41: 0, 0x42: 0, 0x43: 0, 0x44: 0, 0x45: 0,
    0x50: 1, 0x51: 1, 0x52: 1, 0x53: 1, 0x54: 1, 0x55: 1, 0x56: 1,
    0x60: 2, 0x61: 2,
    0x70: 4, 0x71: 4, 0x72: 4, 0x73: 4, 0x74: 4,
    0x80: 8, 0x81: 8, 0x82: 8, 0x83: 8, 0x84: 8,
    0x94: 16, 0x98: 16,
}  # fmt: skip

# Fewest bytes a value of a sized type takes after its constructor (its size, and count if compound).
_MIN_SIZED_WIDTH: dict[int, int] = {
    0xA0: 1, 0xA1: 1, 0xA3: 1, 0xB0: 4, 0xB1: 4, 0xB3: 4,
    0xC0: 2, 0xC1: 2, 0xD0: 8, 0xD1: 8, 0xE0: 2, 0xF0: 8,
}  # fmt: skip

_LIST_OR_MAP = frozenset((0xC0, 0xC1, 0xD0, 0xD1))

_TYPE_NAMES = {0x40: "null", 0x41: "true", 0x42: "false", 0x43: "uint0", 0x44: "ulong0", 0x45: "list0"}

_UINT0 = UInt(0)
_ULONG0 = ULong(0)
# Every value of the one-byte encodings ubyte, smalluint and smallulong, made once (immutable: shared).
_UBYTES = tuple(UByte(i) for i in range(256))
_SMALL_UINTS = tuple(UInt(i) for i in range(256))
_SMALL_ULONGS = tuple(ULong(i) for i in range(256))
# The values of the constructors 0x40-0x44, which take no bytes after them (immutable: shared).
_ZERO_WIDTH_VALUES = (None, True, False, _UINT0, _ULONG0)


def _signed8(buf: Any, pos: int) -> int:
    v = buf[pos]
    return v - 256 if v > 127 else v


def _char(buf: Any, pos: int) -> str:
    code_point = _U32.unpack_from(buf, pos)[0]
    if code_point > 0x10FFFF:
        raise AmqpDecodeError(f"char 0x{code_point:x} is not a Unicode code point")
    return chr(code_point)


# How to read the value of each fixed-width type, given the buffer and the position after the constructor.
_READ_FIXED: dict[int, Any] = {
    0x40: lambda b, p: None,
    0x41: lambda b, p: True,
    0x42: lambda b, p: False,
    0x43: lambda b, p: _UINT0,
    0x44: lambda b, p: _ULONG0,
    0x45: lambda b, p: [],
    0x50: lambda b, p: _UBYTES[b[p]],
    0x51: _signed8,
    0x52: lambda b, p: _SMALL_UINTS[b[p]],
    0x53: lambda b, p: _SMALL_ULONGS[b[p]],
    0x54: _signed8,
    0x55: _signed8,
    0x56: lambda b, p: b[p] != 0,
    0x60: lambda b, p: UShort(_U16.unpack_from(b, p)[0]),
    0x61: lambda b, p: _I16.unpack_from(b, p)[0],
    0x70: lambda b, p: UInt(_U32.unpack_from(b, p)[0]),
    0x71: lambda b, p: _I32.unpack_from(b, p)[0],
    0x72: lambda b, p: _F32.unpack_from(b, p)[0],
    0x73: _char,
    0x74: lambda b, p: bytes(b[p : p + 4]),  # decimals: kept as their raw bytes
    0x80: lambda b, p: ULong(_U64.unpack_from(b, p)[0]),
    0x81: lambda b, p: _I64.unpack_from(b, p)[0],
    0x82: lambda b, p: _F64.unpack_from(b, p)[0],
    0x83: lambda b, p: Timestamp(_I64.unpack_from(b, p)[0]),
    0x84: lambda b, p: bytes(b[p : p + 8]),
    0x94: lambda b, p: bytes(b[p : p + 16]),
    0x98: lambda b, p: uuid.UUID(bytes=bytes(b[p : p + 16])),
}


def skip(buf: bytes | memoryview, pos: int) -> int:
    """Return the position just after the encoded value starting at ``pos`` (without decoding it)."""
    try:
        end = _skip(buf, pos, 0)
    except (IndexError, struct.error) as exc:
        raise AmqpDecodeError("truncated AMQP value") from exc
    if end > len(buf):
        raise AmqpDecodeError("truncated AMQP value")
    return end


def _skip(buf: bytes | memoryview, pos: int, depth: int) -> int:
    code = buf[pos]
    pos += 1
    while code == 0x00:  # described: skip the descriptor, then go on with the value's constructor
        depth = _deeper(depth)
        pos = _skip(buf, pos, depth)
        code = buf[pos]
        pos += 1
    width = _FIXED_WIDTH.get(code)
    if width is not None:
        return pos + width
    if code & 0xF0 in (0xA0, 0xC0, 0xE0):
        return pos + 1 + buf[pos]
    if code & 0xF0 in (0xB0, 0xD0, 0xF0):
        return pos + 4 + _U32.unpack_from(buf, pos)[0]
    raise AmqpDecodeError(f"unknown AMQP constructor 0x{code:02x}")


def decode(buf: bytes | memoryview, pos: int = 0) -> tuple[Any, int]:
    """Decode the value starting at ``pos``; return it and the position just after it.

    Raises AmqpDecodeError, and nothing else, for any input that is not a valid AMQP value.
    """
    try:
        return _Reader(buf).value(pos, len(buf), 0)
    except AmqpDecodeError:
        raise
    except (IndexError, struct.error, ValueError, RecursionError) as exc:  # ValueError: bad UTF-8/ASCII
        raise AmqpDecodeError(f"malformed AMQP value: {exc}") from exc


def _deeper(depth: int) -> int:
    if depth >= MAX_DEPTH:
        raise AmqpDecodeError(f"AMQP value nested deeper than {MAX_DEPTH} levels")
    return depth + 1


def _type_name(code: int) -> str:
    name = _TYPE_NAMES.get(code)
    return f"{name} (0x{code:02x})" if name else f"0x{code:02x}"


class _Reader:
    """The state of one decode call: the buffer, and what is left of the zero-width element allowance.

    Every method takes ``end``, the position its value must end by (the end of the enclosing compound
    value, or of the buffer), and ``depth``, the number of compound or described values around it.
    """

    __slots__ = ("buf", "zero_width_left")

    def __init__(self, buf: bytes | memoryview) -> None:
        self.buf = buf
        self.zero_width_left = MAX_ZERO_WIDTH_ELEMENTS

    def value(self, pos: int, end: int, depth: int) -> tuple[Any, int]:
        """Decode the value whose constructor is at ``pos``."""
        if pos >= end:
            raise AmqpDecodeError("truncated AMQP value")
        buf = self.buf
        code = buf[pos]
        if code == 0x00:
            depth = _deeper(depth)
            if pos + 3 <= end and buf[pos + 1] == 0x53:  # the usual descriptor: a smallulong code
                descriptor, pos = _SMALL_ULONGS[buf[pos + 2]], pos + 3
            else:
                descriptor, pos = self.value(pos + 1, end, depth)
            value, pos = self.value(pos, end, depth)
            return Described(descriptor, value), pos
        if code in _LIST_OR_MAP:
            return self._list_or_map(code, pos + 1, end, depth)
        return self.after_constructor(code, pos + 1, end, depth)

    def after_constructor(self, code: int, pos: int, end: int, depth: int) -> tuple[Any, int]:
        """Decode the value of the primitive type ``code`` whose bytes start at ``pos``.

        The constructor is read by the caller: an array's elements share one, written once.
        """
        buf = self.buf
        read = _READ_FIXED.get(code)
        if read is not None:
            after = pos + _FIXED_WIDTH[code]
            if after > end:
                raise AmqpDecodeError(f"truncated AMQP value of type 0x{code:02x}")
            return read(buf, pos), after
        if code in (0xA0, 0xA1, 0xA3, 0xB0, 0xB1, 0xB3):
            value_end, pos = self._size(code, pos, end, "string or binary")
            raw = bytes(buf[pos:value_end])
            low = code & 0x0F
            if low == 0:
                return raw, value_end
            if low == 1:
                return raw.decode("utf-8"), value_end
            return Symbol(raw.decode("ascii")), value_end
        if code in _LIST_OR_MAP:
            return self._list_or_map(code, pos, end, depth)
        if code in (0xE0, 0xF0):
            value_end, pos = self._size(code, pos, end, "array")
            count, pos = self._count(code, pos, value_end, "array")
            depth = _deeper(depth)
            if count == 0:
                if pos < value_end:  # the SDK leaves out an empty array's element constructor
                    _described, _descriptor, _element, pos = self._element_constructor(pos, value_end, depth)
                self._all_used("array", 0, pos, value_end)
                return SymbolArray(), value_end
            return self._array(pos, value_end, count, depth), value_end
        raise AmqpDecodeError(f"unknown AMQP constructor 0x{code:02x}")

    def _size(self, code: int, pos: int, end: int, what: str) -> tuple[int, int]:
        """Read the 1-byte (0xA_, 0xC_, 0xE_) or 4-byte size at ``pos``: (value end, position after)."""
        if code & 0x10:
            if pos + 4 > end:
                raise AmqpDecodeError(f"truncated {what} size")
            size = _U32.unpack_from(self.buf, pos)[0]
            pos += 4
        else:
            if pos >= end:
                raise AmqpDecodeError(f"truncated {what} size")
            size = self.buf[pos]
            pos += 1
        if size > end - pos:
            raise AmqpDecodeError(f"{what} declares {size} bytes where {end - pos} remain")
        return pos + size, pos

    def _count(self, code: int, pos: int, value_end: int, what: str) -> tuple[int, int]:
        """Read the 1-byte or 4-byte element count that starts a compound value's bytes."""
        if code & 0x10:
            if pos + 4 > value_end:
                raise AmqpDecodeError(f"{what} of {value_end - pos} bytes has no room for its count")
            return _U32.unpack_from(self.buf, pos)[0], pos + 4
        if pos >= value_end:
            raise AmqpDecodeError(f"{what} of 0 bytes has no room for its count")
        return self.buf[pos], pos + 1

    @staticmethod
    def _all_used(what: str, count: int, pos: int, value_end: int) -> None:
        if pos != value_end:
            raise AmqpDecodeError(
                f"{what} of {count} elements leaves {value_end - pos} of its declared bytes unused"
            )

    def _list_or_map(self, code: int, pos: int, end: int, depth: int) -> tuple[Any, int]:
        what = "map" if code & 0x01 else "list"
        buf = self.buf
        size = buf[pos] if pos < end and not code & 0x10 else 0
        if 0 < size < end - pos:  # a one-byte size and count, in bounds (else their reads and errors)
            value_end, count, pos = pos + 1 + size, buf[pos + 1], pos + 2
        else:
            value_end, pos = self._size(code, pos, end, what)
            count, pos = self._count(code, pos, value_end, what)
        if count > value_end - pos:  # every element takes at least its constructor byte
            raise AmqpDecodeError(f"{what} declares {count} elements in {value_end - pos} bytes")
        if what == "map" and count % 2:
            raise AmqpDecodeError(f"map with an odd number of elements ({count})")
        depth = _deeper(depth)
        items: list = []
        append = items.append
        value = self.value
        for _ in range(count):
            # Most performative fields are nulls, booleans and small integers: read those here (the
            # same reads and bounds as ``value``) and leave the rest, and any error, to ``value``.
            code = buf[pos] if pos < value_end else -1
            if 0x40 <= code <= 0x44:  # null, true, false, uint0, ulong0: no bytes after the constructor
                append(_ZERO_WIDTH_VALUES[code - 0x40])
                pos += 1
                continue
            width = _FIXED_WIDTH.get(code)
            if width and pos + 1 + width <= value_end:
                append(_READ_FIXED[code](buf, pos + 1))
                pos += 1 + width
            else:
                item, pos = value(pos, value_end, depth)
                append(item)
        if pos != value_end:
            self._all_used(what, count, pos, value_end)
        if what == "list":
            return items, pos
        try:
            return {_hashable(items[i]): items[i + 1] for i in range(0, count, 2)}, pos
        except TypeError as exc:  # a described key (or one holding a described value): not hashable
            raise AmqpDecodeError("map key is or holds a described value, which is not supported") from exc

    def _element_constructor(self, pos: int, end: int, depth: int) -> tuple[bool, Any, int, int]:
        """Read an array's element constructor: (described, descriptor, primitive code, position after).

        One descriptor at most: nested ones (which the grammar allows and no peer sends) would let each
        input byte make up to MAX_DEPTH objects.
        """
        if pos >= end:
            raise AmqpDecodeError("truncated array element constructor")
        code = self.buf[pos]
        if code != 0x00:
            return False, None, code, pos + 1
        descriptor, pos = self.value(pos + 1, end, _deeper(depth))
        if pos >= end:
            raise AmqpDecodeError("truncated array element constructor")
        code = self.buf[pos]
        if code == 0x00:
            raise AmqpDecodeError("array element constructor with more than one descriptor")
        return True, descriptor, code, pos + 1

    def _array(self, pos: int, end: int, count: int, depth: int) -> list:
        """Decode ``count`` elements sharing the constructor at ``pos``, filling the bytes up to ``end``."""
        described, descriptor, element, pos = self._element_constructor(pos, end, depth)
        width = _FIXED_WIDTH.get(element)
        if width is None:
            width = _MIN_SIZED_WIDTH.get(element)
            if width is None:
                raise AmqpDecodeError(f"unknown AMQP constructor 0x{element:02x} in an array")
        if width == 0:
            if count > self.zero_width_left:
                raise AmqpDecodeError(
                    f"array declares {count} elements of the zero-width type {_type_name(element)}, "
                    f"more than the {self.zero_width_left} left of the {MAX_ZERO_WIDTH_ELEMENTS} "
                    "one value may hold"
                )
            self.zero_width_left -= count
            self._all_used("array", count, pos, end)
            if element == 0x45:
                items: list = [[] for _ in range(count)]
            else:
                items = [_READ_FIXED[element](self.buf, pos)] * count  # immutable: one object shared
        elif count > (end - pos) // width:
            raise AmqpDecodeError(
                f"array declares {count} elements of type 0x{element:02x} in {end - pos} bytes"
            )
        elif element in _READ_FIXED:
            read = _READ_FIXED[element]
            buf = self.buf
            after = pos + count * width
            self._all_used("array", count, after, end)
            items = [read(buf, p) for p in range(pos, after, width)]
        else:
            items = []
            after_constructor = self.after_constructor
            for _ in range(count):
                item, pos = after_constructor(element, pos, end, depth)
                items.append(item)
            self._all_used("array", count, pos, end)
        if described:
            return [Described(descriptor, item) for item in items]
        if element in (0xA3, 0xB3):
            return SymbolArray(items)
        return items


def _hashable(key: Any) -> Any:
    """A decoded map key as a dict key: lists and maps become tuples."""
    if isinstance(key, list):
        return tuple(_hashable(k) for k in key)
    if isinstance(key, dict):
        return tuple((_hashable(k), _hashable(v)) for k, v in key.items())
    return key
