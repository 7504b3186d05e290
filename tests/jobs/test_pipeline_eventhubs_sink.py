"""A pipeline's ``kind: eventhubs`` sink: each row of the function's frame one event on the hub, and
a rerun publishes nothing twice; a frame that marks rows for a quarantine is refused, nothing sent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hubflow.status.exit_codes import EXIT_FAILED, EXIT_OK

from .helpers import EmulatedHub, event_count, receive_all, write_json_landing_file
from .pipelines_support import pipeline_config, run_on_session, write_module

pytestmark = pytest.mark.integration

ENV_VAR = "HUBFLOW_TEST_PIPELINE_SINK_CONNECTION"

#: Good orders as JSON events keyed by id; the broken records (``_raw_record`` set) dropped, or
#: marked for a quarantine the sink does not have.
ORDERS_TO_EVENTS = """
from pyspark.sql import functions as F

from hubflow_jobs.pipeline import QUARANTINE_REASON, RAW_RECORD


def events(orders):
    good = orders.where(F.col(RAW_RECORD).isNull() & F.col("id").isNotNull())
    return good.select(
        F.to_json(F.struct("id", "name")).alias("body"),
        F.col("id").cast("string").alias("partitionKey"),
        F.create_map(F.lit("source"), F.lit("orders")).alias("properties"),
    )


def marked(orders):
    return orders.withColumn(QUARANTINE_REASON, F.when(F.col("id").isNull(), F.lit("no id")))
"""


def _sections(landing: Path) -> dict[str, Any]:
    return {
        "sources": {
            "orders": {
                "kind": "files",
                "path": str(landing),
                "format": "json",
                "schema": "id BIGINT, name STRING",
            }
        },
        "sinks": {"hub": {"kind": "eventhubs", "connection_string_env": ENV_VAR}},
    }


def test_each_row_becomes_one_event_with_its_key_and_properties_and_a_rerun_sends_none_again(
    spark: Any, eventhub: EmulatedHub, tmp_path: Path, pipelines: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_VAR, eventhub.connection_string)
    write_module(pipelines, "orders_events", ORDERS_TO_EVENTS)
    landing = tmp_path / "landing"
    landing.mkdir()
    ids = write_json_landing_file(landing, "a.json", 1, good=6, bad=2)
    config = pipeline_config(tmp_path, "orders_events", **_sections(landing))

    assert run_on_session(spark, "orders_events:events", config)[0] == EXIT_OK
    ids |= write_json_landing_file(landing, "b.json", 100, good=3, bad=1)
    assert run_on_session(spark, "orders_events:events", config)[0] == EXIT_OK
    assert run_on_session(spark, "orders_events:events", config)[0] == EXIT_OK  # nothing new

    events = receive_all(eventhub.connection_string)
    bodies = [json.loads(event.body_as_str()) for _, event in events]
    assert sorted(body["id"] for body in bodies) == sorted(ids), "every good order once"
    assert all(body["name"] == f"n{body['id']}" for body in bodies)
    for _, event in events:
        key = event.partition_key.decode() if isinstance(event.partition_key, bytes) else event.partition_key
        assert key == str(json.loads(event.body_as_str())["id"])
        assert {_text(k): _text(v) for k, v in event.properties.items()} == {"source": "orders"}


def test_a_quarantine_column_for_an_eventhubs_sink_fails_the_start_and_sends_nothing(
    spark: Any, eventhub: EmulatedHub, tmp_path: Path, pipelines: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_VAR, eventhub.connection_string)
    write_module(pipelines, "orders_events", ORDERS_TO_EVENTS)
    landing = tmp_path / "landing"
    landing.mkdir()
    write_json_landing_file(landing, "a.json", 1, good=2, bad=1)
    config = pipeline_config(tmp_path, "orders_marked", **_sections(landing))

    code, reason = run_on_session(spark, "orders_events:marked", config)

    assert code == EXIT_FAILED
    assert reason.endswith(
        "pipeline 'orders_events:marked': sink 'hub' (kind eventhubs) has no quarantine, but its frame has a "
        "_quarantine_reason column; filter the bad rows out, or send them to a lake sink"
    )
    assert event_count(eventhub.connection_string) == 0


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value
