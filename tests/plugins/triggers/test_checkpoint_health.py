"""The deferrable checkpoint health trigger on real checkpoints and status folders: waits, fires,
survives serialization, and judges as the sensor's poke does (a held job, an idle live job)."""

from __future__ import annotations

import asyncio
import importlib
import json
from pathlib import Path

import pytest

from hubflow.supervision.health import FAILING, HEALTHY
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


def test_trigger_reports_a_held_job_and_judges_an_idle_live_one_as_the_poke_does(spark, tmp_path: Path):
    """The poke's judgment, deferred: a stopped job held by on-call fires ``held`` (not judged) whatever
    its checkpoint says; a streaming job alive with a fresh heartbeat and no new input is idle, not
    stalled; the same checkpoint without either fails ``stalled``."""
    from hubflow.status import JobStatus, StatusFolder

    stream = FileStream(spark, tmp_path / "s")
    stream.land_and_run(batches=1, files_per_batch=1)
    status = StatusFolder(str(tmp_path / "status"))
    common = {"status_dir": str(tmp_path / "status"), "heartbeat_timeout_seconds": 60.0, "streaming": True}
    stalled_at_once = (str(stream.checkpoint), 0.001, list(HEALTHY), list(FAILING), 0.1)

    status.place_hold("on-call stop: disk full", by="alice")
    held = _first_event(CheckpointHealthTrigger(*stalled_at_once, skip_when_held=True, **common))
    assert held["verdict"] == "held" and held["done"] and not held["failed"], held
    assert "alice" in held["reason"] and "not judged" in held["reason"]

    status.release_hold()
    JobStatus(status, "s").update(state="running")  # a live driver: this process, heartbeat now
    idle = _first_event(CheckpointHealthTrigger(*stalled_at_once, allow_idle=True, **common))
    assert idle["verdict"] == "stalled" and idle["done"] and not idle["failed"], idle
    assert "waiting for new input" in idle["reason"]
    assert any("job status" in note for note in idle["notes"])

    judged = _first_event(CheckpointHealthTrigger(*stalled_at_once, **common))
    assert judged["verdict"] == "stalled" and judged["failed"], judged


def test_a_trigger_deferred_before_the_shared_judgment_still_loads_and_judges_the_checkpoint(
    spark, tmp_path: Path
) -> None:
    """Its stored arguments were the first five only: it rebuilds with no status folder and fires."""
    stream = FileStream(spark, tmp_path / "s")
    stream.land_and_run(batches=1, files_per_batch=1)
    stored = {
        "checkpoint": str(stream.checkpoint),
        "stalled_after_seconds": 3600,
        "accept": ["healthy"],
        "fail_on": ["corrupt"],
        "poke_interval": 0.1,
    }
    event = _first_event(CheckpointHealthTrigger(**stored))
    assert event["verdict"] == "healthy" and event["done"] and event["notes"] == []
