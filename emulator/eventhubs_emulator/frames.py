"""AMQP 1.0 frames and performatives: codes, field lists, and encoders that write every field.

The SDK's decoder indexes performative fields by position, so every performative we send carries
all of its fields (explicit nulls). Performatives we receive are padded to their full length.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from .codec import Described, Symbol, Timestamp, UByte, UInt, ULong, UShort, encode_into

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"

FRAME_AMQP = 0
FRAME_SASL = 1

# Performative descriptor codes.
OPEN, BEGIN, ATTACH, FLOW, TRANSFER, DISPOSITION, DETACH, END, CLOSE = range(0x10, 0x19)
SASL_MECHANISMS, SASL_INIT, SASL_CHALLENGE, SASL_RESPONSE, SASL_OUTCOME = range(0x40, 0x45)
ERROR = 0x1D
SOURCE = 0x28
TARGET = 0x29
ACCEPTED = 0x24
REJECTED = 0x25

# Number of fields of each performative (AMQP 1.0 core spec, part 2.7 and 5.3).
FIELD_COUNT = {
    OPEN: 10,
    BEGIN: 8,
    ATTACH: 14,
    FLOW: 11,
    TRANSFER: 11,
    DISPOSITION: 6,
    DETACH: 3,
    END: 1,
    CLOSE: 1,
    SASL_MECHANISMS: 1,
    SASL_INIT: 3,
    SASL_CHALLENGE: 1,
    SASL_RESPONSE: 1,
    SASL_OUTCOME: 2,
}

# Field indexes used by the connection handler (names follow the spec).
ATTACH_NAME, ATTACH_HANDLE, ATTACH_ROLE = 0, 1, 2
ATTACH_SOURCE, ATTACH_TARGET = 5, 6
ATTACH_INITIAL_DELIVERY_COUNT = 9
ATTACH_DESIRED_CAPABILITIES = 12
ATTACH_PROPERTIES = 13

_HEADER = struct.Struct(">IBBH")
# Transfer frame with fixed-width fields: handle, delivery-id, delivery-tag (8 bytes), message-format 0,
# settled true, more, and five nulls. 34 bytes of performative after the 8-byte frame header.
_TRANSFER = struct.Struct(">IBBH6sBIBIBBQ3s5s")
_TRANSFER_PREFIX = b"\x00\x53\x14\xc0\x1d\x0b"
_NULLS5 = b"\x40" * 5
TRANSFER_OVERHEAD = _TRANSFER.size


class Error:
    """An AMQP error (condition symbol, description) ready to be placed in a performative."""

    @staticmethod
    def make(condition: str, description: str | None = None, info: dict | None = None) -> Described:
        """Build the described ``amqp:error`` value."""
        return Described(ERROR, [Symbol(condition), description, info])


# The types of the fields a peer sends us (AMQP 1.0 part 2.7 and 5.3), by name; "!" marks the ones
# we need and refuse when absent. Kinds: uint/ushort/ubyte/ulong (an integer in range), bool,
# string, symbol, binary, symbols (one symbol or an array), map, described (a source, target,
# error or delivery state), any. Checked before a handler reads a field (``check_fields``).
FIELDS: dict[int, tuple[tuple[str, str], ...]] = {
    SASL_INIT: (("mechanism!", "symbol"), ("initial-response", "binary"), ("hostname", "string")),
    OPEN: (
        ("container-id", "string"),
        ("hostname", "string"),
        ("max-frame-size", "uint"),
        ("channel-max", "ushort"),
        ("idle-time-out", "uint"),
        ("outgoing-locales", "symbols"),
        ("incoming-locales", "symbols"),
        ("offered-capabilities", "symbols"),
        ("desired-capabilities", "symbols"),
        ("properties", "map"),
    ),
    BEGIN: (
        ("remote-channel", "ushort"),
        ("next-outgoing-id", "uint"),
        ("incoming-window", "uint"),
        ("outgoing-window", "uint"),
        ("handle-max", "uint"),
        ("offered-capabilities", "symbols"),
        ("desired-capabilities", "symbols"),
        ("properties", "map"),
    ),
    ATTACH: (
        ("name!", "string"),
        ("handle!", "uint"),
        ("role!", "bool"),
        ("snd-settle-mode", "ubyte"),
        ("rcv-settle-mode", "ubyte"),
        ("source", "described"),
        ("target", "described"),
        ("unsettled", "map"),
        ("incomplete-unsettled", "bool"),
        ("initial-delivery-count", "uint"),
        ("max-message-size", "ulong"),
        ("offered-capabilities", "symbols"),
        ("desired-capabilities", "symbols"),
        ("properties", "map"),
    ),
    FLOW: (
        ("next-incoming-id", "uint"),
        ("incoming-window", "uint"),
        ("next-outgoing-id", "uint"),
        ("outgoing-window", "uint"),
        ("handle", "uint"),
        ("delivery-count", "uint"),
        ("link-credit", "uint"),
        ("available", "uint"),
        ("drain", "bool"),
        ("echo", "bool"),
        ("properties", "map"),
    ),
    TRANSFER: (
        ("handle!", "uint"),
        ("delivery-id", "uint"),
        ("delivery-tag", "binary"),
        ("message-format", "uint"),
        ("settled", "bool"),
        ("more", "bool"),
        ("rcv-settle-mode", "ubyte"),
        ("state", "described"),
        ("resume", "bool"),
        ("aborted", "bool"),
        ("batchable", "bool"),
    ),
    DISPOSITION: (
        ("role", "bool"),
        ("first", "uint"),
        ("last", "uint"),
        ("settled", "bool"),
        ("state", "described"),
        ("batchable", "bool"),
    ),
    DETACH: (("handle!", "uint"), ("closed", "bool"), ("error", "described")),
    END: (("error", "described"),),
    CLOSE: (("error", "described"),),
}
#: Performative names as the spec writes them (for messages).
NAMES = {
    SASL_INIT: "sasl-init",
    OPEN: "open",
    BEGIN: "begin",
    ATTACH: "attach",
    FLOW: "flow",
    TRANSFER: "transfer",
    DISPOSITION: "disposition",
    DETACH: "detach",
    END: "end",
    CLOSE: "close",
}


def _integer_below(limit: int) -> Callable[[Any], bool]:
    def fits(value: Any) -> bool:
        return isinstance(value, int) and value is not True and value is not False and 0 <= value < limit

    return fits


def _symbols(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))


# What each kind accepts (integers by range, not by their AMQP width: a uint sent as a ulong fits).
_KINDS: dict[str, Callable[[Any], bool]] = {
    "ubyte": _integer_below(2**8),
    "ushort": _integer_below(2**16),
    "uint": _integer_below(2**32),
    "ulong": _integer_below(2**64),
    "bool": lambda value: isinstance(value, bool),
    "string": lambda value: isinstance(value, str),
    "symbol": lambda value: isinstance(value, str),
    "binary": lambda value: isinstance(value, bytes),
    "symbols": _symbols,
    "map": lambda value: isinstance(value, dict),
    "described": lambda value: isinstance(value, Described),
}
# FIELDS compiled once: per performative, (field name, kind, its check, whether it is needed).
_CHECKS: dict[int, tuple[tuple[str, str, Callable[[Any], bool], bool], ...]] = {
    code: tuple((name.rstrip("!"), kind, _KINDS[kind], name.endswith("!")) for name, kind in fields)
    for code, fields in FIELDS.items()
}


# The fast path of ``check_fields``, built from FIELDS: per performative, how many fields must be
# there for its needed ones to be, and per field the exact types of the values that fit it, each with
# the width in bits an integer must fit in (None for other types, and for null: it fits the fields
# not needed). It takes only values the field's check takes; any other value (a symbol array, an
# integer out of range, a bool for an integer, a subclass, a needed field null or left out) goes to
# the checks above, which decide and word the answer.
_INTEGERS = (int, UByte, UShort, UInt, ULong, Timestamp)
_BITS = {"ubyte": 8, "ushort": 16, "uint": 32, "ulong": 64}
_TYPES = {
    "bool": (bool,),
    "string": (str, Symbol),
    "symbol": (str, Symbol),
    "binary": (bytes,),
    "symbols": (str, Symbol),
    "map": (dict,),
    "described": (Described,),
}


def _fits_at_once(name: str, kind: str) -> dict[type, int | None]:
    bits = _BITS.get(kind)
    fits: dict[type, int | None] = dict.fromkeys(_INTEGERS if bits else _TYPES[kind], bits)
    if not name.endswith("!"):
        fits[type(None)] = None
    return fits


_FAST: dict[int, tuple[int, tuple[dict[type, int | None], ...]]] = {
    code: (
        max((i + 1 for i, (name, _) in enumerate(fields) if name.endswith("!")), default=0),
        tuple(_fits_at_once(name, kind) for name, kind in fields),
    )
    for code, fields in FIELDS.items()
}


def check_fields(code: int, fields: list) -> str | None:
    """Why a received performative's ``fields`` break its type (AMQP 1.0), or None when they fit.

    Only the fields the spec defines are checked (extra trailing ones are ignored, as AMQP allows
    for newer versions); a null, or a field left out at the end, fits any field that is not marked
    as needed. ``fields`` may be the list as received or padded (``pad``): the answer is the same.
    """
    fast = _FAST.get(code)
    if fast is None:
        return None
    needed_up_to, fits_at_once = fast
    if len(fields) >= needed_up_to:
        try:
            # zip stops at the shorter, as meant; strict=False (a keyword) would cost 0.1 µs a call
            for value, fits in zip(fields, fits_at_once):  # noqa: B905
                bits = fits[type(value)]  # KeyError: a type left to the checks
                if bits is not None and value >> bits:  # 0 exactly when 0 <= value < 2**bits
                    break
            else:
                return None
        except KeyError:
            pass
    return _why(code, fields)


def _why(code: int, fields: list) -> str | None:
    """``check_fields`` field by field: the first field that does not fit, in words (None if all fit)."""
    checks = _CHECKS[code]
    fields = list(fields) + [None] * (len(checks) - len(fields))
    for (name, kind, fits, needed), value in zip(checks, fields, strict=False):
        if value is None:
            if needed:
                return f"{NAMES[code]} field {name!r} is mandatory"
        elif not fits(value):
            shown = repr(value)
            shown = shown if len(shown) <= 40 else shown[:37] + "..."
            return f"{NAMES[code]} field {name!r} must be {kind}, got {type(value).__name__} {shown}"
    return None


def pad(fields: list, code: int) -> list:
    """Pad a received performative's field list with nulls up to its full length."""
    need = FIELD_COUNT.get(code, 0)
    if len(fields) < need:
        return list(fields) + [None] * (need - len(fields))
    return list(fields)


