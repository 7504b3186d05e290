"""Hand-made AMQP transfer frames as a broker writes them, and the fast receiver's frame scan
without a connection: for the scan's tests (tests/connector/test_transfer_layout.py) and
bench/decoder_loops.py."""

from __future__ import annotations

import struct

from pyspark_eventhubs.fast_receiver import FastPartitionReceiver

CHANNEL, HANDLE = 1, 3
NULL, TRUE, FALSE = b"\x40", b"\x41", b"\x42"


def _uint(value: int) -> bytes:
    return (
        b"\x43"
        if value == 0
        else (b"\x52" + bytes([value]) if value < 256 else b"\x70" + struct.pack(">I", value))
    )


def transfer(
    delivery_id: int | None,
    payload: bytes,
    *,
    more: bool = False,
    aborted: bool = False,
    handle: int = HANDLE,
    channel: int = CHANNEL,
) -> bytes:
    """One transfer frame as a broker writes it: 11 fields, list8."""
    if delivery_id is None:  # a continuation frame: no id, no tag
        id_and_tag = NULL + NULL
    else:
        id_and_tag = _uint(delivery_id) + b"\xa0\x08" + struct.pack(">Q", delivery_id)
    fields = (
        b"\x52" + bytes([handle])
        + id_and_tag
        + b"\x43"  # message-format 0
        + TRUE  # settled
        + (TRUE if more else FALSE)
        + NULL + NULL + FALSE  # rcv-settle-mode, state, resume
        + (TRUE if aborted else FALSE)
        + NULL  # batchable
    )  # fmt: skip
    performative = b"\x00\x53\x14\xc0" + bytes([len(fields) + 1, 11]) + fields
    body = performative + payload
    return struct.pack(">IBBH", 8 + len(body), 2, 0, channel) + body


class Scanner(FastPartitionReceiver):
    """A receiver's scan state and nothing else: no connection; the frames it would hand the SDK,
    its counters' updates and the frames it parsed field by field are recorded."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._scan_pos = 0
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._assembled: list[tuple[int, bytes]] = []
        self._partial = None
        self._channel, self._handle = CHANNEL, HANDLE
        self._layout = None
        self.to_sdk: list[int] = []
        self.counted = [0, 0]
        self.parsed = 0  # frames read field by field

    def _transfer(self, buf: bytearray, pos: int, end: int) -> int | None:
        self.parsed += 1
        return super()._transfer(buf, pos, end)

    def _account(self, frames: int, deliveries: int) -> None:
        self.counted[0] += frames
        self.counted[1] += deliveries

    def _to_sdk(self, channel: int, body: bytes, frame_type: int) -> None:
        self.to_sdk.append(channel)
