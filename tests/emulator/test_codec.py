"""The AMQP codec against itself and against the SDK's own encoder/decoder (no network)."""

from __future__ import annotations

import contextlib
import random
import struct
import subprocess
import sys
import uuid
from typing import Any

import pytest
from azure.eventhub._pyamqp import _decode as sdk_decode
from azure.eventhub._pyamqp import _encode as sdk_encode

from eventhubs_emulator import frames, messages
from eventhubs_emulator.codec import (
    MAX_DEPTH,
    MAX_ZERO_WIDTH_ELEMENTS,
    AmqpDecodeError,
    Described,
    Symbol,
    SymbolArray,
    Timestamp,
    UByte,
    UInt,
    ULong,
    UShort,
    decode,
    encode,
    skip,
)

VALUES = [
    None,
    True,
    False,
    0,
    -5,
    2**40,
    UInt(0),
    UInt(7),
    UInt(70000),
    ULong(0),
    ULong(9),
    ULong(2**40),
    UByte(3),
    UShort(500),
    Timestamp(1_700_000_000_123),
    1.5,
    "héllo",
    "x" * 300,
    b"\x00\x01",
    b"y" * 70000,
    Symbol("amqp:link:stolen"),
    uuid.UUID("12345678-1234-5678-1234-567812345678"),
    [],
    [1, "a", None, [UInt(2)]],
    {Symbol("k"): "v", "n": 1},
    Described(0x24, []),
    Described(Symbol("apache.org:selector-filter:string"), "amqp.annotation.x-opt-offset > '-1'"),
    SymbolArray([Symbol("ANONYMOUS"), Symbol("PLAIN")]),
]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_round_trip_keeps_value_and_type(value):
    data = encode(value)
    decoded, end = decode(data)
    assert end == len(data) == skip(data, 0)
    assert decoded == value
    assert type(decoded) is type(value) or value in (0, -5, 2**40) or isinstance(value, (list, dict))


def test_sdk_decodes_our_performatives_with_every_field():
    data = frames.frame(3, frames.BEGIN, [UShort(3), UInt(0), UInt(10), UInt(10), UInt(5), None, None, None])
    frame_type, fields = sdk_decode.decode_frame(memoryview(data)[8:])
    assert frame_type == frames.BEGIN
    assert len(fields) == 8 and fields[0] == 3 and fields[7] is None


def test_we_decode_sdk_encoded_values():
    out = bytearray()
    sdk_encode.encode_value(
        out, {sdk_encode.TYPE: "MAP", sdk_encode.VALUE: [({"TYPE": "SYMBOL", "VALUE": b"a"}, 5)]}
    )
    assert decode(bytes(out))[0] == {Symbol("a"): 5}
    out = bytearray()
    sdk_encode.encode_value(out, {b"key": [1, "two", None]})
    assert decode(bytes(out))[0] == {b"key": [1, "two", None]}


def test_transfer_frames_split_at_max_frame_size():
    payload = bytes(range(256)) * 20
    parts = frames.transfer_frames(1, 2, 3, 4, payload, max_frame_size=1000)
    assert all(len(p) <= 1000 for p in parts) and len(parts) > 1
    rebuilt = b""
    for i, part in enumerate(parts):
        frame_type, fields = sdk_decode.decode_frame(memoryview(part)[8:])
        assert frame_type == frames.TRANSFER and fields[1] == 3
        assert fields[5] is (i < len(parts) - 1)
        rebuilt += bytes(fields[11])
    assert rebuilt == payload


def test_truncated_or_unknown_input_raises_decode_error():
    with pytest.raises(AmqpDecodeError):
        decode(encode("hello")[:-1])
    with pytest.raises(AmqpDecodeError):
        decode(b"\xff")
    with pytest.raises(AmqpDecodeError):
        skip(b"\xb0\x00\x00\x10\x00abc", 0)


def test_padding_fills_missing_trailing_fields():
    assert frames.pad([1, 2], frames.ATTACH) == [1, 2] + [None] * 12


