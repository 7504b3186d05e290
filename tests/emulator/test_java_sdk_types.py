"""The AMQP types of the $management and $cbs replies that the Java SDK (azure-eventhubs 3.x, proton-j,
under Microsoft's Scala Spark connector) casts: ``status-code`` and ``partition_count`` to ``Integer``
(an AMQP int; a long is a ClassCastException), ``partition_ids`` to ``String[]`` (an AMQP array of
strings, not a list). Read off the wire with a raw client; the Java SDK itself runs against the
emulator in tests/migration (slow, its own Spark 3.5 venv)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import struct
import time
from urllib.parse import quote_plus

import pytest

from eventhubs_emulator import frames
from eventhubs_emulator.codec import Described, UInt, decode, encode
from eventhubs_emulator.messages import APPLICATION_PROPERTIES, PROPERTIES
from tests.emulator.test_raw_protocol import RawClient

pytestmark = pytest.mark.integration

INT_CODES = (0x54, 0x71)  # smallint, int


def _sas_token(resource: str, key_name: str, key: str) -> str:
    expiry = int(time.time()) + 3600
    sig = base64.b64encode(hmac.new(key.encode(), f"{resource}\n{expiry}".encode(), hashlib.sha256).digest())
    return f"SharedAccessSignature sr={resource}&sig={quote_plus(sig.decode())}&se={expiry}&skn={key_name}"


def _read_transfer(client: RawClient) -> bytes:
    """The payload of the next transfer (frames before it are skipped)."""
    while True:
        size, doff, _type, _channel = struct.unpack(">IBBH", client._read_exact(8))
        body = client._read_exact(size - 8)[doff * 4 - 8 :]
        if not body:
            continue
        performative, end = decode(body)
        if int(performative.descriptor) == frames.TRANSFER:
            return body[end:]


def _management_reply(client: RawClient, app_properties: dict) -> bytes:
    source = Described(frames.SOURCE, ["$management"] + [None] * 10)
    target = Described(frames.TARGET, ["mgmt-client"] + [None] * 6)
    client.send(frames.ATTACH, ["mgmt:receiver", UInt(0), True, None, None, source, target])
    client.send(
        frames.ATTACH,
        ["mgmt:sender", UInt(1), False, None, None, Described(frames.SOURCE, ["mgmt-client"] + [None] * 10),
         Described(frames.TARGET, ["$management"] + [None] * 6), None, None, UInt(0)],
    )  # fmt: skip
    # Credit for the reply (handle 0).
    client.send(frames.FLOW, [UInt(0), UInt(100), UInt(0), UInt(100), UInt(0), UInt(0), UInt(10)])
    request = (
        encode(Described(PROPERTIES, ["request-1", None, None, None, "mgmt-client"] + [None] * 8))
        + encode(Described(APPLICATION_PROPERTIES, app_properties))
        + encode(Described(0x77, None))
    )
    transfer = encode(Described(frames.TRANSFER, [UInt(1), UInt(0), b"\x00", UInt(0), True, False]))
    client.sock.sendall(struct.pack(">IBBH", 8 + len(transfer) + len(request), 2, 0, 0) + transfer + request)
    return _read_transfer(client)


def _value_code(payload: bytes, key: str) -> int:
    """The constructor byte of the value that follows the map key ``key`` (an AMQP string) in ``payload``."""
    encoded = encode(key)
    at = payload.index(encoded)
    return payload[at + len(encoded)]


def test_management_replies_carry_the_services_types(emulator) -> None:
    resource = "sb://127.0.0.1/hub1"
    token = _sas_token(resource, emulator.config.key_name, emulator.config.key)
    client = RawClient(emulator.port)
    try:
        payload = _management_reply(
            client,
            {
                "operation": "READ",
                "name": "hub1",
                "type": "com.microsoft:eventhub",
                "security_token": token,
            },
        )
    finally:
        client.close()
    assert _value_code(payload, "status-code") in INT_CODES
    assert _value_code(payload, "partition_count") in INT_CODES
    at = payload.index(encode("partition_ids")) + len(encode("partition_ids"))
    assert payload[at] == 0xE0  # array8: size, count, then one element constructor
    assert payload[at + 3] == 0xA1  # str8-utf8
    assert payload[at + 2] == 2


def test_a_refused_management_request_has_an_int_status_code(emulator) -> None:
    client = RawClient(emulator.port)
    try:
        payload = _management_reply(
            client, {"operation": "READ", "name": "hub1", "type": "com.microsoft:eventhub"}
        )
    finally:
        client.close()
    assert _value_code(payload, "status-code") in INT_CODES
