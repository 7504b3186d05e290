"""Kafka wire encoding: big-endian integers, varints, classic and compact (flexible-version) strings,
bytes and arrays, tagged fields, and a small schema-driven reader and writer for whole messages.

A schema is a tuple of :class:`Field`; each field exists in a version range, may be nullable from a
version on, and an array field either holds structs (``fields``) or a primitive (``item``). In
flexible versions strings, bytes and arrays are compact (unsigned varint length + 1, 0 = null) and
every struct ends with tagged fields, which the reader skips and the writer leaves empty.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any


class KafkaDecodeError(ValueError):
    """The bytes are not a well-formed Kafka message (truncated, negative lengths, bad varint)."""


_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_FIXED = {"int8": _I8, "int16": _I16, "int32": _I32, "int64": _I64, "uint32": _U32}


@dataclass(frozen=True)
class Field:
    """One field of a request or response schema."""

    name: str
    type: str  # int8/int16/int32/int64/bool/string/bytes/records/uuid/array
    versions: tuple[int, int] = (0, 99)
    nullable_from: int | None = None
    fields: tuple[Field, ...] = ()  # an array of structs
    item: str | None = None  # an array of a primitive type
    default: Any = None

    def present(self, version: int) -> bool:
        """Whether the field is on the wire in ``version``."""
        return self.versions[0] <= version <= self.versions[1]


class Reader:
    """Reads Kafka primitives from a buffer; every read past the end raises KafkaDecodeError."""

    def __init__(self, data: bytes | memoryview, pos: int = 0, end: int | None = None) -> None:
        self.data = memoryview(data)
        self.pos = pos
        self.end = len(self.data) if end is None else end

    def remaining(self) -> int:
        """Bytes left."""
        return self.end - self.pos

    def take(self, n: int) -> bytes:
        """The next ``n`` bytes."""
        if n < 0 or self.pos + n > self.end:
            raise KafkaDecodeError(f"truncated: needed {n} bytes at {self.pos}, {self.end - self.pos} left")
        out = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return out

    def fixed(self, kind: str) -> int:
        """A big-endian fixed-size integer (int8/int16/int32/int64/uint32)."""
        st = _FIXED[kind]
        if self.pos + st.size > self.end:
            raise KafkaDecodeError(f"truncated {kind} at {self.pos}")
        (value,) = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return value

    def uvarint(self) -> int:
        """An unsigned varint (at most 10 bytes)."""
        value = shift = 0
        for _ in range(10):
            if self.pos >= self.end:
                raise KafkaDecodeError("truncated varint")
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
        raise KafkaDecodeError("varint longer than 10 bytes")

    def varint(self) -> int:
        """A zig-zag signed varint (varint and varlong alike)."""
        raw = self.uvarint()
        return (raw >> 1) ^ -(raw & 1)

    def _length(self, compact: bool, kind: str) -> int:
        """A length prefix; -1 means null."""
        n = self.uvarint() - 1 if compact else self.fixed("int16" if kind == "string" else "int32")
        if n < -1:
            raise KafkaDecodeError(f"negative {kind} length {n}")
        return n

    def string(self, compact: bool = False) -> str | None:
        """A (nullable) UTF-8 string."""
        n = self._length(compact, "string")
        if n == -1:
            return None
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError:
            raise KafkaDecodeError("string is not UTF-8") from None

    def bytes_(self, compact: bool = False) -> bytes | None:
        """(Nullable) bytes."""
        n = self._length(compact, "bytes")
        return None if n == -1 else self.take(n)

    def array_length(self, compact: bool = False) -> int:
        """An array's element count; -1 means null."""
        n = self._length(compact, "array")
        if n > self.remaining():  # every element takes at least one byte: a hostile count stops here
            raise KafkaDecodeError(f"array of {n} elements in {self.remaining()} bytes")
        return n

    def skip_tagged_fields(self) -> None:
        """Skip a tagged-field section (none are understood)."""
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


