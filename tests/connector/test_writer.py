"""The sink's send path without Spark: batching per route, retries through broker faults, and the
worker's cached producers (reused across tasks, closed when idle, replaced when broken)."""

from __future__ import annotations

import time

import pytest

from pyspark_eventhubs.options import parse_options
from pyspark_eventhubs.producer_cache import PRODUCERS
from pyspark_eventhubs.writer import SinkColumns, _write_rows

from .conftest import Hub, producer_links

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


BY_ID = SinkColumns(body="body", partition_key=None, partition_id="pid", properties=None)


def _rows(prefix: str, count: int, partitions: int = 4) -> list[dict[str, str]]:
    return [{"body": f"{prefix}{i}", "pid": str(i % partitions)} for i in range(count)]


def _counters() -> dict[str, int]:
    return {
        "opened": PRODUCERS.opened,
        "reused": PRODUCERS.reused,
        "dropped": PRODUCERS.dropped,
        "closed_idle": PRODUCERS.closed_idle,
    }


def _since(before: dict[str, int]) -> dict[str, int]:
    return {name: value - before[name] for name, value in _counters().items()}


def _wait_for(condition, seconds: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def test_tasks_of_one_worker_send_on_one_cached_producer_and_its_links(hub: Hub) -> None:
    """Two tasks (two micro-batches) in one worker process: the second borrows the producer the
    first gave back and sends on the same links: the emulator sees the same four links, each with
    a delivery from each task, and no new one. Every row is stored once."""
    options = parse_options(hub.options())
    before = _counters()

    first = _write_rows(options, BY_ID, iter(_rows("a", 200)))
    links = producer_links(hub.emulator, "hub1")
    second = _write_rows(options, BY_ID, iter(_rows("b", 200)))

    assert (first.events, second.events) == (200, 200)
    assert _since(before) == {"opened": 1, "reused": 1, "dropped": 0, "closed_idle": 0}
    assert len(links) == 4 and set(links.values()) == {1}, "one link per partition, one batch each"
    assert producer_links(hub.emulator, "hub1") == {name: 2 for name in links}, "the same links, reused"
    assert PRODUCERS.idle_count() == 1
    assert sorted(_bodies(hub)) == sorted(f"{p}{i}".encode() for p in "ab" for i in range(200))


def test_an_idle_producer_and_an_idle_link_are_closed_by_the_timer(
    hub: Hub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The timer closes a producer no task used for ``idle_seconds`` (its links go from the
    emulator), and before that a single link its tasks stopped using while they use the others."""
    monkeypatch.setattr(PRODUCERS, "idle_seconds", 1.0)
    options = parse_options(hub.options())
    before = _counters()

    _write_rows(options, BY_ID, iter(_rows("a", 20, partitions=2)))  # links of partitions 0 and 1
    links = producer_links(hub.emulator, "hub1")
    assert len(links) == 2
    # Only partition 0 from now on, every 0.2 s: partition 1's link goes, partition 0's stays.
    started = time.monotonic()
    while time.monotonic() - started < 2.5:
        _write_rows(options, BY_ID, iter([{"body": "p0", "pid": "0"}]))
        time.sleep(0.2)
    kept = producer_links(hub.emulator, "hub1")
    assert len(kept) == 1 and set(kept) < set(links), "the idle link closed, the used one kept"
    assert _since(before)["opened"] == 1, "the producer itself stayed cached"

    assert _wait_for(lambda: PRODUCERS.idle_count() == 0), "the idle producer was closed"
    assert _wait_for(lambda: not producer_links(hub.emulator, "hub1")), "its links are gone"
    assert _since(before)["closed_idle"] == 1


def test_a_cached_producer_whose_connections_dropped_is_replaced_and_the_rows_land(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    """The broker drops every connection (as a restart does) while the producer is cached: the next
    task finds it broken before sending (no failed send, no retry), closes it, sends on a new one,
    and every row of both tasks is stored once."""
    options = parse_options(hub.options())
    before = _counters()
    _write_rows(options, BY_ID, iter(_rows("a", 100)))
    assert hub.emulator.faults.drop_connections() >= 4

    message = _write_rows(options, BY_ID, iter(_rows("b", 100)))

    assert message.events == 100
    assert _since(before) == {"opened": 2, "reused": 0, "dropped": 1, "closed_idle": 0}
    assert "retrying" not in caplog.text, "found broken before a send"
    assert len(producer_links(hub.emulator, "hub1")) == 4
    assert sorted(_bodies(hub)) == sorted(f"{p}{i}".encode() for p in "ab" for i in range(100))


def test_a_cached_producer_whose_link_the_service_closed_is_replaced_and_the_rows_land(hub: Hub) -> None:
    """The service detaches one partition's link of a cached producer (the partition moves, here for
    no time at all): the next task sees the detach, replaces the producer, and every row lands."""
    options = parse_options(hub.options())
    before = _counters()
    _write_rows(options, BY_ID, iter(_rows("a", 40, partitions=2)))
    assert hub.emulator.faults.take_partition_offline("hub1", "1", 0) == 1

    message = _write_rows(options, BY_ID, iter(_rows("b", 40, partitions=2)))

    assert message.events == 40
    assert _since(before)["dropped"] == 1 and _since(before)["opened"] == 2
    bodies = _bodies(hub)
    assert set(bodies) == {f"{p}{i}".encode() for p in "ab" for i in range(40)}, "no row lost"
    assert len(bodies) == 80, "none sent twice"


def test_a_send_that_fails_drops_the_producer_and_the_retry_lands_on_a_new_one(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    """A send rejected by the broker (throttled) still raises into the sink's retry, as before the
    cache; the producer that failed is closed instead of cached, and the retry lands every row."""
    options = parse_options(hub.options())
    _write_rows(options, BY_ID, iter(_rows("a", 8)))  # a cached, healthy producer
    before = _counters()
    hub.emulator.faults.throttle(6)  # longer than the SDK's own retries

    message = _write_rows(options, BY_ID, iter(_rows("t", 40)))

    assert message.events == 40
    assert "throttled" in caplog.text
    counters = _since(before)
    assert counters["reused"] == 1 and counters["dropped"] >= 1 and counters["opened"] >= 1
    assert sorted(b for b in _bodies(hub) if b.startswith(b"t")) == sorted(
        f"t{i}".encode() for i in range(40)
    )


def test_events_encoded_by_the_sink_fill_batches_and_partition_keys_go_through_the_sdk(hub: Hub) -> None:
    """Routes to a partition id or round-robin take events the sink encodes itself (``event_encoding``),
    a partition key's the SDK's; either way each event lands once with its properties, and large
    events fill several batches of the hub's maximum message size."""
    from pyspark_eventhubs.writer import _add_record, _BatchSender

    options = parse_options(hub.options())
    columns = SinkColumns(body="body", partition_key="key", partition_id="pid", properties="props")
    sender = _BatchSender(options)
    records = [(f"big-{i}".encode() + b"x" * 100_000, [("n", str(i))], "0", None) for i in range(25)]
    records += [(f"any-{i}", [("n", "é" * i)], None, None) for i in range(10)]
    records += [(f"key-{i}", [("n", str(i))], None, "user-1") for i in range(10)]
    for record in records:
        _add_record(sender, columns, record)
    assert sender.direct == {("id", "0"): True, ("any", ""): True, ("key", "user-1"): False}
    sender.flush()
    sender.close(succeeded=True)

    assert sender.events == 45
    assert sender.batches >= 5  # 2.5 MB of events to partition 0 need three batches of at most 1 MB
    from pyspark_eventhubs.batch_reader import EventHubsBatchReader
    from pyspark_eventhubs.receiver_cache import read_range

    start, end = EventHubsBatchReader(options).resolve_ranges()
    landed = []
    for pid in start:
        for batch in read_range(options, pid, start[pid], end[pid]):
            landed += [(row["body"], dict(row["properties"]), pid) for row in batch.to_pylist()]
    expected = {(body if isinstance(body, bytes) else body.encode()): dict(p) for body, p, *_ in records}
    assert sorted(body for body, _, _ in landed) == sorted(expected)  # each event once
    assert {body: properties for body, properties, _ in landed} == expected
    assert {pid for body, _, pid in landed if body.startswith(b"big-")} == {"0"}
