"""The demo's inputs: the hub in the emulator's config, its sample events and connection file, and
the landing folder's order files (a few records broken on purpose)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from eventhubs_emulator import EmulatorConfig
from hubflow_demo.progress import say
from hubflow_demo.settings import (
    BAD_PER_FILE,
    CONNECTION_FILE,
    EVENTS,
    HUB,
    LANDING_FILES,
    ORDERS_PER_FILE,
    PARTITIONS,
)


def emulator_config() -> EmulatorConfig:
    """The demo's hub in the emulator's config model (written as Config.json for its CLI)."""
    return EmulatorConfig.single_hub(HUB, partition_count=PARTITIONS)


def send_events(conn: str) -> int:
    """Send the sample telemetry events in batches; return how many were sent."""
    from azure.eventhub import EventData, EventHubProducerClient

    producer = EventHubProducerClient.from_connection_string(conn)
    sent = 0
    with producer:
        batch = producer.create_batch()
        for index in range(EVENTS):
            body = json.dumps({"device": f"dev-{index % 25}", "reading": index, "celsius": 20 + index % 15})
            try:
                batch.add(EventData(body))
            except ValueError:
                producer.send_batch(batch)
                sent += len(batch)
                batch = producer.create_batch()
                batch.add(EventData(body))
        if len(batch):
            producer.send_batch(batch)
            sent += len(batch)
    return sent


def write_landing_files(landing: Path) -> tuple[int, int]:
    """Order files as JSON lines, a few records broken on purpose; return (good, bad)."""
    landing.mkdir(parents=True, exist_ok=True)
    good = bad = 0
    for number in range(LANDING_FILES):
        lines = []
        for item in range(ORDERS_PER_FILE):
            order_id = number * 1000 + item
            lines.append(
                json.dumps(
                    {
                        "order_id": order_id,
                        "customer": f"c{item % 7}",
                        "amount": round(item * 1.5, 2),
                        "created_at": "2026-11-22T10:00:00Z",
                    }
                )
            )
            good += 1
        lines += ["this is not json", json.dumps({"customer": "no order id"})][:BAD_PER_FILE]
        bad += BAD_PER_FILE
        temp = landing / f".orders-{number}.tmp"
        temp.write_text("\n".join(lines) + "\n")
        temp.rename(landing / f"orders-{number}.json")
    return good, bad


def write_connection_file(conn: str) -> None:
    """Keep the emulator's connection string where a pipeline's run can read it (owner only)."""
    CONNECTION_FILE.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(CONNECTION_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(conn)


def feed(conn: str, data: Path) -> tuple[int, int, int]:
    """The connection file, the hub's events and the landing files; returns (sent, good, bad)."""
    write_connection_file(conn)
    sent = send_events(conn)
    good, bad = write_landing_files(data / "landing" / "orders")
    say(f"sent {sent} events to hub {HUB!r}; wrote {LANDING_FILES} landing files")
    return sent, good, bad
