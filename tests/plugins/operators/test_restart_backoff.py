"""The supervisor's backoff through the real operator, on a real status folder, with a real
spark-submit (no scheduler): a job that dies at start (its landing folder is gone: only the driver
checks that) is started again after growing pauses, never sooner than its policy allows, and each run
in between starts nothing and says when the next start is due. A running job whose config changed
is restarted gracefully once, by the next supervisor run, which says why."""

from __future__ import annotations

import itertools
import shutil
import time
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException

from hubflow.operations.job_control import JobControl
from hubflow.status import StatusFolder
from hubflow_plugins.operators.streaming_job import StreamingJobOperator
from tests.dags.helpers import landing_job, write_registry
from tests.support.spark_cluster import spark_env

pytestmark = pytest.mark.integration

#: 10 s after the first restart, then 20 s (the ceiling); longer than a failing spark-submit (~7 s here),
#: so runs in between find the pause not over.
POLICY = {"restart_backoff": "10 seconds", "max_restart_backoff": "20 seconds", "healthy_after": "10 minutes"}


def _supervise(action: str = "ensure_running", start_timeout: float = 90) -> dict[str, Any]:
    context = {
        "dag_run": SimpleNamespace(run_type="scheduled", run_id="scheduled__1", triggering_user_name=None)
    }
    return StreamingJobOperator(
        task_id=action, job_name="clicks", action=action, start_timeout=timedelta(seconds=start_timeout)
    ).execute(context)


def _local_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in spark_env(
        {"AIRFLOW_CONN_SPARK_DEFAULT": '{"conn_type": "spark", "host": "local[1]"}'}
    ).items():
        monkeypatch.setenv(key, value)


def test_a_job_that_dies_at_start_is_restarted_after_growing_pauses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _local_spark(monkeypatch)
    entry = landing_job(tmp_path, "clicks", streaming=True, **POLICY)
    monkeypatch.setenv("HUBFLOW_REGISTRY", str(write_registry(tmp_path, [entry])))
    shutil.rmtree(tmp_path / "clicks" / "landing")  # the driver refuses to start without it
    folder = StatusFolder(str(tmp_path / "clicks" / "status" / "clicks"))
    control = JobControl("clicks", folder.url)

    failed_starts, waits = 0, []
    deadline = time.monotonic() + 150
    while failed_starts < 3 and time.monotonic() < deadline:
        try:
            result = _supervise()
        except AirflowException as exc:  # the start was tried and the driver exited
            assert "while starting" in str(exc), exc
            failed_starts += 1
            continue
        assert (
            result["done"][0].startswith("job clicks is not running (")
            and "next start is due" in (result["done"][0])
        ), result
        waits.append(datetime.fromisoformat(result["next_start_at"]))
        time.sleep(0.5)
    restarts = control.restart_times()
    assert failed_starts == 3 and len(restarts) == 3, (failed_starts, restarts)
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(restarts)]
    # each start came no sooner than its pause after the one before: 10 s, then 20 s
    assert gaps[0] >= 10 and gaps[1] >= 20, gaps
    # the runs in between started nothing and named the due time: the last restart plus its pause
    due_times = {restarts[0] + timedelta(seconds=10), restarts[1] + timedelta(seconds=20)}
    assert waits and set(waits) <= due_times, (waits, restarts)
    assert (tmp_path / "clicks" / "status" / "clicks" / "supervisor.json").exists()
    assert control.supervisor_state()["fingerprint"]["digest"], "what was started is recorded"


def test_a_changed_config_restarts_a_running_job_once_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _local_spark(monkeypatch)
    entry = landing_job(tmp_path, "clicks", streaming=True)
    monkeypatch.setenv("HUBFLOW_REGISTRY", str(write_registry(tmp_path, [entry])))
    folder = StatusFolder(str(tmp_path / "clicks" / "status" / "clicks"))
    control = JobControl("clicks", folder.url)
    config = Path(entry["config"])
    try:
        started = _supervise(start_timeout=300)  # a driver's start on a loaded 2-core machine
        assert any(line.startswith("started job clicks") for line in started["done"]), started
        first_pid = control.liveness().pid
        digest = control.supervisor_state()["fingerprint"]["digest"]
        counted = control.restart_times()  # the first start of a job found dead counts

        changed = config.read_text(encoding="utf-8").replace("1 second", "2 seconds")
        assert changed != config.read_text(encoding="utf-8")
        config.write_text(changed, encoding="utf-8")
        restarted = _supervise(start_timeout=300)
        assert restarted["done"][0].startswith(
            f"what the job runs changed since it was started (fingerprint {digest[:12]} -> "
        ), restarted
        assert any(line.startswith("started job clicks") for line in restarted["done"]), restarted
        live = control.liveness()
        assert live.alive and live.pid != first_pid, "a new driver runs the new config"
        assert control.supervisor_state()["fingerprint"]["digest"] != digest
        assert control.restart_times() == counted, "a restart for a change is not the backoff's restart"

        again = _supervise()
        assert again["done"] == ["already running; nothing to do"], "once per change"
    finally:
        _supervise("stop")
