"""Fixtures for the emulator tests: a running emulator and small SDK helpers."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from azure.eventhub import EventData, EventHubConsumerClient, EventHubProducerClient

from eventhubs_emulator import Emulator
from tests.support.emulator import start_test_emulator


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    """An in-memory emulator with hub1 (2 partitions, consumer group cg1) and hub4 (4 partitions)."""
    with start_test_emulator(hub1=2, hub4=4, consumer_groups=["cg1"]) as emu:
        yield emu


def send(conn_str: str, bodies: list[str], client: dict[str, Any] | None = None, **batch_kwargs: Any) -> None:
    """Send ``bodies`` as one batch with the real sync producer (``client``: its keyword arguments)."""
    with EventHubProducerClient.from_connection_string(conn_str, **(client or {})) as producer:
        batch = producer.create_batch(**batch_kwargs)
        for body in bodies:
            batch.add(EventData(body))
        producer.send_batch(batch)


def receive_all(
    conn_str: str, expected: int, consumer_group: str = "$Default", timeout: float = 30.0, settle: float = 0.3
) -> list[tuple[str, EventData]]:
    """Receive from every partition (one client claims them all) until ``expected`` events arrived.

    Returns ``(partition_id, event)`` pairs.
    """
    events: list[tuple[str, EventData]] = []
    consumer = EventHubConsumerClient.from_connection_string(conn_str, consumer_group=consumer_group)

    def on_batch(ctx: Any, batch: list[EventData]) -> None:
        events.extend((ctx.partition_id, e) for e in batch)

    thread = threading.Thread(
        target=lambda: consumer.receive_batch(on_batch, starting_position="-1", max_wait_time=0.5),
        daemon=True,
    )
    thread.start()
    deadline = time.monotonic() + timeout
    while len(events) < expected and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(settle)
    consumer.close()
    thread.join(timeout=10)
    return events


def receive(
    conn_str: str,
    partition_id: str,
    expected: int,
    starting_position: Any = "-1",
    inclusive: bool = False,
    consumer_group: str = "$Default",
    timeout: float = 20.0,
    settle: float = 0.0,
    client: dict[str, Any] | None = None,
    **kwargs: Any,
) -> list[EventData]:
    """Receive from one partition with the real sync consumer until ``expected`` events arrived
    (``client``: the consumer client's keyword arguments).

    ``settle`` keeps receiving that many seconds longer, to catch duplicates or extra events.
    """
    events: list[EventData] = []
    done = threading.Event()
    consumer = EventHubConsumerClient.from_connection_string(
        conn_str, consumer_group=consumer_group, **(client or {})
    )

    def on_batch(_ctx: Any, batch: list[EventData]) -> None:
        events.extend(batch)

    def run() -> None:
        try:
            consumer.receive_batch(
                on_batch,
                partition_id=partition_id,
                starting_position=starting_position,
                starting_position_inclusive=inclusive,
                max_wait_time=0.5,
                **kwargs,
            )
        finally:
            done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while len(events) < expected and time.monotonic() < deadline and not done.is_set():
        time.sleep(0.02)
    if settle:
        time.sleep(settle)
    consumer.close()
    thread.join(timeout=10)
    return events
