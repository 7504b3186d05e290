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


def test_sends_throttled_by_the_service_are_retried_and_each_event_is_stored_once(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    """The service's answer past its ingress quota (``com.microsoft:server-busy``, issue #28 item 1):
    a rejected send stores nothing, so the sink's retry after the throttle stores each row once."""
    columns = SinkColumns(body="body", partition_key=None, partition_id="pid", properties=None)
    hub.emulator.faults.throttle(6)  # longer than the SDK's own retries
    rows = [{"body": f"t{i}", "pid": str(i % 4)} for i in range(200)]
    message = _write_rows(parse_options(hub.options()), columns, iter(rows))
    assert message.events == 200
    assert "throttled" in caplog.text, "the retry names the fault"
    assert sorted(_bodies(hub)) == sorted(f"t{i}".encode() for i in range(200)), "each once"


def test_arrow_batches_are_sent_like_rows(hub: Hub) -> None:
    """What Spark hands the sink (Arrow record batches, a map column as key/value pairs) is routed
    and sent as the same rows would be: integer partition ids, properties, empty maps."""
    import pyarrow as pa

    from pyspark_eventhubs.batch_reader import EventHubsBatchReader
    from pyspark_eventhubs.receiver_cache import read_range
    from pyspark_eventhubs.writer import _write_batches

    columns = SinkColumns(body="body", partition_key=None, partition_id="pid", properties="props")
    props = pa.array([[("k", "v")], None, []], pa.map_(pa.string(), pa.string()))
    first = pa.record_batch(
        {"body": pa.array([b"a", b"b", b"c"]), "pid": pa.array([0, 1, 0], pa.int32()), "props": props}
    )
    second = pa.record_batch(
        {"body": pa.array([b"d"]), "pid": pa.array([1], pa.int32()), "props": pa.array([None], props.type)}
    )
    options = parse_options(hub.options())

    message = _write_batches(options, columns, iter([first, second]))

    assert message.events == 4
    start, end = EventHubsBatchReader(options).resolve_ranges()
    sent = {}
    for pid in start:
        for batch in read_range(options, pid, start[pid], end[pid]):
            for row in batch.to_pylist():
                sent[row["body"]] = (pid, dict(row["properties"] or {}))
    assert sent == {b"a": ("0", {"k": "v"}), b"b": ("1", {}), b"c": ("0", {}), b"d": ("1", {})}


def test_sends_to_a_partition_taken_offline_are_retried_until_it_is_back(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    """A partition moving (the emulator's offline fault, issue #28 item 1): its sender link is
    detached under a send, which the SDK reports as not delivered; the sink retries and every row
    arrives (at-least-once)."""
    columns = SinkColumns(body="body", partition_key=None, partition_id="pid", properties=None)
    _write_rows(parse_options(hub.options()), columns, iter([{"body": "warm", "pid": "1"}]))
    hub.emulator.faults.take_partition_offline("hub1", "1", 3)
    rows = [{"body": f"o{i}", "pid": str(i % 4)} for i in range(80)]
    message = _write_rows(parse_options(hub.options()), columns, iter(rows))
    assert message.events == 80
    assert "not delivered: the service detached the link" in caplog.text, "the retry says why"
    bodies = set(_bodies(hub))
    assert {f"o{i}".encode() for i in range(80)} <= bodies
