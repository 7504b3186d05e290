"""Event Hubs deliveries (encoded AMQP messages) straight into Arrow record batches of the read schema.

The SDK's decoder builds a ``Message`` with dicts, lists and ``bytes`` for every event, and the
connector then turned those into Arrow: that per-event object building was the read path's wall.
Here one pass over each message's sections records *where* the values are in the received bytes
(:mod:`.arrow_columns` cuts the columns out in bulk) and converts only what is not text already:
integers, booleans and timestamps, into the same strings :mod:`.schema` makes of them.

Decoded here, for every message: data-section bodies (one section), message annotations (offset,
sequence number, enqueued time, publisher, partition key, and any other annotation into
``systemProperties``), application properties of every AMQP type, and the AMQP properties
section (through the SDK's own value decoder, then :func:`.schema.property_entries`). Header,
delivery annotations and footer are skipped, as the SDK path ignores them too.

Everything else — a body of several data sections, an ``amqp-value`` or ``amqp-sequence`` body,
sections with symbolic descriptors, non-symbol annotation keys, a value the SDK decodes to
something other than text or a number — goes through the SDK's decoder and
:func:`.schema.message_row` for that message, so a column value never depends on which path
made it. Text that turns out not to be valid UTF-8 sends the whole batch down that path (the SDK
path JSON-encodes such binary values). Runs in executor Python workers.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from . import native
from .amqp_binary import tag_binary_properties
from .amqp_names import ENQUEUED_TIME, OFFSET, PARTITION_KEY, PUBLISHER, SEQUENCE_NUMBER
from .arrow_columns import NULL, int64_array, repeated_string, spans_column, spans_map_column
from .message_layout import MessageLayout, layout_of
from .schema import _text, arrow_schema, message_row, messages_to_record_batch, property_entries

_U16 = struct.Struct(">H").unpack_from
_I16 = struct.Struct(">h").unpack_from
_U32 = struct.Struct(">I").unpack_from
_I32 = struct.Struct(">i").unpack_from
_U64 = struct.Struct(">Q").unpack_from
_I64 = struct.Struct(">q").unpack_from
_I8 = struct.Struct(">b").unpack_from

# Message section descriptors (AMQP 1.0 part 3.2).
HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS, PROPERTIES = 0x70, 0x71, 0x72, 0x73
APPLICATION_PROPERTIES, DATA, AMQP_SEQUENCE, AMQP_VALUE, FOOTER = 0x74, 0x75, 0x76, 0x77, 0x78

# An absent sequence number or enqueued time (neither can be the smallest int64 milliseconds).
MISSING = -(2**63)
# Layouts made in a row without a message matching one; then one more after every LAYOUT_RETRY
# messages walked (a layout costs about what walking a message does).
LAYOUT_BUILDS, LAYOUT_RETRY = 8, 64

# binary, string, symbol: the SDK decodes all three to ``bytes``, so they become the same text.
_TEXT8 = frozenset((0xA0, 0xA1, 0xA3))
_TEXT32 = frozenset((0xB0, 0xB1, 0xB3))
# Widths of fixed-size encodings (AMQP 1.0 part 1.6), for skipping values.
_FIXED_WIDTH = {
    **dict.fromkeys((0x40, 0x41, 0x42, 0x43, 0x44, 0x45), 0),
    **dict.fromkeys((0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56), 1),
    **dict.fromkeys((0x60, 0x61), 2),
    **dict.fromkeys((0x70, 0x71, 0x72, 0x73, 0x74), 4),
    **dict.fromkeys((0x80, 0x81, 0x82, 0x83, 0x84), 8),
    **dict.fromkeys((0x94, 0x98), 16),
}
_SIZED8 = frozenset((0xA0, 0xA1, 0xA3, 0xC0, 0xC1, 0xE0))
_SIZED32 = frozenset((0xB0, 0xB1, 0xB3, 0xD0, 0xD1, 0xF0))


class DeliveryDecodeError(ValueError):
    """A delivery's bytes are not a well-formed AMQP message."""


class _SlowPath(Exception):
    """This message needs the SDK's decoder (raised inside the fast loop, caught per message)."""


