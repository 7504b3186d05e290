"""The sink's producers in executor Python workers, cached across micro-batches and opened at once.

A new ``EventHubProducerClient`` opens each link in a loop that sleeps 50 ms between the frames it
reads (``ConsumerProducerMixin._open``, and the management request for the partition ids that a
send to a partition id makes first), so its first send waited about 1.3 s on the emulator, where
the frames themselves take a few milliseconds (docs/benchmarks.md, "The first send or read on a new
partition"). The sink built one per task of every micro-batch. Here, as for the receivers
(``receiver_cache.py``):

* a Python worker keeps one :class:`SinkProducer` per hub and credential (the key is a SHA-256
  digest, so a secret is not kept in a readable key), lent to one task at a time and given back
  after a task whose sends all succeeded: the next micro-batch sends on the same links;
* a link is opened the way the SDK opens it (its auth, handler, connection and attach) but driven
  here without the SDK's sleeps: each step waits on the socket for the broker's answer, not for a
  timer. A batch for a partition id opens that partition's link directly; no partition-id request
  is made. ``create_batch`` learns the hub's maximum message size from the route's own link;
* a cached producer is checked when it is lent: pending frames are read (a detach, a closed
  connection) and every open link must still be attached; a broken producer is closed and a new
  one is built. Tokens (a SAS key's or an Entra ID credential's) are renewed in place, in their last
  10 % of life as the SDK does, when the producer is lent and by the idle timer while it is cached;
* a daemon thread closes producers :data:`IDLE_SECONDS` after their last use, and single links of a
  producer that a task has not used for as long; every cached producer is closed at interpreter
  exit (``atexit``: a worker forked by PySpark's daemon ends with ``os._exit``, and then the
  operating system closes its sockets).

Delivery is unchanged: a send raises when the broker did not accept it, the sink retries it
(``writer.py``), and a producer that saw any failure is never cached again. The connector relies on
``EventHubProducerClient._create_producer`` / ``_producers`` and the producer's handler of
azure-eventhub 5.15 (pinned in the package metadata), as the receivers rely on the consumer's.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import select
import threading
import time
from typing import Any

from .client import producer_client
from .options import EventHubsOptions

log = logging.getLogger(__name__)

# Producers (and single links) idle this long are closed by the cache's timer. Below the service's
# 60 s inactivity limit of a connection, so a cached producer needs no keep-alive traffic.
IDLE_SECONDS = 30.0
# How often the timer looks at cached producers (idle timeout, tokens due for renewal).
REAP_SECONDS = 0.25
# At most this often the timer renews a cached producer's tokens (azure-identity hands out the same
# token again until it may ask its issuer, and each renewal is a put-token on every due link).
TEND_SECONDS = 1.0
# How long opening one link (connection, authentication, attach) or renewing a token may take.
OPEN_SECONDS = 60.0
# Frames read from an idle link's socket when it is lent (what the broker sent while it was cached).
PROBE_FRAMES = 32
# The SDK's key of the round-robin (and partition-key) link in ``EventHubProducerClient._producers``.
ALL_PARTITIONS = "all-partitions"


class SinkProducer:
    """One ``EventHubProducerClient`` of the sink, with the links it opened itself.

    :meth:`create_batch` and :meth:`send_batch` are the client's, after the route's link is opened
    (or checked) here without the SDK's pauses. ``links_opened`` counts the links this producer
    opened; ``last_used`` (monotonic) is the end of its last task.
    """

    def __init__(self, options: EventHubsOptions) -> None:
        self.options = options
        self.client = producer_client(options)
        self.links_opened = 0
        self.last_used = time.monotonic()
        self.tended_at = 0.0  # when the idle timer last renewed tokens or closed links (monotonic)
        self._link_used: dict[str, float] = {}  # the SDK's producer key -> last use (monotonic)
        # Every SDK producer opened here: the SDK may drop one from its client's table after an
        # error (its partition-id refresh), and close() must still close it.
        self._links: list[Any] = []

    # --------------------------------------------------------------------------- what a task calls
    def create_batch(self, **kwargs: Any) -> Any:
        """The client's ``create_batch``; the route's link gives the hub's maximum message size."""
        link = self._link(_key(kwargs.get("partition_id")))
        if not self.client._max_message_size_on_link:
            self.client._max_message_size_on_link = link._max_message_size_on_link
        return self.client.create_batch(**kwargs)

    def send_batch(self, batch: Any) -> None:
        """The client's ``send_batch`` on the batch's route, its link open and authenticated."""
        key = _key(batch._partition_id)
        self._link(key)
        self.client.send_batch(batch)
        self._link_used[key] = time.monotonic()

    # ------------------------------------------------------------------------------- links
    def _link(self, key: str) -> Any:
        """The SDK producer of ``key``, attached and with a valid token (opened here if need be)."""
        producer = self.client._producers.get(key)
        if producer is None or producer.closed:
            producer = self.client._create_producer(partition_id=None if key == ALL_PARTITIONS else key)
            self.client._producers[key] = producer
        if producer.running:
            if _token_due(producer):
                _renew(producer)
        else:
            _open(producer, time.monotonic() + OPEN_SECONDS)
            if not any(p is producer for p in self._links):
                self._links.append(producer)
            self.links_opened += 1
        self._link_used.setdefault(key, time.monotonic())
        return producer

    def _open_links(self) -> dict[str, Any]:
        return {key: p for key, p in self.client._producers.items() if p is not None and p.running}

    def healthy(self) -> bool:
        """Whether every open link is still attached (frames the broker sent meanwhile are read
        first) and its token valid, renewing tokens due for it; False means: close and rebuild."""
        try:
            for producer in self._open_links().values():
                if not _alive(producer):
                    return False
                if _token_due(producer):
                    _ready(producer, time.monotonic() + OPEN_SECONDS)
        except Exception as exc:
            log.debug("a cached producer of %s is broken: %s", self.options.description, type(exc).__name__)
            return False
        return True

    def tokens_due(self) -> bool:
        """Whether an open link's token is in its last 10 % of life (renew it before it lapses)."""
        return any(_token_due(p) for p in self._open_links().values())

    def idle_links(self, idle_seconds: float) -> list[str]:
        """Open links no task used for ``idle_seconds`` (the producer itself may be in use)."""
        now = time.monotonic()
        return [
            key
            for key in self._open_links()
            if now - self._link_used.get(key, self.last_used) >= idle_seconds
        ]

    def close_link(self, key: str) -> None:
        """Close one link; the next batch on its route opens it again."""
        producer = self.client._producers.get(key)
        self.client._producers[key] = None
        self._links = [p for p in self._links if p is not producer]
        self._link_used.pop(key, None)
        if producer is not None:
            _close_quietly(producer, self.options)

    def close(self) -> None:
        """Close every link and the client; never raises."""
        for producer in self._links:
            _close_quietly(producer, self.options)
        self._links = []
        _close_quietly(self.client, self.options)


