"""One long-lived connection to a hub's ``$management`` node: runtime information in one round trip.

azure-eventhub 5.15 opens, authenticates and closes a new AMQP connection for every
``get_partition_properties`` call (≈0.1 s each on loopback, more over TLS to Azure). A query run
plans many micro-batches, so its driver keeps one :class:`ManagementSession` instead: the
connection, its CBS authentication and the ``$management`` request/response link stay open, and
the requests of one planning round (every partition, plus the hub when its partition list is
due) are sent together and answered together — one round trip however many partitions.

The session is built from the SDK's own pieces (its client's auth, address and configuration,
its pyamqp management link), so SAS keys, SAS tokens and Azure AD work as in the SDK; those
pieces are not public API, which is why the package pins ``azure-eventhub`` to 5.15.x.

Failures (a dropped connection, a lost link, a timeout) close the session; the next round opens
a new one (tenacity retries a round up to 3 times with backoff, not on authentication errors or
an unknown hub). Runtime-information requests are paced at ``eventhubs.managementRequestsPerSecond``
(default 50) per namespace: every request takes a token from a bucket shared by the sessions of
this process for that namespace and rate, so a fast trigger waits instead of being throttled, and a
hub with many partitions (a round is one request per partition) can be given a faster pace.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

from . import amqp_names as names
from .client import EventHubsClientError, consumer_client
from .options import EventHubsOptions
from .redaction import redact

log = logging.getLogger(__name__)

# Attempts of one planning round; the first failure usually means a connection the broker dropped.
ROUND_ATTEMPTS = 3


class RequestRateLimiter:
    """A token bucket: at most ``rate`` requests per second, bursts up to ``rate``."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self._tokens = float(rate)
        self._updated = time.monotonic()
        self._lock = threading.Lock()

    def acquire(self) -> float:
        """Take one token, sleeping until one is free; returns the seconds waited."""
        waited = 0.0
        while True:
            with self._lock:
                now = time.monotonic()
                self._tokens = min(self.rate, self._tokens + (now - self._updated) * self.rate)
                self._updated = now
                if self._tokens >= 1:
                    self._tokens -= 1
                    return waited
                pause = (1 - self._tokens) / self.rate
            time.sleep(pause)
            waited += pause


_LIMITERS: dict[tuple[str, int], RequestRateLimiter] = {}
_LIMITERS_LOCK = threading.Lock()


def rate_limiter(namespace: str, rate: int) -> RequestRateLimiter:
    """The bucket of this process for one namespace at ``rate`` requests per second."""
    with _LIMITERS_LOCK:
        return _LIMITERS.setdefault((namespace, rate), RequestRateLimiter(rate))


class _Retryable(EventHubsClientError):
    """A failure worth a new connection and another attempt (dropped link, timeout, busy)."""


