"""Arrow string, binary and map columns cut out of one byte buffer by (start, end) positions.

The fast read path (``delivery_decoder``) never makes a Python ``bytes`` or ``str`` per event
value: it records where each value lies in the received bytes, and this module turns those
positions into Arrow arrays with a few vectorised calls (numpy + Arrow ``take``), copying only the
selected bytes. Arrays are assembled from buffers, never with ``pyarrow.array`` (which imports
pandas). Runs in executor Python workers.

How: the distinct spans of a column, sorted, are laid out as a binary array over the whole buffer
whose offsets alternate span start / span end (``[s0, e0, s1, e1, ...]``, so element ``2k`` is
span ``k`` and the odd elements are the gaps between spans); ``take`` of the even elements, in row
order, then builds the compact column. Spans of one column never partly overlap (they are distinct
values of distinct events, or the same constant text), which keeps those offsets ascending.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

# A null value's start position.
NULL = -1
INT64 = pa.int64()


def spans_to_array(
    buffer: pa.Buffer, starts: Sequence[int], ends: Sequence[int], type: pa.DataType
) -> pa.Array:
    """The values ``buffer[starts[i]:ends[i]]`` as an Arrow array of ``type`` (binary or string).

    A start of :data:`NULL` makes that row null. For ``pa.string()`` the result is checked to be
    valid UTF-8 (``pyarrow.ArrowInvalid`` otherwise).
    """
    count = len(starts)
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    valid = s != NULL
    all_valid = bool(valid.all())
    keys = (s << 32) | e if all_valid else (s[valid] << 32) | e[valid]
    if keys.size == 0:  # no rows, or only nulls
        offsets = pa.py_buffer(np.zeros(count + 1, dtype=np.int32))
        return pa.Array.from_buffers(type, count, [validity(valid), offsets, pa.py_buffer(b"")])
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
    indices = int64_array(picks, valid)
    column = base.take(indices)
    return column if type == pa.binary() else column.cast(type)


def validity(valid: np.ndarray) -> pa.Buffer | None:
    """Arrow's validity bitmap of a boolean mask (None when every value is valid)."""
    if valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def int64_array(values: np.ndarray, valid: np.ndarray, type: pa.DataType = INT64) -> pa.Array:
    """An int64-layout Arrow array (int64, timestamp) of ``values``, null where not ``valid``.

    Built from buffers: ``pyarrow.array`` would import pandas in every Python worker.
    """
    data = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(type, data.size, [validity(valid), pa.py_buffer(data)])


def repeated_string(value: str, count: int) -> pa.Array:
    """``value`` ``count`` times as a string array (the partition column)."""
    raw = value.encode("utf-8")
    offsets = np.arange(count + 1, dtype=np.int32) * len(raw)
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(raw * count)])


def spans_to_map(
    buffer: pa.Buffer, entry_counts: Sequence[int], entries: np.ndarray, type: pa.MapType
) -> pa.Array:
    """A map<string,string> column: row ``i`` holds the next ``entry_counts[i]`` entries.

    ``entries`` has one row per entry: key start, key end, value start, value end.
    """
    offsets = np.zeros(len(entry_counts) + 1, dtype=np.int32)
    np.cumsum(np.asarray(entry_counts, dtype=np.int32), out=offsets[1:])
    keys = spans_to_array(buffer, entries[:, 0], entries[:, 1], type.key_type)
    items = spans_to_array(buffer, entries[:, 2], entries[:, 3], type.item_type)
    row_offsets = pa.Array.from_buffers(pa.int32(), offsets.size, [None, pa.py_buffer(offsets)])
    return pa.MapArray.from_arrays(row_offsets, keys, items, type=type)