def _key(partition_id: str | None) -> str:
    return ALL_PARTITIONS if partition_id is None else str(partition_id)


def _open(producer: Any, deadline: float) -> None:
    """``ConsumerProducerMixin._open`` of azure-eventhub 5.15 without its 50 ms sleeps.

    The SDK's auth, handler and connection manager open the connection, authenticate (CBS) and
    attach the link; :func:`_ready` drives them. An error is the SDK's own, translated and handled
    (the handler closed) by the producer as the SDK's retry loop does.
    """
    client = producer._client
    try:
        if producer._handler:
            producer._handler.close()
        auth = client._create_auth(auth_uri=client._auth_uri)
        producer._create_handler(auth)
        connection = client._conn_manager.get_connection(endpoint=client._address.hostname, auth=auth)
        producer._handler.open(connection=connection)
        _ready(producer, deadline, opening=True)
    except Exception as exc:
        if _is_sdk_error(exc):
            producer._close_handler()
            raise
        raise producer._handle_exception(exc) from None
    producer._max_message_size_on_link = (
        client._amqp_transport.get_remote_max_message_size(producer._handler)
        or client._amqp_transport.MAX_MESSAGE_LENGTH_BYTES
    )
    producer.running = True


def _renew(producer: Any) -> None:
    """Put a new token on an open link (its last 10 % of life) before the task sends on it; an
    error is the SDK's, translated and handled as in :func:`_open`."""
    try:
        _ready(producer, time.monotonic() + OPEN_SECONDS)
    except Exception as exc:
        if _is_sdk_error(exc):
            producer._close_handler()
            raise
        raise producer._handle_exception(exc) from None


