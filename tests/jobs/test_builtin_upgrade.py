"""A built-in job upgraded mid-stream: the checkpoint and bronze table that eventhubs_to_lake wrote
before it was rebuilt as a pipeline (tests/jobs/fixtures/eventhubs_to_lake_v0, made by hubflow
03a0736 from 40 events) resume exactly with today's job, under its old config keys and under the
new ones: the 20 events sent since land once, the 40 are not read again."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support.lake import delta_version, recorded_batch, spark_rows

from .helpers import EVENTHUBS_TO_LAKE, EmulatedHub, eventhubs_config, spark_submit, write_config

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).parent / "fixtures" / "eventhubs_to_lake_v0"
ENV_VAR = "HUBFLOW_TEST_EVENTHUBS_CONNECTION"
NAME = "telemetry_bronze"
#: What the fixture's job read: events 0..39, ten on each of the 4 partitions.
FIXTURE_EVENTS = 40


def _new_keys(config: dict[str, Any]) -> dict[str, Any]:
    """The same config written with the pipeline's keys."""
    config = dict(config)
    source, sink = config.pop("source"), config.pop("sink")
    config["sources"] = {"events": {"kind": "eventhubs", **source}}
    config["sinks"] = {
        "bronze": {
            "kind": sink["format"],
            "output_path": sink["output_path"],
            "partition_by": ["ingest_date"],
        }
    }
    return config


def _query_id(checkpoint: Path) -> str:
    return json.loads((checkpoint / "metadata").read_text())["id"]


@pytest.mark.parametrize("keys", ["old", "new"])
def test_a_checkpoint_of_the_job_before_pipelines_resumes_exactly(
    spark: Any, eventhub: EmulatedHub, tmp_path: Path, keys: str
) -> None:
    # The hub as the fixture's job saw it (a fresh emulator numbers each partition from 0), then more.
    before = eventhub.send_numbered(0, FIXTURE_EVENTS)
    after = eventhub.send_numbered(FIXTURE_EVENTS, 20)
    for folder in ("checkpoints", "lake"):
        shutil.copytree(FIXTURE / folder, tmp_path / folder)
    checkpoint, table = tmp_path / "checkpoints" / NAME, tmp_path / "lake" / "bronze"
    assert delta_version(table) == 0
    old = spark_rows(spark, table, {"partition": "value", "sequenceNumber": "value", "body": "value"})
    assert {row[2] for row in old} == before, "the fixture holds the first 40 events"

    config = eventhubs_config(tmp_path, eventhub, ENV_VAR, name=NAME, sink={"format": "delta"})
    if keys == "new":
        config = _new_keys(config)
    job = spark_submit(
        write_config(tmp_path / "job.yaml", config),
        tmp_path / "driver.log",
        script=EVENTHUBS_TO_LAKE,
        extra_env={ENV_VAR: eventhub.connection_string},
    )
    log = tmp_path / "driver.log"
    assert job.wait(600) == 0, log.read_text()[-4000:]

    rows = spark_rows(spark, table, {"partition": "value", "sequenceNumber": "value", "body": "value"})
    identities = [(row[0], row[1]) for row in rows]
    assert len(identities) == len(set(identities)), "every event once, by identity"
    assert {row[2] for row in rows} == before | after
    assert set(old) <= set(rows), "the fixture's rows are untouched"
    assert delta_version(table) == 1, "one new batch, in one commit"
    assert recorded_batch(table, _query_id(checkpoint)) == 1, "written with the old query's transaction"
    deprecated = (
        "source: and sink: are the keys of the built-in eventhubs_to_lake before it became a pipeline"
    )
    assert (deprecated in log.read_text()) == (keys == "old")