def value_end(buf: bytes | bytearray, pos: int) -> int:
    """Position right after the AMQP value that starts at ``pos``."""
    code = buf[pos]
    if code == 0x00:  # described: descriptor, then the value
        return value_end(buf, value_end(buf, pos + 1))
    width = _FIXED_WIDTH.get(code)
    if width is not None:
        return pos + 1 + width
    if code in _SIZED8:
        return pos + 2 + buf[pos + 1]
    if code in _SIZED32:
        return pos + 5 + _U32(buf, pos + 1)[0]
    raise DeliveryDecodeError(f"unknown AMQP type code 0x{code:02x} at byte {pos}")


def int_at(buf: bytes | bytearray, pos: int) -> int | None:
    """The integer (or timestamp) encoded at ``pos``; None when the value is not an integer."""
    code = buf[pos]
    if code in (0x50, 0x52, 0x53):
        return buf[pos + 1]
    if code in (0x51, 0x54, 0x55):
        return _I8(buf, pos + 1)[0]
    if code in (0x81, 0x83):
        return _I64(buf, pos + 1)[0]
    if code in (0x43, 0x44):
        return 0
    if code == 0x70:
        return _U32(buf, pos + 1)[0]
    if code == 0x71:
        return _I32(buf, pos + 1)[0]
    if code == 0x80:
        return _U64(buf, pos + 1)[0]
    if code == 0x60:
        return _U16(buf, pos + 1)[0]
    if code == 0x61:
        return _I16(buf, pos + 1)[0]
    return None


def _sdk_value(buf: bytes | bytearray, pos: int) -> Any:
    """The Python value the SDK's own decoder makes of the value at ``pos``."""
    from azure.eventhub._pyamqp._decode import _DECODE_BY_CONSTRUCTOR

    decoder = _DECODE_BY_CONSTRUCTOR[buf[pos]]
    if decoder is None:
        raise DeliveryDecodeError(f"AMQP type code 0x{buf[pos]:02x} is not supported by azure-eventhub")
    return decoder(memoryview(buf)[pos + 1 :])[1]


def sdk_message(payload: bytes | bytearray | memoryview) -> Any:
    """The SDK's ``Message`` for one encoded message (the reference the fast path must match)."""
    from azure.eventhub._pyamqp._decode import decode_payload

    return decode_payload(memoryview(payload))


class _Columns:
    """Per-batch column builders: spans into the received bytes plus a buffer of converted text.

    ``rows`` holds 12 integers per event (body start, body end, offset start, offset end, sequence
    number, enqueued ms, publisher start, publisher end, partition key start, partition key end,
    number of properties, number of system properties; :data:`MISSING` for an absent sequence
    number or time); ``props`` and ``sys`` hold 4 per map entry (key start, key end, value start,
    value end). Flat lists (or, for the compiled loop, int64 arrays) of ints become numpy arrays in
    one conversion each.
    """

    def __init__(self, base: int, packed: bool = False) -> None:
        self.base = base  # converted text is placed after the received bytes
        self.extra = bytearray()
        self._cache: dict[Any, tuple[int, int]] = {}
        # int64 arrays for the compiled loop to append to; lists extend faster in Python
        self.rows: list[int] | array = array("q") if packed else []
        self.props: list[int] | array = array("q") if packed else []
        self.sys: list[int] = []

    def text(self, value: str | bytes | None) -> tuple[int, int]:
        """The span of a converted value (appended once per batch); NULL for None."""
        if value is None:
            return NULL, 0
        span = self._cache.get(value)
        if span is None:
            raw = value.encode("utf-8") if isinstance(value, str) else value
            start = self.base + len(self.extra)
            self.extra += raw
            span = (start, start + len(raw))
            self._cache[value] = span
        return span

    def add_system_properties(
        self, props: list[tuple[str, str | None]], annotations: list[tuple[int, int, int, int]]
    ) -> int:
        """Append one event's systemProperties (properties section first, as the SDK path); count."""
        for key, value in props:
            self.sys.extend((*self.text(key), *self.text(value)))
        for entry in annotations:
            self.sys.extend(entry)
        return len(props) + len(annotations)

    def add_row(self, row: tuple) -> None:
        """Append one message decoded by the SDK path (:func:`.schema.message_row`)."""
        body, offset, seq, enqueued_us, publisher, key, props, sysprops = row
        spans = [self.text(bytes(body)), self.text(offset), self.text(publisher), self.text(key)]
        for k, v in props:
            self.props.extend((*self.text(k), *self.text(v)))
        sys_count = self.add_system_properties(sysprops, [])
        enqueued = MISSING if enqueued_us is None else enqueued_us // 1000
        (body_s, body_e), (off_s, off_e), (pub_s, pub_e), (key_s, key_e) = spans
        seq = MISSING if seq is None else seq
        self.rows.extend(
            (body_s, body_e, off_s, off_e, seq, enqueued, pub_s, pub_e, key_s, key_e, len(props), sys_count)
        )

    def record_batch(self, data: bytes | bytearray, partition_id: str) -> pa.RecordBatch:
        """The Arrow batch (raises ``pyarrow.ArrowInvalid`` when some text is not UTF-8)."""
        schema = arrow_schema()
        buffer = pa.py_buffer(bytes(data) + bytes(self.extra) if self.extra else data)
        rows = np.array(self.rows, dtype=np.int64).reshape(-1, 12)
        count = rows.shape[0]
        props = np.array(self.props, dtype=np.int64).reshape(-1, 4)
        sys = np.array(self.sys, dtype=np.int64).reshape(-1, 4)
        seq, enq = rows[:, 4], rows[:, 5]
        string = pa.string()
        columns = [
            spans_column(buffer, rows[:, 0], rows[:, 1], pa.binary()),
            repeated_string(partition_id, count),
            spans_column(buffer, rows[:, 2], rows[:, 3], string),
            int64_array(seq, seq != MISSING),
            int64_array(enq * 1000, enq != MISSING, schema.field("enqueuedTime").type),
            spans_column(buffer, rows[:, 6], rows[:, 7], string),
            spans_column(buffer, rows[:, 8], rows[:, 9], string),
            spans_map_column(buffer, rows[:, 10], props, schema.field("properties").type),
            spans_map_column(buffer, rows[:, 11], sys, schema.field("systemProperties").type),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=schema)


