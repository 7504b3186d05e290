"""Protocol details checked with a tiny raw AMQP client (the SDK cannot be made to do these)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import socket
import struct
import time
from urllib.parse import quote_plus

import pytest

from eventhubs_emulator import frames
from eventhubs_emulator.codec import Described, Symbol, UInt, UShort, decode, encode
from eventhubs_emulator.messages import build_message

pytestmark = pytest.mark.integration


class RawClient:
    """SASL ANONYMOUS + AMQP header + Open/Begin over a plain socket; reads frames back."""

    def __init__(self, port: int, idle_timeout_ms: int | None = None) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buffer = b""
        self.sock.sendall(frames.SASL_HEADER)
        assert self._read_exact(8) == frames.SASL_HEADER
        code, fields = self.read_frame()
        assert code == frames.SASL_MECHANISMS and Symbol("ANONYMOUS") in fields[0]
        self.sock.sendall(frames.frame(0, frames.SASL_INIT, [Symbol("ANONYMOUS"), b"", None], frame_type=1))
        code, fields = self.read_frame()
        assert code == frames.SASL_OUTCOME and fields[0] == 0
        self.sock.sendall(frames.AMQP_HEADER)
        assert self._read_exact(8) == frames.AMQP_HEADER
        idle = UInt(idle_timeout_ms) if idle_timeout_ms else None
        self.send(
            frames.OPEN, ["raw", "127.0.0.1", UInt(65536), UShort(8), idle, None, None, None, None, None]
        )
        code, fields = self.read_frame()
        assert code == frames.OPEN and len(fields) == 10
        self.send(frames.BEGIN, [None, UInt(0), UInt(100), UInt(100), UInt(10), None, None, None])
        code, fields = self.read_frame()
        assert code == frames.BEGIN and len(fields) == 8 and fields[0] == 0

    def send(self, code: int, fields: list) -> None:
        """Send a performative with exactly these fields (trailing ones may be left out, as AMQP allows)."""
        body = encode(Described(code, fields))
        self.sock.sendall(struct.pack(">IBBH", 8 + len(body), 2, 0, 0) + body)

    def _read_exact(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buffer += chunk
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def read_frame(self) -> tuple[int | None, list]:
        """The next frame's performative code and fields (None, [] for an empty frame)."""
        size, doff, _type, _channel = struct.unpack(">IBBH", self._read_exact(8))
        body = self._read_exact(size - 8)[doff * 4 - 8 :]
        if not body:
            return None, []
        value, _ = decode(body)
        return int(value.descriptor), value.value

    def close(self) -> None:
        self.sock.close()


def test_every_performative_field_is_written(emulator):
    client = RawClient(emulator.port)
    try:
        source = Described(frames.SOURCE, ["$cbs"] + [None] * 10)
        target = Described(frames.TARGET, ["$cbs"] + [None] * 6)
        # A short attach (6 of 14 fields) is padded by the emulator; its reply has all 14.
        client.send(frames.ATTACH, ["cbs-receiver", UInt(0), True, None, None, source])
        code, fields = client.read_frame()
        assert code == frames.ATTACH and len(fields) == 14
        client.send(
            frames.ATTACH, ["cbs-sender", UInt(1), False, None, None, source, target, None, None, UInt(0)]
        )
        code, fields = client.read_frame()
        assert code == frames.ATTACH and len(fields) == 14 and fields[2] is True
        code, fields = client.read_frame()
        assert code == frames.FLOW and len(fields) == 11 and fields[6] > 0  # credit for the sender
        client.send(frames.DETACH, [UInt(1), True])
        code, fields = client.read_frame()
        assert code == frames.DETACH and len(fields) == 3
        client.send(frames.END, [])
        code, fields = client.read_frame()
        assert code == frames.END and fields == [None]
    finally:
        client.close()


def test_attach_without_a_token_is_unauthorized(emulator):
    client = RawClient(emulator.port)
    try:
        source = Described(frames.SOURCE, ["hub1/ConsumerGroups/$Default/Partitions/0"] + [None] * 10)
        client.send(frames.ATTACH, ["consumer", UInt(0), True, None, None, source, None, None, None, None])
        code, fields = client.read_frame()
        assert code == frames.ATTACH
        code, fields = client.read_frame()
        assert code == frames.DETACH and fields[1] is True
        assert fields[2].value[0] == "amqp:unauthorized-access"
    finally:
        client.close()


def test_heartbeats_when_the_client_asks_for_an_idle_timeout(emulator):
    client = RawClient(emulator.port, idle_timeout_ms=5000)  # the emulator's floor (limits.py)
    try:
        client.sock.settimeout(4)
        assert client.read_frame() == (None, [])  # an empty frame within half the idle timeout
    finally:
        client.close()


def _closed_with(client: RawClient) -> str:
    """The error condition of the CLOSE the emulator answers with (frames before it are skipped)."""
    while True:
        code, fields = client.read_frame()
        if code == frames.CLOSE:
            return str(fields[0].value[0])


def test_an_attach_on_a_handle_in_use_ends_the_connection_and_releases_its_links(emulator):
    client = RawClient(emulator.port)
    try:
        source = Described(frames.SOURCE, ["$cbs"] + [None] * 10)
        client.send(frames.ATTACH, ["first", UInt(0), True, None, None, source])
        assert client.read_frame()[0] == frames.ATTACH
        client.send(frames.ATTACH, ["second", UInt(0), True, None, None, source])
        assert _closed_with(client) == "amqp:session:handle-in-use"
    finally:
        client.close()


