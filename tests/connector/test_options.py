"""Option parsing and validation: every bad option is rejected with a message naming it."""

from __future__ import annotations

import json

import pytest

from pyspark_eventhubs.errors import EventHubsOptionError
from pyspark_eventhubs.options import parse_iso_duration_option, parse_options

CONN = (
    "Endpoint=sb://myns.servicebus.windows.net/;SharedAccessKeyName=Root;"
    "SharedAccessKey=S3cr3tKeyValue=;EntityPath=hub1"
)


def test_minimal_connection_string_gives_defaults() -> None:
    opts = parse_options({"eventhubs.connectionString": CONN})
    assert opts.eventhub_name == "hub1"
    assert opts.namespace == "myns.servicebus.windows.net"
    assert opts.description == "myns.servicebus.windows.net/hub1"
    assert opts.consumer_group == "$Default"
    assert opts.fail_on_data_loss is True
    assert opts.max_events_per_trigger is None
    assert opts.receiver_timeout == 60 and opts.operation_timeout == 300
    assert opts.starting_position_for("0").kind == "latest"


def test_keys_are_case_insensitive_and_aliases_work() -> None:
    opts = parse_options(
        {
            "EVENTHUBS.CONNECTIONSTRING": CONN,
            "EventHubs.ConsumerGroup": "cg1",
            "eventhubs.maxEventsPerTrigger": "250",
            "FailOnDataLoss": "False",
            "eventhubs.receiverTimeout": "PT1M30S",
            "eventhubs.operationTimeout": "PT2M",
            "eventhubs.prefetchCount": "4000",
            "minPartitions": "8",
        }
    )
    assert opts.consumer_group == "cg1"
    assert opts.max_events_per_trigger == 250
    assert opts.fail_on_data_loss is False
    assert opts.receiver_timeout == 90 and opts.operation_timeout == 120
    assert opts.prefetch_count == 4000
    assert opts.min_partitions == 8
    assert opts.min_events_per_task == 2000  # default
    assert (
        parse_options(
            {"eventhubs.connectionString": CONN, "eventhubs.mineventspertask": "0"}
        ).min_events_per_task
        == 0
    )


def test_name_option_fills_missing_entity_path() -> None:
    conn = CONN.replace(";EntityPath=hub1", "")
    assert parse_options({"eventhubs.connectionString": conn, "eventhubs.name": "h2"}).eventhub_name == "h2"
    with pytest.raises(EventHubsOptionError, match=r"eventhubs\.name"):
        parse_options({"eventhubs.connectionString": conn})


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("eventhubs.prefetchCount", "0", "eventhubs.prefetchCount"),
        ("EVENTHUBS.PREFETCHCOUNT", "5000", "eventhubs.prefetchCount"),
        ("maxEventsPerTrigger", "ten", "maxEventsPerTrigger"),
        ("failOnDataLoss", "maybe", "failOnDataLoss"),
        ("eventhubs.useExclusiveReceiver", "yes", "eventhubs.useExclusiveReceiver"),
        ("eventhubs.receiverTimeout", "60", "eventhubs.receiverTimeout"),
        ("eventhubs.operationTimeout", "P1M", "eventhubs.operationTimeout"),
        ("eventhubs.startingPosition", "{not json", "eventhubs.startingPosition"),
        ("eventhubs.startingPosition", '{"seqNo": -1}', "eventhubs.startingPosition"),
        ("eventhubs.startingPosition", '{"offset": "abc"}', "eventhubs.startingPosition"),
        ("eventhubs.endingPosition", '{"enqueuedTime": "yesterday"}', "eventhubs.endingPosition"),
        ("eventhubs.startingPositions", '{"x": {}}', "eventhubs.startingPositions"),
        ("eventhubs.maxRatePerPartition", "0", "eventhubs.maxRatePerPartition"),
        ("eventhubs.maxRatesPerPartition", '{"x": 5}', "eventhubs.maxRatesPerPartition"),
        ("eventhubs.maxRatesPerPartition", "[1]", "eventhubs.maxRatesPerPartition"),
        ("minPartitions", "-1", "minPartitions"),
        ("eventhubs.minEventsPerTask", "-5", "eventhubs.minEventsPerTask"),
        ("EventHubs.MinEventsPerTask", "many", "eventhubs.minEventsPerTask"),
        ("eventhubs.bogus", "1", "eventhubs.bogus"),
        ("eventhubs.aadAuthCallback", "com.x.Cb", "eventhubs.aadAuthCallback"),
    ],
)
def test_bad_option_is_named_as_documented_in_the_error(key: str, value: str, named: str) -> None:
    """Spark hands a Python source lower-cased keys; errors still spell the option as the docs do."""
    with pytest.raises(EventHubsOptionError) as info:
        parse_options({"eventhubs.connectionString": CONN, key.lower(): value})
    assert f"'{named}'" in str(info.value)
    assert "S3cr3tKeyValue" not in str(info.value)


