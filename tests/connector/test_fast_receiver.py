"""The fast receiver against the emulator and the real SDK: same events as the SDK path, exactly.

Both read paths run ``receiver_cache.read_range`` in the test process (the code every Spark task
runs), one with ``eventhubs.useFastReceiver=true`` (the default) and one with ``false`` (the SDK's
receive loop), over the same retained events; their Arrow tables must be equal. The contract
tests shared by both paths (timeouts, data loss, reconnects) are in ``test_receiver.py``.
"""

from __future__ import annotations

import datetime
import itertools
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from azure.eventhub import EventData, EventHubProducerClient
from azure.eventhub.amqp import AmqpAnnotatedMessage, AmqpMessageHeader, AmqpMessageProperties

from pyspark_eventhubs.fast_receiver import FastPartitionReceiver
from pyspark_eventhubs.options import EventHubsOptions, parse_options
from pyspark_eventhubs.receiver_cache import RECEIVERS, ReceiverCache, read_range
from pyspark_eventhubs.schema import arrow_schema

from .conftest import Hub

pytestmark = pytest.mark.integration


def _table(options: EventHubsOptions, partition: str, start: int, end: int) -> pa.Table:
    # A partition can be empty (keys land where the service's hash puts them): schema given.
    return pa.Table.from_batches(list(read_range(options, partition, start, end)), schema=arrow_schema())


def _options(hub: Hub, fast: bool, **extra: str) -> EventHubsOptions:
    return parse_options({**_options_dict(hub, fast), **extra})


def _send(hub: Hub, events: list, **route: str) -> None:
    producer = EventHubProducerClient.from_connection_string(hub.connection_string)
    try:
        batch = producer.create_batch(**route)
        for event in events:
            try:
                batch.add(event)
            except ValueError:
                producer.send_batch(batch)
                batch = producer.create_batch(**route)
                batch.add(event)
        producer.send_batch(batch)
    finally:
        producer.close()


def _rich_events() -> list:
    """Events with every kind of property value the SDK sends, AMQP properties, odd bodies."""
    typed = EventData(b"typed")
    typed.properties = {
        "text": "hé",
        "binary": b"\xff\x00raw",
        "utf8-binary": b"bytes",
        "int": 42,
        "negative": -5,
        "float": 1.5,
        "bool": True,
        "null": None,
        "uuid": uuid.UUID(int=5),
        "list": [1, "a", b"b"],
        "map": {"k": "v", "n": 1},
        "time": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
    }
    typed.message_id = "id-1"
    typed.content_type = "application/json"
    typed.correlation_id = "corr-1"
    return [
        typed,
        AmqpAnnotatedMessage(value_body={"a": [1, 2]}),
        AmqpAnnotatedMessage(sequence_body=[[1, "x"]]),
        AmqpAnnotatedMessage(
            data_body=[b"two ", b"sections"],
            header=AmqpMessageHeader(durable=True, priority=5),
            footer={"f": "x"},
            delivery_annotations={"da": 1},
            properties=AmqpMessageProperties(message_id=uuid.UUID(int=3), subject="s", group_sequence=4),
        ),
        *[EventData(f"plain-{i}") for i in range(20)],
    ]


@pytest.fixture
def rich_hub(hub: Hub) -> Iterator[Hub]:
    """hub1 with rich events on partition 0, keyed events spread by key, large bodies on 3."""
    _send(hub, _rich_events(), partition_id="0")
    for key in ("alpha", "beta", "gamma"):
        _send(hub, [EventData(f"{key}-{i}") for i in range(5)], partition_key=key)
    _send(hub, [EventData(bytes([i]) * 300_000) for i in range(1, 4)], partition_id="3")
    yield hub


