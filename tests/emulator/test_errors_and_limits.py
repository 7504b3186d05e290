"""Authentication, not-found, owner level, event size limits, frame splitting and runtime metrics."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import re
import threading
import time
from urllib.parse import quote_plus, urlencode

import pytest
from azure.core.credentials import AzureSasCredential
from azure.eventhub import EventData, EventHubConsumerClient, EventHubProducerClient
from azure.eventhub.aio import EventHubConsumerClient as AsyncConsumer
from azure.eventhub.exceptions import AuthenticationError, ConnectError, EventDataSendError, EventHubError

from eventhubs_emulator import ConfigError, Emulator, EmulatorConfig
from tests.support.emulator import start_test_emulator

from .conftest import receive, send

pytestmark = pytest.mark.integration


def test_wrong_key_is_an_authentication_error_not_a_hang(emulator):
    bad = emulator.connection_string("hub1").replace("SharedAccessKey=SAS_KEY_VALUE", "SharedAccessKey=wrong")
    started = time.monotonic()
    with pytest.raises(AuthenticationError, match="401"):
        with EventHubProducerClient.from_connection_string(bad, retry_total=0) as producer:
            producer.get_eventhub_properties()
    assert time.monotonic() - started < 5


def _sas_token(audience: str, key: str, expiry: int) -> str:
    """A SAS token built the way the SDK builds one (HMAC-SHA256 over the encoded URI and expiry)."""
    encoded = quote_plus(audience)
    digest = hmac.new(key.encode(), f"{encoded}\n{expiry}".encode(), hashlib.sha256).digest()
    return "SharedAccessSignature " + urlencode(
        {
            "sr": audience,
            "sig": base64.b64encode(digest),
            "se": str(expiry),
            "skn": "RootManageSharedAccessKey",
        }
    )


@pytest.mark.parametrize(
    ("key", "expiry", "reason"),
    [("SAS_KEY_VALUE", 1000, "expired"), ("other-key", 4_000_000_000, "signature")],
)
def test_expired_or_forged_token_is_rejected(emulator, key, expiry, reason):
    token = _sas_token(f"sb://127.0.0.1:{emulator.port}/hub1", key, expiry)
    producer = EventHubProducerClient(
        f"127.0.0.1:{emulator.port}", "hub1", AzureSasCredential(token), use_tls=False, retry_total=0
    )
    with pytest.raises(AuthenticationError, match=reason):
        with producer:
            producer.get_eventhub_properties()


def test_valid_token_from_sas_credential_works(emulator):
    token = _sas_token(f"sb://127.0.0.1:{emulator.port}/hub1", "SAS_KEY_VALUE", int(time.time()) + 600)
    producer = EventHubProducerClient(
        f"127.0.0.1:{emulator.port}", "hub1", AzureSasCredential(token), use_tls=False, retry_total=0
    )
    with producer:
        assert producer.get_partition_ids() == ["0", "1"]


def _hub_not_found(emu: Emulator, hub: str) -> str:
    """What the SDK reports for a $cbs put-token the service answers with 404 (the audience is the hub)."""
    return (
        "CBS Token authentication failed.\nStatus code: 404\n"
        f"Description: The messaging entity 'sb://127.0.0.1:{emu.port}/{hub}' could not be found."
    )


def test_token_for_an_unknown_hub_is_refused_on_cbs_with_404(emulator, caplog):
    """As on the service, $cbs answers put-token for a hub the namespace lacks with 404 "could not be
    found", so the SDK fails before it attaches a link (AuthenticationError, an EventHubError)."""
    caplog.set_level(logging.WARNING, logger="eventhubs_emulator")
    missing = emulator.connection_string("hub1").replace("EntityPath=hub1", "EntityPath=nohub")
    expected = re.escape(_hub_not_found(emulator, "nohub"))
    started = time.monotonic()
    with pytest.raises(AuthenticationError, match=expected):
        with EventHubProducerClient.from_connection_string(missing, retry_total=0) as producer:
            producer.get_eventhub_properties()
    with pytest.raises(AuthenticationError, match=expected):
        with EventHubProducerClient.from_connection_string(missing, retry_total=0) as producer:
            producer.send_batch([EventData("never")], partition_id="0")
    with pytest.raises(AuthenticationError, match=expected):
        with EventHubConsumerClient.from_connection_string(
            missing, consumer_group="$Default", retry_total=0
        ) as consumer:
            consumer.get_eventhub_properties()
    assert time.monotonic() - started < 60
    warnings = [r.getMessage() for r in caplog.records if r.name == "eventhubs_emulator"]
    assert len([w for w in warnings if "'nohub' is not configured" in w]) == 1, warnings
    # The hub that exists still answers, and its token is still accepted for sending.
    conn = emulator.connection_string("hub1")
    with EventHubProducerClient.from_connection_string(conn, retry_total=0) as producer:
        assert producer.get_eventhub_properties()["eventhub_name"] == "hub1"
        producer.send_batch([EventData("still works")], partition_id="0")
    assert [e.body_as_str() for e in receive(conn, "0", expected=1)] == ["still works"]


