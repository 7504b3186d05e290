"""Arrow columns from Python lists, built from buffers, without ``pyarrow.array``.

``pyarrow.array`` asks pyarrow's pandas shim whether its input is a pandas object, and that
imports pandas — in every Spark Python worker that reads events, the first time. With bytecode
caches that is about half a second of CPU per worker; without them (``PYTHONDONTWRITEBYTECODE``,
a fresh image) several seconds, paid by the first micro-batch of each worker. The event columns
are plain (binary, string, int64, timestamp, map<string,string>), so they are assembled here
from validity bitmaps, offsets and data buffers (``Array.from_buffers``), which never touches
pandas. ``tests/connector/test_schema.py`` checks the result equals ``pyarrow.array``'s.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from itertools import accumulate

import pyarrow as pa


def _validity(values: Sequence[object]) -> tuple[pa.Buffer | None, int]:
    """The validity bitmap (None when nothing is null) and the null count."""
    nulls = sum(1 for v in values if v is None)
    if not nulls:
        return None, 0
    bits = bytearray((len(values) + 7) // 8)
    for i, value in enumerate(values):
        if value is not None:
            bits[i >> 3] |= 1 << (i & 7)
    return pa.py_buffer(bytes(bits)), nulls


def _int32_offsets(lengths: Sequence[int]) -> pa.Buffer:
    return pa.py_buffer(array("i", accumulate(lengths, initial=0)).tobytes())


def binary_column(values: Sequence[bytes | str | None], type_: pa.DataType) -> pa.Array:
    """A ``binary`` or ``string`` array (``str`` values are UTF-8 encoded)."""
    data = [v.encode() if isinstance(v, str) else (v or b"") for v in values]
    validity, nulls = _validity(values)
    buffers = [validity, _int32_offsets([len(d) for d in data]), pa.py_buffer(b"".join(data))]
    return pa.Array.from_buffers(type_, len(values), buffers, null_count=nulls)


INT64 = pa.int64()


def int64_column(values: Sequence[int | None], type_: pa.DataType = INT64) -> pa.Array:
    """An ``int64`` array, or any 64-bit type of the same layout (``timestamp``)."""
    validity, nulls = _validity(values)
    data = array("q", (0 if v is None else v for v in values)).tobytes()
    return pa.Array.from_buffers(type_, len(values), [validity, pa.py_buffer(data)], null_count=nulls)


def string_map_column(rows: Sequence[Sequence[tuple[str, str | None]]], type_: pa.MapType) -> pa.Array:
    """A ``map<string,string>`` array from rows of ``(key, value)`` pairs (no null maps)."""
    keys = [k for row in rows for k, _ in row]
    items = [v for row in rows for _, v in row]
    offsets = pa.Array.from_buffers(pa.int32(), len(rows) + 1, [None, _int32_offsets([len(r) for r in rows])])
    return pa.MapArray.from_arrays(
        offsets, binary_column(keys, type_.key_type), binary_column(items, type_.item_type), type=type_
    )
