"""The sink: ``df.write`` / ``df.writeStream.format("eventhubs")``.

Columns: ``body`` (string or binary, required), ``partitionKey`` (string), ``partitionId``
(alias ``partition``; string or integer), ``properties`` (map<string,string>). Other columns are
ignored. As in the Scala sink a row may set a key or an id, not both (a DataFrame read from a hub
has both columns, and writes back as long as no row sets both). Every task packs its rows into
``EventDataBatch`` objects — one open batch per route (partition id, partition key, or
round-robin), each up to the hub's maximum message size — and sends a batch when it is full.
Events to a partition id or round-robin are encoded here (``event_encoding.py``), not one
``EventData`` each.
Sends are retried with exponential backoff on transient errors and throttling (server busy).

Producers are not built per task: each executor Python worker keeps its producer of a hub across
micro-batches, its links open (``producer_cache.py``); a producer that failed is closed, never reused.

Delivery is **at-least-once**: a retried send whose first attempt did reach the broker, a task
retried by Spark, or a streaming batch re-run after a restart sends its events again. Make
consumers idempotent (e.g. a message id in ``properties``) if duplicates matter.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
)

from . import worker_gc
from .errors import EventHubsOptionError
from .event_encoding import add_encoded, direct_encoding, encode_event
from .options import EventHubsOptions
from .producer_cache import PRODUCERS, SinkProducer
from .redaction import redact

log = logging.getLogger(__name__)

# Open batches per task before all are flushed (bounds memory with many distinct keys).
MAX_OPEN_BATCHES = 64
SEND_ATTEMPTS = 6


@dataclass(frozen=True)
class SinkColumns:
    """Which input columns feed the event; checked on the driver before any task runs."""

    body: str
    partition_key: str | None
    partition_id: str | None
    properties: str | None


def sink_columns(schema: StructType) -> SinkColumns:
    """Validate the DataFrame schema for the sink; raise EventHubsOptionError naming the column."""
    fields = {f.name.lower(): f for f in schema.fields}
    body = fields.get("body")
    if body is None:
        raise EventHubsOptionError(
            "The eventhubs sink needs a 'body' column (string or binary); got columns "
            f"{[f.name for f in schema.fields]}."
        )
    if not isinstance(body.dataType, (StringType, BinaryType)):
        raise EventHubsOptionError(
            f"Column 'body' must be string or binary, not {body.dataType.simpleString()}."
        )
    key = fields.get("partitionkey")
    if key is not None and not isinstance(key.dataType, StringType):
        raise EventHubsOptionError(
            f"Column 'partitionKey' must be a string, not {key.dataType.simpleString()}."
        )
    # As in the Scala sink: the first column, in schema order, named partitionId or partition.
    pid = next((f for f in schema.fields if f.name.lower() in ("partitionid", "partition")), None)
    if pid is not None and not isinstance(pid.dataType, (StringType, IntegerType, LongType, ShortType)):
        raise EventHubsOptionError(
            f"Column '{pid.name}' must be a string or integer partition id, not "
            f"{pid.dataType.simpleString()}."
        )
    props = fields.get("properties")
    if props is not None and not (
        isinstance(props.dataType, MapType)
        and isinstance(props.dataType.keyType, StringType)
        and isinstance(props.dataType.valueType, StringType)
    ):
        raise EventHubsOptionError(
            f"Column 'properties' must be map<string,string>, not {props.dataType.simpleString()}."
        )
    return SinkColumns(
        body=body.name,
        partition_key=key.name if key is not None else None,
        partition_id=pid.name if pid is not None else None,
        properties=props.name if props is not None else None,
    )


@dataclass
class EventHubsCommitMessage(WriterCommitMessage):
    """What one task sent."""

    events: int
    batches: int


def _is_transient(exc: BaseException) -> bool:
    from azure.eventhub.exceptions import (
        AuthenticationError,
        ConnectError,
        ConnectionLostError,
        EventDataSendError,
        EventHubError,
        OperationTimeoutError,
    )

    if isinstance(exc, AuthenticationError):
        return False
    if isinstance(exc, (ConnectError, ConnectionLostError, OperationTimeoutError)):
        return True
    text = str(exc).lower()
    throttled = any(w in text for w in ("server-busy", "serverbusy", "throttl", "timeout"))
    return isinstance(exc, (EventDataSendError, EventHubError)) and (throttled or _not_delivered(exc))


def _not_delivered(exc: BaseException) -> bool:
    """A send the SDK saw settle without an outcome: its link was detached under it (the service
    moving the partition detaches with ``amqp:link:detach-forced``), which the SDK reports only as
    ``ErrorCondition.UnknownError``. Nothing was stored, so the sink sends again."""
    return "errorcondition.unknownerror" in str(exc).lower()


class _BatchSender:
    """Packs events into EventDataBatch objects per route and sends them with retries.

    Sends go through this worker's cached producer of the hub (``PRODUCERS``). A create or send
    that fails closes the producer; the retry (and the next task) gets a new one.
    """

    def __init__(self, options: EventHubsOptions) -> None:
        self.options = options
        # Borrowed now (no network: a new producer opens its links on first use), so that a client
        # that cannot be built fails the task with its own error.
        self._producer: SinkProducer | None = PRODUCERS.borrow(options)
        self.open: dict[tuple[str, str], Any] = {}
        # Per route, whether its batches take events encoded here (``event_encoding.direct_encoding``).
        self.direct: dict[tuple[str, str], bool] = {}
        self.events = 0
        self.batches = 0

    @property
    def producer(self) -> SinkProducer:
        """The producer this task sends with (after a failure, a new one from the cache)."""
        if self._producer is None:
            self._producer = PRODUCERS.borrow(self.options)
        return self._producer

    def _drop_producer(self) -> None:
        """Close the producer after a failure; the next attempt borrows (builds) another."""
        if self._producer is not None:
            producer, self._producer = self._producer, None
            PRODUCERS.discard(producer)

    def add(self, body: bytes | str, properties: dict[str, str] | None, route: tuple[str, str]) -> None:
        """Pack one event into the open batch of its route; a full batch is sent first."""
        batch = self.open.get(route)
        if batch is None:
            batch = self._new_batch(route)
        if not self._put(route, batch, body, properties):
            if len(batch):
                self._send(batch)
                batch = self._new_batch(route)
            if not self._put(route, batch, body, properties):
                raise EventHubsOptionError(
                    "One event is larger than the hub's maximum message size; shrink 'body'."
                )
        self.open[route] = batch
        if len(self.open) > MAX_OPEN_BATCHES:
            self.flush()

    def _put(
        self, route: tuple[str, str], batch: Any, body: bytes | str, properties: dict[str, str] | None
    ) -> bool:
        """Add the event to ``batch``, encoded here where the SDK would add nothing else to it
        (``event_encoding.py``), else through ``EventDataBatch.add``; False when it does not fit."""
        if self.direct[route]:
            return add_encoded(batch, encode_event(body, properties))
        from azure.eventhub import EventData

        event = EventData(body)
        if properties:
            event.properties = properties
        try:
            batch.add(event)
        except ValueError:  # the batch is full
            return False
        return True

    def _new_batch(self, route: tuple[str, str]) -> Any:
        kind, value = route
        kwargs = {"partition_id": value} if kind == "id" else {}
        if kind == "key":
            kwargs = {"partition_key": value}
        batch = self._retrying(lambda: self.producer.create_batch(**kwargs))
        self.direct[route] = direct_encoding(batch)
        return batch

    def _send(self, batch: Any) -> None:
        count = len(batch)
        self._retrying(lambda: self.producer.send_batch(batch))
        self.events += count
        self.batches += 1

    def _retrying(self, action: Any) -> Any:
        from tenacity import (
            Retrying,
            retry_if_exception,
            stop_after_attempt,
            wait_exponential_jitter,
        )

        try:
            for attempt in Retrying(
                retry=retry_if_exception(_is_transient),
                stop=stop_after_attempt(SEND_ATTEMPTS),
                wait=wait_exponential_jitter(multiplier=0.5, max=30, jitter=0.5),
                before_sleep=self._log_retry,
                reraise=True,
            ):
                with attempt:
                    try:
                        return action()
                    except Exception:
                        self._drop_producer()
                        raise
        except EventHubsOptionError:
            raise
        except Exception as exc:
            raise RuntimeError(
                f"Event hub {self.options.description}: sending events failed: "
                f"{redact(f'{type(exc).__name__}: {exc}', self.options)}"
            ) from None
        return None  # pragma: no cover

    def _log_retry(self, state: Any) -> None:
        exc = state.outcome.exception() if state.outcome else None
        first_line = next((line for line in str(exc).splitlines() if line.strip()), "") if exc else ""
        if exc is not None and _not_delivered(exc):
            first_line = (
                "not delivered: the service detached the link under the send, as when a partition moves"
            )
        log.warning(
            "Event hub %s: send attempt %d failed (%s); retrying",
            self.options.description,
            state.attempt_number,
            redact(f"{type(exc).__name__}: {first_line}" if first_line else type(exc).__name__, self.options),
        )

    def flush(self) -> None:
        for batch in self.open.values():
            if len(batch):
                self._send(batch)
        self.open.clear()

    def close(self, succeeded: bool) -> None:
        """Cache the producer for the next task after a task that succeeded; close it otherwise."""
        if self._producer is None:
            return
        producer, self._producer = self._producer, None
        if succeeded:
            PRODUCERS.give_back(producer)
        else:
            PRODUCERS.discard(producer)


def _add_record(sender: _BatchSender, columns: SinkColumns, record: tuple[Any, Any, Any, Any]) -> None:
    """Executor: pack one ``(body, properties as (key, value) pairs, partition id, partition key)``
    record into the sender's open batch of its route; ValueError names a bad row's column."""
    body, props, pid, key = record
    if body is None:
        raise ValueError("Column 'body' is null in a row; every event needs a body.")
    if props and any(k is None or v is None for k, v in props):
        raise ValueError("Column 'properties' holds a null key or value.")
    if pid is not None and key is not None:
        raise ValueError(
            f"A row sets both '{columns.partition_key}' ({key!r}) and "
            f"'{columns.partition_id}' ({pid!r}); an event goes either to a partition key "
            f"or to a partition id: set one of them to null in each row."
        )
    route = ("any", "")
    if pid is not None:
        route = ("id", str(pid))
    elif key is not None:
        route = ("key", str(key))
    sender.add(
        body if isinstance(body, (bytes, bytearray)) else str(body), dict(props) if props else None, route
    )


def _send_records(
    options: EventHubsOptions, columns: SinkColumns, records: Iterator[tuple[Any, Any, Any, Any]]
) -> EventHubsCommitMessage:
    """Executor: send ``(body, properties, partition id, partition key)`` records in batches per route."""
    sender = _BatchSender(options)
    succeeded = False
    try:
        for record in records:
            _add_record(sender, columns, record)
        sender.flush()
        succeeded = True
        return EventHubsCommitMessage(events=sender.events, batches=sender.batches)
    finally:
        sender.close(succeeded)
        worker_gc.settle()


def _write_rows(
    options: EventHubsOptions, columns: SinkColumns, rows: Iterator[Any]
) -> EventHubsCommitMessage:
    """Executor: send rows (anything indexed by column name: Spark Rows, dicts)."""

    return _send_records(options, columns, (_row_record(columns, row) for row in rows))


def _row_record(columns: SinkColumns, row: Any) -> tuple[Any, Any, Any, Any]:
    """Executor: the ``_add_record`` record of one row (anything indexed by column name)."""
    props = row[columns.properties] if columns.properties is not None else None
    return (
        row[columns.body],
        list(props.items()) if props else None,
        row[columns.partition_id] if columns.partition_id is not None else None,
        row[columns.partition_key] if columns.partition_key is not None else None,
    )


def _write_batches(
    options: EventHubsOptions, columns: SinkColumns, batches: Iterator[Any]
) -> EventHubsCommitMessage:
    """Executor: send Arrow record batches, a column at a time (no Spark Row per event)."""

    def column(batch: Any, name: str | None, size: int) -> list[Any]:
        return batch.column(name).to_pylist() if name is not None else [None] * size

    def records() -> Iterator[tuple[Any, Any, Any, Any]]:
        for batch in batches:
            size = batch.num_rows
            yield from zip(
                column(batch, columns.body, size),
                column(batch, columns.properties, size),  # a map is a list of (key, value) pairs
                column(batch, columns.partition_id, size),
                column(batch, columns.partition_key, size),
                strict=True,
            )

    return _send_records(options, columns, records())


class _EventSender:
    """What the batch and the stream writer share: the sink columns (driver) and sending (executor)."""

    def __init__(self, options: EventHubsOptions, schema: StructType) -> None:
        self.options = options
        self.columns = sink_columns(schema)
        worker_gc.settle()  # in the write planner and the commit runner, both reused Python workers

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        """Executor: send this task's rows, which Spark hands over as Arrow record batches."""
        return _write_batches(self.options, self.columns, iterator)


class EventHubsBatchWriter(_EventSender, DataSourceArrowWriter):
    """``df.write.format("eventhubs").mode("append").save()``."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        events = sum(m.events for m in messages if isinstance(m, EventHubsCommitMessage))
        log.info("Event hub %s: wrote %d events", self.options.description, events)


class EventHubsStreamWriter(_EventSender, DataSourceStreamArrowWriter):
    """``df.writeStream.format("eventhubs")``: each micro-batch's rows, at-least-once."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        events = sum(m.events for m in messages if isinstance(m, EventHubsCommitMessage))
        log.info("Event hub %s: micro-batch %d wrote %d events", self.options.description, batchId, events)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning(
            "Event hub %s: micro-batch %d aborted; events already sent stay in the hub (at-least-once)",
            self.options.description,
            batchId,
        )
