"""Round trips with the real sync azure-eventhub SDK: properties, producers, every position kind."""

from __future__ import annotations

import datetime
import functools
import threading
import time

import pytest
from azure.eventhub import (
    EventData,
    EventHubConsumerClient,
    EventHubProducerClient,
    EventHubSharedKeyCredential,
)
from azure.eventhub._pyamqp import ReceiveClient
from azure.eventhub._pyamqp.authentication import JWTTokenAuth
from azure.eventhub._pyamqp.message import Message
from azure.eventhub.amqp import AmqpAnnotatedMessage

from eventhubs_emulator import Emulator
from tests.support.emulator import start_test_emulator
from tests.support.processes import wait_until

from .conftest import receive, receive_all, send

pytestmark = pytest.mark.integration


def test_hub_and_empty_partition_properties(emulator):
    conn = emulator.connection_string("hub4")
    with EventHubProducerClient.from_connection_string(conn) as producer:
        props = producer.get_eventhub_properties()
        assert props["eventhub_name"] == "hub4"
        assert props["partition_ids"] == ["0", "1", "2", "3"]
        assert isinstance(props["created_at"], datetime.datetime)
        part = producer.get_partition_properties("2")
    assert part["eventhub_name"] == "hub4"
    assert part["id"] == "2"
    assert part["is_empty"] is True
    assert part["beginning_sequence_number"] == 0
    assert part["last_enqueued_sequence_number"] == -1
    assert part["last_enqueued_offset"] == "-1"


def test_batch_to_partition_round_trip_every_event_once(emulator):
    conn = emulator.connection_string("hub1")
    bodies = [f"event-{i}" for i in range(50)]
    with EventHubProducerClient.from_connection_string(conn) as producer:
        batch = producer.create_batch(partition_id="1")
        for i, body in enumerate(bodies):
            event = EventData(body)
            event.properties = {"index": i, "kind": "test"}
            event.content_type = "text/plain"
            batch.add(event)
        producer.send_batch(batch)
        part = producer.get_partition_properties("1")
    assert part["is_empty"] is False
    assert part["last_enqueued_sequence_number"] == 49
    events = receive(conn, "1", expected=50, settle=0.3)
    assert [e.body_as_str() for e in events] == bodies
    assert [e.sequence_number for e in events] == list(range(50))
    offsets = [int(e.offset) for e in events]
    assert offsets == sorted(offsets) and len(set(offsets)) == 50
    assert all(isinstance(e.offset, str) for e in events)
    assert events[-1].offset == part["last_enqueued_offset"]
    assert [e.properties[b"index"] for e in events] == list(range(50))
    assert events[0].content_type == "text/plain"
    assert all(e.enqueued_time is not None for e in events)
    with EventHubProducerClient.from_connection_string(conn) as producer:
        assert producer.get_partition_properties("0")["is_empty"] is True


def test_partition_key_routes_same_key_to_same_partition(emulator):
    conn = emulator.connection_string("hub4")
    with EventHubProducerClient.from_connection_string(conn) as producer:
        for key in ["alpha", "beta", "gamma", "delta", "epsilon"]:
            for round_ in range(2):
                batch = producer.create_batch(partition_key=key)
                for i in range(3):
                    batch.add(EventData(f"{key}-{round_}-{i}"))
                producer.send_batch(batch)
    found: dict[str, set[str]] = {}
    bodies = []
    for pid, event in receive_all(conn, expected=30):
        key = event.partition_key
        key = key.decode() if isinstance(key, bytes) else key
        assert event.body_as_str().startswith(f"{key}-")
        found.setdefault(key, set()).add(pid)
        bodies.append(event.body_as_str())
    assert len(bodies) == len(set(bodies)) == 30
    assert all(len(pids) == 1 for pids in found.values()) and len(found) == 5
    assert len(set().union(*found.values())) > 1  # different keys spread over partitions


def test_round_robin_spreads_batches_over_partitions(emulator):
    conn = emulator.connection_string("hub1")
    with EventHubProducerClient.from_connection_string(conn) as producer:
        for i in range(4):
            batch = producer.create_batch()
            batch.add(EventData(f"rr-{i}"))
            producer.send_batch(batch)
        counts = [producer.get_partition_properties(p)["last_enqueued_sequence_number"] + 1 for p in "01"]
    assert counts == [2, 2]


def test_send_event_single_message(emulator):
    conn = emulator.connection_string("hub1")
    with EventHubProducerClient.from_connection_string(conn) as producer:
        producer.send_event(EventData("single"), partition_id="0")
    events = receive(conn, "0", expected=1)
    assert [(e.sequence_number, e.body_as_str()) for e in events] == [(0, "single")]