# Values for the field checks: ones that fit some kind, and ones at or past a kind's edge.
FIELD_VALUES = [
    None,
    True,
    False,
    0,
    -1,
    2**32,
    1.5,
    UByte(3),
    UShort(70),
    UInt(0),
    UInt(2**32 - 1),
    UInt(2**32),
    UInt(-1),
    ULong(2**64 - 1),
    ULong(2**64),
    Timestamp(5),
    Timestamp(-5),
    "name",
    Symbol("sym"),
    b"tag",
    bytearray(b"tag"),
    SymbolArray([Symbol("a")]),
    SymbolArray(),
    ["a", Symbol("b")],
    ["a", 1],
    {},
    {Symbol("k"): 1},
    Described(ULong(0x28), [None]),
    [],
]


@pytest.mark.parametrize("seed", range(3))
def test_the_field_checks_fast_path_answers_as_the_field_by_field_checks(seed):
    """``check_fields`` takes the common values at once and leaves the rest to the field-by-field
    checks: the same answer (and words) for random field lists, as received or padded."""
    rng = random.Random(seed)
    for code in frames.FIELDS:
        count = len(frames.FIELDS[code])
        for _ in range(2000):
            fields = [rng.choice(FIELD_VALUES) for _ in range(rng.randrange(count + 3))]
            expected = frames._why(code, frames.pad(fields, code))
            assert frames.check_fields(code, fields) == expected, fields
            assert frames.check_fields(code, frames.pad(fields, code)) == expected, fields


def test_field_checks_refuse_integers_out_of_range_and_needed_fields_left_out():
    check = frames.check_fields
    too_big = "flow field 'next-incoming-id' must be uint, got UInt 4294967296"
    assert check(frames.FLOW, [UInt(2**32)]) == too_big
    assert check(frames.FLOW, [True]) == "flow field 'next-incoming-id' must be uint, got bool True"
    assert check(frames.ATTACH, ["link"]) == "attach field 'handle' is mandatory"
    assert check(frames.ATTACH, ["link", UInt(0), False]) is None
    assert check(frames.OPEN, ["c", None, None, None, None, SymbolArray([Symbol("en")])]) is None


# ------------------------------------------------------------------------------------ hostile input


def _array(constructor: bytes, elements: bytes, count: int, large: bool = True) -> bytes:
    """An AMQP array: the shared element constructor, then the elements written without one."""
    body = constructor + elements
    if large:
        return b"\xf0" + struct.pack(">II", len(body) + 4, count) + body
    return bytes([0xE0, len(body) + 1, count]) + body


def _list(items: list[bytes], code: int = 0xD0) -> bytes:
    """An AMQP list (0xD0) or map (0xD1) of already encoded items, sizes as declared."""
    body = b"".join(items)
    return bytes([code]) + struct.pack(">II", len(body) + 4, len(items)) + body


def _peak_bytes(setup: str, statement: str) -> int:
    """The most memory ``statement`` holds at once beyond what ``setup`` made, by tracemalloc in a
    fresh interpreter: no other thread of the test process allocates during the measurement."""
    script = "\n".join(
        [
            "import struct, tracemalloc",
            "from eventhubs_emulator.codec import AmqpDecodeError, decode",
            setup,
            "tracemalloc.start()",
            "base = tracemalloc.get_traced_memory()[0]",
            statement,
            "print(tracemalloc.get_traced_memory()[1] - base)",
        ]
    )
    done = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip().splitlines()[-1])


ZERO_WIDTH = [0x40, 0x41, 0x42, 0x43, 0x44, 0x45]


