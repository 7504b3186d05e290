"""Admin/health HTTP API (a tiny HTTP/1.1 server on the emulator's event loop).

Endpoints (JSON in, JSON out):

- ``GET  /health`` → ``{"status": "healthy"}`` (like the official emulator's health check)
- ``GET  /hubs`` → hubs, partitions, beginning/last sequence numbers, active faults
- ``POST /faults/drop-connections`` → ``{"dropped": n}``
- ``POST /faults/refuse-connections`` ``{"seconds": 5}``
- ``POST /faults/delay-deliveries`` ``{"seconds": 2}`` (0 turns the delay off)
- ``POST /faults/clock`` ``{"offset_seconds": -7200}`` (stamp new events two hours back; 0 undoes it)
- ``POST /faults/clear``
- ``POST /hubs/<hub>/partitions`` ``{"count": 8}`` (grow the hub)
- ``POST /hubs/<hub>/partitions/<id>/truncate`` ``{"before_sequence_number": 100}``
- ``POST /retention/apply`` (apply the configured retention now)
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from .roles import EmulatorRole

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
}


class HttpError(Exception):
    """An error answer: status code and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def start_admin(emulator: EmulatorRole, host: str, port: int) -> asyncio.base_events.Server:
    """Start the admin HTTP server on the running loop."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            status, body = await _serve_one(emulator, reader)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError, ValueError):
            status, body = 400, {"error": "malformed HTTP request"}
        data = json.dumps(body).encode()
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
        )
        try:
            writer.write(head.encode() + data)
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, host, port)


async def _serve_one(emulator: EmulatorRole, reader: asyncio.StreamReader) -> tuple[int, Any]:
    request_line = (await reader.readline()).decode("latin-1").strip()
    parts = request_line.split()
    if len(parts) < 2:
        raise ValueError("bad request line")
    method, path = parts[0].upper(), parts[1].split("?", 1)[0]
    length = 0
    while True:
        line = (await reader.readline()).decode("latin-1").strip()
        if not line:
            break
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
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
    raise HttpError(404, f"no POST endpoint {path}")
