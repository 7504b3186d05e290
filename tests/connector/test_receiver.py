"""The executor read path without Spark: exact ranges, receiver reuse, data loss, timeouts.

Runs ``read_range`` in the test process against the emulator with the real SDK; this is the code
every Spark task runs, and here its receiver cache can be inspected directly.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from pyspark_eventhubs import receiver_cache, receiver_slots
from pyspark_eventhubs.errors import EventHubsDataLossError, EventHubsReadError
from pyspark_eventhubs.options import EventHubsOptions, parse_options
from pyspark_eventhubs.receiver_cache import RECEIVERS, PartitionReceiver, ReceiverCache, read_range

from .conftest import Hub

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True, params=["fast", "sdk"])
def receive_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every rule here holds on both receive paths: the fast receiver (the default) and the SDK's."""
    setting = "true" if request.param == "fast" else "false"
    options = Hub.options
    monkeypatch.setattr(
        Hub, "options", lambda self, **extra: options(self, **{"eventhubs.useFastReceiver": setting, **extra})
    )
    return request.param


def _read(options: EventHubsOptions, partition: str, start: int, end: int) -> list[tuple[int, bytes]]:
    rows: list[tuple[int, bytes]] = []
    for batch in read_range(options, partition, start, end):
        seqs, bodies = batch.column("sequenceNumber").to_pylist(), batch.column("body").to_pylist()
        rows.extend(zip(seqs, bodies, strict=True))
    return rows


@pytest.fixture
def filled(hub: Hub) -> Iterator[tuple[Hub, EventHubsOptions]]:
    hub.send([f"ev-{i}" for i in range(30)], partition="1")
    yield hub, parse_options(hub.options(**{"eventhubs.receiverTimeout": "PT2S"}))


def _cached(options: EventHubsOptions, partition: str) -> object:
    return RECEIVERS.cached(options, partition)


def _open_receivers(hub: Hub, partition: str, group: str = "$default") -> int:
    """Receiver links the emulator has open on a partition of hub1 (what the service counts)."""
    links = hub.emulator._server.receivers.get(("hub1", group, partition), set())
    return sum(1 for link in links if not link.closed)