@pytest.mark.parametrize("element", ZERO_WIDTH, ids=lambda c: f"0x{c:02x}")
@pytest.mark.parametrize("count", [1_000_000, 2**32 - 1])
def test_ten_byte_array_of_a_zero_width_type_is_refused_before_any_allocation(element, count):
    hostile = _array(bytes([element]), b"", count)
    assert len(hostile) == 10

    with pytest.raises(AmqpDecodeError, match=rf"array declares {count} elements of the zero-width"):
        decode(hostile)
    attempt = "try:\n    decode(hostile)\nexcept AmqpDecodeError:\n    pass"
    # decoded, 1_000_000 items would take megabytes
    assert _peak_bytes(f"hostile = {hostile!r}", attempt) < 64 * 1024


def test_zero_width_elements_up_to_the_cap_decode():
    assert decode(_array(b"\x40", b"", MAX_ZERO_WIDTH_ELEMENTS))[0] == [None] * MAX_ZERO_WIDTH_ELEMENTS
    lists = decode(_array(b"\x45", b"", 3))[0]
    assert lists == [[], [], []] and lists[0] is not lists[1]
    assert decode(_array(b"\x43", b"", 2, large=False)) == ([UInt(0), UInt(0)], 4)
    with pytest.raises(AmqpDecodeError, match=r"more than the 65536 left"):
        decode(_array(b"\x41", b"", MAX_ZERO_WIDTH_ELEMENTS + 1))


def test_the_zero_width_cap_is_for_one_whole_value_not_each_array():
    half = _array(b"\x40", b"", MAX_ZERO_WIDTH_ELEMENTS // 2 + 1)
    with pytest.raises(AmqpDecodeError, match=r"more than the 32767 left of the 65536"):
        decode(_list([half, half]))
    assert len(decode(_list([half]))[0][0]) == MAX_ZERO_WIDTH_ELEMENTS // 2 + 1  # a new call: a new allowance


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_array(b"\x50", b"", 2**32 - 1), r"array declares 4294967295 elements of type 0x50 in 0 bytes"),
        (_array(b"\x80", b"\x00" * 15, 2), r"array declares 2 elements of type 0x80 in 15 bytes"),
        (_array(b"\xa1", b"\x01a\x01b", 5), r"array declares 5 elements of type 0xa1 in 4 bytes"),
        (_array(b"\xa1", b"\x01a\x01b", 1), r"array of 1 elements leaves 2 of its declared bytes unused"),
        (_array(b"\xa1", b"\x01a\x05b", 2), r"declares 5 bytes where 1 remain"),
        (b"\xf0\xff\xff\xff\xff\xff\xff\xff\xff\x40", r"array declares 4294967295 bytes where 5 remain"),
        (b"\xf0\x00\x00\x00\x02\x00\x00", r"array of 2 bytes has no room for its count"),
        (_array(b"\x00\x53\x01\x00\x53\x02\x50", b"\x01", 1), r"more than one descriptor"),
        (_array(b"\x99", b"\x01", 1), r"unknown AMQP constructor 0x99 in an array"),
        (b"\xd0\x00\x00\x00\x04\xff\xff\xff\xff", r"list declares 4294967295 elements in 0 bytes"),
        (b"\xd1\x00\x00\x00\x05\xff\xff\xff\xff\x40", r"map declares 4294967295 elements in 1 bytes"),
        (b"\xd0\x00\xff\xff\xff\x00\x00\x00\x01\x40", r"list declares 16777215 bytes where 5 remain"),
        (b"\xc0\x03\x01\x40\x40", r"list of 1 elements leaves 1 of its declared bytes unused"),
        (b"\xc0\x03\x01\xa1\x05ab", r"string or binary declares 5 bytes where 0 remain"),
        (b"\xc0\x00", r"list of 0 bytes has no room for its count"),
        (b"\xc1\x02\x01\x40", r"map with an odd number of elements \(1\)"),
        (b"\xc1\x06\x02\x00\x53\x01\x40\x40", r"map key is or holds a described value"),
        (b"\x73\x00\x11\x00\x00", r"char 0x110000 is not a Unicode code point"),
        (b"\xa3\x01\xff", r"malformed AMQP value"),
        (b"\x00" * 100_000 + b"\x40", r"nested deeper than 64 levels"),
    ],
    ids=lambda v: v[:40] if isinstance(v, str) else "",
)
def test_sizes_and_counts_that_do_not_fit_are_named(data, message):
    with pytest.raises(AmqpDecodeError, match=message):
        decode(data)


