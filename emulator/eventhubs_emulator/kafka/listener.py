"""A Kafka client connection: size-prefixed frames, request headers, SASL gating, dispatch.

Requests on one connection are answered in order, one at a time (as a Kafka broker does). Until the
client has authenticated with SASL (PLAIN or OAUTHBEARER: sasl_handlers.py) only ApiVersions,
SaslHandshake and SaslAuthenticate are served; anything else, a malformed frame or a size prefix
over the limit closes the connection (with a log line naming the peer and the reason, never the
frame's content). So does any other request after an OAUTHBEARER session's token has expired
without the client re-authenticating.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import logging
import struct
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .. import limits
from ..store import Broker
from . import handlers, sasl_handlers
from .groups import GroupCoordinator
from .protocol import (
    FAILED_AUTHENTICATION_DELAY,
    FLEXIBLE_FROM,
    MAX_REQUEST_BYTES,
    MAX_UNAUTHENTICATED_REQUEST_BYTES,
    PRE_AUTH_APIS,
    SUPPORTED_VERSIONS,
    ApiKey,
    ErrorCode,
)
from .schemas import SCHEMAS
from .wire import KafkaDecodeError, Reader, Writer, read_struct, write_struct

log = logging.getLogger("eventhubs_emulator.kafka")

_SIZE = struct.Struct(">i")

_HANDLERS: dict[ApiKey, Callable[..., Any]] = {
    ApiKey.API_VERSIONS: handlers.api_versions,
    ApiKey.SASL_HANDSHAKE: sasl_handlers.sasl_handshake,
    ApiKey.SASL_AUTHENTICATE: sasl_handlers.sasl_authenticate,
    ApiKey.METADATA: handlers.metadata,
    ApiKey.PRODUCE: handlers.produce,
    ApiKey.FETCH: handlers.fetch,
    ApiKey.LIST_OFFSETS: handlers.list_offsets,
    ApiKey.INIT_PRODUCER_ID: handlers.init_producer_id,
    ApiKey.FIND_COORDINATOR: handlers.find_coordinator,
    ApiKey.OFFSET_COMMIT: handlers.offset_commit,
    ApiKey.OFFSET_FETCH: handlers.offset_fetch,
    ApiKey.JOIN_GROUP: handlers.join_group,
    ApiKey.SYNC_GROUP: handlers.sync_group,
    ApiKey.HEARTBEAT: handlers.heartbeat,
    ApiKey.LEAVE_GROUP: handlers.leave_group,
    ApiKey.DESCRIBE_GROUPS: handlers.describe_groups,
    ApiKey.LIST_GROUPS: handlers.list_groups,
}


#: Worker threads that decode large or compressed Produce requests (``handlers.produce``), shared by
#: every connection: a client cannot take more, however many connections it opens, and the memory a
#: request's records may take (``records.MAX_PRODUCE_RECORD_BYTES``) is held by at most this many at once.
PRODUCE_DECODE_THREADS = 2


class ClosingConnection(Exception):
    """The client broke the protocol; the message (logged) says how."""


def _flexible(api: ApiKey, version: int) -> bool:
    start = FLEXIBLE_FROM[api]
    return start is not None and version >= start


async def _read(reader: asyncio.StreamReader, n: int, deadline: float | None) -> bytes:
    """``n`` bytes, before ``deadline`` (the loop's clock; None: no deadline) or ClosingConnection."""
    if deadline is None:
        return await reader.readexactly(n)
    try:
        async with asyncio.timeout_at(deadline):
            return await reader.readexactly(n)
    except TimeoutError:
        raise ClosingConnection(
            f"not authenticated within {limits.HANDSHAKE_TIMEOUT:g} s of connecting (the handshake "
            "time-out: ApiVersions, SaslHandshake and SaslAuthenticate come first)"
        ) from None


class KafkaServer:
    """The Kafka endpoint's state on the emulator's loop: the broker, the advertised host, the open
    connections; it serves the plain and the TLS port alike."""

    def __init__(self, broker: Broker, host: str) -> None:
        self.broker = broker
        self.host = host  # what Metadata tells clients to connect to (with the port they came in on)
        self.writers: set[asyncio.StreamWriter] = set()
        self.producer_ids = itertools.count(1000)
        self.committed: dict[tuple[str, str, int], tuple[int, str | None]] = {}  # consumer group offsets
        self.groups = GroupCoordinator()
        self.decoder = ThreadPoolExecutor(PRODUCE_DECODE_THREADS, thread_name_prefix="kafka-produce")

    def close(self) -> None:
        """Drop the worker threads (a request being decoded finishes; queued ones are dropped)."""
        self.decoder.shutdown(wait=False, cancel_futures=True)

    def drop_connections(self) -> int:
        """Abort every Kafka client connection; return how many."""
        writers = list(self.writers)
        for writer in writers:
            if writer.transport is not None:
                writer.transport.abort()
        return len(writers)

    async def handle_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one client until it closes the connection or breaks the protocol."""
        peer = writer.get_extra_info("peername")
        sockname = writer.get_extra_info("sockname")
        port = sockname[1] if sockname else 0
        state = handlers.ClientState(client_host=f"/{peer[0]}" if peer else "")
        self.writers.add(writer)
        # ApiVersions and SASL must be over by then: a client that connects and does not
        # authenticate is dropped (after that, a connection may stay idle, as on the service)
        deadline = asyncio.get_running_loop().time() + limits.HANDSHAKE_TIMEOUT
        try:
            while True:
                try:
                    head = await _read(reader, 4, None if state.authenticated else deadline)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                (size,) = _SIZE.unpack(head)
                limit = MAX_REQUEST_BYTES if state.authenticated else MAX_UNAUTHENTICATED_REQUEST_BYTES
                if size < 8 or size > limit:
                    raise ClosingConnection(f"request size {size} outside 8..{limit} bytes")
                try:
                    frame = await _read(reader, size, None if state.authenticated else deadline)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                response = await self._serve(frame, state, port)
                if state.failed_auth:  # the answer held back, then sent, then the close (as Kafka)
                    await asyncio.sleep(FAILED_AUTHENTICATION_DELAY)
                if response is not None:
                    writer.write(_SIZE.pack(len(response)) + response)
                    # one response at a time: wait until the client has read most of it
                    if not await limits.wait_until_read(writer):
                        writer.transport.abort()  # what it has not read goes with the connection
                        raise ClosingConnection(
                            f"the client has read nothing of its response for {limits.SEND_STALL_TIMEOUT:g} s"
                        )
                if state.failed_auth:
                    raise ClosingConnection("SASL authentication failed")
        except ClosingConnection as exc:
            log.warning("Kafka endpoint: closing the connection from %s: %s", peer, exc)
        except KafkaDecodeError as exc:
            log.warning("Kafka endpoint: closing the connection from %s: malformed request: %s", peer, exc)
        except (ConnectionError, asyncio.CancelledError):  # the peer went, or the emulator stops
            pass
        except Exception:  # a bug answering this client must not reach the others: close it, loudly
            log.exception("Kafka endpoint: closing the connection from %s after an internal error", peer)
        finally:
            self.writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    async def _serve(self, frame: bytes, state: handlers.ClientState, port: int) -> bytes | None:
        """The response frame (without its size) to one request frame, or None (acks=0 produce)."""
        r = Reader(frame)
        key, version, correlation_id = r.fixed("int16"), r.fixed("int16"), r.fixed("int32")
        try:
            api = ApiKey(key)
        except ValueError:
            raise ClosingConnection(f"unsupported API key {key}") from None
        if not state.authenticated and api not in PRE_AUTH_APIS:
            raise ClosingConnection(f"{api.name} before SASL authentication")
        if api not in PRE_AUTH_APIS and sasl_handlers.session_expired(state):
            raise ClosingConnection(f"{api.name} after the SASL session expired (the token's lifetime)")
        lo, hi = SUPPORTED_VERSIONS[api]
        if not lo <= version <= hi:
            if api is ApiKey.API_VERSIONS:  # answered in v0 so that the client can pick a version
                return self._api_versions_fallback(correlation_id)
            raise ClosingConnection(f"{api.name} version {version} is not served ({lo}-{hi})")
        flexible = _flexible(api, version)
        client_id = r.string() or ""
        if flexible:
            r.skip_tagged_fields()
        request_schema, response_schema = SCHEMAS[api]
        request = read_struct(r, request_schema, version, flexible)
        ctx = handlers.Context(
            self.broker,
            self.host,
            port,
            state,
            self.producer_ids,
            self.committed,
            self.groups,
            client_id,
            self.decoder,
        )
        result = _HANDLERS[api](ctx, version, request)
        if inspect.isawaitable(result):
            result = await result
        if result is None:
            return None
        w = Writer()
        w.fixed("int32", correlation_id)
        if flexible and api is not ApiKey.API_VERSIONS:  # ApiVersions keeps response header v0
            w.empty_tagged_fields()
        write_struct(w, response_schema, version, flexible, result)
        return bytes(w.out)

    def _api_versions_fallback(self, correlation_id: int) -> bytes:
        w = Writer()
        w.fixed("int32", correlation_id)
        body = handlers.api_versions(None, 0, {})  # type: ignore[arg-type]
        body["error_code"] = ErrorCode.UNSUPPORTED_VERSION
        write_struct(w, SCHEMAS[ApiKey.API_VERSIONS][1], 0, False, body)
        return bytes(w.out)