def test_a_begin_on_a_channel_in_use_ends_the_connection(emulator):
    """As the service's AMQP stack, which maps the remote channel in a handle table (azure-amqp
    HandleTable.Add refuses a channel in use with amqp:session:handle-in-use)."""
    client = RawClient(emulator.port)
    try:
        client.send(frames.BEGIN, [None, UInt(0), UInt(100), UInt(100), UInt(10), None, None, None])
        assert _closed_with(client) == "amqp:session:handle-in-use"
    finally:
        client.close()


def test_a_late_detach_on_a_session_the_client_ended_is_dropped_not_a_framing_error(emulator):
    """azure-eventhub's producer sends its link's detach after its session's end when a partition
    is taken offline; the connection (shared with its other links) must live on."""
    client = RawClient(emulator.port)
    try:
        client.send(frames.END, [None])
        assert client.read_frame()[0] == frames.END
        client.send(frames.DETACH, [UInt(0), True, None])  # late: the session is gone
        client.send(frames.BEGIN, [None, UInt(0), UInt(100), UInt(100), UInt(10), None, None, None])
        code, fields = client.read_frame()
        assert code == frames.BEGIN and fields[0] == 0  # the connection lives on, channel 0 again
        body = encode(Described(frames.FLOW, [None, UInt(1), UInt(0), UInt(1)]))
        client.sock.sendall(struct.pack(">IBBH", 8 + len(body), 2, 0, 5) + body)  # never begun
        code, fields = client.read_frame()
        assert code == frames.CLOSE and fields[0].value[0] == "amqp:connection:framing-error"
        assert "no session on channel 5" in fields[0].value[1]
    finally:
        client.close()


def _sas_token(audience: str, key_name: str, key: str, lifetime: int = 3600) -> str:
    sr = quote_plus(audience)
    expiry = int(time.time()) + lifetime
    digest = hmac.new(key.encode(), f"{sr}\n{expiry}".encode(), hashlib.sha256).digest()
    signature = quote_plus(base64.b64encode(digest).decode())
    return f"SharedAccessSignature sr={sr}&sig={signature}&se={expiry}&skn={key_name}"


class _CbsClient(RawClient):
    """A raw client that puts SAS tokens on $cbs (a sender link on handle 0) and attaches links."""

    def __init__(self, emulator) -> None:
        super().__init__(emulator.port)
        self.config = emulator.config
        self.delivery_id = 0
        target = Described(frames.TARGET, ["$cbs"] + [None] * 6)
        self.send(frames.ATTACH, ["cbs", UInt(0), False, None, None, None, target, None, None, UInt(0)])
        assert self.read_until(frames.ATTACH)[2] is True
        self.tokens: list[str] = []

    def read_until(self, code: int) -> list:
        while True:
            got, fields = self.read_frame()
            if got == code:
                return fields
            assert got not in (frames.DETACH, frames.CLOSE), f"the emulator ended a link: {fields}"

    def put_token(self, hub: str) -> None:
        """Put a token for ``hub`` and wait until the emulator has accepted it."""
        audience = f"sb://localhost/{hub}"
        token = _sas_token(audience, self.config.key_name, self.config.key)
        self.tokens.append(token)
        props = {"operation": "put-token", "type": "servicebus.windows.net:sastoken", "name": audience}
        payload = build_message(token, props)
        fields = [UInt(0), UInt(self.delivery_id), str(self.delivery_id).encode(), UInt(0), False, False]
        body = encode(Described(frames.TRANSFER, fields))
        self.sock.sendall(struct.pack(">IBBH", 8 + len(body) + len(payload), 2, 0, 0) + body + payload)
        self.delivery_id += 1
        state = self.read_until(frames.DISPOSITION)[4]
        assert int(state.descriptor) == frames.ACCEPTED

    def attach(self, handle: int, address: str, receive: bool) -> None:
        """Attach a consumer (``receive``) or producer link to ``address``; it stays attached."""
        if receive:
            source, target = Described(frames.SOURCE, [address] + [None] * 10), None
        else:
            source, target = None, Described(frames.TARGET, [address] + [None] * 6)
        self.send(frames.ATTACH, [f"link-{handle}", UInt(handle), receive, None, None, source, target])
        self.read_until(frames.ATTACH)
        if not receive:
            self.read_until(frames.FLOW)  # credit: the producer link is open, not refused


def test_a_token_put_for_open_links_logs_their_renewal_and_a_first_token_does_not(emulator, caplog):
    """The emulator logs one INFO line per put-token that renews the token of open consumer /
    producer links (what the slow Entra ID stream tests count), never the token itself."""
    caplog.set_level(logging.INFO, logger="eventhubs_emulator")

    def renewals() -> list[str]:
        messages = [r.getMessage() for r in caplog.records if r.name == "eventhubs_emulator"]
        return [m for m in messages if m.startswith("token renewed for open")]

    client = _CbsClient(emulator)
    try:
        client.put_token("hub1")  # the first token, before any link: no renewal
        assert renewals() == []
        client.attach(1, "hub1/ConsumerGroups/$Default/Partitions/0", receive=True)
        client.attach(2, "hub1", receive=False)
        client.put_token("hub4")  # a token for another hub renews none of these links
        assert renewals() == []
        client.put_token("hub1")
        assert len(renewals()) == 1
        line = renewals()[0]
        assert line.startswith("token renewed for open consumer (1) and producer (1) links of event hub ")
        assert "'hub1' on the connection from ('127.0.0.1'," in line
        assert "expires at" in line
        client.send(frames.DETACH, [UInt(2), True])  # the producer is closed: only the consumer is open
        client.read_until(frames.DETACH)
        client.put_token("hub1")
        assert len(renewals()) == 2
        assert "open consumer (1) links" in renewals()[1] and "producer" not in renewals()[1]
    finally:
        client.close()
    for token in client.tokens:
        signature = token.split("sig=", 1)[1].split("&", 1)[0]
        assert signature not in caplog.text, "a token was logged"