def _nested_lists(depth: int) -> bytes:
    data = b"\x40"
    for _ in range(depth):
        data = _list([data])
    return data


def test_nesting_is_capped_with_a_decode_error_not_a_recursion_error():
    value, _ = decode(_nested_lists(MAX_DEPTH))
    for _ in range(MAX_DEPTH):
        value = value[0]
    assert value is None
    for too_deep in (MAX_DEPTH + 1, 2000):  # 2000 levels would overflow Python's stack
        with pytest.raises(AmqpDecodeError, match=r"nested deeper than 64 levels"):
            decode(_nested_lists(too_deep))
    with pytest.raises(AmqpDecodeError, match=r"nested deeper than 64 levels"):
        skip(b"\x00" * 100_000 + b"\x40", 0)
    arrays = _array(b"\x40", b"", 1)
    for _ in range(200):  # an array of arrays of ...: each level's element drops its 0xf0 constructor
        arrays = _array(b"\xf0", arrays[1:], 1)
    with pytest.raises(AmqpDecodeError, match=r"nested deeper than 64 levels"):
        decode(arrays)


def test_an_array_is_decoded_in_place_without_copying_the_rest_per_element():
    # 256 binaries of 4 KiB: the decoded elements hold ~1 MiB. A decoder that copies the rest of the
    # array for each element holds about two more copies of it at its peak (and copies 128 MiB in all).
    element = struct.pack(">I", 4096) + b"x" * 4096
    data = _array(b"\xb0", element * 256, 256)
    assert decode(data)[0] == [b"x" * 4096] * 256
    peak = _peak_bytes(f"data = {data!r}", "decoded = decode(data)[0]")
    assert peak < 1.5 * len(data)


# ------------------------------------------------------------------- arrays of every element type
#
# Each entry: element constructor, a random element value, and the element's bytes without its
# constructor, written here from the AMQP 1.0 spec (part 1.6) rather than with the codec's encoder.


def _text(rng: random.Random, n: int) -> str:
    ranges = [(0x20, 0x7F), (0xA0, 0xD800), (0xE000, 0x110000)]  # no lone surrogates: not UTF-8
    return "".join(chr(rng.randrange(*rng.choice(ranges))) for _ in range(n))


def _float32(rng: random.Random) -> float:
    return struct.unpack(">f", struct.pack(">f", rng.uniform(-1e30, 1e30)))[0]


def _sized(width: int, data: bytes) -> bytes:
    return (bytes([len(data)]) if width == 1 else struct.pack(">I", len(data))) + data


def _compound(width: int, count: int, body: bytes) -> bytes:
    if width == 1:
        return bytes([len(body) + 1, count]) + body
    return struct.pack(">II", len(body) + 4, count) + body


def _list_body(width: int, items: list) -> bytes:
    return _compound(width, len(items), b"".join(encode(x) for x in items))


def _map_body(width: int, items: dict) -> bytes:
    return _compound(width, 2 * len(items), b"".join(encode(k) + encode(x) for k, x in items.items()))


def _array_body(width: int, element: int, fmt: str, items: list) -> bytes:
    return _compound(width, len(items), bytes([element]) + b"".join(struct.pack(">" + fmt, x) for x in items))