def _field(values: dict, name: str) -> Any:
    key = name.encode()
    return values[key] if key in values else values[name]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class ManagementSession:
    """A kept-open ``$management`` connection for one hub; thread-safe, reopened after failures."""

    def __init__(self, options: EventHubsOptions) -> None:
        self.options = options
        self._lock = threading.Lock()
        self._client: Any = None  # the SDK consumer client whose auth/config the connection uses
        self._amqp: Any = None  # pyamqp AMQPClient: the connection, session and CBS auth
        self._auth: Any = None
        self._link: Any = None  # pyamqp ManagementLink on $management
        self.connections_opened = 0

    # ------------------------------------------------------------------------ public requests
    def hub_properties(self) -> dict[str, Any]:
        """``{"partition_ids": [...]}`` of the hub."""
        return self.run(include_hub=True, partition_ids=())["hub"]

    def run(self, include_hub: bool, partition_ids: Iterable[str]) -> dict[str, Any]:
        """One planning round: ``{"hub": {...}, "partitions": {id: properties}}`` in one round trip.

        Partition properties use the SDK's names (``beginning_sequence_number``,
        ``last_enqueued_sequence_number``, ``last_enqueued_time_utc`` in ms, ``is_empty``).
        """
        from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential_jitter

        ids = [str(p) for p in partition_ids]
        with self._lock:
            for attempt in Retrying(
                retry=retry_if_exception_type(_Retryable),
                stop=stop_after_attempt(ROUND_ATTEMPTS),
                wait=wait_exponential_jitter(multiplier=0.1, max=4, jitter=0.2),
                before_sleep=self._log_retry,
                reraise=True,
            ):
                with attempt:
                    try:
                        return self._round(include_hub, ids)
                    except BaseException:
                        self._close_locked()
                        raise
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        """Close the connection; safe to call twice."""
        with self._lock:
            self._close_locked()

    # ------------------------------------------------------------------------ internals
    def _log_retry(self, state: Any) -> None:
        exc = state.outcome.exception() if state.outcome else None
        log.warning(
            "Event hub %s: management request failed (%s); reconnecting (attempt %d)",
            self.options.description,
            exc,
            state.attempt_number + 1,
        )

    def _deadline_error(self, what: str) -> _Retryable:
        return _Retryable(
            f"Event hub {self.options.description}: {what} took longer than "
            f"eventhubs.operationTimeout ({self.options.operation_timeout:g} s); check the "
            "namespace is reachable."
        )

    def _open(self, deadline: float) -> None:
        from azure.eventhub._pyamqp.management_link import ManagementLinkState

        client = consumer_client(self.options)
        self._client = client
        transport = client._amqp_transport
        self._auth = client._create_auth()
        self._amqp = transport.create_mgmt_client(
            client._address, mgmt_auth=self._auth, config=client._config
        )
        self._amqp.open()
        self._wait_ready(deadline, "connecting to the management node")
        self._link = self._amqp._session.create_request_response_link_pair(
            endpoint=names.MANAGEMENT_NODE,
            on_amqp_management_open_complete=lambda _result: None,
            on_amqp_management_error=lambda: None,
            status_code_field=names.STATUS_CODE,
            status_description_field=names.STATUS_DESCRIPTION,
        )
        self._link.open()
        while self._link.state == ManagementLinkState.OPENING:
            if time.monotonic() > deadline:
                raise self._deadline_error("opening the management link")
            self._amqp._connection.listen(wait=False)
        if self._link.state != ManagementLinkState.OPEN:
            raise _Retryable(f"Event hub {self.options.description}: the management link did not open")
        self.connections_opened += 1

    def _wait_ready(self, deadline: float, what: str) -> None:
        """Pump the connection until it is open and its CBS token is valid (refreshed when due)."""
        while not self._amqp.client_ready():
            if time.monotonic() > deadline:
                raise self._deadline_error(what)

    def _close_locked(self) -> None:
        for closeable in (self._link, self._amqp, self._client):
            if closeable is None:
                continue
            try:
                closeable.close()
            except Exception:
                log.debug("closing the management connection of %s failed", self.options.description)
        self._link = self._amqp = self._auth = self._client = None

    def _round(self, include_hub: bool, ids: list[str]) -> dict[str, Any]:
        deadline = time.monotonic() + self.options.operation_timeout
        try:
            if self._amqp is None:
                self._open(deadline)
            else:
                self._wait_ready(deadline, "refreshing the management connection's token")
            return self._exchange(include_hub, ids, deadline)
        except EventHubsClientError:
            raise
        except Exception as exc:
            code = getattr(exc, "status_code", None)  # pyamqp's TokenAuthFailure: $cbs refused the token
            if isinstance(code, int) and code in (401, 403, 404):
                description = getattr(exc, "status_description", None)
                text = _text(description) if description is not None else ""
                raise self._refused("the hub", code, text) from None
            raise _Retryable(
                f"Event hub {self.options.description}: management request failed: "
                f"{redact(f'{type(exc).__name__}: {exc}', self.options)}"
            ) from None

    def _exchange(self, include_hub: bool, ids: list[str], deadline: float) -> dict[str, Any]:
        """Send every request, then pump the connection until all are answered."""
        transport = self._client._amqp_transport
        limiter = rate_limiter(self.options.namespace, self.options.management_requests_per_second)
        answers: dict[str, Any] = {}
        token = transport.get_updated_token(self._auth)
        requests: list[tuple[str, dict[str, Any], str]] = []
        if include_hub:
            requests.append(("hub", {names.NAME: self.options.eventhub_name}, names.HUB_TYPE))
        for pid in ids:
            requests.append(
                (pid, {names.NAME: self.options.eventhub_name, names.PARTITION: pid}, names.PARTITION_TYPE)
            )
        for key, properties, kind in requests:
            limiter.acquire()
            message = transport.build_message(
                application_properties={**properties, names.SECURITY_TOKEN: token}
            )

            def done(
                result: Any, status: Any, description: Any, response: Any, error: Any, key: str = key
            ) -> None:
                answers[key] = (status, description, response, error)

            self._link.execute_operation(message, done, operation=names.READ_OPERATION, type=kind)
        while len(answers) < len(requests):
            if time.monotonic() > deadline:
                raise self._deadline_error("a management request")
            self._amqp._connection.listen(wait=False)
        result: dict[str, Any] = {"partitions": {}}
        for key, _, kind in requests:
            value = self._check(key, *answers[key])
            if kind == names.HUB_TYPE:
                result["hub"] = {"partition_ids": [_text(p) for p in _field(value, names.PARTITION_IDS)]}
            else:
                result["partitions"][key] = {
                    "id": _text(_field(value, names.PARTITION)),
                    "beginning_sequence_number": int(_field(value, names.BEGIN_SEQUENCE_NUMBER)),
                    "last_enqueued_sequence_number": int(_field(value, names.LAST_ENQUEUED_SEQUENCE_NUMBER)),
                    "last_enqueued_time_utc": int(_field(value, names.LAST_ENQUEUED_TIME_UTC)),
                    "is_empty": bool(_field(value, names.IS_PARTITION_EMPTY)),
                }
        return result

    def _check(self, key: str, status: Any, description: Any, response: Any, error: Any) -> dict:
        what = "the hub" if key == "hub" else f"partition {key}"
        if status is None:
            raise _Retryable(
                f"Event hub {self.options.description}: the management request for {what} failed: "
                f"{redact(str(error), self.options)}"
            )
        code = int(status)
        text = _text(description) if description is not None else ""
        if code < 400:
            return response.value
        raise self._refused(what, code, text)

    def _refused(self, what: str, code: int, text: str) -> EventHubsClientError:
        """The error for a refusal with a status code, from ``$management`` or from ``$cbs``.

        The service answers ``$cbs`` put-token for a hub the namespace lacks with 404 and a bad key
        with 401, before any READ: those are not worth a retry either.
        """
        detail = redact(f"{code} {text}".strip(), self.options)
        if code in (401, 403):
            return EventHubsClientError(
                f"Event hub {self.options.description}: not authorized to read {what} ({detail}); "
                "check the connection string's key or the credential's role (Azure Event Hubs Data "
                "Receiver)."
            )
        if code == 404:
            return EventHubsClientError(
                f"Event hub {self.options.description}: {what} was not found ({detail}); check "
                "eventhubs.name / EntityPath."
            )
        return _Retryable(f"Event hub {self.options.description}: reading {what} failed ({detail}).")