def frame(channel: int, code: int, fields: list, payload: bytes = b"", frame_type: int = FRAME_AMQP) -> bytes:
    """Encode one frame holding the performative ``code`` with all its ``fields`` (and a payload)."""
    need = FIELD_COUNT[code]
    if len(fields) != need:
        raise ValueError(f"performative 0x{code:02x} needs {need} fields, got {len(fields)}")
    body = bytearray()
    encode_into(body, Described(code, list(fields)))
    size = 8 + len(body) + len(payload)
    return _HEADER.pack(size, 2, frame_type, channel) + bytes(body) + payload


def transfer_frames(
    channel: int, handle: int, delivery_id: int, tag: int, payload: bytes, max_frame_size: int
) -> list[bytes]:
    """Encode one pre-settled delivery as transfer frames, split with ``more`` at the max frame size."""
    room = max_frame_size - TRANSFER_OVERHEAD
    n = len(payload)
    if n <= room:
        return [_transfer_header(channel, handle, delivery_id, tag, n, more=False) + payload]
    out = []
    view = memoryview(payload)
    start = 0
    while start < n:
        chunk = view[start : start + room]
        start += len(chunk)
        header = _transfer_header(channel, handle, delivery_id, tag, len(chunk), more=start < n)
        out.append(header + bytes(chunk))
    return out


