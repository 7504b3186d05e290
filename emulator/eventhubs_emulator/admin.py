"""Admin/health HTTP API (a tiny HTTP/1.1 server on the emulator's event loop).

Endpoints (JSON in, JSON out):

- ``GET  /health`` → ``{"status": "healthy"}`` (like the official emulator's health check)
- ``GET  /hubs`` → hubs, partitions, beginning/last sequence numbers, active faults
- ``POST /faults/drop-connections`` → ``{"dropped": n}``
- ``POST /faults/refuse-connections`` ``{"seconds": 5}``
- ``POST /faults/delay-deliveries`` ``{"seconds": 2}`` (0 turns the delay off)
- ``POST /faults/throttle`` ``{"seconds": 10}`` (sends rejected with ``com.microsoft:server-busy``; 0 stops)
- ``POST /faults/slow-responses`` ``{"milliseconds": 200}`` (every client frame handled that late; 0 off)
- ``POST /hubs/<hub>/partitions/<id>/offline`` ``{"seconds": 10}`` → ``{"detached": n}`` (links to it
  force-detached, new ones refused, until it is back)
- ``POST /faults/clock`` ``{"offset_seconds": -7200}`` (stamp new events two hours back; 0 undoes it)
- ``POST /faults/clear``
- ``POST /hubs/<hub>/partitions`` ``{"count": 8}`` (grow the hub)
- ``POST /hubs/<hub>/partitions/<id>/truncate`` ``{"before_sequence_number": 100}``
- ``POST /retention/apply`` (apply the configured retention now)

Bounded and private: it listens on loopback unless told otherwise (``--admin-host``); on any other
address every request but ``GET /health`` needs ``Authorization: Bearer <token>`` (``--admin-token``
or ``EVENTHUBS_EMULATOR_ADMIN_TOKEN``), and the emulator refuses to start without one. A request's
head is at most 64 KiB and 100 lines, its body 64 KiB, and the whole request must arrive within 10 s.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
from typing import Any

from .roles import EmulatorRole

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
}

#: Bounds of one admin request: its head (request line and headers), its body, and how long it may
#: take to arrive (a client that sends slowly or not at all is cut off).
MAX_HEAD_BYTES = 64 * 1024
MAX_HEADER_LINES = 100
MAX_BODY_BYTES = 64 * 1024
REQUEST_SECONDS = 10.0
#: The environment variable that holds the admin token (``--admin-token`` overrides it).
TOKEN_ENV = "EVENTHUBS_EMULATOR_ADMIN_TOKEN"


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def token_problem(host: str, token: str | None) -> str | None:
    """Why the admin API may not listen on ``host`` with ``token`` (None when it may)."""
    if is_loopback(host) or token:
        return None
    return (
        f"the admin API would listen on {host}, beyond loopback, without a token: anyone who reaches "
        f"it could drop connections and truncate partitions. Pass --admin-token (or set {TOKEN_ENV}), "
        f"or --admin-host 127.0.0.1"
    )


class HttpError(Exception):
    """An error answer: status code and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def start_admin(
    emulator: EmulatorRole, host: str, port: int, token: str | None = None
) -> asyncio.base_events.Server:
    """Start the admin HTTP server on the running loop (``token_problem`` must have passed)."""
    problem = token_problem(host, token)
    if problem:
        raise ValueError(problem)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            status, body = await asyncio.wait_for(_serve_one(emulator, reader, token), REQUEST_SECONDS)
        except TimeoutError:
            status, body = 408, {"error": f"the request did not arrive within {REQUEST_SECONDS:.0f} s"}
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError, ValueError):
            status, body = 400, {"error": "malformed HTTP request"}
        data = json.dumps(body).encode()
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
        )
        try:
            writer.write(head.encode() + data)
            await asyncio.wait_for(writer.drain(), REQUEST_SECONDS)
        except TimeoutError:  # a client that does not read its answer: drop it, answer unsent
            writer.transport.abort()
        except ConnectionError:
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, host, port, limit=MAX_HEAD_BYTES)