@pytest.fixture(scope="module")
def ten_events():
    """One emulator for the position tests, with ten events in hub1 partition 0 (two batches)."""
    with start_test_emulator(hub1=2) as emu:
        yield _send_ten(emu.connection_string("hub1"))


def _send_ten(conn):
    with EventHubProducerClient.from_connection_string(conn) as producer:
        for half in (range(5), range(5, 10)):
            batch = producer.create_batch(partition_id="0")
            for i in half:
                batch.add(EventData(f"e{i}"))
            producer.send_batch(batch)
            time.sleep(0.05)  # a distinct enqueued time for the second half
    events = receive(conn, "0", expected=10)
    assert [e.body_as_str() for e in events] == [f"e{i}" for i in range(10)]
    return conn, events


def _bodies(events):
    return [e.body_as_str() for e in events]


def test_position_sequence_number_inclusive_and_exclusive(ten_events):
    conn, _ = ten_events
    assert _bodies(receive(conn, "0", 7, starting_position=3, inclusive=True, settle=0.3)) == [
        f"e{i}" for i in range(3, 10)
    ]
    assert _bodies(receive(conn, "0", 6, starting_position=3, inclusive=False, settle=0.3)) == [
        f"e{i}" for i in range(4, 10)
    ]


def test_position_offset_inclusive_and_exclusive(ten_events):
    conn, events = ten_events
    offset = events[4].offset
    assert _bodies(receive(conn, "0", 6, starting_position=offset, inclusive=True, settle=0.3)) == [
        f"e{i}" for i in range(4, 10)
    ]
    assert _bodies(receive(conn, "0", 5, starting_position=offset, inclusive=False, settle=0.3)) == [
        f"e{i}" for i in range(5, 10)
    ]


def test_position_enqueued_time(ten_events):
    conn, events = ten_events
    second_half = events[5].enqueued_time
    assert events[4].enqueued_time < second_half
    assert _bodies(receive(conn, "0", 5, starting_position=second_half, inclusive=True, settle=0.3)) == [
        f"e{i}" for i in range(5, 10)
    ]
    assert receive(conn, "0", 1, starting_position=events[9].enqueued_time, timeout=1.5) == []


def test_position_start_of_stream(ten_events):
    conn, _ = ten_events
    assert len(receive(conn, "0", 10, starting_position="-1", settle=0.3)) == 10


def test_latest_gets_only_new_events_pushed_to_a_waiting_receiver(emulator):
    conn = emulator.connection_string("hub1")
    send(conn, ["old"], partition_id="0")
    received: list[tuple[float, EventData]] = []
    consumer = EventHubConsumerClient.from_connection_string(conn, consumer_group="cg1")

    def on_event(_ctx, event):
        if event is not None:
            received.append((time.monotonic(), event))

    thread = threading.Thread(
        target=lambda: consumer.receive(on_event, partition_id="0", starting_position="@latest"), daemon=True
    )
    thread.start()
    # "@latest" is where the partition ends when the link attaches: send only after that.
    wait_until(lambda: emulator.consumer_count("hub1", "0") == 1, 60, "the receiver to attach")
    with EventHubProducerClient.from_connection_string(conn) as producer:
        batch = producer.create_batch(partition_id="0")
        batch.add(EventData("new"))
        producer.send_batch(batch)
    # The waiting link gets the new event without asking again (pushed on its open credit).
    wait_until(lambda: bool(received), 60, "the new event")
    consumer.close()
    thread.join(timeout=10)
    assert [e.body_as_str() for _, e in received] == ["new"]


def _receive_without_filter(
    emu: Emulator, partition_id: str, expected: int, timeout: float = 60.0
) -> list[Message]:
    """Attach a receiver with no start-position filter (the SDK's pyamqp ReceiveClient, CBS auth).

    ``EventHubConsumerClient`` always sends a selector filter ("@latest" by default), so a link
    without one is made with the AMQP client inside azure-eventhub, authenticated the way the SDK
    authenticates: a SAS token for the hub put on ``$cbs``.
    """
    host = f"127.0.0.1:{emu.port}"
    audience = f"sb://{host}/hub1"
    credential = EventHubSharedKeyCredential("RootManageSharedAccessKey", "SAS_KEY_VALUE")
    auth = JWTTokenAuth(
        audience,
        audience,
        functools.partial(credential.get_token, audience),
        token_type=b"servicebus.windows.net:sastoken",
    )
    source = f"amqp://{host}/hub1/ConsumerGroups/$Default/Partitions/{partition_id}"
    client = ReceiveClient(host, source, auth=auth, use_tls=False, retry_total=0)
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    try:
        client.open()
        while len(got) < expected and time.monotonic() < deadline:
            got += client.receive_message_batch(max_batch_size=expected - len(got), timeout=1)
    finally:
        client.close()
    return got


