"""The emulator server: an asyncio AMQP listener on a background thread, with a Python handle.

``Emulator`` is what tests and the CLI use: ``start()`` binds and returns once listening;
``add_partitions``, ``truncate`` and ``faults`` act on the running server from any thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from . import limits, websocket
from .attach import DETACH_FORCED, partition_offline_description
from .config import EmulatorConfig, HubConfig
from .connection import Connection, Link
from .store import Broker, Hub

log = logging.getLogger("eventhubs_emulator")

T = TypeVar("T")

RETENTION_INTERVAL_S = 1.0
SYNC_INTERVAL_S = 1.0


class PortInUseError(OSError):
    """The requested port is taken by another process."""


class Faults:
    """Fault injection for reliability tests: drop connections, refuse them, delay deliveries, shift
    the clock that stamps enqueued times, throttle sends, slow every response, take a partition
    offline for a while."""

    def __init__(self, emulator: Emulator) -> None:
        self._emulator = emulator
        self._refuse_until = 0.0
        self._throttle_until = 0.0
        self._response_delay = 0.0
        self._offline: dict[tuple[str, str], float] = {}  # (hub, partition) -> until (monotonic)
        self._delay = 0.0
        self._clock_offset = 0.0

    def drop_connections(self) -> int:
        """Drop every open client connection now (TCP abort); return how many were dropped."""
        return self._emulator._call(self._emulator._server.drop_connections)

    def refuse_connections(self, seconds: float) -> None:
        """Close new connections at once for the next ``seconds`` (0 stops refusing)."""
        self._refuse_until = time.monotonic() + max(0.0, float(seconds))

    def delay_deliveries(self, seconds: float) -> None:
        """Hold every delivery to consumers for ``seconds`` before sending it (0 turns the delay off)."""
        self._delay = max(0.0, float(seconds))

    def throttle(self, seconds: float) -> None:
        """Reject every sent event for the next ``seconds`` as the service does past its ingress quota:
        the delivery is rejected with ``com.microsoft:server-busy`` and stores nothing (0 stops)."""
        self._throttle_until = time.monotonic() + max(0.0, float(seconds))

    def take_partition_offline(self, hub: str, partition: str, seconds: float) -> int:
        """Take one partition away for ``seconds``, as the service does while it moves a partition:
        the links reading or sending to it are force-detached (``amqp:link:detach-forced``, which
        clients retry) and new ones are refused the same way until it is back. Returns how many
        links were detached."""
        return self._emulator._call(self.take_partition_offline_now, hub, partition, seconds)

    def take_partition_offline_now(self, hub: str, partition: str, seconds: float) -> int:
        """:meth:`take_partition_offline` on the emulator's loop (the admin API runs there)."""
        self._emulator._partition_log(hub, partition)  # KeyError naming an unknown hub or partition
        self._offline[(hub.lower(), partition)] = time.monotonic() + max(0.0, float(seconds))
        return self._emulator._server.detach_partition_links(hub, partition)

    def partition_offline(self, hub: str, partition: str) -> bool:
        """Whether the partition is offline now."""
        return time.monotonic() < self._offline.get((hub.lower(), partition), 0.0)

    def slow_responses(self, milliseconds: float) -> None:
        """Handle every frame a client sends ``milliseconds`` late, so every answer (attach, token,
        management, flow: the deliveries it asks for) comes that much later (0 turns it off)."""
        self._response_delay = max(0.0, float(milliseconds)) / 1000

    def response_delay(self) -> float:
        """The current delay before each client frame is handled, in seconds."""
        return self._response_delay

    def throttling(self) -> bool:
        """Whether sends are being throttled now."""
        return time.monotonic() < self._throttle_until

    def shift_clock(self, offset_seconds: float) -> None:
        """Stamp events enqueued from now on with the wall time plus ``offset_seconds`` (negative: in
        the past; 0: the wall time again). A partition's enqueued times never go backwards."""
        self._clock_offset = float(offset_seconds)
        if self._emulator._broker is not None:  # one int, read by the loop thread on its next append
            self._emulator._broker.clock.offset_ms = int(self._clock_offset * 1000)

    def clear(self) -> None:
        """Turn off every fault."""
        self._refuse_until = 0.0
        self._throttle_until = 0.0
        self._response_delay = 0.0
        self._offline.clear()
        self._delay = 0.0
        if self._clock_offset:
            self.shift_clock(0)

    def refusing(self) -> bool:
        """Whether new connections are being refused now."""
        return time.monotonic() < self._refuse_until

    def delivery_delay(self) -> float:
        """The current delivery delay in seconds."""
        return self._delay

    def status(self) -> dict[str, float]:
        """Active faults, for the admin API."""
        return {
            "refusing_for_seconds": round(max(0.0, self._refuse_until - time.monotonic()), 3),
            "throttling_for_seconds": round(max(0.0, self._throttle_until - time.monotonic()), 3),
            "response_delay_ms": round(self._response_delay * 1000, 3),
            "offline_partitions": sorted(
                f"{h}/{p}" for (h, p) in self._offline if self.partition_offline(h, p)
            ),
            "delivery_delay_seconds": self._delay,
            "clock_offset_seconds": self._clock_offset,
        }


