"""azure-eventhub clients built from the connector options, and the driver-side queries on them.

Auth is either the SAS connection string (plain text, as the user gives it — no JVM encryption)
or Azure AD through azure-identity: a service principal, or ``DefaultAzureCredential`` (managed
identity, workload identity, environment, CLI). Everything the driver asks the broker — partition
ids, the retained range of each partition, an enqueued time or offset turned into a sequence
number — is here, bounded by ``eventhubs.operationTimeout`` because the SDK's management calls
have no timeout of their own. Errors are re-raised with secrets scrubbed from their text.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from .options import EventHubsOptions
from .positions import EventPosition

log = logging.getLogger(__name__)
T = TypeVar("T")

_SECRET_PATTERNS = [
    re.compile(r"(SharedAccessKey\s*=\s*)[^;\"'\s]+", re.IGNORECASE),
    re.compile(r"(SharedAccessSignature\s*=\s*)[^;\"']+", re.IGNORECASE),
    re.compile(r"(\bsig=)[^&;\"'\s]+", re.IGNORECASE),
]


def redact(text: str, options: EventHubsOptions | None = None) -> str:
    """``text`` with connection strings, SAS keys, signatures and client secrets replaced."""
    if options is not None:
        for secret in (options.connection_string, options.client_secret):
            if secret:
                text = text.replace(secret, "***")
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(r"\1***", text)
    return text


class EventHubsClientError(RuntimeError):
    """A broker call failed; the message names the hub (namespace/hub) and never a secret."""


def _credential(options: EventHubsOptions) -> Any:
    try:
        from azure.identity import ClientSecretCredential, DefaultAzureCredential
    except ImportError:  # pragma: no cover - depends on the installation
        raise EventHubsClientError(
            "eventhubs.useAadAuth=true needs azure-identity: pip install 'hubflow-connectors[aad]'."
        ) from None
    if options.tenant_id and options.client_id and options.client_secret:
        return ClientSecretCredential(options.tenant_id, options.client_id, options.client_secret)
    return DefaultAzureCredential()


def _common_kwargs(options: EventHubsOptions) -> dict[str, Any]:
    return {"eventhub_name": options.eventhub_name, "retry_total": 3}


def consumer_client(options: EventHubsOptions) -> Any:
    """An ``EventHubConsumerClient`` for the options' hub and consumer group."""
    from azure.eventhub import EventHubConsumerClient

    kwargs = _common_kwargs(options)
    if options.use_aad_auth and not _has_key(options):
        return EventHubConsumerClient(
            fully_qualified_namespace=options.namespace,
            consumer_group=options.consumer_group,
            credential=_credential(options),
            **kwargs,
        )
    return EventHubConsumerClient.from_connection_string(
        options.connection_string, consumer_group=options.consumer_group, **kwargs
    )


def producer_client(options: EventHubsOptions) -> Any:
    """An ``EventHubProducerClient`` for the options' hub."""
    from azure.eventhub import EventHubProducerClient

    kwargs = _common_kwargs(options)
    if options.use_aad_auth and not _has_key(options):
        return EventHubProducerClient(
            fully_qualified_namespace=options.namespace,
            credential=_credential(options),
            **kwargs,
        )
    return EventHubProducerClient.from_connection_string(options.connection_string, **kwargs)


def _has_key(options: EventHubsOptions) -> bool:
    conn = (options.connection_string or "").lower()
    return "sharedaccesskey=" in conn or "sharedaccesssignature=" in conn


