"""The deferrable checkpoint health trigger on real checkpoints: waits, fires, survives serialization."""

from __future__ import annotations

import asyncio
import importlib
import json
from pathlib import Path

import pytest

from hubflow_plugins.core.health import FAILING, HEALTHY
from hubflow_plugins.triggers.checkpoint_health import CheckpointHealthTrigger
from tests.plugins.file_streams import FileStream

pytestmark = pytest.mark.integration


def import_string(classpath: str) -> type:
    """What the triggerer does with a serialized trigger's classpath."""
    module, _, name = classpath.rpartition(".")
    return getattr(importlib.import_module(module), name)


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
    assert classpath == "hubflow_plugins.triggers.checkpoint_health.CheckpointHealthTrigger"
    assert import_string(classpath) is CheckpointHealthTrigger  # the triggerer imports it by this path
    # a trigger deferred before the provider layout still loads after an upgrade
    assert import_string("hubflow_plugins.triggers.CheckpointHealthTrigger") is CheckpointHealthTrigger
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
