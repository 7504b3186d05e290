"""The fast decoder against the SDK path, value for value, on encoded AMQP messages of every kind.

Each case encodes messages the way a broker sends them (the emulator's independent AMQP encoder,
plus raw bytes for encodings it never writes), decodes them with ``decode_deliveries`` and with
the SDK's own decoder followed by ``schema.messages_to_record_batch`` (the SDK read path), and
requires equal Arrow batches. No broker needed.
"""

from __future__ import annotations

import math
import struct
import subprocess
import sys
import uuid

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventhubs_emulator.codec import (
    Described,
    Symbol,
    SymbolArray,
    Timestamp,
    UByte,
    UInt,
    ULong,
    UShort,
    encode,
)
from pyspark_eventhubs import delivery_decoder
from pyspark_eventhubs.amqp_binary import tag_binary_properties
from pyspark_eventhubs.arrow_columns import NULL, spans_column
from pyspark_eventhubs.delivery_decoder import decode_deliveries, sdk_message
from pyspark_eventhubs.schema import arrow_schema, messages_to_record_batch

# Every test runs with the compiled loops and with the pure-Python ones (conftest.hot_loops).
pytestmark = pytest.mark.usefixtures("hot_loops")


class Raw:
    """Bytes placed as they are into an encoded section (encodings the codec does not write)."""

    def __init__(self, data: bytes) -> None:
        self.data = data


def _section(code: int, value: object) -> bytes:
    if isinstance(value, Raw):
        return b"\x00\x53" + bytes([code]) + value.data
    return encode(Described(code, value))


def _annotations(seq: int, **more: object) -> dict:
    ann: dict = {
        Symbol("x-opt-sequence-number"): seq,
        Symbol("x-opt-offset"): str(seq * 250),
        Symbol("x-opt-enqueued-time"): Timestamp(1_763_800_000_000 + seq),
    }
    ann.update({Symbol(k): v for k, v in more.items()})
    return ann


def _event(seq: int, body: bytes = b"payload", props: object = None, **sections: object) -> bytes:
    """One message: annotations, optional properties/application properties, one data section."""
    out = b""
    if "header" in sections:
        out += _section(0x70, sections["header"])
    if "delivery_annotations" in sections:
        out += _section(0x71, sections["delivery_annotations"])
    out += _section(0x72, sections.get("annotations", _annotations(seq)))
    if "properties" in sections:
        out += _section(0x73, sections["properties"])
    if props is not None:
        out += _section(0x74, props)
    for part in sections.get("bodies", [body]):  # type: ignore[union-attr]
        out += _section(0x75, part)
    if "value" in sections:
        out += _section(0x77, sections["value"])
    if "sequence" in sections:
        out += _section(0x76, sections["sequence"])
    if "footer" in sections:
        out += _section(0x78, sections["footer"])
    return out


def _layout(messages: list[bytes]) -> tuple[bytes, list[int], list[int]]:
    """The messages in one buffer with frame-like bytes between them, and where each one is."""
    data = bytearray(b"\x00\x00\x01\x00\x02\x00\x00\x00")
    starts, ends = [], []
    for message in messages:
        data += b"\x00\x53\x14\xc0\x03\x01\x43\x41"  # stand-in for a frame header + performative
        starts.append(len(data))
        data += message
        ends.append(len(data))
    return bytes(data), starts, ends


def _refuse(*_: object) -> None:
    raise AssertionError("the SDK decoder was used for a message the fast path decodes itself")


def _both(messages: list[bytes], partition: str = "2") -> tuple[pa.RecordBatch, pa.RecordBatch]:
    """(fast, SDK path) batches of the messages."""
    raw, starts, ends = _layout(messages)
    fast = decode_deliveries(raw, starts, ends, partition)
    view = memoryview(raw)
    reference_messages = []
    for s, e in zip(starts, ends, strict=True):
        message = sdk_message(view[s:e])
        tag_binary_properties(view[s:e], message)  # as the SDK path's receiver does
        reference_messages.append(message)
    return fast, messages_to_record_batch(partition, reference_messages)


def _assert_same(messages: list[bytes]) -> pa.RecordBatch:
    fast, reference = _both(messages)
    assert fast.schema == arrow_schema()
    assert fast.to_pylist() == reference.to_pylist()
    assert fast.equals(reference)
    return fast