def decode_deliveries(
    data: bytes | bytearray, starts: Sequence[int], ends: Sequence[int], partition_id: str
) -> pa.RecordBatch:
    """The record batch of the messages ``data[starts[i]:ends[i]]`` (one per event, in order).

    The result equals ``schema.messages_to_record_batch(partition_id, [SDK-decoded messages])``
    value for value; that equality is what ``tests/connector/test_delivery_decoder.py`` checks.
    """
    cols = _Columns(len(data), packed=native.accel is not None)
    _decode_messages(data, starts, ends, cols)
    try:
        return cols.record_batch(data, partition_id)
    except pa.ArrowInvalid:
        # Some text is not UTF-8: the SDK path's rules (JSON lists of bytes) for the whole batch.
        view = memoryview(data)
        messages = []
        for s, e in zip(starts, ends, strict=True):
            message = sdk_message(view[s:e])
            tag_binary_properties(view[s:e], message)
            messages.append(message)
        return messages_to_record_batch(partition_id, messages)


def _value(buf: bytes | bytearray, pos: int, cols: _Columns) -> tuple[int, int, int]:
    """(start, end) of a value's text and the position after the value."""
    code = buf[pos]
    if code in _TEXT8:
        s = pos + 2
        e = s + buf[pos + 1]
        return s, e, e
    if code in _TEXT32:
        s = pos + 5
        e = s + _U32(buf, pos + 1)[0]
        return s, e, e
    if code == 0x40:
        return NULL, 0, pos + 1
    after = value_end(buf, pos)
    number = int_at(buf, pos)
    if number is not None:
        s, e = cols.text(str(number))
    elif code in (0x41, 0x42, 0x56):
        s, e = cols.text("true" if code == 0x41 or (code == 0x56 and buf[pos + 1] == 1) else "false")
    else:
        s, e = cols.text(_text(_sdk_value(buf, pos)))
    return s, e, after


def _map_bounds(buf: bytes | bytearray, pos: int) -> tuple[int, int, int]:
    """(first entry position, number of key/value pairs, end) of the map at ``pos``."""
    code = buf[pos]
    if code == 0xC1:
        return pos + 3, buf[pos + 2] // 2, pos + 2 + buf[pos + 1]
    if code == 0xD1:
        return pos + 9, _U32(buf, pos + 5)[0] // 2, pos + 5 + _U32(buf, pos + 1)[0]
    if code == 0x40:
        return pos + 1, 0, pos + 1
    raise _SlowPath