def test_fast_and_sdk_paths_give_identical_batches(
    rich_hub: Hub, monkeypatch: pytest.MonkeyPatch, hot_loops: str
) -> None:
    """The fast receiver, with its compiled loops and with the pure-Python ones, against the SDK."""
    # Small AMQP frames, as on Azure (64 KiB): the 300 kB events come in several transfer frames.
    from azure.eventhub._pyamqp import client as amqp_client

    monkeypatch.setattr(amqp_client, "MAX_FRAME_SIZE_BYTES", 16 * 1024)
    fast, sdk = _options(rich_hub, True), _options(rich_hub, False)
    from pyspark_eventhubs.hub_metadata import HubMetadata

    metadata = HubMetadata(fast)
    try:
        bounds = metadata.bounds()
    finally:
        metadata.close()
    keyed = 0
    for pid, b in bounds.items():
        ours, theirs = _table(fast, pid, b.earliest, b.latest), _table(sdk, pid, b.earliest, b.latest)
        assert ours.num_rows == b.latest - b.earliest
        assert ours.to_pylist() == theirs.to_pylist()
        assert ours.equals(theirs)
        keyed += sum(key is not None for key in ours.column("partitionKey").to_pylist())
    assert keyed == 15
    bodies = _table(fast, "3", bounds["3"].earliest, bounds["3"].latest).column("body").to_pylist()
    assert bodies[-3:] == [bytes([i]) * 300_000 for i in range(1, 4)]
    first = _table(fast, "0", 0, 1).to_pylist()[0]
    assert dict(first["properties"])["binary"] == "[-1,0,114,97,119]"
    assert dict(first["systemProperties"])["message-id"] == "id-1"


def test_ranges_of_any_size_read_each_event_once_with_little_credit(hub: Hub) -> None:
    hub.send([f"ev-{i}" for i in range(700)], partition="2")
    options = _options(hub, True, **{"eventhubs.prefetchCount": "7"})
    whole = _table(options, "2", 0, 700)
    assert whole.column("sequenceNumber").to_pylist() == list(range(700))
    cuts = [0, 1, 2, 50, 51, 333, 500, 699, 700]
    parts = [_table(options, "2", lo, hi) for lo, hi in itertools.pairwise(cuts)]
    receiver = RECEIVERS._idle.get(ReceiverCache.key(options, "2"))
    assert isinstance(receiver, FastPartitionReceiver) and receiver.next_seq == 700
    assert pa.concat_tables(parts).equals(whole)
    assert whole.column("body").to_pylist() == [f"ev-{i}".encode() for i in range(700)]


def test_token_refresh_replies_arrive_between_transfers(hub: Hub) -> None:
    hub.send([f"ev-{i}" for i in range(400)], partition="1")
    options = _options(hub, True, **{"eventhubs.prefetchCount": "10"})
    receiver = FastPartitionReceiver(options, "1", 0, options.prefetch_count)
    try:
        assert receiver.receive(1, 30).num_rows == 1  # attached; now every check asks for a token
        cbs = receiver._consumer._handler._cbs_authenticator
        cbs._refresh_window = 10**9
        sent = []
        update = cbs.update_token

        def update_and_refresh_again() -> None:
            sent.append(1)
            update()
            cbs._refresh_window = 10**9  # update_token sets 10% of the lifetime: ask again next time

        cbs.update_token = update_and_refresh_again
        rows = 1
        while rows < 400:
            batch = receiver.receive(min(25, 400 - rows), 30, fill=True)
            assert batch is not None
            assert batch.column("sequenceNumber").to_pylist()[0] == rows
            rows += batch.num_rows
        assert rows == 400 and len(sent) >= 5
        assert cbs.handle_token() is False  # a put-token is out again, the link still reads
    finally:
        receiver.close()


def test_spark_reads_the_same_dataframe_on_both_paths(rich_hub: Hub, eh_spark: Any) -> None:
    def rows(fast: bool) -> list:
        df = eh_spark.read.format("eventhubs").options(**_options_dict(rich_hub, fast)).load()
        return sorted(df.collect(), key=lambda r: (r.partition, r.sequenceNumber))

    ours, theirs = rows(True), rows(False)
    assert len(ours) == 24 + 15 + 3
    assert ours == theirs


def _options_dict(hub: Hub, fast: bool) -> dict[str, str]:
    return hub.options(**{"eventhubs.useFastReceiver": str(fast).lower()})
