"""Arrow columns of the read schema, built from buffers, without ``pyarrow.array``.

``pyarrow.array`` asks pyarrow's pandas shim whether its input is a pandas object, and that
imports pandas — in every Spark Python worker that reads events, the first time. With bytecode
caches that is about half a second of CPU per worker; without them (``PYTHONDONTWRITEBYTECODE``,
a fresh image) several seconds, paid by the first micro-batch of each worker. The event columns
are plain (binary, string, int64, timestamp, map<string,string>), so they are assembled here
from validity bitmaps, offsets and data buffers (``Array.from_buffers``), which never touches
pandas. ``tests/connector/test_schema.py`` checks the result equals ``pyarrow.array``'s.

Two kinds of input, one module: Python lists (the SDK path, ``schema.py``) and (start, end)
positions of values inside one received byte buffer (the fast path, ``delivery_decoder.py``,
which never makes a Python ``bytes`` or ``str`` per value). For positions, the distinct spans of
a column, sorted, are laid out as a binary array over the whole buffer whose offsets alternate
span start / span end (``[s0, e0, s1, e1, ...]``: element ``2k`` is span ``k``, the odd elements
the gaps between spans); Arrow's ``take`` of the even elements, in row order, then builds the
compact column, copying only the selected bytes. Spans of one column never partly overlap
(distinct values of distinct events, or the same converted text), so those offsets ascend.
Runs in executor Python workers.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from itertools import accumulate

import numpy as np
import pyarrow as pa

# A null value's start position (span columns).
NULL = -1


INT64 = pa.int64()


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


def repeated_string(value: str, count: int) -> pa.Array:
    """``value`` ``count`` times as a string array (the partition column)."""
    raw = value.encode("utf-8")
    offsets = np.arange(count + 1, dtype=np.int32) * len(raw)
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(raw * count)])


# ------------------------------------------------------------------ columns from spans of a buffer
def _mask_validity(valid: np.ndarray) -> pa.Buffer | None:
    """Arrow's validity bitmap of a boolean mask (None when every value is valid)."""
    if valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def int64_array(values: np.ndarray, valid: np.ndarray, type_: pa.DataType = INT64) -> pa.Array:
    """An int64-layout array (int64, timestamp) of a numpy array, null where not ``valid``."""
    data = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(type_, data.size, [_mask_validity(valid), pa.py_buffer(data)])


def spans_column(
    buffer: pa.Buffer, starts: Sequence[int], ends: Sequence[int], type_: pa.DataType
) -> pa.Array:
    """The values ``buffer[starts[i]:ends[i]]`` as a ``binary`` or ``string`` array.

    A start of :data:`NULL` makes that row null. For ``string`` the result is checked to be valid
    UTF-8 (``pyarrow.ArrowInvalid`` otherwise).
    """
    count = len(starts)
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    valid = s != NULL
    all_valid = bool(valid.all())
    keys = (s << 32) | e if all_valid else (s[valid] << 32) | e[valid]
    if keys.size == 0:  # no rows, or only nulls
        offsets = pa.py_buffer(np.zeros(count + 1, dtype=np.int32))
        return pa.Array.from_buffers(type_, count, [_mask_validity(valid), offsets, pa.py_buffer(b"")])
    unique, inverse = np.unique(keys, return_inverse=True)
    offsets = np.empty(2 * unique.size, dtype=np.int32)
    offsets[0::2] = unique >> 32
    offsets[1::2] = unique & 0xFFFFFFFF
    base = pa.Array.from_buffers(pa.binary(), offsets.size - 1, [None, pa.py_buffer(offsets), buffer])
    if all_valid:
        picks = 2 * inverse.reshape(-1)
    else:
        picks = np.zeros(count, dtype=np.int64)
        picks[valid] = 2 * inverse.reshape(-1)
    column = base.take(int64_array(picks, valid))
    return column if type_ == pa.binary() else column.cast(type_)


def spans_map_column(
    buffer: pa.Buffer, entry_counts: Sequence[int], entries: np.ndarray, type_: pa.MapType
) -> pa.Array:
    """A ``map<string,string>`` array: row ``i`` holds the next ``entry_counts[i]`` entries.

    ``entries`` has one row per entry: key start, key end, value start, value end.
    """
    offsets = np.zeros(len(entry_counts) + 1, dtype=np.int32)
    np.cumsum(np.asarray(entry_counts, dtype=np.int32), out=offsets[1:])
    keys = spans_column(buffer, entries[:, 0], entries[:, 1], type_.key_type)
    items = spans_column(buffer, entries[:, 2], entries[:, 3], type_.item_type)
    row_offsets = pa.Array.from_buffers(pa.int32(), offsets.size, [None, pa.py_buffer(offsets)])
    return pa.MapArray.from_arrays(row_offsets, keys, items, type=type_)