def call_with_timeout(options: EventHubsOptions, what: str, func: Callable[..., T], *args: Any) -> T:
    """Run one broker call with ``eventhubs.operationTimeout``; scrub secrets from failures."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(func, *args).result(timeout=options.operation_timeout)
    except concurrent.futures.TimeoutError:
        raise EventHubsClientError(
            f"Event hub {options.description}: {what} took longer than eventhubs.operationTimeout "
            f"({options.operation_timeout:g} s); check the namespace is reachable."
        ) from None
    except EventHubsClientError:
        raise
    except Exception as exc:
        raise EventHubsClientError(
            f"Event hub {options.description}: {what} failed: "
            f"{redact(f'{type(exc).__name__}: {exc}', options)}"
        ) from None
    finally:
        pool.shutdown(wait=False)


@dataclass(frozen=True)
class PartitionBounds:
    """The retained range of one partition: ``[earliest, latest)`` in sequence numbers."""

    partition_id: str
    earliest: int
    latest: int
    last_enqueued_time: datetime.datetime | None = None


def _bounds_from_properties(props: dict[str, Any]) -> PartitionBounds:
    last = int(props["last_enqueued_sequence_number"])
    begin = int(props["beginning_sequence_number"])
    latest = last + 1
    earliest = latest if props.get("is_empty") else max(0, begin)
    when = props.get("last_enqueued_time_utc")
    if isinstance(when, datetime.datetime) and when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return PartitionBounds(
        str(props["id"]),
        min(earliest, latest),
        latest,
        when if isinstance(when, datetime.datetime) and not props.get("is_empty") else None,
    )


class HubMetadata:
    """Driver-side view of one hub: partition ids and retained ranges (one client, reused)."""

    def __init__(self, options: EventHubsOptions) -> None:
        self.options = options
        self._client: Any = None
        self._known_ids: list[str] = []

    def _get_client(self) -> Any:
        if self._client is None:
            self._client = consumer_client(self.options)
        return self._client

    def close(self) -> None:
        """Close the client's connections; safe to call twice."""
        if self._client is not None:
            try:
                self._client.close()
            except Exception:
                log.debug("closing the metadata client of %s failed", self.options.description)
            self._client = None

    def partition_ids(self) -> list[str]:
        """The hub's partition ids, as the broker lists them."""
        client = self._get_client()
        ids = call_with_timeout(self.options, "listing partitions", client.get_partition_ids)
        return [str(p) for p in ids]

    def bounds(self, partition_ids: Iterable[str] | None = None) -> dict[str, PartitionBounds]:
        """Retained range of every partition, one management call each, all in parallel.

        Without ``partition_ids`` the hub's partitions are listed; the properties of the
        partitions seen last time are fetched at the same time (each SDK management call opens
        its own connection, so overlapping them halves the latency of a micro-batch's planning).
        """
        client = self._get_client()
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=8)
        try:
            listing = None
            if partition_ids is not None:
                ids = [str(p) for p in partition_ids]
            else:
                listing = pool.submit(client.get_partition_ids)
                ids = list(self._known_ids)
            futures = {pid: pool.submit(client.get_partition_properties, pid) for pid in ids}
            if listing is not None:
                listed = [str(p) for p in self._wait(listing, "listing partitions")]
                self._known_ids = listed
                for pid in listed:
                    if pid not in futures:
                        futures[pid] = pool.submit(client.get_partition_properties, pid)
                futures = {pid: futures[pid] for pid in listed}
            return {
                pid: _bounds_from_properties(self._wait(future, f"reading partition {pid} properties"))
                for pid, future in futures.items()
            }
        finally:
            pool.shutdown(wait=False)

    def _wait(self, future: concurrent.futures.Future, what: str) -> Any:
        try:
            return future.result(timeout=self.options.operation_timeout)
        except concurrent.futures.TimeoutError:
            raise EventHubsClientError(
                f"Event hub {self.options.description}: {what} took longer than "
                f"eventhubs.operationTimeout ({self.options.operation_timeout:g} s); check the "
                "namespace is reachable."
            ) from None
        except Exception as exc:
            raise EventHubsClientError(
                f"Event hub {self.options.description}: {what} failed: "
                f"{redact(f'{type(exc).__name__}: {exc}', self.options)}"
            ) from None

    def resolve(self, position: EventPosition, bounds: PartitionBounds, end: bool = False) -> int:
        """The sequence number an EventPosition means in one partition.

        For a start position the result is the first sequence number to read; for an end
        position (``end=True``) it is the first one *not* to read. Offsets and enqueued times are
        looked up by receiving one event from the broker (prefetch 1); when no event is at or
        after the position the result is ``latest``. Results are clamped to the retained range.
        """
        kind = position.kind
        if kind == "earliest":
            return bounds.earliest
        if kind == "latest":
            return bounds.latest
        if kind == "seqNo":
            assert position.seq_no is not None
            # Start: inclusive → seq, exclusive → seq+1. End: inclusive → seq+1, exclusive → seq.
            first = position.seq_no + (0 if position.is_inclusive != end else 1)
            return max(bounds.earliest, min(first, bounds.latest))
        if bounds.earliest >= bounds.latest:
            return bounds.latest
        if kind == "offset":
            assert position.offset is not None
            selector: Any = position.offset
            inclusive = position.is_inclusive if not end else not position.is_inclusive
        else:
            assert position.enqueued_time is not None
            selector = position.enqueued_time
            inclusive = True  # first event enqueued at or after the time
            last = bounds.last_enqueued_time
            if last is not None and selector > last:
                return bounds.latest  # no event that late yet: no need to ask a receiver
        seq = self._first_sequence_at(bounds.partition_id, selector, inclusive)
        return bounds.latest if seq is None else max(bounds.earliest, min(seq, bounds.latest))

    def _first_sequence_at(self, partition_id: str, selector: Any, inclusive: bool) -> int | None:
        """Sequence number of the first event at a position, or None when there is none yet."""
        from .receiver_cache import PartitionReceiver

        receiver = PartitionReceiver(
            self.options,
            partition_id,
            selector,
            prefetch=1,
            inclusive=inclusive,
            exclusive=False,
            keep_alive=False,
        )
        try:
            messages = receiver.receive(1, self.options.receiver_timeout)
            if not messages:
                return None
            ann = messages[0].message_annotations or {}
            return int(ann[b"x-opt-sequence-number"])
        finally:
            receiver.close()


def utc_now() -> datetime.datetime:
    """Now, timezone-aware (UTC)."""
    return datetime.datetime.now(datetime.UTC)
