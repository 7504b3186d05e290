"""The AMQP codec against itself and against the SDK's own encoder/decoder (no network)."""

from __future__ import annotations

import uuid

import pytest
from azure.eventhub._pyamqp import _decode as sdk_decode
from azure.eventhub._pyamqp import _encode as sdk_encode

from eventhubs_emulator import frames
from eventhubs_emulator.codec import (
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