def _key_span(buf: bytes | bytearray, pos: int) -> tuple[int, int]:
    """(start, end) of a text map key at ``pos``."""
    code = buf[pos]
    if code in _TEXT8:
        return pos + 2, pos + 2 + buf[pos + 1]
    if code in _TEXT32:
        return pos + 5, pos + 5 + _U32(buf, pos + 1)[0]
    raise _SlowPath


def _decode_messages(
    buf: bytes | bytearray, starts: Sequence[int], ends: Sequence[int], cols: _Columns
) -> None:
    """Append each message's values to ``cols`` (the hot loop: one pass, common encodings inline).

    A message this loop leaves to the SDK (``_SlowPath``) is decoded by :func:`.schema.message_row`
    instead; what it had appended so far is removed first.
    """
    rows = cols.rows.extend
    prop_list = cols.props
    prop_add = prop_list.extend
    layout: MessageLayout | None = None
    segments: tuple[tuple[int, bytes], ...] = ()
    startswith = buf.startswith
    builds_left = LAYOUT_BUILDS
    walked = 0  # messages walked since the last layout was made
    fast = native.accel
    resume = 0  # with the compiled loop: the first message it has not decoded
    for index, (pos, end) in enumerate(zip(starts, ends, strict=True)):
        if index < resume:
            continue
        if fast is not None and layout is not None:
            resume = fast.decode_laid_out(
                buf, starts, ends, index, segments, layout.body_size_at, layout.body_wide,
                layout.seq_at, layout.enq_at, *(layout.offset or (-1, -1)), layout.props,
                MISSING, NULL, cols.rows, prop_list,
            )  # fmt: skip
            if resume > index:
                builds_left = LAYOUT_BUILDS
                continue
        elif layout is not None:
            laid_out = True
            for at, constant in segments:
                if not startswith(constant, pos + at):
                    laid_out = False
                    break
            if laid_out:
                # laid out as the last walked message: its values are where that one's were
                size_at = pos + layout.body_size_at
                if layout.body_wide:
                    body_s = size_at + 4
                    laid_out = body_s + _U32(buf, size_at)[0] == end
                else:
                    body_s = size_at + 1
                    laid_out = body_s + buf[size_at] == end
            if laid_out:
                builds_left = LAYOUT_BUILDS
                at = layout.seq_at
                seq = MISSING if at < 0 else _I64(buf, pos + at)[0]
                at = layout.enq_at
                enq = MISSING if at < 0 else _I64(buf, pos + at)[0]
                if layout.offset is None:
                    off_s, off_e = NULL, 0
                else:
                    off_s, off_e = pos + layout.offset[0], pos + layout.offset[1]
                props = layout.props
                if props:
                    prop_add([pos + at for at in props])
                rows((body_s, end, off_s, off_e, seq, enq, NULL, 0, NULL, 0, len(props) >> 2, 0))
                continue
        first = pos
        props_before = len(prop_list)
        try:
            body_s = body_e = -1
            off_s, off_e = NULL, 0
            pub_s, pub_e = NULL, 0
            key_s, key_e = NULL, 0
            seq = enq = MISSING
            props: list[tuple[str, str | None]] | None = None
            annotations: list[tuple[int, int, int, int]] | None = None
            prop_count = 0
            while pos < end:
                if buf[pos] != 0x00 or buf[pos + 1] != 0x53:
                    raise _SlowPath  # a symbolic or ulong section descriptor
                code = buf[pos + 2]
                pos += 3
                if code == DATA:
                    if body_s >= 0:
                        raise _SlowPath  # several data sections are joined by the SDK path
                    constructor = buf[pos]
                    if constructor == 0xA0:
                        body_s = pos + 2
                        body_e = body_s + buf[pos + 1]
                    elif constructor == 0xB0:
                        body_s = pos + 5
                        body_e = body_s + _U32(buf, pos + 1)[0]
                    else:
                        raise _SlowPath
                    pos = body_e
                elif code == MESSAGE_ANNOTATIONS:
                    if buf[pos] == 0xC1:
                        entry = pos + 3
                        pairs = buf[pos + 2] >> 1
                        pos += 2 + buf[pos + 1]
                    else:
                        entry, pairs, pos = _map_bounds(buf, pos)
                    for _ in range(pairs):
                        if buf[entry] == 0xA3:
                            ks = entry + 2
                            entry = ke = ks + buf[entry + 1]
                        else:
                            ks, ke = _key_span(buf, entry)
                            entry = ke
                        size = ke - ks
                        if size == 21 and buf.startswith(SEQUENCE_NUMBER, ks, ke):
                            if buf[entry] == 0x81:
                                seq = _I64(buf, entry + 1)[0]
                                entry += 9
                            else:
                                seq = int_at(buf, entry)
                                if seq is None:
                                    raise _SlowPath
                                entry = value_end(buf, entry)
                        elif size == 12 and buf.startswith(OFFSET, ks, ke):
                            if buf[entry] == 0xA1:
                                off_s = entry + 2
                                entry = off_e = off_s + buf[entry + 1]
                            else:
                                off_s, off_e, entry = _value(buf, entry, cols)
                        elif size == 19 and buf.startswith(ENQUEUED_TIME, ks, ke):
                            if buf[entry] == 0x83:
                                enq = _I64(buf, entry + 1)[0]
                                entry += 9
                            else:
                                enq = int_at(buf, entry)
                                if enq is None:
                                    if buf[entry] != 0x40:
                                        raise _SlowPath
                                    enq = MISSING
                                entry = value_end(buf, entry)
                        else:
                            vs, ve, after = _value(buf, entry, cols)
                            if size == 19 and buf.startswith(PARTITION_KEY, ks, ke):
                                key_s, key_e = vs, ve
                            elif size == 15 and buf.startswith(PUBLISHER, ks, ke):
                                pub_s, pub_e = vs, ve
                            if annotations is None:
                                annotations = []
                            annotations.append((ks, ke, vs, ve))
                            entry = after
                elif code == APPLICATION_PROPERTIES:
                    if buf[pos] == 0xC1:
                        entry = pos + 3
                        pairs = buf[pos + 2] >> 1
                        pos += 2 + buf[pos + 1]
                    else:
                        entry, pairs, pos = _map_bounds(buf, pos)
                    for _ in range(pairs):
                        code = buf[entry]
                        if code == 0xA1 or code == 0xA3:  # the usual string key
                            ks = entry + 2
                            entry = ke = ks + buf[entry + 1]
                        else:
                            ks, ke = _key_span(buf, entry)
                            entry = ke
                        if buf[entry] == 0xA1:  # the usual string value
                            vs = entry + 2
                            entry = ve = vs + buf[entry + 1]
                        elif buf[entry] == 0xA0 or buf[entry] == 0xB0:
                            raise _SlowPath  # binary values are written as the Scala connector does
                        else:
                            vs, ve, entry = _value(buf, entry, cols)
                        prop_add((ks, ke, vs, ve))
                    prop_count += pairs
                elif code == PROPERTIES:
                    from azure.eventhub._pyamqp.message import Properties

                    fields = _sdk_value(buf, pos)
                    props = property_entries(Properties(*fields)) if fields is not None else []
                    pos = value_end(buf, pos)
                elif code == AMQP_SEQUENCE or code == AMQP_VALUE:
                    raise _SlowPath
                else:  # header, delivery annotations, footer, unknown: not part of the columns
                    pos = value_end(buf, pos)
            if pos != end:
                raise DeliveryDecodeError(f"a message section runs past its delivery ({pos} > {end})")
        except (_SlowPath, IndexError, struct.error):
            del prop_list[props_before:]
            payload = memoryview(buf)[first:end]
            message = sdk_message(payload)
            tag_binary_properties(payload, message)
            cols.add_row(message_row(message))
            continue
        if body_s < 0:
            body_s = body_e = end  # no body: empty, as on the SDK path
        sys_count = 0
        if props or annotations:
            sys_count = cols.add_system_properties(props or [], annotations or [])
        rows((body_s, body_e, off_s, off_e, seq, enq, pub_s, pub_e, key_s, key_e, prop_count, sys_count))
        if not props and not annotations:
            if builds_left:
                builds_left -= 1
                layout = layout_of(buf, first, end)
                segments = () if layout is None else layout.segments
            else:
                walked += 1
                if walked == LAYOUT_RETRY:  # the stream may have settled into one layout since
                    walked, builds_left = 0, 1