def _transfer_header(channel: int, handle: int, delivery_id: int, tag: int, size: int, more: bool) -> bytes:
    """Frame header and transfer performative of one frame carrying ``size`` payload bytes."""
    return _TRANSFER.pack(
        TRANSFER_OVERHEAD + size,
        2,
        0,
        channel,
        _TRANSFER_PREFIX,
        0x70,
        handle,
        0x70,
        delivery_id,
        0xA0,
        8,
        tag,
        b"\x43\x41\x41" if more else b"\x43\x41\x42",  # message-format 0, settled, more
        _NULLS5,
    )


EMPTY_FRAME = _HEADER.pack(8, 2, 0, 0)


def sasl_mechanisms(mechanisms: list[str]) -> bytes:
    """The server's sasl-mechanisms frame."""
    from .codec import SymbolArray

    return frame(0, SASL_MECHANISMS, [SymbolArray(Symbol(m) for m in mechanisms)], frame_type=FRAME_SASL)


SASL_OK = 0
SASL_AUTH = 1  # authentication failed: bad credentials


def sasl_outcome(code: int, additional_data: bytes | None = None) -> bytes:
    """The server's sasl-outcome frame (``SASL_OK`` or ``SASL_AUTH``)."""
    return frame(0, SASL_OUTCOME, [UByte(code), additional_data], frame_type=FRAME_SASL)


def uint_or_none(value: Any) -> UInt | None:
    """Wrap an int as AMQP uint (None stays null)."""
    return None if value is None else UInt(value)