ELEMENT_TYPES = {
    0x40: (lambda r: None, lambda v: b""),
    0x41: (lambda r: True, lambda v: b""),
    0x42: (lambda r: False, lambda v: b""),
    0x43: (lambda r: UInt(0), lambda v: b""),
    0x44: (lambda r: ULong(0), lambda v: b""),
    0x45: (lambda r: [], lambda v: b""),
    0x50: (lambda r: UByte(r.randrange(256)), lambda v: struct.pack(">B", v)),
    0x51: (lambda r: r.randrange(-128, 128), lambda v: struct.pack(">b", v)),
    0x52: (lambda r: UInt(r.randrange(256)), lambda v: struct.pack(">B", v)),
    0x53: (lambda r: ULong(r.randrange(256)), lambda v: struct.pack(">B", v)),
    0x54: (lambda r: r.randrange(-128, 128), lambda v: struct.pack(">b", v)),
    0x55: (lambda r: r.randrange(-128, 128), lambda v: struct.pack(">b", v)),
    0x56: (lambda r: r.random() < 0.5, lambda v: bytes([v])),
    0x60: (lambda r: UShort(r.randrange(2**16)), lambda v: struct.pack(">H", v)),
    0x61: (lambda r: r.randrange(-(2**15), 2**15), lambda v: struct.pack(">h", v)),
    0x70: (lambda r: UInt(r.randrange(2**32)), lambda v: struct.pack(">I", v)),
    0x71: (lambda r: r.randrange(-(2**31), 2**31), lambda v: struct.pack(">i", v)),
    0x72: (_float32, lambda v: struct.pack(">f", v)),
    0x73: (lambda r: chr(r.randrange(0x110000)), lambda v: struct.pack(">I", ord(v))),
    0x74: (lambda r: r.randbytes(4), lambda v: v),
    0x80: (lambda r: ULong(r.randrange(2**64)), lambda v: struct.pack(">Q", v)),
    0x81: (lambda r: r.randrange(-(2**63), 2**63), lambda v: struct.pack(">q", v)),
    0x82: (lambda r: r.uniform(-1e300, 1e300), lambda v: struct.pack(">d", v)),
    0x83: (lambda r: Timestamp(r.randrange(-(2**63), 2**63)), lambda v: struct.pack(">q", v)),
    0x84: (lambda r: r.randbytes(8), lambda v: v),
    0x94: (lambda r: r.randbytes(16), lambda v: v),
    0x98: (lambda r: uuid.UUID(bytes=r.randbytes(16)), lambda v: v.bytes),
    0xA0: (lambda r: r.randbytes(r.randrange(256)), lambda v: _sized(1, v)),
    0xB0: (lambda r: r.randbytes(r.randrange(600)), lambda v: _sized(4, v)),
    0xA1: (lambda r: _text(r, r.randrange(60)), lambda v: _sized(1, v.encode())),
    0xB1: (lambda r: _text(r, r.randrange(300)), lambda v: _sized(4, v.encode())),
    0xA3: (lambda r: Symbol(r.randbytes(r.randrange(128)).hex()[:255]), lambda v: _sized(1, v.encode())),
    0xB3: (lambda r: Symbol("s" * r.randrange(600)), lambda v: _sized(4, v.encode())),
    0xC0: (lambda r: [UByte(r.randrange(256))] * r.randrange(50), lambda v: _list_body(1, v)),
    0xD0: (lambda r: [_text(r, 3)] * r.randrange(50), lambda v: _list_body(4, v)),
    0xC1: (lambda r: {Symbol(f"k{i}"): i for i in range(r.randrange(20))}, lambda v: _map_body(1, v)),
    0xD1: (lambda r: {f"k{i}": None for i in range(r.randrange(40))}, lambda v: _map_body(4, v)),
    0xE0: (lambda r: [UShort(r.getrandbits(16))] * r.randrange(1, 9), lambda v: _array_body(1, 0x60, "H", v)),
    0xF0: (lambda r: [ULong(r.getrandbits(64))] * r.randrange(1, 9), lambda v: _array_body(4, 0x80, "Q", v)),
}  # fmt: skip