def test_typical_events_decode_like_the_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    messages = [
        _event(
            seq,
            body=f"event-{seq}".encode() * 3,
            props={"device": f"d{seq % 3}", "kind": "reading", "n": str(seq)},
            annotations=_annotations(seq, **({"x-opt-partition-key": f"key-{seq}"} if seq % 2 else {})),
        )
        for seq in range(40, 60)
    ]
    # Decoded without the SDK's per-message decoder (which only the reference uses here).
    _, reference = _both(messages)
    monkeypatch.setattr(delivery_decoder, "sdk_message", _refuse)
    assert decode_deliveries(*_layout(messages), "2").equals(reference)
    monkeypatch.undo()
    batch = _assert_same(messages)
    row = batch.slice(1, 1).to_pylist()[0]
    assert row["sequenceNumber"] == 41 and row["offset"] == "10250" and row["partition"] == "2"
    assert row["body"] == b"event-41" * 3 and row["partitionKey"] == "key-41"
    assert row["properties"] == [("device", "d2"), ("kind", "reading"), ("n", "41")]
    assert row["systemProperties"] == [("x-opt-partition-key", "key-41")]
    assert row["enqueuedTime"].timestamp() == pytest.approx(1_763_800_000.041)


def test_every_kind_of_property_value() -> None:
    props = {
        "str8": "text",
        "str32": "é" * 300,
        "empty": "",
        "sym": Symbol("a-symbol"),
        "bin": b"\x01\x02binary",
        "bin-utf8": b"plain bytes",
        "null": None,
        "true": True,
        "false": False,
        "ubyte": UByte(200),
        "ushort": UShort(60000),
        "uint0": UInt(0),
        "uint": UInt(7),
        "uint-large": UInt(4_000_000_000),
        "ulong0": ULong(0),
        "ulong": ULong(250),
        "ulong-large": ULong(2**63 + 5),
        "small-long": -7,
        "long": -(2**40),
        "double": 2.5,
        "nan": math.nan,
        "inf": -math.inf,
        "timestamp": Timestamp(1_700_000_000_123),
        "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
        "list": [1, "two", b"three", None],
        "map": {"inner": 1, "deep": {"x": [True]}},
        "symbols": SymbolArray(["a", "b"]),
        "described": Described(Symbol("com.example:thing"), "described value"),
    }
    messages = [_event(1, props=props), _event(2, props={"only": "one"}), _event(3, props={})]
    _assert_same(messages)
    # Encodings the codec never writes: bool, byte, short, int, float and 32-bit sizes.
    raw_values = {
        "bool-true": b"\x56\x01",
        "bool-false": b"\x56\x00",
        "byte": b"\x51\xfe",
        "short": b"\x61\xff\x00",
        "int-small": b"\x54\x80",
        "int": b"\x71\x80\x00\x00\x01",
        "float": b"\x72" + struct.pack(">f", 0.1),
        "sym32": b"\xb3\x00\x00\x00\x03abc",
        "bin32": b"\xb0\x00\x00\x00\x02hi",
    }
    body = b"".join(encode(k) + v for k, v in raw_values.items())
    map32 = b"\xd1" + struct.pack(">II", len(body) + 4, 2 * len(raw_values)) + body
    map8 = b"\xc1" + bytes([len(body) + 1, 2 * len(raw_values)]) + body if len(body) < 255 else map32
    batch = _assert_same([_event(4, props=Raw(map32)), _event(5, props=Raw(map8))])
    values = dict(batch.column("properties").to_pylist()[0])
    assert values["bool-true"] == "true" and values["byte"] == "-2" and values["int"] == str(-(2**31) + 1)


def test_binary_property_is_the_scala_connectors_signed_byte_json_as_on_the_sdk_path() -> None:
    batch = _assert_same([_event(1, props={"raw": b"\xff\xfe\x00"}), _event(2, props={"ok": "yes"})])
    assert batch.column("properties").to_pylist()[0] == [("raw", "[-1,-2,0]")]


def test_amqp_properties_header_annotations_and_footer() -> None:
    full = [
        "message-id-1",  # message-id
        b"user",  # user-id
        "to-address",  # to
        "subject",  # subject
        "reply-here",  # reply-to
        uuid.UUID(int=99),  # correlation-id
        Symbol("application/json"),  # content-type
        Symbol("gzip"),  # content-encoding
        Timestamp(1_800_000_000_000),  # absolute-expiry-time
        Timestamp(1_700_000_000_000),  # creation-time
        "group",  # group-id
        UInt(3),  # group-sequence
        "reply-group",  # reply-to-group-id
    ]
    sparse = [ULong(12345), None, None, "", None, b"corr", None, None, None, None, None, UInt(0), None]
    messages = [
        _event(1, properties=full, header=[True, UByte(4)], footer={Symbol("f"): "x"}),
        _event(
            2,
            properties=sparse,
            delivery_annotations={Symbol("last_enqueued_sequence_number"): 9},
            annotations=_annotations(2, **{"x-opt-publisher": "pub", "x-custom": UInt(5), "x-null": None}),
        ),
        _event(3, properties=[uuid.UUID(int=7)]),
    ]
    batch = _assert_same(messages)
    rows = batch.to_pylist()
    assert rows[1]["publisher"] == "pub"
    assert rows[1]["systemProperties"] == [
        ("message-id", "12345"),
        ("correlation-id", "corr"),
        ("x-opt-publisher", "pub"),
        ("x-custom", "5"),
        ("x-null", None),
    ]


