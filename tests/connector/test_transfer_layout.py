"""The fast receiver's frame scan on hand-made AMQP transfer frames: a frame laid out as the last
plain transfer is taken by comparing bytes (``_TransferLayout``); anything else — the first frame
of a multi-frame delivery, its continuation, an aborted delivery, another link or channel, a
different delivery-id encoding — must still be read field by field, with the same deliveries."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.amqp_frames import CHANNEL, HANDLE, Scanner, transfer

# Every test runs with the compiled loops and with the pure-Python ones (conftest.hot_loops).
pytestmark = pytest.mark.usefixtures("hot_loops")


def scan(frames: list[bytes], split: int | None = None) -> tuple[list[bytes], Scanner]:
    """The delivered messages of ``frames`` (fed whole, or in two pieces cut at byte ``split``)."""
    scanner = Scanner()
    data = b"".join(frames)
    pieces = [data] if split is None else [data[:split], data[split:]]
    messages: list[bytes] = []
    for piece in pieces:
        scanner._buf += piece
        scanner._scan(10**6)
        block, starts, ends = scanner._take_block()
        messages += [block[s:e] for s, e in zip(starts, ends, strict=True)]
    return messages, scanner


def test_every_kind_of_transfer_after_a_plain_one_is_read_as_before() -> None:
    frames = [
        transfer(0, b"m0"),  # uint0 delivery-id
        transfer(1, b"m1"),  # smalluint: a new layout
        transfer(2, b"m2-longer payload"),  # taken by the layout
        transfer(3, b"m3-a", more=True),  # first frame of a multi-frame delivery
        transfer(None, b"m3-b", more=True),
        transfer(None, b"m3-c"),
        transfer(4, b"m4"),
        transfer(5, b"lost", aborted=True),  # the broker gave up: dropped
        transfer(6, b"other link", handle=HANDLE + 1),  # not ours: the SDK's
        transfer(7, b"other channel", channel=CHANNEL + 1),
        transfer(300, b"m300"),  # uint delivery-id: another layout
        transfer(301, b"m301"),
        transfer(302, b"m302", more=True),
        transfer(None, b"-end"),
        transfer(303, b"m303"),
    ]
    expected = [
        b"m0",
        b"m1",
        b"m2-longer payload",
        b"m3-am3-bm3-c",
        b"m4",
        b"m300",
        b"m301",
        b"m302-end",
        b"m303",
    ]
    messages, scanner = scan(frames)
    assert messages == expected
    assert scanner.to_sdk == [CHANNEL, CHANNEL + 1]
    # m2, m4, m301 and m303 were taken by the layout of the plain transfer before them
    assert scanner.parsed == len(frames) - 4
    # every transfer of this link is counted (the SDK's session window), the aborted one as done
    assert scanner.counted == [13, 10]
    # frames cut anywhere arrive in two reads: the same deliveries
    total = len(b"".join(frames))
    for split in range(1, total, 7):
        assert scan(frames, split)[0] == expected, split


def test_a_frame_cut_short_is_never_taken_by_the_layout() -> None:
    plain = transfer(1, b"m1")
    cut = transfer(2, b"m2")[:-2]  # the frame's size says more than the buffer holds
    messages, scanner = scan([plain, cut])
    assert messages == [b"m1"]
    assert scanner._scan_pos == 0 and len(scanner._buf) == len(cut)


def _scanned_in_both_modes(data: bytes) -> list[object]:
    """What ``_scan`` makes of ``data`` (deliveries, frames handed to the SDK, counters; or the
    error type), with the compiled loop and with the pure-Python one."""
    from pyspark_eventhubs import native

    compiled = native.accel
    results: list[object] = []
    for accel in (compiled, None):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(native, "accel", accel)
            scanner = Scanner()
            scanner._buf += data
            try:
                scanner._scan(10**6)
                block, starts, ends = scanner._take_block()
                messages = [block[s:e] for s, e in zip(starts, ends, strict=True)]
                results.append((messages, scanner.to_sdk, scanner.counted, scanner.parsed))
            except Exception as error:
                results.append(type(error))
    return results


@given(
    cuts=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3),
    trim=st.integers(0, 40),
)
@settings(max_examples=150, deadline=None)
def test_damaged_frames_get_the_same_result_in_both_modes(cuts: list[tuple[int, int]], trim: int) -> None:
    """Bytes changed anywhere in a run of plain transfers (sizes, channels, fields, heartbeats) or
    the run cut short: the compiled loop takes only frames laid out as the last plain one, so both
    modes find the same deliveries, hand the SDK the same frames, or fail alike."""
    frames = [transfer(i, b"event-%d" % i) for i in range(1, 9)]
    frames.insert(4, struct.pack(">IBBH", 8, 2, 0, 0))  # a heartbeat between them
    data = bytearray(b"".join(frames))
    for at, value in cuts:
        data[at % len(data)] = value
    compiled, python = _scanned_in_both_modes(bytes(data[: len(data) - trim]))
    assert compiled == python