@pytest.mark.parametrize("element", sorted(ELEMENT_TYPES), ids=lambda c: f"0x{c:02x}")
def test_arrays_of_every_element_type_decode_to_their_elements(element):
    make, write = ELEMENT_TYPES[element]
    rng = random.Random(element)
    for trial in range(60):
        values = [make(rng) for _ in range(rng.randrange(1, 40) if trial else 1)]
        body = b"".join(write(v) for v in values)
        for large in (False, True):
            if not large and (len(body) > 240 or len(values) > 255):
                continue
            data = _array(bytes([element]), body, len(values), large)
            decoded, end = decode(data + b"\x40")  # a value after the array is not part of it
            assert end == len(data) == skip(data, 0)
            assert decoded == values and [type(v) for v in decoded] == [type(v) for v in values]
            assert type(decoded) is (SymbolArray if element in (0xA3, 0xB3) else list)
            described = _array(b"\x00\xa3\x03abc" + bytes([element]), body, len(values), large)
            assert decode(described)[0] == [Described(Symbol("abc"), v) for v in values]
            if body:
                with pytest.raises(AmqpDecodeError):  # the last element cut short
                    decode(_array(bytes([element]), body[:-1], len(values), large))


def test_an_empty_array_decodes_with_or_without_its_element_constructor():
    assert decode(b"\xe0\x01\x00") == (SymbolArray(), 3)  # as the SDK writes it
    assert decode(b"\xe0\x02\x00\xa3") == (SymbolArray(), 4)  # as the codec writes it
    assert decode(b"\xf0\x00\x00\x00\x08\x00\x00\x00\x00\x00\x53\x24\x70") == (SymbolArray(), 13)
    with pytest.raises(AmqpDecodeError, match=r"array of 0 elements leaves 1 of its declared bytes unused"):
        decode(b"\xe0\x03\x00\x50\x01")


# --------------------------------------------------------------- random input, a fixed budget of it
#
# Seeded, so every run checks the same inputs (hypothesis is not among the locked packages).


def _scalar(rng: random.Random) -> Any:
    choice = rng.randrange(18)
    if choice == 0:
        return None
    if choice == 1:
        return rng.random() < 0.5
    if choice == 2:
        return rng.choice([rng.randrange(-128, 128), rng.randrange(-(2**63), 2**63)])
    if choice == 3:
        return UInt(rng.choice([0, rng.randrange(256), rng.randrange(2**32)]))
    if choice == 4:
        return ULong(rng.choice([0, rng.randrange(256), rng.randrange(2**64)]))
    if choice == 5:
        return UByte(rng.randrange(256))
    if choice == 6:
        return UShort(rng.randrange(2**16))
    if choice == 7:
        return Timestamp(rng.randrange(-(2**63), 2**63))
    if choice == 8:
        return rng.choice([rng.uniform(-1e300, 1e300), float("inf"), -0.0])
    if choice == 9:
        return _text(rng, rng.choice([0, 5, 300]))
    if choice == 10:
        return rng.randbytes(rng.choice([0, 7, 300]))
    if choice == 11:
        return Symbol("x" * rng.choice([1, 20, 300]))
    if choice == 12:
        return uuid.UUID(int=rng.randrange(2**128))
    if choice == 13:
        return SymbolArray(Symbol(f"cap{i}" * rng.choice([1, 80])) for i in range(rng.randrange(4)))
    key = _key(rng)
    return list(key) if isinstance(key, tuple) else key  # a tuple decodes as a list


def _key(rng: random.Random) -> Any:
    """A value usable as a dict key (tuples encode as lists and decode back to tuples as keys)."""
    return rng.choice(
        [Symbol(f"k{rng.randrange(99)}"), f"key{rng.randrange(99)}", rng.randrange(-5, 5), ULong(7), (1, "a")]
    )


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    choice = rng.randrange(10) if depth < 6 else 9
    if choice < 2:
        return [_random_value(rng, depth + 1) for _ in range(rng.choice([0, 3, 300 if depth == 0 else 3]))]
    if choice < 4:
        return {_key(rng): _random_value(rng, depth + 1) for _ in range(rng.randrange(6))}
    if choice < 5:
        descriptor = rng.choice([ULong(rng.randrange(2**64)), Symbol("com.example:thing")])
        return Described(descriptor, _random_value(rng, depth + 1))
    return _scalar(rng)


