"""Fixtures for the connector's integration tests: the embedded emulator and a registered source.

The editable install of ``hubflow-connectors`` uses a setuptools import hook, which Spark's
auto-discovery (``pkgutil.iter_modules``) cannot see; tests therefore register
``DefaultSource`` on the session explicitly. ``test_cluster.py`` checks auto-discovery with the
package on a plain path, as a wheel install puts it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest


@dataclass
class Hub:
    """One emulated hub: its emulator, name and connection string."""

    emulator: Any
    name: str
    connection_string: str

    def options(self, **extra: str) -> dict[str, str]:
        """Reader/writer options for this hub plus ``extra``."""
        return {"eventhubs.connectionString": self.connection_string, **extra}

    def send(
        self,
        events: Iterable[str | bytes],
        partition: str | None = None,
        key: str | None = None,
        properties: dict[str, str] | None = None,
    ) -> int:
        """Send ``events`` with the SDK's batched producer; returns how many were sent."""
        from azure.eventhub import EventData, EventHubProducerClient

        producer = EventHubProducerClient.from_connection_string(self.connection_string)
        count = 0
        try:
            kwargs = {"partition_id": partition} if partition is not None else {}
            if key is not None:
                kwargs = {"partition_key": key}
            batch = producer.create_batch(**kwargs)
            for body in events:
                event = EventData(body)
                if properties:
                    event.properties = dict(properties)
                try:
                    batch.add(event)
                except ValueError:
                    producer.send_batch(batch)
                    batch = producer.create_batch(**kwargs)
                    batch.add(event)
                count += 1
            if len(batch):
                producer.send_batch(batch)
        finally:
            producer.close()
        return count

    def send_per_partition(self, counts: dict[str, int], prefix: str = "e") -> set[str]:
        """Send ``counts[pid]`` events to each partition; bodies are unique; returns them."""
        bodies: set[str] = set()
        for pid, n in counts.items():
            batch = [f"{prefix}-{pid}-{i}" for i in range(n)]
            self.send(batch, partition=pid)
            bodies.update(batch)
        return bodies


def producer_links(emulator: Any, hub: str) -> dict[str, int]:
    """The producer links attached to ``hub`` as the emulator sees them: link name -> deliveries.

    A link's name is the client's (a uuid per link), so the same name before and after is the same
    link; closed links are not listed."""

    def collect() -> dict[str, int]:
        return {
            link.name: link.received
            for conn in emulator._server.connections
            for session in conn.sessions.values()
            for link in session.links.values()
            if link.kind == "producer"
            and not link.closed
            and link.hub is not None
            and link.hub.name.lower() == hub.lower()
        }

    return emulator._call(collect)


@pytest.fixture
def hub() -> Iterator[Hub]:
    """A fresh emulator with hub ``hub1`` (4 partitions, consumer group cg1), stopped after."""
    from eventhubs_emulator import Emulator, EmulatorConfig

    cfg = EmulatorConfig.single_hub("hub1", partition_count=4, consumer_groups=["cg1"])
    with Emulator(cfg, port=0) as emu:
        yield Hub(emu, "hub1", emu.connection_string("hub1"))
    from pyspark_eventhubs.producer_cache import PRODUCERS
    from pyspark_eventhubs.receiver_cache import RECEIVERS

    RECEIVERS.close_all()
    PRODUCERS.close_all()


@pytest.fixture(scope="session")
def eh_spark(spark: Any) -> Any:
    """The session-wide local Spark with ``format("eventhubs")`` registered."""
    from pyspark_eventhubs import DefaultSource, register_data_source

    register_data_source(spark, DefaultSource)
    return spark


@pytest.fixture(params=["compiled", "python"])
def hot_loops(request: pytest.FixtureRequest) -> Iterator[str]:
    """Runs a test with the connector's compiled hot loops, then with the pure-Python ones (its own
    patch, so a test's ``monkeypatch.undo()`` keeps the mode)."""
    from pyspark_eventhubs import native

    with pytest.MonkeyPatch.context() as patch:
        if request.param == "python":
            patch.setattr(native, "accel", None)
        else:
            assert native.accel is not None, NATIVE_MISSING
        yield request.param


# Why the compiled loops can be missing where the suite runs (scripts/bootstrap.sh builds them).
NATIVE_MISSING = (
    "pyspark_eventhubs._native is not built: `make venv` builds it with gcc and the Python "
    "headers (Debian: gcc python3-dev); see docs/connector.md, 'Installing'"
)