def test_bodies_of_every_shape() -> None:
    messages = [
        _event(1, body=b""),
        _event(2, body=b"\x00\xff" * 5000),  # vbin32
        _event(3, bodies=[]),  # no body at all
        _event(4, bodies=[b"first|", b"second"]),  # several data sections: joined
        _event(5, bodies=[], value="an amqp-value string"),
        _event(6, bodies=[], value=42),
        _event(7, bodies=[], value=b"value bytes"),
        _event(8, bodies=[], sequence=[1, "two"]),
        _event(9, body=b"after the others"),
    ]
    batch = _assert_same(messages)
    assert batch.column("body").to_pylist()[3] == b"first|second"


def test_unusual_annotations() -> None:
    ann = {
        ULong(7): "numeric key",
        "x-opt-sequence-number": 3,  # a string key, not a symbol
        Symbol("x-opt-offset"): 750,  # a number, not a string
        Symbol("x-opt-enqueued-time"): Timestamp(5),
    }
    messages = [
        _event(1),
        _event(3, annotations=ann),
        _event(4, annotations={Symbol("x-opt-offset"): "1000", Symbol("x-opt-enqueued-time"): 77}),
        _event(5, annotations=Raw(b"\x40")),  # null annotations
    ]
    batch = _assert_same(messages)
    assert batch.column("sequenceNumber").to_pylist() == [1, 3, None, None]


def test_empty_input_and_many_events() -> None:
    empty = decode_deliveries(b"", [], [], "0")
    assert empty.num_rows == 0 and empty.schema == arrow_schema()
    _assert_same([_event(seq, props={"i": UInt(seq)}) for seq in range(3000)])


def test_spans_column_handles_nulls_repeats_and_bad_utf8() -> None:
    buffer = pa.py_buffer(b"..alpha..beta..\xff\xfe..")
    column = spans_column(buffer, [2, NULL, 9, 2, 9], [7, 0, 13, 7, 9], pa.string())
    assert column.to_pylist() == ["alpha", None, "beta", "alpha", ""]
    assert spans_column(buffer, [NULL, NULL], [0, 0], pa.string()).to_pylist() == [None, None]
    with pytest.raises(pa.ArrowInvalid):
        spans_column(buffer, [15], [17], pa.string())
    assert spans_column(buffer, [15], [17], pa.binary()).to_pylist() == [b"\xff\xfe"]


