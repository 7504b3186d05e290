"""AMQP message handling: split a message into sections, unpack batches, stamp Event Hubs annotations.

An event is stored as the bytes a consumer receives: the producer's sections with the broker's
message annotations (sequence number, offset, enqueued time, partition key) merged in. Only the
message-annotations section is decoded; the body and properties stay as raw bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .codec import AmqpDecodeError, Described, Symbol, Timestamp, decode, encode, skip

BATCH_FORMAT = 0x80013700

HEADER = 0x70
DELIVERY_ANNOTATIONS = 0x71
MESSAGE_ANNOTATIONS = 0x72
PROPERTIES = 0x73
APPLICATION_PROPERTIES = 0x74
DATA = 0x75
AMQP_VALUE = 0x77
FOOTER = 0x78

PARTITION_KEY = Symbol("x-opt-partition-key")
SEQUENCE_NUMBER = Symbol("x-opt-sequence-number")
OFFSET = Symbol("x-opt-offset")
ENQUEUED_TIME = Symbol("x-opt-enqueued-time")
_BROKER_KEYS = (SEQUENCE_NUMBER, OFFSET, ENQUEUED_TIME)

# The $management node's vocabulary (request types, reply status properties, runtime-information keys).
HUB_TYPE = "com.microsoft:eventhub"
PARTITION_TYPE = "com.microsoft:partition"
STATUS_CODE = "status-code"
STATUS_DESCRIPTION = "status-description"
LAST_ENQUEUED_SEQUENCE_NUMBER = "last_enqueued_sequence_number"
LAST_ENQUEUED_OFFSET = "last_enqueued_offset"
LAST_ENQUEUED_TIME_UTC = "last_enqueued_time_utc"

_SYMBOLIC_SECTIONS = {
    "amqp:header:list": HEADER,
    "amqp:delivery-annotations:map": DELIVERY_ANNOTATIONS,
    "amqp:message-annotations:map": MESSAGE_ANNOTATIONS,
    "amqp:properties:list": PROPERTIES,
    "amqp:application-properties:map": APPLICATION_PROPERTIES,
    "amqp:data:binary": DATA,
    "amqp:amqp-sequence:list": 0x76,
    "amqp:amqp-value:*": AMQP_VALUE,
    "amqp:footer:map": FOOTER,
}


@dataclass
class Section:
    """One message section: its code and where it (and its value) lie in the message bytes."""

    code: int
    start: int
    value_start: int
    end: int


def split_sections(message: bytes | memoryview) -> list[Section]:
    """Split an encoded AMQP message into its sections (raises AmqpDecodeError if malformed)."""
    sections = []
    pos = 0
    n = len(message)
    while pos < n:
        start = pos
        if message[pos] != 0x00:
            raise AmqpDecodeError("message section is not a described value")
        if pos + 2 < n and message[pos + 1] == 0x53:
            code = message[pos + 2]
            value_start = pos + 3
        else:
            descriptor, value_start = decode(message, pos + 1)
            if isinstance(descriptor, str):
                code = _SYMBOLIC_SECTIONS.get(str(descriptor), -1)
            elif isinstance(descriptor, int):
                code = int(descriptor)
            else:
                raise AmqpDecodeError("message section descriptor is neither a ulong nor a symbol")
        end = skip(message, value_start)
        sections.append(Section(code, start, value_start, end))
        pos = end
    return sections


def decode_section_value(message: bytes | memoryview, section: Section) -> Any:
    """Decode the value of one section."""
    return decode(message, section.value_start)[0]


def unpack_delivery(payload: bytes, message_format: int | None) -> tuple[list[bytes], str | None]:
    """The events inside one delivery and the partition key set on it (if any).

    A batch (format 0x80013700) carries one data section per event, each holding an encoded message;
    any other format is one event.
    """
    sections = split_sections(payload)
    partition_key = None
    for s in sections:
        if s.code == MESSAGE_ANNOTATIONS:
            annotations = decode_section_value(payload, s)
            if isinstance(annotations, dict):
                key = annotations.get(PARTITION_KEY)
                partition_key = key.decode() if isinstance(key, bytes) else key
    if message_format != BATCH_FORMAT:
        return [payload], partition_key
    events = []
    for s in sections:
        if s.code == DATA:
            inner = decode_section_value(payload, s)
            if not isinstance(inner, bytes):
                raise AmqpDecodeError("batch data section does not hold binary")
            events.append(inner)
    return events, partition_key


def stamp_event(
    message: bytes, sequence_number: int, offset: int, enqueued_ms: int, partition_key: str | None
) -> tuple[bytes, int]:
    """Return the stored form of an event and where delivery annotations go.

    The result keeps the producer's sections with the broker's message annotations merged in, in
    AMQP 1.0's order (§3.2: header, delivery-annotations, message-annotations, ...). The producer's
    delivery annotations are kept and reach consumers, as the service passes them on (azure-eventhub's
    own live test ``test_send_amqp_annotated_message`` reads them back). The second value is the byte
    position right after the header section, where they start (see :func:`with_delivery_annotations`).
    """
    sections = split_sections(message)
    header = b""
    delivery_annotations = b""
    annotations: dict = {}
    rest = bytearray()
    for s in sections:
        if s.code == HEADER:
            header = bytes(message[s.start : s.end])
        elif s.code == MESSAGE_ANNOTATIONS:
            value = decode_section_value(message, s)
            if isinstance(value, dict):
                annotations.update(value)
        elif s.code == DELIVERY_ANNOTATIONS:
            delivery_annotations = bytes(message[s.start : s.end])
        else:
            rest += message[s.start : s.end]
    for k in _BROKER_KEYS:
        annotations.pop(k, None)
    annotations[SEQUENCE_NUMBER] = sequence_number
    annotations[OFFSET] = str(offset)
    annotations[ENQUEUED_TIME] = Timestamp(enqueued_ms)
    if partition_key is not None and PARTITION_KEY not in annotations:
        annotations[PARTITION_KEY] = partition_key
    stamped = header + delivery_annotations + encode(Described(MESSAGE_ANNOTATIONS, annotations))
    stamped += bytes(rest)
    return stamped, len(header)


_DELIVERY_ANNOTATIONS_PREFIX = bytes((0x00, 0x53, DELIVERY_ANNOTATIONS))


def with_delivery_annotations(payload: bytes, header_len: int, values: dict, encoded: bytes) -> bytes:
    """A stored event with ``values`` in its delivery annotations (the service's runtime metrics for
    a receiver that asked for them; ``encoded`` is their section, encoded once per round): merged
    into the producer's section when it has one (one section per message; the service's keys win),
    else that section inserted after the header."""
    if payload.startswith(_DELIVERY_ANNOTATIONS_PREFIX, header_len):
        end = skip(payload, header_len + 3)
        own = decode(payload, header_len + 3)[0]
        merged = {**own, **values} if isinstance(own, dict) else dict(values)
        return payload[:header_len] + encode(Described(DELIVERY_ANNOTATIONS, merged)) + payload[end:]
    return payload[:header_len] + encoded + payload[header_len:]


def build_message(
    body_value: Any = None,
    application_properties: dict | None = None,
    correlation_id: Any = None,
) -> bytes:
    """Encode a small reply message (properties with correlation-id, application properties, amqp-value)."""
    props = [None, None, None, None, None, correlation_id, None, None, None, None, None, None, None]
    out = encode(Described(PROPERTIES, props))
    if application_properties is not None:
        out += encode(Described(APPLICATION_PROPERTIES, application_properties))
    out += encode(Described(AMQP_VALUE, body_value))
    return out


def parse_request(payload: bytes) -> tuple[Any, dict, Any]:
    """Decode a management/CBS request: (message-id, application properties, amqp-value body)."""
    message_id = None
    app_props: dict = {}
    body = None
    message = memoryview(payload)
    for s in split_sections(message):
        if s.code == PROPERTIES:
            props = decode_section_value(message, s)
            if isinstance(props, list) and props:
                message_id = props[0]
        elif s.code == APPLICATION_PROPERTIES:
            value = decode_section_value(message, s)
            if isinstance(value, dict):
                app_props = {str(k): v for k, v in value.items()}
        elif s.code == AMQP_VALUE:
            body = decode_section_value(message, s)
    return message_id, app_props, body