def _ready(producer: Any, deadline: float, opening: bool = False) -> None:
    """Drive the handler until it is ready: token accepted, link attached.

    ``client_ready()`` reads the socket (waiting there for the broker's next frame) whenever it
    returns False, so this loop waits for frames, never for a timer.
    """
    from azure.eventhub.exceptions import ConnectError

    handler = producer._handler
    while not handler.client_ready():
        if time.monotonic() >= deadline:
            what = "opened" if opening else "authenticated again"
            raise ConnectError(f"the producer link was not {what} within {OPEN_SECONDS:g} s")


def _token_due(producer: Any) -> bool:
    """The SDK's own rule: a token is renewed in its last 10 % of life (``cbs._refresh_window``)."""
    cbs = getattr(producer._handler, "_cbs_authenticator", None)
    expires_on = getattr(cbs, "_expires_on", None)
    if cbs is None or expires_on is None:
        return False
    return expires_on - time.time() <= (cbs._refresh_window or 0)


def _alive(producer: Any) -> bool:
    """Read what the broker sent to an idle link (a detach, a close, a closed socket); then
    whether its connection is open and its link attached."""
    from azure.eventhub._pyamqp.constants import ConnectionState, LinkState

    handler = producer._handler
    connection = handler._connection
    link = handler._link
    if link is None or connection is None:
        return False
    for _ in range(PROBE_FRAMES):
        if connection._error is not None or not _has_input(connection._transport):
            break
        connection.listen(wait=False)
    if connection._error is not None:
        return False
    return connection.state == ConnectionState.OPENED and link.get_state() == LinkState.ATTACHED


def _has_input(transport: Any) -> bool:
    """Whether reading a frame would not block: bytes buffered by the transport or TLS, or
    readable on the socket (data, or the peer's close). False for AMQP over WebSockets, whose
    frames are only checked by state."""
    from azure.eventhub._pyamqp._transport import WebSocketTransport

    if isinstance(transport, WebSocketTransport):
        return False
    buffered = transport._read_buffer
    if buffered.tell() < len(buffered.getvalue()):
        return True
    sock = transport.sock
    if sock is None:
        return True  # the read fails and marks the connection broken
    pending = getattr(sock, "pending", None)
    if pending is not None and pending():
        return True
    if not hasattr(select, "poll"):  # Windows
        return bool(select.select([sock], [], [], 0)[0])
    poller = select.poll()  # not select(): a worker with many links has descriptors past 1024
    poller.register(sock, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))


def _is_sdk_error(exc: BaseException) -> bool:
    from azure.eventhub.exceptions import EventHubError

    return isinstance(exc, EventHubError)


def _close_quietly(closeable: Any, options: EventHubsOptions) -> None:
    try:
        closeable.close()
    except Exception:
        log.debug("closing a producer of %s failed", options.description)