def test_decoding_keeps_pandas_out_of_the_worker() -> None:
    # pyarrow.array would import pandas: seconds of CPU in the first batch of every Python worker.
    code = (
        "import sys\n"
        "from pyspark_eventhubs.delivery_decoder import decode_deliveries\n"
        f"data = {_layout([_event(1, props={'a': 'b', 'n': None}), _event(2, bodies=[])])!r}\n"
        "batch = decode_deliveries(*data, '0')\n"
        "assert batch.num_rows == 2, batch\n"
        "assert 'pandas' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_messages_laid_out_alike_are_read_by_the_layout_of_the_last_walked_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Runs of messages laid out alike (one producer's events) take ``message_layout``'s path; every
    change of layout in between (value lengths, encodings, sections, keys) is walked again, and the
    batch equals the SDK path's either way."""
    big = 5_000_000_000  # sequence numbers encoded as long (0x81), as on a busy partition

    def usual(seq: int, body: bytes = b"b" * 200, **props: str) -> bytes:
        return _event(seq, body=body, props={"source": "bench", "kind": "reading", **props})

    messages = [
        usual(3),  # a small sequence number: smalllong, not the layout's shape
        *(usual(big + i, body=bytes([i]) * (i * 7)) for i in range(20)),  # bodies of any size
        usual(big + 20, body=b"w" * 70_000),  # vbin32: a new layout
        usual(big + 21, body=b"v" * 300),
        usual(big + 22, kind="sample"),  # a property value of another length
        usual(big + 23, kind="metric"),  # same length, other text: laid out alike
        usual(big + 24, kind="reading", schema="v1"),  # one more property
        usual(big + 25, kind="reading", schema="v2"),
        _event(big + 26, props={"kind": "reading", "source": "bench"}),  # other key order
        _event(big + 27, props={"kind": "reading", "source": "bench"}),
        _event(big + 28, props={"kind": "readinh", "sourcf": "bench"}),  # a key differs
        _event(big + 29, annotations=_annotations(big + 29, **{"x-opt-partition-key": "k"})),
        _event(big + 30, props={"n": UInt(30)}),  # not a text value: walked
        _event(big + 31, properties=[b"message-id"]),
        _event(big + 32, header=[True]),  # a header section: kept as constant bytes
        _event(big + 33, header=[True]),
        _event(big + 99_999_995),  # the offset text grows by a digit
        _event(big + 99_999_996),
        _event(big + 99_999_997, bodies=[b"one", b"two"]),  # several data sections
        _event(big + 99_999_998),
        _event(big + 99_999_999, bodies=[]),  # no body
        _event(big + 100_000_000),
    ]
    from pyspark_eventhubs import message_layout

    laid_out: list[int] = []
    made = message_layout.layout_of

    def counting(buf: bytes, pos: int, end: int) -> message_layout.MessageLayout | None:
        layout = made(buf, pos, end)
        laid_out.append(layout is not None)
        return layout

    monkeypatch.setattr(delivery_decoder, "layout_of", counting)
    fast, reference = _both(messages)
    assert fast.to_pylist() == reference.to_pylist()
    assert fast.equals(reference)
    # A layout is tried after each walked message without other annotations or a properties
    # section: the first (smalllong: none), the empty body, vbin32, "sample", schema, key order,
    # other key, UInt value (none), header, longer offset, no body (none), the last. The other 26
    # of the 41 messages (all but those and the partition-key, properties and several-data ones)
    # were read by a layout.
    assert laid_out == [False, True, True, True, True, True, True, False, True, True, False, True]
    monkeypatch.setattr(delivery_decoder, "LAYOUT_BUILDS", 0)
    monkeypatch.setattr(delivery_decoder, "LAYOUT_RETRY", 10**9)
    assert decode_deliveries(*_layout(messages), "2").equals(reference)  # the walk alone


def _decoded_in_both_modes(raw: bytes, starts: list[int], ends: list[int]) -> list[object]:
    """decode_deliveries' batch (as a list) or error type, compiled and pure Python."""
    from pyspark_eventhubs import native

    compiled = native.accel
    results: list[object] = []
    for accel in (compiled, None):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(native, "accel", accel)
            try:
                results.append(decode_deliveries(raw, starts, ends, "1").to_pylist())
            except Exception as error:  # the same refusal either way
                results.append(type(error))
    return results


def test_the_compiled_loop_decodes_the_runs_of_laid_out_messages(hot_loops: str) -> None:
    """The compiled loop takes every message the Python layout check would take (the walk runs only
    for the messages whose layout changed), with the same batch."""
    from pyspark_eventhubs import native

    messages = [_event(5_000_000_000 + i, body=b"x" * i, props={"k": "v"}) for i in range(50)]
    messages[30] = _event(5_000_000_030, props={"k": "longer value"})
    taken: list[int] = []
    if hot_loops == "compiled":
        decode = native.accel.decode_laid_out

        class Recording:
            def decode_laid_out(self, *args: object) -> int:
                resume = decode(*args)
                taken.append(resume - args[3])  # type: ignore[operator]
                return resume

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(native, "accel", Recording())
            fast, reference = _both(messages)
        # messages 1-29 by message 0's layout; 30 (a longer value) and 31 (the value as before)
        # walked, each after a compiled call that takes nothing; 32-49 by message 31's layout
        assert taken == [29, 0, 0, 18]
    else:
        fast, reference = _both(messages)
    assert fast.equals(reference)


@given(
    cuts=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=4),
    trim=st.integers(0, 3),
)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_damaged_messages_get_the_same_result_in_both_modes(cuts: list[tuple[int, int]], trim: int) -> None:
    """Bytes of laid-out messages changed anywhere (or a delivery cut short): the compiled loop hands
    back every message its layout no longer describes, so both modes give the same batch or the
    same error, and neither reads past the buffer."""
    messages = [_event(5_000_000_000 + i, body=b"y" * (20 + i), props={"a": "b"}) for i in range(12)]
    raw, starts, ends = _layout(messages)
    data = bytearray(raw)
    for at, value in cuts:
        data[8 + at % (len(data) - 8)] = value
    ends = [*ends[:-1], ends[-1] - trim]
    compiled, python = _decoded_in_both_modes(bytes(data), starts, ends)
    assert compiled == python