def test_unknown_partition_is_not_found(emulator):
    started = time.monotonic()
    with pytest.raises(ConnectError, match="does not exist"):
        with EventHubProducerClient.from_connection_string(
            emulator.connection_string("hub1"), retry_total=0
        ) as producer:
            producer.get_partition_properties("9")
    assert time.monotonic() - started < 6


def _receive_errors(conn_str, consumer_group, seconds, **kwargs):
    errors, events = [], []
    consumer = EventHubConsumerClient.from_connection_string(
        conn_str, consumer_group=consumer_group, retry_total=0
    )

    def run():
        consumer.receive(
            lambda _c, e: events.append(e),
            partition_id="0",
            starting_position="-1",
            on_error=lambda _c, err: errors.append(err),
            **kwargs,
        )

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return consumer, thread, errors, events


# The SDK client's start-up (a $management request for the partition ids, $cbs, then the attach) runs in
# this process next to the emulator and its EventProcessor busy-waits until it has a partition: under CPU
# load it took 10-50 s in the stress loops. Waits that include a client's start-up are therefore generous
# deadlines for "eventually", while each step waits for the previous one, so the outcome is exact.
STARTUP = 120.0


def _wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


NOT_FOUND = "The messaging entity 'emulatorNs1:eventhub:hub1~32766|nocg' could not be found."


def test_unknown_consumer_group_is_refused_as_the_service_refuses_it(emulator, caplog):
    caplog.set_level(logging.WARNING, logger="eventhubs_emulator")
    conn = emulator.connection_string("hub1")
    send(conn, ["x"], partition_id="0")
    consumer, thread, errors, events = _receive_errors(conn, "nocg", 5)
    try:
        assert _wait_for(lambda: errors, STARTUP)
    finally:
        consumer.close()
        thread.join(timeout=10)
    assert isinstance(errors[0], EventHubError)
    assert "amqp:not-found" in str(errors[0]) and NOT_FOUND in str(errors[0])
    assert events == []
    warnings = [r.getMessage() for r in caplog.records if r.name == "eventhubs_emulator"]
    assert len([w for w in warnings if "'nocg'" in w and "ConsumerGroups" in w]) == 1, warnings


def test_unknown_consumer_group_reaches_the_async_on_error_with_default_retries(emulator):
    """The async client retries, then hands the refusal to on_error. (The sync client with retries
    swallows link errors and re-attaches for ever, against Azure as well: azure-sdk-for-python #27137.)"""
    conn = emulator.connection_string("hub1")

    async def run() -> list[Exception]:
        errors: list[Exception] = []
        consumer = AsyncConsumer.from_connection_string(conn, consumer_group="nocg")

        async def on_error(_ctx, error):
            errors.append(error)

        async def on_event(_ctx, _event):
            pass

        task = asyncio.ensure_future(consumer.receive(on_event, partition_id="0", on_error=on_error))
        try:
            deadline = time.monotonic() + STARTUP
            while not errors and time.monotonic() < deadline and not task.done():
                await asyncio.sleep(0.05)
        finally:
            await consumer.close()
            task.cancel()
        return errors

    errors = asyncio.run(run())
    assert errors, "no error reached on_error"
    assert "amqp:not-found" in str(errors[0]) and NOT_FOUND in str(errors[0])


def test_default_consumer_group_always_exists_and_group_names_ignore_case():
    with start_test_emulator(hub1=1, consumer_groups=["Orders"]) as emu:
        conn = emu.connection_string("hub1")
        send(conn, ["hello"], partition_id="0")
        for group in ("$default", "ORDERS"):
            events = receive(conn, "0", expected=1, consumer_group=group, timeout=STARTUP)
            assert [e.body_as_str() for e in events] == ["hello"], group


def test_owner_level_higher_steals_lower_is_refused(emulator):
    conn = emulator.connection_string("hub1")
    send(conn, ["one"], partition_id="0")
    a = _receive_errors(conn, "$Default", 0, owner_level=1)
    assert _wait_for(lambda: a[3], STARTUP)  # A is receiving
    b = _receive_errors(conn, "$Default", 0, owner_level=2)
    try:
        assert _wait_for(lambda: a[2], STARTUP)
        assert "amqp:link:stolen" in str(a[2][0])
        assert _wait_for(lambda: b[3], STARTUP)  # B took over and reads
        c = _receive_errors(conn, "$Default", 0, owner_level=1)
        try:
            assert _wait_for(lambda: c[2], STARTUP)
            assert "amqp:link:stolen" in str(c[2][0]) and "higher owner level" in str(c[2][0])
            assert c[3] == []
            assert b[2] == []
        finally:
            c[0].close()
    finally:
        for consumer, thread, _, _ in (a, b):
            consumer.close()
            thread.join(timeout=10)


def test_event_over_max_size_rejected_by_the_service():
    cfg = EmulatorConfig.single_hub("small", partition_count=1, max_event_size=1000)
    with Emulator(cfg) as emu:
        conn = emu.connection_string("small")
        with EventHubProducerClient.from_connection_string(conn, retry_total=0) as producer:
            batch = producer.create_batch()
            batch.add(EventData(b"x" * 2000))
            with pytest.raises(EventDataSendError, match="LinkMessageSizeExceeded"):
                producer.send_batch(batch)
            ok = producer.create_batch()
            ok.add(EventData(b"y" * 500))
            producer.send_batch(ok)
            assert producer.get_partition_properties("0")["last_enqueued_sequence_number"] == 0