def test_max_rate_per_partition_options_follow_the_scala_dstream_rules() -> None:
    from pyspark_eventhubs import position_key

    assert parse_options({"eventhubs.connectionString": CONN}).max_events_per_partition("0") is None
    one = parse_options({"eventhubs.connectionString": CONN, "eventhubs.maxRatePerPartition": "70"})
    assert [one.max_events_per_partition(p) for p in "01"] == [70, 70]
    rates = json.dumps({position_key("hub1", 1): 5})
    both = parse_options(
        {
            "eventhubs.connectionString": CONN,
            "eventhubs.maxRatePerPartition": "70",
            "eventhubs.maxRatesPerPartition": rates,
        }
    )
    assert [both.max_events_per_partition(p) for p in "01"] == [70, 5]
    # Only the map: the other partitions get the Scala default of 1000.
    only_map = parse_options({"eventhubs.connectionString": CONN, "eventhubs.maxRatesPerPartition": rates})
    assert [only_map.max_events_per_partition(p) for p in "01"] == [1000, 5]
    with pytest.raises(EventHubsOptionError, match=r"'eventhubs\.maxRatesPerPartition'.*other"):
        parse_options(
            {
                "eventhubs.connectionString": CONN,
                "eventhubs.maxRatesPerPartition": json.dumps({position_key("other", 0): 5}),
            }
        )


def test_unknown_option_lists_the_valid_ones() -> None:
    with pytest.raises(EventHubsOptionError) as info:
        parse_options({"eventhubs.connectionString": CONN, "eventhubs.startPosition": "x"})
    message = str(info.value)
    for name in ("eventhubs.startingPosition", "maxEventsPerTrigger", "failOnDataLoss"):
        assert name in message


def test_receiver_timeout_may_not_exceed_operation_timeout() -> None:
    with pytest.raises(EventHubsOptionError, match="receiverTimeout"):
        parse_options(
            {
                "eventhubs.connectionString": CONN,
                "eventhubs.receiverTimeout": "PT10M",
                "eventhubs.operationTimeout": "PT1M",
            }
        )


def test_connection_string_errors_never_echo_the_secret() -> None:
    for conn in (
        "Endpoint=sb://x/;SharedAccessKey=S3cr3tKeyValue=;garbage",
        "SharedAccessKey=S3cr3tKeyValue",
    ):
        with pytest.raises(EventHubsOptionError) as info:
            parse_options({"eventhubs.connectionString": conn})
        assert "S3cr3tKeyValue" not in str(info.value)
        assert "eventhubs.connectionString" in str(info.value)
    with pytest.raises(EventHubsOptionError, match=r"eventhubs\.connectionString"):
        parse_options({})


def test_repr_hides_secrets() -> None:
    opts = parse_options(
        {
            "eventhubs.connectionString": CONN,
            "eventhubs.useAadAuth": "true",
            "eventhubs.tenantId": "t",
            "eventhubs.clientId": "c",
            "eventhubs.clientSecret": "TopSecretValue",
        }
    )
    assert "S3cr3tKeyValue" not in repr(opts) and "TopSecretValue" not in repr(opts)


def test_aad_needs_namespace_and_complete_service_principal() -> None:
    base = {"eventhubs.useAadAuth": "true", "eventhubs.name": "hub1"}
    with pytest.raises(EventHubsOptionError, match="fullyQualifiedNamespace"):
        parse_options(base)
    ok = parse_options({**base, "eventhubs.fullyQualifiedNamespace": "ns.servicebus.windows.net"})
    assert (
        ok.use_aad_auth
        and ok.connection_string is None
        and ok.description == "ns.servicebus.windows.net/hub1"
    )
    with pytest.raises(EventHubsOptionError, match="clientSecret"):
        parse_options({**base, "eventhubs.fullyQualifiedNamespace": "ns", "eventhubs.tenantId": "t"})


def test_ignored_scala_options_are_accepted() -> None:
    opts = parse_options({"eventhubs.connectionString": CONN, "eventhubs.threadPoolSize": "4"})
    assert opts.eventhub_name == "hub1"


def test_durations() -> None:
    assert parse_iso_duration_option("k", "PT0.5S") == 0.5
    assert parse_iso_duration_option("k", "P1DT1S") == 86401
    with pytest.raises(EventHubsOptionError, match="'k'"):
        parse_iso_duration_option("k", "PT0S")
