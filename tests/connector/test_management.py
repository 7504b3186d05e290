"""The driver's kept-open management connection against the emulator, with the real SDK pieces."""

from __future__ import annotations

import time

import pytest

from pyspark_eventhubs import hub_metadata
from pyspark_eventhubs.client import EventHubsClientError
from pyspark_eventhubs.hub_metadata import HubMetadata
from pyspark_eventhubs.management import RequestRateLimiter
from pyspark_eventhubs.options import parse_options

from .conftest import Hub

pytestmark = pytest.mark.integration


def test_one_connection_answers_every_round_as_the_sdk_does(hub: Hub) -> None:
    from azure.eventhub import EventHubConsumerClient

    hub.send_per_partition({"0": 3, "2": 5})
    hub.emulator.truncate("hub1", partition="2", before_sequence_number=1)
    metadata = HubMetadata(parse_options(hub.options()))
    try:
        for _ in range(5):
            bounds = metadata.bounds()
        assert metadata.session.connections_opened == 1
    finally:
        metadata.close()
    assert {pid: (b.earliest, b.latest) for pid, b in bounds.items()} == {
        "0": (0, 3),
        "1": (0, 0),
        "2": (1, 5),
        "3": (0, 0),
    }
    sdk = EventHubConsumerClient.from_connection_string(hub.connection_string, "$Default")
    try:
        props = sdk.get_partition_properties("2")
    finally:
        sdk.close()
    assert bounds["2"].last_enqueued_time == props["last_enqueued_time_utc"]
    assert bounds["2"].earliest == props["beginning_sequence_number"]


def test_a_dropped_connection_is_reopened_by_the_next_round(hub: Hub) -> None:
    hub.send_per_partition({"1": 4})
    metadata = HubMetadata(parse_options(hub.options()))
    try:
        assert metadata.bounds()["1"].latest == 4
        assert hub.emulator.faults.drop_connections() >= 1
        hub.send_per_partition({"1": 2})
        assert metadata.bounds()["1"].latest == 6
        assert metadata.session.connections_opened == 2
    finally:
        metadata.close()


def test_new_partitions_appear_once_the_listing_is_due(hub: Hub, monkeypatch: pytest.MonkeyPatch) -> None:
    metadata = HubMetadata(parse_options(hub.options()))
    try:
        assert sorted(metadata.bounds()) == ["0", "1", "2", "3"]
        hub.emulator.add_partitions("hub1", 6)
        assert sorted(metadata.bounds()) == ["0", "1", "2", "3"]  # listed less than 30 s ago
        monkeypatch.setattr(hub_metadata, "PARTITION_LIST_SECONDS", 0.0)
        assert sorted(metadata.bounds()) == ["0", "1", "2", "3", "4", "5"]
    finally:
        metadata.close()


def test_an_unknown_hub_is_a_clear_error(hub: Hub, caplog: pytest.LogCaptureFixture) -> None:
    """The service refuses the $cbs token for a hub it lacks (404) before any READ: not retried."""
    conn = hub.connection_string.replace(";EntityPath=hub1", "")
    metadata = HubMetadata(parse_options({"eventhubs.connectionString": conn, "eventhubs.name": "nohub"}))
    try:
        with pytest.raises(EventHubsClientError, match="nohub") as info:
            metadata.bounds()
    finally:
        metadata.close()
    assert "the hub was not found (404 " in str(info.value)
    assert "check eventhubs.name / EntityPath" in str(info.value)
    assert not [r for r in caplog.records if "reconnecting" in r.getMessage()]
    assert "SharedAccessKey" not in str(info.value)


def test_a_wrong_key_is_a_clear_error_not_retried(hub: Hub, caplog: pytest.LogCaptureFixture) -> None:
    conn = hub.connection_string.replace("SharedAccessKey=SAS_KEY_VALUE", "SharedAccessKey=wrong")
    metadata = HubMetadata(parse_options({"eventhubs.connectionString": conn}))
    try:
        with pytest.raises(EventHubsClientError, match="not authorized to read the hub") as info:
            metadata.bounds()
    finally:
        metadata.close()
    assert "(401 " in str(info.value)
    assert not [r for r in caplog.records if "reconnecting" in r.getMessage()]
    assert "SAS_KEY_VALUE" not in str(info.value) and "=wrong" not in str(info.value)


def test_the_request_rate_stays_within_the_service_quota() -> None:
    limiter = RequestRateLimiter(50)
    started = time.monotonic()
    for _ in range(100):  # a burst of 50, then 50 per second
        limiter.acquire()
    assert time.monotonic() - started >= 0.95


def test_the_request_pace_is_the_option_and_each_pace_has_its_own_bucket(hub: Hub) -> None:
    """``eventhubs.managementRequestsPerSecond``: a round of one request per partition draws from the
    bucket of the namespace at that pace (a many-partition hub can plan faster than the default)."""
    from pyspark_eventhubs.management import rate_limiter
    from pyspark_eventhubs.options import EventHubsOptionError

    options = parse_options(hub.options(**{"eventhubs.managementRequestsPerSecond": "777"}))
    assert options.management_requests_per_second == 777
    assert parse_options(hub.options()).management_requests_per_second == 50
    drawn: list[int] = []
    for rate in (777, 50):  # count the tokens each bucket gives out
        bucket = rate_limiter(options.namespace, rate)
        bucket.acquire = lambda take=bucket.acquire, rate=rate: (drawn.append(rate), take())[1]
    metadata = HubMetadata(options)
    try:
        assert set(metadata.bounds()) == {"0", "1", "2", "3"}
    finally:
        metadata.close()
        for rate in (777, 50):
            del rate_limiter(options.namespace, rate).acquire
    assert drawn and set(drawn) == {777}  # every request of the rounds, none from the default's bucket
    assert drawn.count(777) >= 4  # one per partition at least
    for bad in ("0", "10001", "fast"):
        with pytest.raises(EventHubsOptionError, match=r"eventhubs\.managementRequestsPerSecond"):
            parse_options(hub.options(**{"eventhubs.managementRequestsPerSecond": bad}))