def test_receiver_without_a_position_filter_starts_at_the_beginning_of_the_partition(emulator):
    conn = emulator.connection_string("hub1")
    send(conn, [f"first-{i}" for i in range(3)], partition_id="0")
    send(conn, [f"second-{i}" for i in range(2)], partition_id="0")
    expected = [f"first-{i}" for i in range(3)] + [f"second-{i}" for i in range(2)]
    got = _receive_without_filter(emulator, "0", expected=5)
    assert [b"".join(m.data).decode() for m in got] == expected
    assert [m.message_annotations[b"x-opt-sequence-number"] for m in got] == list(range(5))
    # The beginning is the earliest *retained* event: after retention drops 0-1, it starts at 2.
    emulator.truncate("hub1", partition="0", before_sequence_number=2)
    got = _receive_without_filter(emulator, "0", expected=3)
    assert [m.message_annotations[b"x-opt-sequence-number"] for m in got] == [2, 3, 4]


def test_producer_message_annotations_reach_the_consumer_beside_the_service_ones(emulator):
    conn = emulator.connection_string("hub1")
    with EventHubProducerClient.from_connection_string(conn) as producer:
        batched = EventData("batched")
        batched.raw_amqp_message.annotations["x-custom-tenant"] = "t-1"
        batched.raw_amqp_message.annotations["x-opt-sequence-number"] = 999  # the service's key wins
        batched.raw_amqp_message.delivery_annotations = {"x-hop-only": "d"}
        batch = producer.create_batch(partition_id="0")
        batch.add(batched)
        own = {"x-custom-tenant": "t-2", "rank": 7}
        batch.add(AmqpAnnotatedMessage(value_body={"n": 1}, annotations=own))
        producer.send_batch(batch)
        single = EventData("single")
        single.raw_amqp_message.annotations["x-custom-tenant"] = "t-3"
        producer.send_event(single, partition_id="0")
    for metrics in (False, True):  # with runtime metrics the emulator adds delivery annotations too
        events = receive(conn, "0", expected=3, track_last_enqueued_event_properties=metrics)
        annotations = [e.raw_amqp_message.annotations for e in events]
        assert [a[b"x-custom-tenant"] for a in annotations] == [b"t-1", b"t-2", b"t-3"]
        assert annotations[1][b"rank"] == 7
        assert [a[b"x-opt-sequence-number"] for a in annotations] == [0, 1, 2]
        assert [e.sequence_number for e in events] == [0, 1, 2]
        assert all(b"x-opt-offset" in a and b"x-opt-enqueued-time" in a for a in annotations)
        # The producer's delivery annotations reach the consumer too, as on the service (below).
        assert events[0].raw_amqp_message.delivery_annotations[b"x-hop-only"] == b"d"


def test_producer_delivery_annotations_reach_the_consumer_with_the_runtime_metrics(emulator):
    """What azure-eventhub's live test ``test_send_amqp_annotated_message`` reads back from the
    service: a sent message's delivery annotations, in a batch and alone; a receiver that asks for
    runtime metrics gets them in the same section (a message has one), the producer's keys kept."""
    conn = emulator.connection_string("hub1")
    annotated = AmqpAnnotatedMessage(
        data_body=[b"aa", b"bb"], header={"priority": 10}, delivery_annotations={"delann_key": "delann_value"}
    )
    with EventHubProducerClient.from_connection_string(conn) as producer:
        batch = producer.create_batch(partition_id="0")
        batch.add(annotated)
        batch.add(EventData("plain"))
        producer.send_batch(batch)
        producer.send_event(annotated, partition_id="0")
    for metrics in (False, True):
        events = receive(conn, "0", expected=3, track_last_enqueued_event_properties=metrics)
        own = [e.raw_amqp_message.delivery_annotations or {} for e in events]
        assert [d.get(b"delann_key") for d in own] == [b"delann_value", None, b"delann_value"]
        assert [e.body_as_str() for e in events] == ["aabb", "plain", "aabb"]
        assert events[0].raw_amqp_message.header.priority == 10
        if metrics:
            assert [d[b"last_enqueued_sequence_number"] for d in own] == [2, 2, 2]