def _wait_until(condition: object, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return bool(condition())  # type: ignore[operator]


def test_consecutive_ranges_reuse_one_receiver_and_keep_its_prefetch(
    filled: tuple[Hub, EventHubsOptions],
) -> None:
    _, options = filled
    assert _read(options, "1", 0, 3) == [(i, f"ev-{i}".encode()) for i in range(3)]
    receiver = _cached(options, "1")
    assert receiver is not None and receiver.next_seq == 3  # type: ignore[attr-defined]
    # The rest was prefetched already; the next range continues on the same receiver.
    assert _read(options, "1", 3, 30) == [(i, f"ev-{i}".encode()) for i in range(3, 30)]
    assert _cached(options, "1") is receiver
    # A range elsewhere gets a fresh receiver at the right place.
    assert _read(options, "1", 10, 12) == [(10, b"ev-10"), (11, b"ev-11")]
    assert _cached(options, "1") is not receiver


def test_a_broker_that_answers_slowly_delays_the_read_and_loses_nothing(hub: Hub) -> None:
    """Every answer 200 ms late (``slow_responses``, issue #28 item 1): the range still reads each
    event once, in order."""
    hub.send([f"slow-{i}" for i in range(20)], partition="2")
    hub.emulator.faults.slow_responses(200)
    try:
        rows = _read(parse_options(hub.options()), "2", 0, 20)
    finally:
        hub.emulator.faults.clear()
    assert rows == [(i, f"slow-{i}".encode()) for i in range(20)]


def test_a_receiver_stolen_by_a_higher_owner_level_stops_the_read_naming_the_thief(hub: Hub) -> None:
    """An exclusive reader (owner level 0) whose partition another client takes with a higher owner
    level (issue #28 item 1): the read stops, nothing returned short, with the service's reason."""
    from azure.eventhub import EventHubConsumerClient

    hub.send([f"own-{i}" for i in range(10)], partition="0")
    options = parse_options(
        hub.options(**{"eventhubs.useExclusiveReceiver": "true", "eventhubs.receiverTimeout": "PT30S"})
    )
    thief = EventHubConsumerClient.from_connection_string(hub.connection_string, consumer_group="$Default")

    def steal() -> None:
        _wait_until(lambda: _open_receivers(hub, "0") == 1)  # the read is waiting for event 10
        thief.receive(lambda *_: None, partition_id="0", owner_level=5, starting_position="@latest")

    threading.Thread(target=steal, daemon=True).start()
    try:
        with pytest.raises(EventHubsReadError, match=r"amqp:link:stolen[\s\S]*higher owner level '5'"):
            _read(options, "0", 0, 20)  # 10 events exist: the read waits for the rest
    finally:
        thief.close()


def test_a_read_across_a_partition_taken_offline_and_back_gets_every_event_once(hub: Hub) -> None:
    """The partition moves while a range is being read (its link force-detached, new ones refused
    for 2 s, issue #28 item 1): the read reconnects where it was and returns each event once."""
    hub.send([f"mv-{i}" for i in range(10)], partition="3")
    options = parse_options(hub.options(**{"eventhubs.receiverTimeout": "PT60S"}))

    def move_then_send() -> None:
        _wait_until(lambda: _open_receivers(hub, "3") == 1)  # the read is waiting for event 10
        hub.emulator.faults.take_partition_offline("hub1", "3", 2)
        time.sleep(2.5)
        hub.send([f"mv-{i}" for i in range(10, 20)], partition="3")

    mover = threading.Thread(target=move_then_send, daemon=True)
    mover.start()
    rows = _read(options, "3", 0, 20)
    mover.join(30)
    assert rows == [(i, f"mv-{i}".encode()) for i in range(20)]


def test_a_receiver_a_little_behind_drops_events_forward_instead_of_reconnecting(
    filled: tuple[Hub, EventHubsOptions],
) -> None:
    """The task of the next batch often lands on a worker whose receiver stopped a batch earlier."""
    _, options = filled
    assert [seq for seq, _ in _read(options, "1", 0, 3)] == [0, 1, 2]
    receiver = _cached(options, "1")
    assert _read(options, "1", 10, 12) == [(10, b"ev-10"), (11, b"ev-11")]
    assert _cached(options, "1") is receiver


def test_range_past_the_end_times_out_instead_of_returning_short(
    filled: tuple[Hub, EventHubsOptions],
) -> None:
    _, options = filled
    with pytest.raises(EventHubsReadError, match=r"receiverTimeout.*\[30, 35\)"):
        _read(options, "1", 25, 35)
    assert _cached(options, "1") is None  # a failed receiver is not reused


def test_expired_events_fail_or_are_skipped(filled: tuple[Hub, EventHubsOptions]) -> None:
    hub, options = filled
    hub.emulator.truncate("hub1", partition="1", before_sequence_number=12)
    with pytest.raises(EventHubsDataLossError, match=r"partition 1.*\[5, 12\)"):
        _read(options, "1", 5, 20)
    lenient = parse_options(hub.options(failOnDataLoss="false"))
    assert [seq for seq, _ in _read(lenient, "1", 5, 20)] == list(range(12, 20))
    assert _read(lenient, "1", 0, 8) == []  # everything asked for expired


def test_dropped_connection_is_reopened_at_the_right_sequence_number(
    filled: tuple[Hub, EventHubsOptions],
) -> None:
    hub, options = filled
    assert [seq for seq, _ in _read(options, "1", 0, 5)] == list(range(5))
    assert hub.emulator.faults.drop_connections() >= 1  # kills the cached receiver's connection
    hub.send([f"late-{i}" for i in range(5)], partition="1")
    rows = _read(options, "1", 5, 35)
    assert [seq for seq, _ in rows] == list(range(5, 35))
    assert rows[-1] == (34, b"late-4")


def test_range_that_expired_after_planning_with_nothing_after_it_does_not_wait_for_events(
    filled: tuple[Hub, EventHubsOptions],
) -> None:
    """Every event from the task's start on expired and no newer one exists: the task must not
    wait eventhubs.receiverTimeout for events that will never come (it used to, then failed)."""
    hub, _ = filled
    hub.emulator.truncate("hub1", partition="1", before_sequence_number=30)
    patient = {"eventhubs.receiverTimeout": "PT4M"}
    lenient = parse_options(hub.options(failOnDataLoss="false", **patient))
    assert _read(lenient, "1", 10, 20) == []
    strict = parse_options(hub.options(**patient))
    with pytest.raises(EventHubsDataLossError, match=r"partition 1.*\[10, 20\)"):
        _read(strict, "1", 10, 20)


def test_idle_receiver_is_closed_by_the_timer_without_another_borrow(
    filled: tuple[Hub, EventHubsOptions], monkeypatch: pytest.MonkeyPatch
) -> None:
    hub, options = filled
    cache = ReceiverCache(idle_seconds=1.0)
    monkeypatch.setattr(receiver_cache, "RECEIVERS", cache)
    assert [seq for seq, _ in _read(options, "1", 0, 3)] == [0, 1, 2]
    assert cache.idle_count() == 1 and _wait_until(lambda: _open_receivers(hub, "1") == 1)
    # Nothing borrows again: the timer alone closes the receiver and its link.
    assert _wait_until(lambda: cache.idle_count() == 0 and _open_receivers(hub, "1") == 0)


def test_worker_caches_never_open_more_receivers_than_the_host_limit(
    filled: tuple[Hub, EventHubsOptions], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three Python workers (three caches) read one partition in turn with a limit of 2: the third
    gets a slot because an idle receiver of another worker makes room; never more than 2 open."""
    hub, options = filled
    monkeypatch.setattr(receiver_slots, "MAX_RECEIVERS", 2)
    most = [0]
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            most[0] = max(most[0], _open_receivers(hub, "1"))
            time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    caches = [ReceiverCache() for _ in range(3)]
    open_after: list[int] = []
    try:
        for i, cache in enumerate(caches):
            monkeypatch.setattr(receiver_cache, "RECEIVERS", cache)
            assert [seq for seq, _ in _read(options, "1", i, i + 2)] == [i, i + 1]
            open_after.append(_open_receivers(hub, "1"))
        assert caches[2].idle_count() == 1  # the third worker got its receiver
        assert 1 <= sum(cache.idle_count() for cache in caches) <= 2
    finally:
        done.set()
        watcher.join()
        for cache in caches:
            cache.close_all()
    # Counted between the reads (nothing else opens one then): the first two workers' receivers
    # were both open, as the limit allows, before the third needed room.
    assert open_after[:2] == [1, 2], open_after
    # The sampler saw every moment it could (a 5 ms sampler can miss a short one on a loaded
    # machine, so it bounds from above only): never more than the limit.
    assert 1 <= most[0] <= 2, most


def test_every_slot_busy_reading_fails_with_an_error_that_says_what_to_do(
    filled: tuple[Hub, EventHubsOptions], monkeypatch: pytest.MonkeyPatch
) -> None:
    hub, _ = filled
    monkeypatch.setattr(receiver_slots, "MAX_RECEIVERS", 2)
    quick = parse_options(
        hub.options(**{"eventhubs.receiverTimeout": "PT1S", "eventhubs.consumerGroup": "cg1"})
    )
    busy = [PartitionReceiver(quick, "1", 0, 10) for _ in range(2)]  # two tasks reading
    try:
        with pytest.raises(EventHubsReadError) as info:
            _read(quick, "1", 0, 3)
    finally:
        for receiver in busy:
            receiver.close()
    message = str(info.value)
    assert "partition 1, consumer group 'cg1': all 2 receivers" in message
    assert "eventhubs.consumerGroup" in message and "minPartitions" in message
    assert [seq for seq, _ in _read(quick, "1", 0, 3)] == [0, 1, 2]  # room again once they closed


def test_receiver_refused_by_the_service_waits_for_a_place(hub: Hub) -> None:
    """A receiver outside this machine's slots (another machine) holds the service's only place;
    the read waits until it goes instead of failing at once, and fails clearly if it never does."""
    from azure.eventhub import EventHubConsumerClient

    hub.send([f"ev-{i}" for i in range(5)], partition="0")
    hub.emulator.config.max_receivers_per_partition = 1
    other = EventHubConsumerClient.from_connection_string(hub.connection_string, consumer_group="$Default")
    threading.Thread(
        target=other.receive,
        kwargs={"on_event": lambda *_: None, "partition_id": "0", "starting_position": "-1"},
        daemon=True,
    ).start()
    try:
        assert _wait_until(lambda: _open_receivers(hub, "0") == 1)
        short = parse_options(hub.options(**{"eventhubs.receiverTimeout": "PT3S"}))
        with pytest.raises(EventHubsReadError, match="resource-limit-exceeded"):
            _read(short, "0", 0, 5)
        threading.Timer(2.0, other.close).start()
        patient = parse_options(hub.options(**{"eventhubs.receiverTimeout": "PT60S"}))
        assert [seq for seq, _ in _read(patient, "0", 0, 5)] == [0, 1, 2, 3, 4]
    finally:
        other.close()


def test_binary_property_values_are_written_as_the_scala_connector_writes_them(hub: Hub) -> None:
    """AMQP binary values become the JSON array of their signed bytes (proton-j + json4s, as in
    azure-event-hubs-spark); strings stay strings, numbers become JSON."""
    from azure.eventhub import EventData, EventHubProducerClient

    event = EventData(b"payload")
    event.properties = {"text": "h\u00e9", "raw": b"h\xff\x00", "n": 7, "ok": True}
    with EventHubProducerClient.from_connection_string(hub.connection_string) as producer:
        batch = producer.create_batch(partition_id="2")
        batch.add(event)
        producer.send_batch(batch)
    options = parse_options(hub.options())
    batches = list(read_range(options, "2", 0, 1))
    props = dict(batches[0].column("properties").to_pylist()[0])
    assert props == {"text": "h\u00e9", "raw": "[104,-1,0]", "n": "7", "ok": "true"}


def test_a_read_retries_a_failure_once_at_a_position_and_again_after_progress() -> None:
    """A dropped link is retried once where the read stands; once events arrived since, a second
    drop is a new fault (a long read through two transient disconnects finishes), while two
    failures at one position give up, naming the position."""
    options = parse_options(
        {
            "eventhubs.connectionString": "Endpoint=sb://127.0.0.1:5672/;SharedAccessKeyName=k;SharedAccessKey=s;EntityPath=hub1"
        }
    )
    retries = receiver_cache.ReadRetries(options, "2")
    dropped = ConnectionError("the broker closed the connection of partition 2")
    retries.after(dropped, 0)
    retries.after(dropped, 15)  # 15 events arrived after the first drop
    retries.after(dropped, 40)
    with pytest.raises(EventHubsReadError, match="partition 2: receiving from sequence number 40 failed"):
        retries.after(dropped, 40)
