"""Partition key → partition, mapped the way the Event Hubs service maps it.

The service hashes the key's UTF-8 bytes with Bob Jenkins' lookup3 (``hashlittle2``, both seeds 0),
keeps the low 16 bits of ``c ^ b`` as a signed short ``h``, and picks the partition at index
``|h| mod partition_count`` (C#'s ``Math.Abs(h % count)``: the remainder takes the sign of ``h``).
The Azure SDKs for .NET and Java carry the same function for their buffered producers, described as a
direct port of the service's gateway code; see docs/emulator.md for what the Python SDK does differently.

Written here from the published lookup3 algorithm (public domain); stdlib only.
"""

from __future__ import annotations

import struct

_MASK = 0xFFFFFFFF
_WORDS = struct.Struct("<3I")


def _rot(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & _MASK


def _mix(a: int, b: int, c: int) -> tuple[int, int, int]:
    a = ((a - c) & _MASK) ^ _rot(c, 4)
    c = (c + b) & _MASK
    b = ((b - a) & _MASK) ^ _rot(a, 6)
    a = (a + c) & _MASK
    c = ((c - b) & _MASK) ^ _rot(b, 8)
    b = (b + a) & _MASK
    a = ((a - c) & _MASK) ^ _rot(c, 16)
    c = (c + b) & _MASK
    b = ((b - a) & _MASK) ^ _rot(a, 19)
    a = (a + c) & _MASK
    c = ((c - b) & _MASK) ^ _rot(b, 4)
    b = (b + a) & _MASK
    return a, b, c


def _final(a: int, b: int, c: int) -> tuple[int, int, int]:
    c = ((c ^ b) - _rot(b, 14)) & _MASK
    a = ((a ^ c) - _rot(c, 11)) & _MASK
    b = ((b ^ a) - _rot(a, 25)) & _MASK
    c = ((c ^ b) - _rot(b, 16)) & _MASK
    a = ((a ^ c) - _rot(c, 4)) & _MASK
    b = ((b ^ a) - _rot(a, 14)) & _MASK
    c = ((c ^ b) - _rot(b, 24)) & _MASK
    return a, b, c


def lookup3_pair(data: bytes, seed1: int = 0, seed2: int = 0) -> tuple[int, int]:
    """lookup3's ``hashlittle2``: the two 32-bit hashes ``(c, b)`` of ``data``.

    ``seed1`` is the primary seed (``*pc`` in lookup3.c), ``seed2`` the secondary (``*pb``).
    """
    length = len(data)
    a = b = c = (0xDEADBEEF + length + seed1) & _MASK
    c = (c + seed2) & _MASK
    if length == 0:
        return c, b
    pos = 0
    while length - pos > 12:  # every 12-byte block but the last one is mixed
        w0, w1, w2 = _WORDS.unpack_from(data, pos)
        a, b, c = _mix((a + w0) & _MASK, (b + w1) & _MASK, (c + w2) & _MASK)
        pos += 12
    # The last 1..12 bytes are added as little-endian words; zero padding adds nothing, exactly as the
    # byte-by-byte tail of lookup3.c does.
    w0, w1, w2 = _WORDS.unpack(data[pos:].ljust(12, b"\0"))
    a, b, c = _final((a + w0) & _MASK, (b + w1) & _MASK, (c + w2) & _MASK)
    return c, b


def partition_key_hash(partition_key: str) -> int:
    """The service's 16-bit signed hash code of a partition key."""
    c, b = lookup3_pair(partition_key.encode("utf-8"))
    h = (c ^ b) & 0xFFFF
    return h - 0x10000 if h >= 0x8000 else h


def partition_index(partition_key: str, partition_count: int) -> int:
    """The index of the partition (0-based, in partition id order) the service picks for a key."""
    return abs(partition_key_hash(partition_key)) % partition_count