_CONSTRUCTORS = [*sorted(ELEMENT_TYPES), 0x00]


def _hostile_input(rng: random.Random) -> bytes:
    kind = rng.randrange(4)
    if kind == 0:  # bytes drawn mostly from constructors and extreme values
        pool = [0x00, 0xFF, 0x01, *_CONSTRUCTORS]
        return bytes(rng.choice(pool) if rng.random() < 0.7 else rng.randrange(256) for _ in range(40))
    if kind == 3:  # a compound value's header with an extreme size and count
        code = rng.choice([0xC0, 0xC1, 0xD0, 0xD1, 0xE0, 0xF0])
        width = 4 if code & 0x10 else 1
        size, count = (rng.choice([0, 1, 2, 5, rng.randrange(256**width), 256**width - 1]) for _ in "sc")
        header = size.to_bytes(width, "big") + count.to_bytes(width, "big")
        return bytes([code]) + header + bytes(rng.choice(_CONSTRUCTORS) for _ in range(rng.randrange(12)))
    data = bytearray(encode(_random_value(rng)))  # a valid encoding (kind 1) or a message (2), mutated
    if kind == 2:
        data = bytearray(
            encode(Described(0x73, [_scalar(rng), None, None]))
            + encode(Described(0x74, {"a": _scalar(rng)}))
            + encode(Described(0x75, rng.randbytes(9)))
        )
    for _ in range(rng.randrange(1, 4)):
        i = rng.randrange(len(data))
        op = rng.randrange(4)
        if op == 0:
            data[i] = rng.randrange(256)
        elif op == 1:
            data[i : i + 4] = b"\xff\xff\xff\xff"
        elif op == 2 and i:
            del data[i:]
        else:
            data[i:i] = bytes([rng.choice(_CONSTRUCTORS)])
    return bytes(data)


def _objects(value: Any) -> int:
    """How many Python objects a decoded value is made of."""
    count, todo = 0, [value]
    while todo:
        item = todo.pop()
        count += 1
        if isinstance(item, list | tuple):
            todo.extend(item)
        elif isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, Described):
            todo += [item.descriptor, item.value]
    return count


def _check_hostile_inputs(seed: int, n: int) -> int:
    rng = random.Random(seed)
    decoded = 0
    for _ in range(n):
        data = _hostile_input(rng)
        try:
            value, end = decode(data)
        except AmqpDecodeError:
            pass
        else:
            decoded += 1
            assert end == skip(data, 0), data
            # Each object costs input bytes, except zero-width array elements (capped) and the
            # Described wrapping each element of a described array (one per element at most).
            assert _objects(value) <= 2 * (len(data) + MAX_ZERO_WIDTH_ELEMENTS), data
        for parse in (skip, messages.split_sections, messages.parse_request):
            with contextlib.suppress(AmqpDecodeError):
                parse(data) if parse is not skip else skip(data, 0)
        with contextlib.suppress(AmqpDecodeError):
            messages.unpack_delivery(data, messages.BATCH_FORMAT)
    return decoded


@pytest.mark.parametrize("seed", range(4))
def test_random_and_mutated_input_raises_only_decode_errors_and_stays_bounded(seed):
    decoded = _check_hostile_inputs(seed, 1000)
    assert 50 < decoded < 1000  # the inputs reach both outcomes


@pytest.mark.slow
def test_random_and_mutated_input_long_run():
    for seed in range(100, 140):
        _check_hostile_inputs(seed, 5000)


@pytest.mark.parametrize("seed", range(4))
def test_every_value_the_encoder_writes_decodes_back_to_itself(seed):
    rng = random.Random(seed)
    for _ in range(400):
        value = _random_value(rng)
        data = encode(value)
        decoded, end = decode(data)
        assert end == len(data) == skip(data, 0)
        assert decoded == value
        assert encode(decoded) == data  # the same AMQP types, byte for byte
    nan = decode(encode(float("nan")))[0]
    assert nan != nan