class Writer:
    """Builds Kafka primitives into a bytearray."""

    def __init__(self) -> None:
        self.out = bytearray()

    def fixed(self, kind: str, value: int) -> None:
        """A big-endian fixed-size integer."""
        self.out += _FIXED[kind].pack(value)

    def uvarint(self, value: int) -> None:
        """An unsigned varint."""
        while value > 0x7F:
            self.out.append((value & 0x7F) | 0x80)
            value >>= 7
        self.out.append(value)

    def varint(self, value: int) -> None:
        """A zig-zag signed varint."""
        self.uvarint((value << 1) ^ (value >> 63))

    def _length(self, n: int, compact: bool, kind: str) -> None:
        if compact:
            self.uvarint(n + 1)
        else:
            self.fixed("int16" if kind == "string" else "int32", n)

    def string(self, value: str | None, compact: bool = False) -> None:
        """A (nullable) UTF-8 string."""
        if value is None:
            self._length(-1, compact, "string")
            return
        data = value.encode("utf-8")
        self._length(len(data), compact, "string")
        self.out += data

    def bytes_(self, value: bytes | None, compact: bool = False) -> None:
        """(Nullable) bytes."""
        if value is None:
            self._length(-1, compact, "bytes")
            return
        self._length(len(value), compact, "bytes")
        self.out += value

    def array_length(self, n: int | None, compact: bool = False) -> None:
        """An array's element count (None: a null array)."""
        self._length(-1 if n is None else n, compact, "array")

    def empty_tagged_fields(self) -> None:
        """A tagged-field section with no fields."""
        self.uvarint(0)


def _read_value(r: Reader, kind: str, compact: bool) -> Any:
    if kind in _FIXED:
        return r.fixed(kind)
    if kind == "bool":
        return r.fixed("int8") != 0
    if kind == "string":
        return r.string(compact)
    if kind in ("bytes", "records"):
        return r.bytes_(compact)
    if kind == "uuid":
        return r.take(16)
    raise ValueError(f"unknown field type {kind}")


def _write_value(w: Writer, kind: str, value: Any, compact: bool) -> None:
    if kind in _FIXED:
        w.fixed(kind, value)
    elif kind == "bool":
        w.fixed("int8", 1 if value else 0)
    elif kind == "string":
        w.string(value, compact)
    elif kind in ("bytes", "records"):
        w.bytes_(value, compact)
    elif kind == "uuid":
        w.out += value if value is not None else bytes(16)
    else:
        raise ValueError(f"unknown field type {kind}")


def read_struct(r: Reader, schema: tuple[Field, ...], version: int, flexible: bool) -> dict[str, Any]:
    """Read one struct of ``schema`` in ``version``; absent fields get their defaults."""
    out: dict[str, Any] = {}
    for f in schema:
        if not f.present(version):
            out[f.name] = f.default
            continue
        if f.type != "array":
            out[f.name] = _read_value(r, f.type, flexible)
            continue
        n = r.array_length(flexible)
        if n == -1:
            if f.nullable_from is None or version < f.nullable_from:  # as Kafka: the request is malformed
                raise KafkaDecodeError(f"non-nullable array {f.name!r} is null (version {version})")
            out[f.name] = None
        elif f.fields:
            out[f.name] = [read_struct(r, f.fields, version, flexible) for _ in range(n)]
        else:
            out[f.name] = [_read_value(r, f.item or "", flexible) for _ in range(n)]
    if flexible:
        r.skip_tagged_fields()
    return out


def write_struct(w: Writer, schema: tuple[Field, ...], version: int, flexible: bool, value: dict) -> None:
    """Write one struct of ``schema`` in ``version``; missing keys take the field's default."""
    for f in schema:
        if not f.present(version):
            continue
        item = value.get(f.name, f.default)
        if f.type != "array":
            _write_value(w, f.type, item, flexible)
            continue
        w.array_length(None if item is None else len(item), flexible)
        for element in item or ():
            if f.fields:
                write_struct(w, f.fields, version, flexible, element)
            else:
                _write_value(w, f.item or "", element, flexible)
    if flexible:
        w.empty_tagged_fields()
