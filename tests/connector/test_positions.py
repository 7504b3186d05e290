"""EventPosition JSON and the per-partition position map, as the Scala connector writes them."""

from __future__ import annotations

import datetime
import json

import pytest

from pyspark_eventhubs.errors import EventHubsOptionError
from pyspark_eventhubs.positions import (
    EventPosition,
    parse_position,
    parse_positions,
    position_key,
)


def test_kinds_follow_the_scala_precedence() -> None:
    assert parse_position("o", '{"offset": "-1", "seqNo": 5}').kind == "earliest"
    assert parse_position("o", '{"offset": "@latest"}').kind == "latest"
    assert parse_position("o", '{"offset": "1024", "isInclusive": false}') == EventPosition(
        offset="1024", is_inclusive=False
    )
    assert parse_position("o", '{"offset": null, "seqNo": 7, "enqueuedTime": null}').seq_no == 7
    when = parse_position("o", '{"offset": null, "seqNo": -1, "enqueuedTime": "2024-01-31T12:00:00.000Z"}')
    assert when.kind == "enqueuedTime"
    assert when.enqueued_time == datetime.datetime(2024, 1, 31, 12, tzinfo=datetime.UTC)


def test_json_round_trip() -> None:
    for pos in (
        EventPosition.start_of_stream(),
        EventPosition.end_of_stream(),
        EventPosition.from_sequence_number(42, inclusive=False),
        EventPosition.from_enqueued_time(datetime.datetime(2024, 5, 1, 8, 30, 1, 250000)),
    ):
        assert parse_position("o", pos.to_json()) == pos
    assert json.loads(EventPosition.end_of_stream().to_json()) == {
        "offset": "@latest",
        "seqNo": -1,
        "enqueuedTime": None,
        "isInclusive": False,
    }


def test_per_partition_map_uses_eh_name_partition_id_keys() -> None:
    raw = json.dumps(
        {
            position_key("hub1", 0): json.loads(EventPosition.from_sequence_number(10).to_json()),
            position_key("hub1", "3"): json.loads(EventPosition.start_of_stream().to_json()),
        }
    )
    parsed = parse_positions("eventhubs.startingPositions", raw, "hub1")
    assert parsed == {"0": EventPosition(seq_no=10), "3": EventPosition.start_of_stream()}
    assert json.loads(position_key("hub1", 2)) == {"ehName": "hub1", "partitionId": 2}


def test_map_for_another_hub_is_an_error() -> None:
    raw = json.dumps({position_key("other", 0): {"seqNo": 1}})
    with pytest.raises(EventHubsOptionError, match="other"):
        parse_positions("eventhubs.startingPositions", raw, "hub1")


def test_unknown_position_keys_are_rejected() -> None:
    with pytest.raises(EventHubsOptionError, match="seqno"):
        parse_position("eventhubs.startingPosition", '{"seqno": 5}')
