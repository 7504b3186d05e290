"""Supervised streaming: the supervisor starts a dead job and leaves a live one alone; on-call stop
holds it across a supervisor run (which succeeds without starting it); on-call start resumes it, and
every record lands exactly once. (restart = the same stop and start without the hold.) Each
supervisor run announces the stream's new commits to its table as Airflow asset events, each
version once across runs (issue #27): a Delta table's versions, a parquet output's file-sink batches."""

from __future__ import annotations

import json
import time
from itertools import pairwise
from pathlib import Path

import pytest

from tests.dags.helpers import (
    airflow_env,
    asset_events,
    job_status,
    kill_job,
    lake_ids,
    landing_job,
    pid_alive,
    run_airflow,
    write_registry,
)
from tests.jobs.helpers import write_json_landing_file
from tests.support.processes import wait_until

pytestmark = pytest.mark.integration


def _announced(airflow_home, table: Path) -> list[tuple[int, int]]:
    """The versions each asset event of the table announced, in the order of the events."""
    extras = [event["extra"] for event in asset_events(airflow_home, f"file://{table}")]
    return [(extra["from_version"], extra["to_version"]) for extra in extras]


def _table_version(table: Path, sink_format: str) -> int:
    """The table's newest version: a Delta commit, or a parquet output's last file-sink batch."""
    if sink_format == "parquet":
        from hubflow.checkpoints.file_sink_log import last_batch_id

        return last_batch_id(str(table))
    return max(int(path.stem) for path in (table / "_delta_log").glob("*.json"))


def _oncall(env: dict, action: str) -> str:
    conf = json.dumps({"action": action, "dry_run": False})
    result = run_airflow(env, "dags", "test", "clicks__oncall", "-c", conf)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    return output


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("sink_format", ["delta", "parquet"])
def test_supervisor_starts_oncall_stop_holds_start_resumes_and_every_record_lands_once(
    airflow_home, spark, tmp_path: Path, sink_format: str
):
    job = landing_job(tmp_path, "clicks", streaming=True, sink={"format": sink_format})
    registry = write_registry(tmp_path, [job])
    table = tmp_path / "clicks" / "lake" / "orders"
    env = airflow_env(airflow_home, registry)
    landing = tmp_path / "clicks" / "landing"
    expected = write_json_landing_file(landing, "a.json", 0, good=30, bad=0)
    try:
        result = run_airflow(env, "dags", "test", "clicks__supervisor")
        output = result.stdout + result.stderr
        assert result.returncode == 0, output[-6000:]
        assert "started job clicks" in output
        first_pid = job_status(tmp_path, "clicks")["pid"]
        wait_until(
            lambda: sorted(lake_ids(spark, tmp_path, "clicks", sink_format)) == sorted(expected),
            120,
            "batch a in the lake",
        )

        # A second supervisor run finds the job alive and leaves it alone.
        result = run_airflow(env, "dags", "test", "clicks__supervisor")
        assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
        assert "already running; nothing to do" in result.stdout + result.stderr
        assert job_status(tmp_path, "clicks")["pid"] == first_pid

        # On-call stop: the job stops gracefully and is held.
        expected |= write_json_landing_file(landing, "b.json", 1000, good=30, bad=0)
        output = _oncall(env, "stop")
        assert "held job clicks by dag_test (run " in output and "stopped gracefully" in output
        assert job_status(tmp_path, "clicks")["state"] == "stopped"
        assert not pid_alive(first_pid)

        # The supervisor's next run reports the hold, starts nothing, does not judge its health,
        # and succeeds.
        result = run_airflow(env, "dags", "test", "clicks__supervisor")
        output = result.stdout + result.stderr
        assert result.returncode == 0, output[-6000:]
        assert "job clicks is held by dag_test (run " in output and "not starting it" in output
        assert "its health is not judged" in output
        assert (
            job_status(tmp_path, "clicks")["pid"] == first_pid
            and job_status(tmp_path, "clicks")["state"] == "stopped"
        )

        # The second and third runs announced the stream's commits to the lake table (the first
        # ran before its first batch): each version once, in order, up to the stopped job's last.
        announced = _announced(airflow_home, table)
        assert announced and announced[0][0] == 0, announced
        assert all(later[0] == earlier[1] + 1 for earlier, later in pairwise(announced)), announced
        assert announced[-1][1] == _table_version(table, sink_format), announced

        # On-call start releases the hold and resumes from the checkpoint: nothing lost or doubled.
        expected |= write_json_landing_file(landing, "c.json", 2000, good=30, bad=0)
        output = _oncall(env, "start")
        assert "released the hold by dag_test" in output and "started job clicks" in output
        second_pid = job_status(tmp_path, "clicks")["pid"]
        assert second_pid != first_pid and pid_alive(second_pid)
        wait_until(
            lambda: len(lake_ids(spark, tmp_path, "clicks", sink_format)) >= len(expected),
            120,
            "batches b and c in the lake",
        )
        time.sleep(2)  # a duplicate would show up in the next micro-batch
        ids = lake_ids(spark, tmp_path, "clicks", sink_format)
        assert sorted(ids) == sorted(expected), "every record exactly once across the stop and start"
        driver_log = (tmp_path / "clicks" / "status" / "clicks" / "driver.log").read_text()
        assert driver_log.count("INFO hubflow_jobs: job clicks starting") == 2, "both starts log there"

        # The audit trail: the supervisor's start, on-call's stop and start; not the runs that
        # found the job alive or held.
        from hubflow.operations.audit import read_audit
        from hubflow.status import StatusFolder

        trail = read_audit(StatusFolder(str(tmp_path / "clicks" / "status" / "clicks")))
        assert [(e.action, e.dry_run, e.outcome.split(":")[0]) for e in trail] == [
            ("ensure_running", False, "done"),
            ("stop", False, "done"),
            ("start", False, "done"),
        ], [e.line() for e in trail]
        assert all(e.by.startswith("dag_test (run ") and e.source == "airflow" for e in trail), trail
        stop, start = trail[1], trail[2]
        assert stop.hold_before is None and stop.hold_after and stop.hold_after.startswith("by dag_test")
        assert (start.hold_before, start.hold_after) == (stop.hold_after, None)
        assert "started job clicks" in trail[0].outcome and "stopped gracefully" in stop.outcome
    finally:
        kill_job(tmp_path, "clicks")
