"""The sink's send path without Spark: batching per route and retries through broker faults."""

from __future__ import annotations

import pytest

from pyspark_eventhubs.options import parse_options
from pyspark_eventhubs.writer import SinkColumns, _write_rows

from .conftest import Hub

pytestmark = pytest.mark.integration


def _bodies(hub: Hub) -> list[bytes]:
    from pyspark_eventhubs.batch_reader import EventHubsBatchReader
    from pyspark_eventhubs.receiver_cache import read_range

    options = parse_options(hub.options())
    start, end = EventHubsBatchReader(options).resolve_ranges()
    bodies: list[bytes] = []
    for pid in start:
        for batch in read_range(options, pid, start[pid], end[pid]):
            bodies.extend(batch.column("body").to_pylist())
    return bodies


def test_rows_are_sent_in_few_batches_per_route(hub: Hub) -> None:
    columns = SinkColumns(body="body", partition_key=None, partition_id="pid", properties=None)
    rows = [{"body": f"r{i}", "pid": str(i % 2)} for i in range(1000)]
    message = _write_rows(parse_options(hub.options()), columns, iter(rows))
    assert message.events == 1000
    assert message.batches <= 4  # one EventDataBatch per partition holds hundreds of small events
    assert sorted(_bodies(hub)) == sorted(f"r{i}".encode() for i in range(1000))


def test_sends_are_retried_while_the_broker_refuses_connections(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    columns = SinkColumns(body="body", partition_key="key", partition_id=None, properties=None)
    # Longer than the SDK's own connect retries (3 attempts, 0.8 s exponential backoff).
    hub.emulator.faults.refuse_connections(7)
    rows = [{"body": f"k{i}", "key": f"user-{i % 3}"} for i in range(60)]
    message = _write_rows(parse_options(hub.options()), columns, iter(rows))
    assert message.events == 60
    assert "retrying" in caplog.text
    bodies = _bodies(hub)
    assert set(bodies) == {f"k{i}".encode() for i in range(60)}  # at-least-once: none missing
