"""The supervision rules of the operators and the health sensor, called directly (no scheduler):
backfill runs skip the health gate and the archive, on-call ``stop`` holds and ``ensure_running``
respects the hold, a held job's health is not judged, and a scheduled run without input is idle."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from hubflow.status import JobState, JobStatus, StatusFolder
from hubflow_plugins.operators.cleanup import ArchiveOperator
from hubflow_plugins.operators.streaming_job import StreamingJobOperator
from hubflow_plugins.sensors.checkpoint_health import CheckpointHealthSensor

pytestmark = pytest.mark.integration


def _context(run_type: str = "manual", user: str | None = "alice") -> dict[str, Any]:
    run_id = f"{run_type}__2026-11-22T10:00:00+00:00"
    dag_run = SimpleNamespace(run_type=run_type, run_id=run_id, triggering_user_name=user)
    return {"dag_run": dag_run, "run_id": run_id}


def test_a_backfill_run_skips_the_health_gate_and_the_archive(registry: Path) -> None:
    backfill = _context("backfill")
    sensor = CheckpointHealthSensor(task_id="check_health", job_name="orders", allow_idle=True)
    with pytest.raises(AirflowSkipException, match="backfill run"):
        sensor.execute(backfill)
    with pytest.raises(AirflowSkipException, match="nothing to archive"):
        ArchiveOperator(task_id="archive_processed_files", job_name="orders").execute(backfill)
    with pytest.raises(AirflowFailException, match="checkpoint missing"):
        sensor.poke(_context("scheduled"))  # a scheduled run is judged: never ran, nothing planned


def test_oncall_stop_holds_and_the_supervisor_reports_the_hold_without_starting(
    registry: Path, tmp_path: Path
) -> None:
    status_dir = tmp_path / "clicks" / "status" / "clicks"
    stop = StreamingJobOperator(task_id="oncall_action", job_name="clicks", action="stop", reason="sink full")
    result = stop.execute(_context())
    assert result["done"][0].startswith("held job clicks by alice (run manual__2026-11-22T10:00:00+00:00) at")
    assert "nothing to stop" in result["done"]
    hold = StatusFolder(str(status_dir)).hold()
    assert hold.by == "alice (run manual__2026-11-22T10:00:00+00:00)" and hold.reason == "sink full"

    JobStatus(StatusFolder(str(status_dir)), "clicks").update(state=JobState.STOPPED)
    ensure = StreamingJobOperator(task_id="ensure_running", job_name="clicks")
    result = ensure.execute(_context("scheduled", user=None))
    assert result["held"]["by"] == hold.by
    assert "is held by alice" in result["done"][0] and "not starting it" in result["done"][0]
    assert StatusFolder(str(status_dir)).restarts_within(3600) == 0, "no start was attempted"

    sensor = CheckpointHealthSensor(
        task_id="check_health", job_name="clicks", allow_idle=True, skip_when_held=True
    )
    assert sensor.poke(_context("scheduled")), "a held job's (missing) checkpoint is not judged"
    without = CheckpointHealthSensor(task_id="check_health", job_name="clicks", allow_idle=True)
    with pytest.raises(AirflowFailException, match="missing"):
        without.poke(_context("scheduled"))

    for action in ("start", "restart"):
        dry = StreamingJobOperator(task_id="oncall_action", job_name="clicks", action=action, dry_run=True)
        done = dry.execute(_context())["done"]
        assert done[0].startswith("would release the hold by alice"), done
        assert done[-1].startswith("would start job clicks from checkpoint"), done
    assert StatusFolder(str(status_dir)).hold() is not None, "a dry run changes nothing"


def test_a_scheduled_run_that_found_no_input_is_idle_not_stalled(
    registry: Path, tmp_path: Path, spark: Any
) -> None:
    from tests.jobs.helpers import files_to_lake_config, run_files_to_lake

    config = files_to_lake_config(tmp_path / "orders.yaml")
    code, reason = run_files_to_lake(spark, config)  # an empty landing folder
    assert code == 0 and "no more input" in reason
    status = StatusFolder(config.status_dir).status()
    assert status["state"] == "stopped" and status["input_rows"] == 0

    sensor = CheckpointHealthSensor(task_id="check_health", job_name="orders", allow_idle=True)
    assert sensor.poke(_context("scheduled"))
    strict = CheckpointHealthSensor(task_id="check_health", job_name="orders")
    with pytest.raises(AirflowFailException, match="missing"):
        strict.poke(_context("scheduled"))