class EmulatorServer:
    """State shared by all connections; lives on the emulator's event loop."""

    def __init__(self, broker: Broker, faults: Faults) -> None:
        self.broker = broker
        self.faults = faults
        self.connections: set[Connection] = set()
        self.receivers: dict[tuple[str, str, str], set[Link]] = {}
        self._warned: set[tuple[str, ...]] = set()

    def warn_once(self, key: tuple[str, ...], message: str, *args: Any) -> None:
        """Log a client's configuration mistake at WARNING the first time it happens (clients retry)."""
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message, *args)

    async def handle_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one TCP client."""
        if self.faults.refusing():
            transport = writer.transport
            if transport is not None:
                transport.abort()
            return
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # The whole handshake (a WebSocket upgrade, the protocol headers, SASL, the client's open)
        # must be over by then; a client that connects and stalls is dropped.
        deadline = asyncio.get_running_loop().time() + limits.HANDSHAKE_TIMEOUT
        try:
            async with asyncio.timeout_at(deadline):
                header = await reader.readexactly(8)
        except TimeoutError:
            _drop_stalled(writer, "sent no protocol header")
            return
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        if not websocket.looks_like_http(header):
            conn = Connection(self, reader, writer)
            self.connections.add(conn)
            await conn.run(header, deadline)
            return
        # AMQP over WebSockets: the same AMQP connection, carried in binary WebSocket messages.
        try:
            async with asyncio.timeout_at(deadline):
                stream = await websocket.upgrade(reader, writer, header)
        except TimeoutError:
            _drop_stalled(writer, "did not finish its WebSocket upgrade request")
            return
        except (websocket.UpgradeRefused, asyncio.IncompleteReadError, ConnectionError) as exc:
            log.debug("WebSocket upgrade refused: %s", exc)
            writer.close()
            return
        log.debug("WebSocket upgrade: AMQP over WebSockets from %s", writer.get_extra_info("peername"))
        pump = asyncio.ensure_future(stream.pump())
        conn = Connection(self, stream.reader, stream)
        self.connections.add(conn)
        try:
            await conn.run(deadline=deadline)
        finally:
            pump.cancel()

    def detach_partition_links(self, hub: str, partition: str) -> int:
        """Force-detach every link reading or sending to one partition (the partition-offline fault)."""
        detached = 0
        for conn in list(self.connections):
            for session in list(conn.sessions.values()):
                for link in list(session.links.values()):
                    on_it = link.hub is not None and link.hub.name.lower() == hub.lower()
                    if on_it and link.partition_id == partition and not link.closed:
                        link.detach(DETACH_FORCED, partition_offline_description(hub, partition))
                        detached += 1
        return detached

    def drop_connections(self) -> int:
        """Abort every connection."""
        conns = list(self.connections)
        for conn in conns:
            conn.abort()
        return len(conns)


def _drop_stalled(writer: asyncio.StreamWriter, what: str) -> None:
    """Drop a connection whose client did not finish its handshake in time, with a WARNING."""
    log.warning(
        "closing the connection from %s: it %s within %g s of connecting (the handshake time-out)",
        writer.get_extra_info("peername"),
        what,
        limits.HANDSHAKE_TIMEOUT,
    )
    transport = writer.transport
    if transport is not None:
        transport.abort()


class Emulator:
    """An in-process Event Hubs emulator; use ``start()``/``stop()`` or ``with Emulator(cfg) as emu``."""

    def __init__(
        self,
        config: EmulatorConfig,
        host: str = "127.0.0.1",
        port: int = 0,
        data_dir: str | Path | None = None,
        admin_port: int | None = None,
        admin_host: str = "127.0.0.1",
        admin_token: str | None = None,
    ) -> None:
        config.validate()
        from .admin import token_problem

        problem = token_problem(admin_host, admin_token) if admin_port is not None else None
        if problem:
            raise ValueError(problem)
        self.config = config
        self.host = host
        self.admin_host = admin_host
        self._admin_token = admin_token
        self.requested_port = port
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.requested_admin_port = admin_port
        self.port = 0
        self.admin_port: int | None = None
        self.websocket_port: int | None = None
        self.tls_port: int | None = None
        self.ca_certificate: Path | None = None  # what TLS clients trust, once the TLS port listens
        self.kafka_port: int | None = None  # the Kafka endpoint's port, once it listens
        self.kafka_tls_port: int | None = None  # the Kafka endpoint's TLS port, once it listens
        self._kafka: Any = None  # the Kafka endpoint (eventhubs_emulator.kafka.KafkaServer)
        self.faults = Faults(self)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: EmulatorServer = None  # type: ignore[assignment]
        self._broker: Broker | None = None
        self._listeners: list[asyncio.base_events.Server] = []
        self._tasks: list[asyncio.Task] = []

    # -------------------------------------------------------------------------------------- life cycle
    def start(self) -> Emulator:
        """Bind and serve from a background thread; return once listening (raises if the port is taken)."""
        if self._thread is not None:
            raise RuntimeError("the emulator is already running")
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._open())
            except BaseException as exc:  # report bind errors to start()
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self._shutdown())
                loop.close()

        self._thread = threading.Thread(target=run, name="eventhubs-emulator", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]
        return self

    async def _listen(self, port: int, in_use: str, tls: Any = None) -> asyncio.base_events.Server:
        """Listen for clients on ``port`` (through TLS with the ``tls`` context); a taken port raises
        :class:`PortInUseError` saying ``in_use``."""
        try:
            # a TLS handshake has the same time-out as the rest of the handshake (asyncio's default
            # is 60 s too; named here so that the bound is one setting)
            handshake = {"ssl_handshake_timeout": limits.HANDSHAKE_TIMEOUT} if tls is not None else {}
            return await asyncio.start_server(
                self._server.handle_client, self.host, port, limit=4 * 1024 * 1024, ssl=tls, **handshake
            )
        except OSError as exc:
            if exc.errno in (98, 48, 10048):
                raise PortInUseError(exc.errno, in_use) from None
            raise

    async def _open(self) -> None:
        self._broker = Broker(self.config, self.data_dir)
        self._server = EmulatorServer(self._broker, self.faults)
        try:
            listener = await self._listen(
                self.requested_port,
                f"port {self.requested_port} on {self.host} is already in use (RabbitMQ also uses 5672); "
                f"pass another port, or port 0 to pick a free one",
            )
        except OSError:
            self._broker.close()
            raise
        self._listeners.append(listener)
        self.port = listener.sockets[0].getsockname()[1]
        if self.config.websocket_port is not None:
            try:
                ws_listener = await self._listen(
                    self.config.websocket_port,
                    f"WebSocket port {self.config.websocket_port} on {self.host} is already in use "
                    f"(UserConfig.EmulatorExtras.WebSocketPort / --websocket-port); pass another port, "
                    f"or 0 to pick a free one",
                )
            except OSError:
                listener.close()
                self._broker.close()
                raise
            self._listeners.append(ws_listener)
            self.websocket_port = ws_listener.sockets[0].getsockname()[1]
        if self.config.tls_port is not None:
            try:
                await self._listen_tls()
            except BaseException:
                for opened in self._listeners:
                    opened.close()
                self._broker.close()
                raise
        if self.config.kafka_port is not None or self.config.kafka_tls_port is not None:
            try:
                await self._listen_kafka()
            except BaseException:
                for opened in self._listeners:
                    opened.close()
                self._broker.close()
                raise
        if self.requested_admin_port is not None:
            from .admin import start_admin

            admin = await start_admin(self, self.admin_host, self.requested_admin_port, self._admin_token)
            self._listeners.append(admin)
            self.admin_port = admin.sockets[0].getsockname()[1]
        self._tasks.append(asyncio.ensure_future(self._housekeeping()))

    async def _listen_tls(self) -> None:
        """The AMQPS and WSS port (one listener: the handler tells AMQP from a WebSocket upgrade)."""
        from .tls import ensure_certificates

        files = ensure_certificates(self.config.tls_dir or "", self.host)
        listener = await self._listen(
            self.config.tls_port or 0,
            f"TLS port {self.config.tls_port} on {self.host} is already in use "
            f"(UserConfig.EmulatorExtras.TlsPort / --tls-port); pass another port, or 0 to pick a free one",
            tls=files.server_context(),
        )
        self._listeners.append(listener)
        self.tls_port = listener.sockets[0].getsockname()[1]
        self.ca_certificate = files.ca_cert

    async def _listen_kafka(self) -> None:
        """The Kafka endpoint's ports: plain (``KafkaPort``) and TLS (``KafkaTlsPort``), both SASL PLAIN
        with the connection string, over one KafkaServer."""
        from .kafka import KafkaServer

        assert self._broker is not None
        self._kafka = KafkaServer(self._broker, self.client_host())
        wanted: list[tuple[str, int, Any]] = []
        if self.config.kafka_port is not None:
            wanted.append(("KafkaPort", self.config.kafka_port, None))
        if self.config.kafka_tls_port is not None:
            from .tls import ensure_certificates

            files = ensure_certificates(self.config.tls_dir or "", self.host)
            self.ca_certificate = files.ca_cert
            wanted.append(("KafkaTlsPort", self.config.kafka_tls_port, files.server_context()))
        for key, port, tls in wanted:
            try:
                handshake = {"ssl_handshake_timeout": limits.HANDSHAKE_TIMEOUT} if tls is not None else {}
                listener = await asyncio.start_server(
                    self._kafka.handle_client, self.host, port, ssl=tls, **handshake
                )
            except OSError as exc:
                if exc.errno in (98, 48, 10048):
                    option = "--kafka-tls-port" if tls else "--kafka-port"
                    raise PortInUseError(
                        exc.errno,
                        f"Kafka port {port} on {self.host} is already in use "
                        f"(UserConfig.EmulatorExtras.{key} / {option}); pass another port, or 0 to pick "
                        f"a free one",
                    ) from None
                raise
            self._listeners.append(listener)
            bound = listener.sockets[0].getsockname()[1]
            if tls is None:
                self.kafka_port = bound
            else:
                self.kafka_tls_port = bound

    async def _housekeeping(self) -> None:
        last_retention = 0.0
        while True:
            await asyncio.sleep(min(RETENTION_INTERVAL_S, SYNC_INTERVAL_S))
            try:
                assert self._broker is not None
                self._broker.sync()
                now = time.monotonic()
                if now - last_retention >= RETENTION_INTERVAL_S:
                    last_retention = now
                    self._broker.apply_retention()
            except Exception:  # keep serving even if a disk write fails
                log.exception("housekeeping failed")

    async def _shutdown(self) -> None:
        for task in self._tasks:
            task.cancel()
        for listener in self._listeners:
            listener.close()
        if self._server is not None:
            self._server.drop_connections()
        if self._kafka is not None:
            self._kafka.drop_connections()
            self._kafka.close()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        if self._broker is not None:
            self._broker.close()

    def stop(self) -> None:
        """Stop serving, drop connections, fsync and close the logs."""
        if self._thread is None or self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._thread = None
        self._loop = None

    def __enter__(self) -> Emulator:
        if self._thread is None:
            self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -------------------------------------------------------------------------------------- operations
    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the emulator's loop and return its result."""
        if self._loop is None:
            raise RuntimeError("the emulator is not running; call start() first")

        async def call() -> T:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(timeout=30)

    @property
    def admin_url(self) -> str | None:
        """Base URL of the admin HTTP API (None without an admin port)."""
        if self.admin_port is None:
            return None
        host = "127.0.0.1" if self.admin_host in ("0.0.0.0", "::") else self.admin_host
        return f"http://{host}:{self.admin_port}"

    def websocket_endpoint(self, port: int | None = None) -> str:
        """The SDK's ``custom_endpoint_address`` for AMQP over WebSockets to this emulator.

        The SDK ignores the connection string's port for WebSockets (ws:// goes to port 80 in the sync
        client, 443 in the async one) unless a custom endpoint names it. Both the AMQP port (the
        default here) and the WebSocket port, when configured, serve WebSockets.
        """
        return f"sb://{self.client_host()}:{port if port is not None else self.port}"

    def client_host(self) -> str:
        """The address clients use: the bound one, or loopback when it binds every address."""
        return self.host if self.host not in ("0.0.0.0", "::", "") else "127.0.0.1"

    def connection_string(self, hub: str) -> str:
        """The connection string an SDK client uses for ``hub`` (emulator mode, plain AMQP)."""
        return self.config.connection_string(self.client_host(), self.port, hub)

    def tls_connection_string(self, hub: str) -> str:
        """The connection string for ``hub`` as for the service (no ``UseDevelopmentEmulator``: TLS).
        The SDK then goes to port 5671 of the endpoint unless ``custom_endpoint_address`` names the
        TLS port (:meth:`tls_endpoint`); it trusts :attr:`ca_certificate` (``connection_verify``)."""
        if self.tls_port is None:
            raise RuntimeError("the emulator has no TLS port: set EmulatorExtras.TlsPort and TlsDir")
        plain = self.config.connection_string("localhost", self.tls_port, hub)
        return plain.replace(";UseDevelopmentEmulator=true", "")

    @property
    def kafka_bootstrap(self) -> str | None:
        """The Kafka clients' ``bootstrap.servers`` (None without a Kafka port)."""
        return None if self.kafka_port is None else f"{self.client_host()}:{self.kafka_port}"

    @property
    def kafka_tls_bootstrap(self) -> str | None:
        """``bootstrap.servers`` for the Kafka endpoint over TLS (clients trust :attr:`ca_certificate`)."""
        return None if self.kafka_tls_port is None else f"{self.client_host()}:{self.kafka_tls_port}"

    def kafka_password(self) -> str:
        """The SASL PLAIN password a Kafka client sends (user ``$ConnectionString``): the namespace's
        connection string (no EntityPath, as the service's Kafka clients use it)."""
        c = self.config
        return (
            f"Endpoint=sb://{self.client_host()}:{self.port}/;SharedAccessKeyName={c.key_name};"
            f"SharedAccessKey={c.key}"
        )

    def tls_endpoint(self) -> str:
        """The SDK's ``custom_endpoint_address`` for the TLS port (AMQPS, and WSS with WebSockets)."""
        return f"sb://localhost:{self.tls_port}"

    def add_partitions(self, hub: str, new_count: int) -> list[str]:
        """Grow ``hub`` to ``new_count`` partitions; return the partition ids."""
        return self._call(self._grow, hub, new_count)

    def add_hub(self, name: str, partition_count: int = 2, consumer_groups: list[str] | None = None) -> None:
        """Create event hub ``name`` at run time (as ARM's create does on the service); an existing
        one is left as it is. For harnesses that make a hub per test (Microsoft's live tests)."""
        self._call(self._add_hub, name, partition_count, list(consumer_groups or []))

    def remove_hub(self, name: str) -> bool:
        """Delete event hub ``name`` and its events; links already open on it keep what they hold.
        Returns whether there was one."""
        return self._call(self._remove_hub, name)

    def truncate(self, hub: str, partition: str, before_sequence_number: int) -> int:
        """Drop events of one partition with sequence numbers below the given one; return how many."""
        return self._call(self._truncate, hub, partition, before_sequence_number)

    def apply_retention(self) -> int:
        """Apply the configured retention now (it also runs every second); return events dropped."""
        return self._call(lambda: self._broker.apply_retention() if self._broker else 0)

    def partition_info(self, hub: str, partition: str) -> dict[str, Any]:
        """Beginning and last sequence numbers of a partition (for tests and the admin API)."""
        return self._call(lambda: self._hubs_info(hub)[0]["partitions"][str(partition)])

    # The functions below run on the emulator's loop thread (called through _call or the admin API).
    def _hub(self, name: str) -> Hub:
        assert self._broker is not None
        hub = self._broker.hub(name)
        if hub is None:
            raise KeyError(f"no event hub named {name!r}")
        return hub

    def _grow(self, hub: str, new_count: int) -> list[str]:
        h = self._hub(hub)
        h.grow(int(new_count))
        h.config.partition_count = int(new_count)
        return h.partition_ids()

    def _add_hub(self, name: str, partition_count: int, consumer_groups: list[str]) -> None:
        assert self._broker is not None
        if self._broker.hub(name) is not None:
            return
        config = HubConfig(name=name, partition_count=int(partition_count), consumer_groups=consumer_groups)
        self.config.hubs.append(config)
        try:
            self.config.validate()  # a bad name or count is refused as in Config.json
        except Exception:
            self.config.hubs.remove(config)
            raise
        self._broker.hubs[name.lower()] = Hub(config, self._broker.data_dir, self._broker.clock)

    def _remove_hub(self, name: str) -> bool:
        assert self._broker is not None
        self.config.hubs = [h for h in self.config.hubs if h.name.lower() != name.lower()]
        return self._broker.hubs.pop(name.lower(), None) is not None

    def _truncate(self, hub: str, partition: str, before_sequence_number: int) -> int:
        return self._partition_log(hub, partition).truncate_before(int(before_sequence_number))

    def _partition_log(self, hub: str, partition: str) -> Any:
        log_ = self._hub(hub).partitions.get(str(partition))
        if log_ is None:
            raise KeyError(f"event hub {hub!r} has no partition {partition!r}")
        return log_

    def _hubs_info(self, only: str | None = None) -> list[dict[str, Any]]:
        assert self._broker is not None
        hubs = [self._hub(only)] if only is not None else list(self._broker.hubs.values())
        return [
            {
                "name": h.name,
                "consumer_groups": list(h.consumer_groups.values()),
                "partitions": {
                    pid: {
                        "beginning_sequence_number": log_.begin_seq,
                        "last_enqueued_sequence_number": log_.next_seq - 1,
                        "retained_events": len(log_.events),
                    }
                    for pid, log_ in h.partitions.items()
                },
            }
            for h in hubs
        ]

    def connection_count(self) -> int:
        """Open client connections."""
        return self._call(lambda: len(self._server.connections))

    def consumer_count(self, hub: str, partition: str) -> int:
        """Receivers attached to one partition, their starting position already resolved.

        A client learns of its own attach only when the first event arrives; tests that start a
        receiver at ``@latest`` wait on this before they send.
        """
        return self._call(lambda: self._consumer_count(hub, str(partition)))

    def _consumer_count(self, hub: str, partition: str) -> int:
        return sum(
            1
            for conn in self._server.connections
            for session in conn.sessions.values()
            for link in session.links.values()
            if link.kind == "consumer"
            and not link.closed
            and link.log is not None
            and link.hub is not None
            and link.hub.name.lower() == hub.lower()
            and link.partition_id == partition
        )
