"""CheckpointHealthSensor called directly (no scheduler): what it hands the triggerer when deferrable,
how it ends on the trigger's event, and how it waits on a verdict it neither accepts nor fails on.
Its judgement on real checkpoints is tested in tests/control/test_health.py and the triggers'."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred

from hubflow.checkpoints.inspector import Verdict
from hubflow.registry import load_registry
from hubflow_plugins.sensors.checkpoint_health import CheckpointHealthSensor
from hubflow_plugins.triggers.checkpoint_health import CheckpointHealthTrigger

pytestmark = pytest.mark.integration

SCHEDULED = {
    "dag_run": SimpleNamespace(run_type="scheduled", run_id="scheduled__1"),
    "run_id": "scheduled__1",
}


def test_deferrable_hands_the_trigger_the_jobs_checkpoint_and_plain_verdicts(
    registry: Path, tmp_path: Path
) -> None:
    sensor = CheckpointHealthSensor(
        task_id="check_health",
        job_name="orders",
        accept=(Verdict.HEALTHY,),
        fail_on=(Verdict.CORRUPT,),  # no checkpoint yet: wait for one
        stalled_after="5 min",
        deferrable=True,
        poke_interval=7,
        timeout=90,
    )
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(SCHEDULED)

    assert deferred.value.method_name == "execute_complete"
    assert deferred.value.timeout.total_seconds() == 90
    trigger = deferred.value.trigger
    assert isinstance(trigger, CheckpointHealthTrigger)
    _, kwargs = trigger.serialize()
    assert json.loads(json.dumps(kwargs)) == {  # what the triggerer stores: plain JSON
        "checkpoint": str(tmp_path / "orders" / "checkpoints" / "orders"),
        "stalled_after_seconds": 300.0,
        "accept": ["healthy"],
        "fail_on": ["corrupt"],
        "poke_interval": 7.0,
        # the rest of the poke's judgment travels too (tests/plugins/triggers: held, idle)
        "status_dir": str(tmp_path / "orders" / "status" / "orders"),
        "heartbeat_timeout_seconds": load_registry().job("orders").heartbeat_timeout.total_seconds(),
        "streaming": False,
        "allow_idle": False,
        "skip_when_held": False,
        "max_lag_events": None,
        "eventhubs_conn_id": None,
        "consumer_group": "$Default",
        "storage_conn_id": None,  # the job's storage connection: the triggerer reads through it
    }


def test_deferrable_judges_once_before_deferring_and_a_final_verdict_needs_no_trigger(registry: Path) -> None:
    """A missing checkpoint is failing by default: the first judgment in the worker ends the task,
    no trigger is handed over (nor a second start of the task paid for)."""
    sensor = CheckpointHealthSensor(task_id="check_health", job_name="orders", deferrable=True)
    with pytest.raises(AirflowFailException, match="job orders: checkpoint missing"):
        sensor.execute(SCHEDULED)


def test_the_registry_gives_stalled_after_unless_the_task_does(registry: Path) -> None:
    sensor = CheckpointHealthSensor(
        task_id="check_health", job_name="orders", deferrable=True, fail_on=(Verdict.CORRUPT,)
    )
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(SCHEDULED)
    assert deferred.value.trigger.stalled_after_seconds == 30 * 60  # the registry's default "30 minutes"


def test_the_triggers_event_ends_the_task(registry: Path) -> None:
    sensor = CheckpointHealthSensor(task_id="check_health", job_name="orders")
    healthy = {"verdict": "healthy", "reason": "last batch 3 committed", "done": True, "failed": False}
    assert sensor.execute_complete(SCHEDULED, healthy) == healthy
    corrupt = {"verdict": "corrupt", "reason": "offsets/1 is not JSON", "done": False, "failed": True}
    with pytest.raises(AirflowFailException, match="job orders: checkpoint corrupt: offsets/1 is not JSON"):
        sensor.execute_complete(SCHEDULED, corrupt)


def test_poke_keeps_waiting_on_a_verdict_it_neither_accepts_nor_fails_on(registry: Path) -> None:
    waiting = CheckpointHealthSensor(task_id="check_health", job_name="orders", fail_on=(Verdict.CORRUPT,))
    assert waiting.poke(SCHEDULED) is False, "a missing checkpoint may still appear: poke again"
    failing = CheckpointHealthSensor(task_id="check_health", job_name="orders")
    with pytest.raises(AirflowFailException, match="job orders: checkpoint missing"):
        failing.poke(SCHEDULED)
