"""azure-eventhub clients built from the connector options, and the driver-side queries on them.

Auth is either the SAS connection string (plain text, as the user gives it — no JVM encryption)
or Azure AD through azure-identity: a service principal, or ``DefaultAzureCredential`` (managed
identity, workload identity, environment, CLI). Everything the driver asks the broker is here:
partition ids and the retained range of each partition (:class:`HubMetadata`, over one kept-open
management connection, see ``management.py``), an enqueued time or offset turned into a sequence
number (one short-lived receiver). Every request is bounded by ``eventhubs.operationTimeout``;
errors are re-raised with secrets scrubbed from their text.
"""

from __future__ import annotations

import datetime
import logging
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .amqp_names import SEQUENCE_NUMBER
from .options import EventHubsOptions
from .positions import EventPosition

log = logging.getLogger(__name__)

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
    when = None
    if not props.get("is_empty"):
        when = datetime.datetime.fromtimestamp(int(props["last_enqueued_time_utc"]) / 1000, datetime.UTC)
    return PartitionBounds(str(props["id"]), min(earliest, latest), latest, when)


#: How often the driver re-lists the hub's partitions (a hub only ever gains partitions, rarely).
PARTITION_LIST_SECONDS = 30.0


class HubMetadata:
    """Driver-side view of one hub: partition ids and retained ranges over one kept-open connection.

    Every :meth:`bounds` call is one round trip on a :class:`~.management.ManagementSession`
    (all partitions at once); the partition list is asked for with it when it is older than
    :data:`PARTITION_LIST_SECONDS` (new partitions then appear in the next micro-batch).
    """

    def __init__(self, options: EventHubsOptions) -> None:
        from .management import ManagementSession

        self.options = options
        self.session = ManagementSession(options)
        self._known_ids: list[str] = []
        self._listed_at: float | None = None

    def close(self) -> None:
        """Close the connection; safe to call twice."""
        self.session.close()

    def partition_ids(self) -> list[str]:
        """The hub's partition ids, as the broker lists them (asked now)."""
        self._known_ids = self.session.hub_properties()["partition_ids"]
        self._listed_at = time.monotonic()
        return list(self._known_ids)

    def bounds(self, partition_ids: Iterable[str] | None = None) -> dict[str, PartitionBounds]:
        """Retained range of the given partitions, or of every partition of the hub.

        Without ``partition_ids``, the partitions listed last are asked for together with a new
        listing when that is due; partitions the new listing adds cost a second round trip.
        """
        if partition_ids is not None:
            ids = [str(p) for p in partition_ids]
            answer = self.session.run(include_hub=False, partition_ids=ids)
            return {pid: _bounds_from_properties(answer["partitions"][pid]) for pid in ids}
        due = self._listed_at is None or time.monotonic() - self._listed_at >= PARTITION_LIST_SECONDS
        answer = self.session.run(include_hub=due, partition_ids=self._known_ids)
        partitions = answer["partitions"]
        if due:
            self._known_ids = answer["hub"]["partition_ids"]
            self._listed_at = time.monotonic()
            missing = [pid for pid in self._known_ids if pid not in partitions]
            if missing:
                partitions.update(self.session.run(include_hub=False, partition_ids=missing)["partitions"])
        return {pid: _bounds_from_properties(partitions[pid]) for pid in self._known_ids}

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
        )
        try:
            messages = receiver.receive(1, self.options.receiver_timeout)
            if not messages:
                return None
            ann = messages[0].message_annotations or {}
            return int(ann[SEQUENCE_NUMBER])
        finally:
            receiver.close()
