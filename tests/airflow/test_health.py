"""Health checks on real checkpoints: the deferrable trigger and the shared judgement it uses."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path

import pytest

from hubflow_plugins.core.health import (
    FAILING,
    HEALTHY,
    HEALTHY_STREAMING,
    check_health,
    committed_sequence_numbers,
)
from hubflow_plugins.triggers.checkpoint_health import CheckpointHealthTrigger
from tests.plugins.file_streams import FileStream, age_files

pytestmark = pytest.mark.integration


def _first_event(trigger: CheckpointHealthTrigger, timeout: float = 60) -> dict:
    async def first() -> dict:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger ended without an event")

    return asyncio.run(asyncio.wait_for(first(), timeout))


def test_trigger_fires_healthy_on_a_fresh_checkpoint_and_survives_serialization(spark, tmp_path: Path):
    stream = FileStream(spark, tmp_path / "s")
    stream.land_and_run(batches=2, files_per_batch=1)
    trigger = CheckpointHealthTrigger(str(stream.checkpoint), 3600, list(HEALTHY), list(FAILING), 0.1)
    classpath, kwargs = trigger.serialize()
    assert classpath == "hubflow_plugins.triggers.CheckpointHealthTrigger"
    rebuilt = CheckpointHealthTrigger(**json.loads(json.dumps(kwargs)))  # what the triggerer does
    event = _first_event(rebuilt)
    assert event["verdict"] == "healthy" and event["done"] and not event["failed"]


def test_trigger_waits_through_a_batch_in_flight_then_fires_when_it_commits(spark, tmp_path: Path):
    stream = FileStream(spark, tmp_path / "s")
    stream.land_and_run(batches=1, files_per_batch=1)
    stream.land(1)
    stream.run()
    stream.uncommit_last_batch()  # offsets ahead of commits, recent: a batch in flight
    trigger = CheckpointHealthTrigger(str(stream.checkpoint), 3600, list(HEALTHY), list(FAILING), 0.2)

    async def scenario() -> dict:
        task = asyncio.ensure_future(_consume(trigger))
        await asyncio.sleep(1.0)
        assert not task.done(), "a batch in flight is neither healthy nor failing: keep waiting"
        await asyncio.to_thread(stream.run)  # Spark re-runs and commits the batch
        return await asyncio.wait_for(task, 60)

    event = asyncio.run(scenario())
    assert event["verdict"] == "healthy"


async def _consume(trigger: CheckpointHealthTrigger) -> dict:
    async for event in trigger.run():
        return event.payload
    raise AssertionError("no event")


def test_trigger_fires_failed_on_a_corrupt_checkpoint(spark, tmp_path: Path):
    stream = FileStream(spark, tmp_path / "s")
    stream.land_and_run(batches=2, files_per_batch=1)
    (stream.checkpoint / "offsets" / "1").write_text("garbage")
    event = _first_event(
        CheckpointHealthTrigger(str(stream.checkpoint), 3600, list(HEALTHY), list(FAILING), 0.1)
    )
    assert event["verdict"] == "corrupt" and event["failed"]


def test_stalled_is_healthy_only_while_the_job_is_alive(spark, tmp_path: Path):
    stream = FileStream(spark, tmp_path / "s")
    stream.land_and_run(batches=1, files_per_batch=1)
    age_files(stream.checkpoint, 7200)
    dead = check_health(str(stream.checkpoint), stalled_after=timedelta(hours=1), accept=HEALTHY_STREAMING)
    assert dead.verdict == "stalled" and dead.failed
    idle = check_health(
        str(stream.checkpoint), stalled_after=timedelta(hours=1), accept=HEALTHY_STREAMING, live_state="idle"
    )
    assert idle.done and not idle.failed and "waiting for new input" in idle.reason


def test_lag_is_measured_against_the_committed_event_hubs_offsets(spark, tmp_path: Path):
    report = {"sources": [{"committed_end_offset": json.dumps({"hub": {"0": 10, "1": 7}})}]}
    assert committed_sequence_numbers(report, "hub") == {"0": 10, "1": 7}
    assert committed_sequence_numbers(report, "other") == {}
    stream = FileStream(spark, tmp_path / "s")
    stream.land_and_run(batches=1, files_per_batch=1)
    # A file-source checkpoint has no Event Hubs offsets: every event the hub holds counts as lag.
    result = check_health(
        str(stream.checkpoint),
        stalled_after=timedelta(hours=1),
        latest=("hub", {"0": 12, "1": 3}),
        max_lag_events=10,
    )
    assert result.lag == {"0": 12, "1": 3}
    assert result.failed and "lag is 15 events" in result.reason