def test_large_events_split_across_frames_both_ways():
    cfg = EmulatorConfig.single_hub("big", partition_count=1, max_event_size=3 * 1024 * 1024)
    with Emulator(cfg) as emu:
        conn = emu.connection_string("big")
        bodies = [bytes([65 + i]) * (1536 * 1024) for i in range(2)]  # 1.5 MiB each > 1 MiB frames
        with EventHubProducerClient.from_connection_string(conn) as producer:
            for body in bodies:
                batch = producer.create_batch()
                batch.add(EventData(body))
                producer.send_batch(batch)
        events = receive(conn, "0", expected=2)
    assert [b"".join(e.body) for e in events] == bodies


def test_runtime_metrics_when_tracking_last_enqueued_event(emulator):
    conn = emulator.connection_string("hub1")
    send(conn, [f"m{i}" for i in range(3)], partition_id="0")
    seen = []
    consumer = EventHubConsumerClient.from_connection_string(conn, consumer_group="$Default")

    def on_event(ctx, event):
        if event is not None:
            seen.append(ctx.last_enqueued_event_properties)

    thread = threading.Thread(
        target=lambda: consumer.receive(
            on_event, partition_id="0", starting_position="-1", track_last_enqueued_event_properties=True
        ),
        daemon=True,
    )
    thread.start()
    try:
        assert _wait_for(lambda: len(seen) >= 3, STARTUP)
    finally:
        consumer.close()
        thread.join(timeout=10)
    props = seen[-1]
    assert props["sequence_number"] == 2
    assert props["offset"] is not None and int(props["offset"]) > 0
    assert props["enqueued_time"] is not None
    assert props["retrieval_time"] is not None


def test_send_to_unknown_partition_fails(emulator):
    with pytest.raises((ConnectError, EventHubError, ValueError)):
        with EventHubProducerClient.from_connection_string(
            emulator.connection_string("hub1"), retry_total=0
        ) as producer:
            producer.send_event(EventData("x"), partition_id="7")


def test_sixth_receiver_without_owner_level_is_refused(emulator):
    conn = emulator.connection_string("hub1")
    send(conn, ["x"], partition_id="0")
    five = [_receive_errors(conn, "$Default", 0) for _ in range(5)]
    sixth = replacement = other_group = None
    try:
        # every one of the five is attached once it has received the event
        assert _wait_for(lambda: all(r[3] or r[2] for r in five), STARTUP)
        assert [r[2] for r in five] == [[]] * 5
        sixth = _receive_errors(conn, "$Default", 0)
        assert _wait_for(lambda: sixth[2], STARTUP)
        assert "amqp:resource-limit-exceeded" in str(sixth[2][0])
        assert "maximum number of allowed receivers" in str(sixth[2][0])
        assert sixth[3] == []
        assert [r[2] for r in five] == [[]] * 5  # exactly one of the six was refused
        # the limit is per consumer group
        other_group = _receive_errors(conn, "cg1", 0)
        assert _wait_for(lambda: other_group[3] or other_group[2], STARTUP)
        assert other_group[2] == []
        # a receiver that detaches gives its place up (the refused one is stopped first: its client would
        # attach again every ~30 s and could take the place)
        sixth[0].close()
        five[0][0].close()
        replacement = _receive_errors(conn, "$Default", 0)
        assert _wait_for(lambda: replacement[3] or replacement[2], STARTUP)
        assert replacement[2] == []
        assert [r[2] for r in five[1:]] == [[]] * 4
    finally:
        for r in [*five, sixth, other_group, replacement]:
            if r is not None:
                r[0].close()
                r[1].join(timeout=10)


def test_a_hub_added_at_run_time_serves_clients_and_a_removed_one_is_not_found(emulator):
    """``Emulator.add_hub``/``remove_hub`` (what make live-tests' stand-in for Resource Manager calls
    per test): a new hub is served at once with its partitions; after removal $cbs answers 404."""
    emulator.add_hub("made-late", 3)
    emulator.add_hub("made-late", 5)  # an existing hub is left as it is, as ARM's create_or_update
    conn = emulator.connection_string("made-late")
    send(conn, ["late"], partition_id="2")
    assert [e.body_as_str() for e in receive(conn, "2", expected=1)] == ["late"]
    with EventHubProducerClient.from_connection_string(conn, retry_total=0) as producer:
        assert producer.get_partition_ids() == ["0", "1", "2"]
    with pytest.raises(ConfigError, match="PartitionCount"):
        emulator.add_hub("too-many", 2000)
    assert emulator.remove_hub("made-late") and not emulator.remove_hub("made-late")
    with pytest.raises(AuthenticationError, match="could not be found"):
        with EventHubProducerClient.from_connection_string(conn, retry_total=0) as producer:
            producer.get_partition_ids()
    assert emulator.connection_string("hub1")  # the others stay
