"""Arrow string, binary and map columns cut out of one byte buffer by (start, end) positions.

The fast read path (``delivery_decoder``) never makes a Python ``bytes`` or ``str`` per event
value: it records where each value lies in the received bytes, and this module turns those
positions into Arrow arrays with a few vectorised calls (numpy + Arrow ``take``), copying only the
selected bytes. Runs in executor Python workers.

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


def spans_to_array(
    buffer: pa.Buffer, starts: Sequence[int], ends: Sequence[int], type: pa.DataType
) -> pa.Array:
    """The values ``buffer[starts[i]:ends[i]]`` as an Arrow array of ``type`` (binary or string).

    A start of :data:`NULL` makes that row null. For ``pa.string()`` the result is checked to be
    valid UTF-8 (``pyarrow.ArrowInvalid`` otherwise).
    """
    count = len(starts)
    if count == 0:
        return pa.array([], type=type)
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    valid = s != NULL
    all_valid = bool(valid.all())
    keys = (s << 32) | e if all_valid else (s[valid] << 32) | e[valid]
    if keys.size == 0:
        return pa.nulls(count, type=type)
    unique, inverse = np.unique(keys, return_inverse=True)
    offsets = np.empty(2 * unique.size, dtype=np.int32)
    offsets[0::2] = unique >> 32
    offsets[1::2] = unique & 0xFFFFFFFF
    base = pa.Array.from_buffers(pa.binary(), offsets.size - 1, [None, pa.py_buffer(offsets), buffer])
    if all_valid:
        indices = pa.array(2 * inverse.reshape(-1))
    else:
        picks = np.zeros(count, dtype=np.int64)
        picks[valid] = 2 * inverse.reshape(-1)
        indices = pa.array(picks, mask=~valid)
    column = base.take(indices)
    return column if type == pa.binary() else column.cast(type)


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
    return pa.MapArray.from_arrays(pa.array(offsets), keys, items, type=type)