async def _serve_one(
    emulator: EmulatorRole, reader: asyncio.StreamReader, token: str | None
) -> tuple[int, Any]:
    request_line = (await reader.readline()).decode("latin-1").strip()
    parts = request_line.split()
    if len(parts) < 2:
        raise ValueError("bad request line")
    method, path = parts[0].upper(), parts[1].split("?", 1)[0]
    length = 0
    authorization = ""
    head_bytes = len(request_line)
    for _ in range(MAX_HEADER_LINES + 1):
        line = (await reader.readline()).decode("latin-1").strip()
        head_bytes += len(line)
        if not line:
            break
        if head_bytes > MAX_HEAD_BYTES:
            return 431, {"error": f"the request head is larger than {MAX_HEAD_BYTES} bytes"}
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "content-length":
            length = int(value.strip())
        elif name == "authorization":
            authorization = value.strip()
    else:
        return 431, {"error": f"the request has more than {MAX_HEADER_LINES} header lines"}
    if length < 0 or length > MAX_BODY_BYTES:
        return 413, {
            "error": f"the request body must be 0 to {MAX_BODY_BYTES} bytes (Content-Length {length})"
        }
    if token and (method, path) != ("GET", "/health"):
        scheme, _, given = authorization.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
            return 401, {"error": "this admin API needs the header 'Authorization: Bearer <admin token>'"}
    raw = await reader.readexactly(length) if length else b""
    try:
        payload = json.loads(raw) if raw.strip() else {}
        if not isinstance(payload, dict):
            raise HttpError(400, "the request body must be a JSON object")
        return 200, route(emulator, method, path, payload)
    except json.JSONDecodeError:
        return 400, {"error": "the request body is not valid JSON"}
    except HttpError as exc:
        return exc.status, {"error": str(exc)}
    except KeyError as exc:
        return 404, {"error": str(exc).strip("'\"")}
    except (TypeError, ValueError) as exc:
        return 400, {"error": str(exc)}


def _number(payload: dict, key: str) -> float:
    value = payload.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise HttpError(400, f"field '{key}' must be a number")
    return value


def route(emulator: EmulatorRole, method: str, path: str, payload: dict) -> Any:
    """Run one admin request on the loop thread and return the JSON answer."""
    segments = [s for s in path.split("/") if s]
    if method == "GET":
        if segments == ["health"]:
            return {"status": "healthy"}
        if segments == ["hubs"]:
            return {"hubs": emulator._hubs_info(), "faults": emulator.faults.status()}
        raise HttpError(404, f"no GET endpoint {path}")
    if method != "POST":
        raise HttpError(405, f"method {method} is not supported")
    faults = emulator.faults
    if segments == ["faults", "drop-connections"]:
        return {"dropped": emulator._server.drop_connections()}
    if segments == ["faults", "refuse-connections"]:
        faults.refuse_connections(_number(payload, "seconds"))
        return faults.status()
    if segments == ["faults", "delay-deliveries"]:
        faults.delay_deliveries(_number(payload, "seconds"))
        return faults.status()
    if segments == ["faults", "slow-responses"]:
        faults.slow_responses(_number(payload, "milliseconds"))
        return faults.status()
    if segments == ["faults", "throttle"]:
        faults.throttle(_number(payload, "seconds"))
        return faults.status()
    if segments == ["faults", "clock"]:
        faults.shift_clock(_number(payload, "offset_seconds"))
        return faults.status()
    if segments == ["faults", "clear"]:
        faults.clear()
        return faults.status()
    if segments == ["retention", "apply"]:
        return {"dropped": emulator._broker.apply_retention() if emulator._broker else 0}
    if len(segments) == 3 and segments[0] == "hubs" and segments[2] == "partitions":
        count = _number(payload, "count")
        return {"partition_ids": emulator._grow(segments[1], int(count))}
    if (
        len(segments) == 5
        and segments[0] == "hubs"
        and segments[2] == "partitions"
        and segments[4] == "truncate"
    ):
        before = _number(payload, "before_sequence_number")
        return {"dropped": emulator._truncate(segments[1], segments[3], int(before))}
    if (
        len(segments) == 5
        and segments[0] == "hubs"
        and segments[2] == "partitions"
        and segments[4] == "offline"
    ):
        seconds = _number(payload, "seconds")
        return {"detached": emulator.faults.take_partition_offline_now(segments[1], segments[3], seconds)}
    raise HttpError(404, f"no POST endpoint {path}")
