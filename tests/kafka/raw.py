"""Hand-built Kafka requests over a plain socket (the classic encoding), for answers a client library
hides: the SASL exchange's error code and message, when it comes, and whether the server then closes."""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass


def request(api_key: int, version: int, correlation_id: int, body: bytes, client_id: bytes = b"raw") -> bytes:
    """A size-prefixed request with header v1 (api key, version, correlation id, client id)."""
    payload = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id + body
    return struct.pack(">i", len(payload)) + payload


def read_frame(sock: socket.socket) -> bytes | None:
    """One size-prefixed response, or None when the server closed first."""
    data = b""
    for wanted in (4, None):
        size = 4 if wanted else struct.unpack(">i", data)[0]
        chunk = b""
        while len(chunk) < size:
            more = sock.recv(size - len(chunk))
            if not more:
                return None
            chunk += more
        data = chunk
    return data


@dataclass(frozen=True)
class SaslAnswer:
    handshake_error: int
    error: int
    message: str | None
    seconds: float  # from the SaslAuthenticate request to its answer
    closed: bool  # the server closed the connection right after the answer


def sasl_plain(bootstrap: str, user: str, password: str) -> SaslAnswer:
    """SaslHandshake v1 (PLAIN) then SaslAuthenticate v1 with ``user``/``password``."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        return _sasl_plain(sock, user, password)


def _string(value: str) -> bytes:
    data = value.encode()
    return struct.pack(">h", len(data)) + data


def _read_string(data: bytes, at: int) -> tuple[str, int]:
    (size,) = struct.unpack_from(">h", data, at)
    return data[at + 2 : at + 2 + size].decode(), at + 2 + size


def join_group_v4(bootstrap: str, password: str, group: str, member_id: str = "") -> tuple[int, str]:
    """One JoinGroup v4 (after SASL PLAIN) for a consumer with the range protocol: (error code, the
    member id answered)."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        assert _sasl_plain(sock, "$ConnectionString", password).error == 0
        # FindCoordinator v1 until the group has one (a fresh Kafka makes its offsets topic first)
        deadline = time.monotonic() + 30
        while True:
            sock.sendall(request(10, 1, 3, _string(group) + b"\x00"))
            found = read_frame(sock)
            assert found is not None, "closed before the FindCoordinator answer"
            (coordinator_error,) = struct.unpack_from(">h", found, 8)
            if coordinator_error == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert coordinator_error == 0, f"no coordinator for {group}: error {coordinator_error}"
        subscription = struct.pack(">hi", 0, 1) + _string("t") + struct.pack(">i", 0)
        body = (
            _string(group)
            + struct.pack(">ii", 10_000, 10_000)
            + _string(member_id)
            + _string("consumer")
            + struct.pack(">i", 1)
            + _string("range")
            + struct.pack(">i", len(subscription))
            + subscription
        )
        while True:  # a coordinator still loading its groups answers 14-16: ask again
            sock.sendall(request(11, 4, 4, body))
            answer = read_frame(sock)
            assert answer is not None, "closed before the JoinGroup answer"
            (error,) = struct.unpack_from(">h", answer, 8)  # after correlation id and throttle time
            if error not in (14, 15, 16) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        _, at = _read_string(answer, 14)  # protocol name, after the generation id
        _, at = _read_string(answer, at)  # leader
        answered, _ = _read_string(answer, at)
        return error, answered


def _sasl_plain(sock: socket.socket, user: str, password: str) -> SaslAnswer:
    if True:
        sock.sendall(request(17, 1, 1, struct.pack(">h", 5) + b"PLAIN"))
        handshake = read_frame(sock)
        assert handshake is not None, "closed before the SaslHandshake answer"
        (handshake_error,) = struct.unpack_from(">h", handshake, 4)
        token = b"\0" + user.encode() + b"\0" + password.encode()
        started = time.monotonic()
        sock.sendall(request(36, 1, 2, struct.pack(">i", len(token)) + token))
        answer = read_frame(sock)
        seconds = time.monotonic() - started
        assert answer is not None, "closed before the SaslAuthenticate answer"
        error, size = struct.unpack_from(">hh", answer, 4)
        message = answer[8 : 8 + size].decode() if size >= 0 else None
        closed = False
        if error:
            sock.settimeout(5)
            closed = sock.recv(1) == b""
        return SaslAnswer(handshake_error, error, message, seconds, closed)


def produce(bootstrap: str, password: str, topic: str, entries: list[tuple[int, bytes | None]]) -> list[int]:
    """One Produce v3 (acks -1) after SASL PLAIN, a partition entry per ``(partition, record set)``:
    the partition error codes answered, in order."""
    host, port = bootstrap.rsplit(":", 1)
    body = struct.pack(">hhi", -1, -1, 30_000) + struct.pack(">i", 1) + _string(topic)
    body += struct.pack(">i", len(entries))
    for partition, data in entries:
        body += struct.pack(">i", partition)
        body += struct.pack(">i", -1) if data is None else struct.pack(">i", len(data)) + data
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        assert _sasl_plain(sock, "$ConnectionString", password).error == 0
        sock.sendall(request(0, 3, 5, body))
        answer = read_frame(sock)
        assert answer is not None, "closed before the Produce answer"
    (topics,) = struct.unpack_from(">i", answer, 4)
    _, at = _read_string(answer, 8)
    (count,) = struct.unpack_from(">i", answer, at)
    at += 4
    errors = []
    for _ in range(count):  # index, error code, base offset, log append time
        errors.append(struct.unpack_from(">h", answer, at + 4)[0])
        at += 4 + 2 + 8 + 8
    assert topics == 1
    return errors
