"""The async SDK clients, and many concurrent clients on one emulator."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter

import pytest
from azure.eventhub import EventData, EventHubProducerClient
from azure.eventhub.aio import EventHubConsumerClient as AsyncConsumer
from azure.eventhub.aio import EventHubProducerClient as AsyncProducer

from .conftest import receive

pytestmark = pytest.mark.integration


async def _async_round_trip(conn: str) -> tuple[dict, list[tuple[int, str]]]:
    async with AsyncProducer.from_connection_string(conn) as producer:
        props = await producer.get_partition_properties("1")
        batch = await producer.create_batch(partition_id="1")
        for i in range(20):
            batch.add(EventData(f"async-{i}"))
        await producer.send_batch(batch)
        await asyncio.sleep(0.01)  # a later enqueued time for the single event
        await producer.send_event(EventData("async-20"), partition_id="1")
        after = await producer.get_partition_properties("1")
    got: list[tuple[int, str]] = []
    done = asyncio.Event()
    consumer = AsyncConsumer.from_connection_string(conn, consumer_group="cg1")

    async def on_event(_ctx, event):
        got.append((event.sequence_number, event.body_as_str()))
        if len(got) == 21:
            done.set()

    task = asyncio.ensure_future(
        consumer.receive(on_event, partition_id="1", starting_position=0, starting_position_inclusive=True)
    )
    try:
        await asyncio.wait_for(done.wait(), 20)
    finally:
        await consumer.close()
        task.cancel()
    return {"before": props, "after": after}, got


async def _async_positions(conn: str, by_seq: dict[int, EventData]) -> dict[str, list[int]]:
    """Run one async consumer per position kind at once; return the sequence numbers each saw."""
    positions = {
        "start": ("-1", False),
        "sequence": (5, False),
        "offset": (by_seq[10].offset, True),
        "time": (by_seq[19].enqueued_time, False),
        "latest": ("@latest", False),
    }
    seen: dict[str, list[int]] = {name: [] for name in positions}
    clients = []
    tasks = []
    for name, (position, inclusive) in positions.items():
        client = AsyncConsumer.from_connection_string(
            conn, consumer_group="cg1" if name == "latest" else "$Default"
        )

        async def on_event(_ctx, event, name=name):
            seen[name].append(event.sequence_number)

        clients.append(client)
        tasks.append(
            asyncio.ensure_future(
                client.receive(
                    on_event,
                    partition_id="1",
                    starting_position=position,
                    starting_position_inclusive=inclusive,
                )
            )
        )
    await asyncio.sleep(3)  # all links attached
    async with AsyncProducer.from_connection_string(conn) as producer:
        await producer.send_event(EventData("async-21"), partition_id="1")
    for _ in range(200):
        if seen["latest"] and len(seen["start"]) >= 22:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)
    await asyncio.gather(*(client.close() for client in clients))
    for task in tasks:
        task.cancel()
    return seen


def test_async_clients_round_trip_and_every_position_kind(emulator):
    conn = emulator.connection_string("hub1")
    props, got = asyncio.run(_async_round_trip(conn))
    assert props["before"]["is_empty"] is True
    assert props["after"]["last_enqueued_sequence_number"] == 20
    assert got == [(i, f"async-{i}") for i in range(21)]
    by_seq = {e.sequence_number: e for e in receive(conn, "1", expected=21, consumer_group="cg1")}
    assert by_seq[19].enqueued_time < by_seq[20].enqueued_time  # the single send came later
    seen = asyncio.run(_async_positions(conn, by_seq))
    assert seen["start"] == list(range(22))
    assert seen["sequence"] == list(range(6, 22))
    assert seen["offset"] == list(range(10, 22))
    assert seen["time"] == [20, 21]
    assert seen["latest"] == [21]


def test_twenty_concurrent_clients(emulator):
    """12 producers and 8 consumers at once; every consumer sees every event of its partition once.

    Each consumer's deadline includes the SDK client's start-up ($management request for the partition
    ids, $cbs, attach). Those clients run in this process next to the emulator, and the SDK's
    EventProcessor busy-waits until it has claimed its partition, so under CPU load the start-up alone took
    15-55 s in the stress loops (it is ~3 s on a quiet machine): the deadline is generous, the consumers stop
    as soon as they have every event (plus a settle time to catch duplicates).
    """
    conn = emulator.connection_string("hub4")
    per_producer = 25
    results: dict[int, list] = {}
    errors: list[BaseException] = []

    def produce(n: int) -> None:
        try:
            with EventHubProducerClient.from_connection_string(conn) as producer:
                batch = producer.create_batch(partition_id=str(n % 4))
                for i in range(per_producer):
                    batch.add(EventData(f"p{n}-{i}"))
                producer.send_batch(batch)
        except BaseException as exc:  # reported below
            errors.append(exc)

    expected_per_partition = 3 * per_producer

    def consume(n: int) -> None:
        try:
            results[n] = receive(
                conn,
                str(n % 4),
                expected=expected_per_partition,
                consumer_group="cg1" if n >= 4 else "$Default",
                timeout=180,
                settle=0.5,
            )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=consume, args=(n,)) for n in range(8)]
    threads += [threading.Thread(target=produce, args=(n,)) for n in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors
    for n in range(8):
        pid = n % 4
        bodies = Counter(e.body_as_str() for e in results[n])
        expected = {f"p{p}-{i}" for p in range(12) if p % 4 == pid for i in range(per_producer)}
        assert set(bodies) == expected
        assert all(c == 1 for c in bodies.values())
        assert sorted(e.sequence_number for e in results[n]) == list(range(expected_per_partition))