class ProducerCache:
    """Sink producers of this worker process by hub and credential; one task uses a producer at a time.

    Counters for tests and logs: ``opened`` (producers built), ``reused`` (lent from the cache),
    ``dropped`` (broken or failed: closed instead of cached), ``closed_idle`` (closed by the timer).
    """

    def __init__(self, idle_seconds: float = IDLE_SECONDS) -> None:
        self.idle_seconds = idle_seconds
        self.opened = 0
        self.reused = 0
        self.dropped = 0
        self.closed_idle = 0
        self._lock = threading.Condition()
        self._idle: dict[str, SinkProducer] = {}
        self._tending: dict[str, threading.Event] = {}  # keys the timer is tending, set when done
        self._timer: threading.Thread | None = None

    @staticmethod
    def key(options: EventHubsOptions) -> str:
        """A digest of what the producer's client is built from; secrets only enter the hash."""
        identity = "\0".join(
            [
                options.connection_string or "",
                options.namespace,
                options.eventhub_name,
                str(options.use_aad_auth),
                options.tenant_id or "",
                options.client_id or "",
                options.client_secret or "",
                options.custom_endpoint_address or "",
                options.connection_verify or "",
            ]
        )
        return hashlib.sha256(identity.encode()).hexdigest()

    def borrow(self, options: EventHubsOptions) -> SinkProducer:
        """The cached producer of the hub if it is healthy; else a new one (links open on first use).

        Waits first for the timer to finish tending the hub's producer (closing an idle link or
        renewing a token: a few round trips), so that a worker keeps one producer per hub.
        """
        key = self.key(options)
        with self._lock:
            tending = self._tending.get(key)
        if tending is not None:
            tending.wait(OPEN_SECONDS + 5)
        with self._lock:
            cached = self._idle.pop(key, None)
        if cached is not None:
            if cached.healthy():
                with self._lock:
                    self.reused += 1
                return cached
            log.info(
                "Event hub %s: a cached producer's connection or link broke while idle; opening a new one",
                options.description,
            )
            self.discard(cached)
        producer = SinkProducer(options)
        with self._lock:
            self.opened += 1
        return producer

    def give_back(self, producer: SinkProducer) -> None:
        """Keep a producer whose task's sends all succeeded for the next task of this hub."""
        producer.last_used = time.monotonic()
        key = self.key(producer.options)
        with self._lock:
            previous = self._idle.pop(key, None)
            self._idle[key] = producer
            if self._timer is None:
                self._timer = threading.Thread(
                    target=self._close_idle, name="eventhubs-producers", daemon=True
                )
                self._timer.start()
            self._lock.notify()
        if previous is not None:
            previous.close()

    def discard(self, producer: SinkProducer) -> None:
        """Close a producer that failed (or whose task did); it is never cached."""
        with self._lock:
            self.dropped += 1
        producer.close()

    def idle_count(self) -> int:
        """How many producers are cached (tests)."""
        with self._lock:
            return len(self._idle)

    def cached(self, options: EventHubsOptions) -> SinkProducer | None:
        """The cached producer of a hub, if any (tests)."""
        with self._lock:
            return self._idle.get(self.key(options))

    def _close_idle(self) -> None:
        """The timer thread: close idle producers and links, renew tokens due, for the life of the process."""
        while True:
            try:
                self._close_idle_once()
            except Exception:  # the timer must outlive any one producer's failure
                log.exception("the sink's idle-producer timer failed; it goes on")
            time.sleep(REAP_SECONDS)

    def _close_idle_once(self) -> None:
        """One look of the timer at the cached producers (waits while there are none)."""
        with self._lock:
            while not self._idle:
                self._lock.wait()
            now = time.monotonic()
            expired = [k for k, p in self._idle.items() if now - p.last_used >= self.idle_seconds]
            closing = [self._idle.pop(k) for k in expired]
            busy = [
                k
                for k, p in self._idle.items()
                if now - p.tended_at >= TEND_SECONDS and (p.tokens_due() or p.idle_links(self.idle_seconds))
            ]
            tending = [(k, self._idle.pop(k)) for k in busy]
            for k in busy:
                self._tending[k] = threading.Event()
            self.closed_idle += len(closing)
        for producer in closing:
            producer.close()
        for key, producer in tending:
            try:
                self._tend(key, producer)
            finally:
                with self._lock:
                    done = self._tending.pop(key)
                done.set()

    def _tend(self, key: str, producer: SinkProducer) -> None:
        """Close a cached producer's idle links and renew its tokens due; cache it again if healthy."""
        producer.tended_at = time.monotonic()
        try:
            for link in producer.idle_links(self.idle_seconds):
                producer.close_link(link)
            healthy = producer.healthy()
        except Exception:
            healthy = False
        if not healthy:
            self.discard(producer)
            return
        with self._lock:
            newer = key in self._idle  # a task gave one back meanwhile: keep that one
            if not newer:
                self._idle[key] = producer
        if newer:
            producer.close()

    def close_all(self) -> None:
        """Close every cached producer (tests, interpreter exit)."""
        with self._lock:
            producers, self._idle = list(self._idle.values()), {}
        for producer in producers:
            producer.close()


PRODUCERS = ProducerCache()
atexit.register(PRODUCERS.close_all)
