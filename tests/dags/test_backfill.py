"""Backfill from `airflow backfill create`, run by a real scheduler beside the DAG's scheduled runs:
each interval's events land once, a rerun replaces its interval, and a backfill run never judges
the streaming checkpoint nor archives (its ``check_health`` is skipped, whatever the scheduled runs
have or have not committed yet).

One Event Hubs job (``telemetry``, the events enqueued in each interval). The file job's backfill,
its reruns and files archived while it reads are covered by ``tests/jobs/test_backfill_files.py``.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.dags.helpers import (
    RunSnapshot,
    airflow_env,
    run_airflow,
    run_snapshot,
    start_airflow_services,
    write_registry,
)
from tests.jobs.helpers import EmulatedHub, eventhubs_config, write_config
from tests.support.emulator import start_test_emulator
from tests.support.processes import stop_process, wait_until

pytestmark = pytest.mark.integration
ENV_VAR = "HUBFLOW_EVENTHUBS_CONNECTION_STRING"
HOUR = timedelta(hours=1)
DAG_ID = "telemetry__available_now"


@pytest.mark.timeout(1200)
def test_backfill_beside_scheduled_runs_writes_each_interval_once_and_a_rerun_replaces_it(
    airflow_home, spark, tmp_path: Path
) -> None:
    emulator = start_test_emulator(tmp_path, telemetry=2)
    processes: list = []
    try:
        conn = emulator.connection_string("telemetry")
        hub = EmulatedHub("telemetry", conn, 2)
        # An hourly job, as users schedule one. The events of two past hours (10 and 20 of them, a
        # minute into each) are enqueued back then by shifting the emulator's clock, so nothing waits
        # for an interval to pass; then 7 in the last finished hour, which the scheduled run reads
        # and the backfill must not.
        now = datetime.now(UTC)
        this_hour = now.replace(minute=0, second=0, microsecond=0)
        first = this_hour - 3 * HOUR
        sent: dict[str, set[bytes]] = {}
        number = 0
        for index, count in enumerate((10, 20)):
            start = first + index * HOUR
            emulator.faults.shift_clock((start + timedelta(minutes=1) - datetime.now(UTC)).total_seconds())
            sent[start.strftime("%Y-%m-%dT%H:%M:%SZ")] = hub.send_numbered(number, count)
            number += count
        last_hour = this_hour - HOUR
        emulator.faults.shift_clock((last_hour + timedelta(minutes=1) - datetime.now(UTC)).total_seconds())
        hub.send_numbered(number, 7)
        emulator.faults.shift_clock(0)

        config = eventhubs_config(tmp_path, hub, ENV_VAR, name="telemetry")
        entry = {
            "name": "telemetry",
            "application": "eventhubs_to_lake",
            "config": str(write_config(tmp_path / "telemetry.yaml", config)),
            "mode": "scheduled",
            "schedule": "@hourly",
            "eventhubs_conn_id": "eventhubs_default",
        }
        env = airflow_env(airflow_home, write_registry(tmp_path, [entry]))
        env["AIRFLOW_CONN_EVENTHUBS_DEFAULT"] = json.dumps({"conn_type": "generic", "password": conn})
        # The scheduler starts no run of a paused DAG, backfill runs included. Once unpaused it runs
        # the newest finished hour (catchup is off): the scheduled run beside the backfill, on an
        # interval after the two (a backfill skips dates that have a run). The services are ready
        # (API server, scheduler, DAG processor) before the DAG is unpaused, so no task is queued
        # while its API server does not answer yet.
        assert run_airflow(env, "dags", "reserialize").returncode == 0
        processes, env = start_airflow_services(env, tmp_path / "airflow-logs")
        assert run_airflow(env, "dags", "unpause", DAG_ID).returncode == 0

        def backfill(last: datetime, *extra: str) -> None:
            args = ["backfill", "create", "--dag-id", DAG_ID, "--from-date", first.isoformat()]
            args += ["--to-date", last.isoformat(), *extra]
            for _ in range(30):
                result = run_airflow(env, *args)
                # The scheduler marks a finished backfill complete a little later; until then a
                # new one for the same DAG is refused.
                if "AlreadyRunningBackfill" not in result.stderr:
                    break
                time.sleep(3)
            assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]

        def runs(snapshot: list[RunSnapshot], kind: str) -> list[RunSnapshot]:
            return [run for run in snapshot if run.run_type == kind]

        def finished(count: int, after: datetime | None = None) -> bool:
            """``count`` backfill runs ended well after ``after``; no run of either kind failed."""
            snapshot = run_snapshot(airflow_home, DAG_ID)
            assert not any(run.state == "failed" for run in snapshot), snapshot
            done = [
                run
                for run in runs(snapshot, "backfill")
                if run.state == "success" and (after is None or (run.end_date and run.end_date > after))
            ]
            return len(done) >= count

        def check() -> None:
            output = tmp_path / "lake" / "bronze_backfill"
            rows = spark.read.parquet(str(output)).select("window_start", "body").collect()
            assert Counter(r.window_start for r in rows) == {w: len(bodies) for w, bodies in sent.items()}
            for window, bodies in sent.items():
                assert sorted(bytes(r.body) for r in rows if r.window_start == window) == sorted(bodies)

        backfill(first + HOUR)  # logical dates from..to: two intervals
        wait_until(lambda: finished(2), 600, "two successful backfill runs", interval=5)
        check()
        first_end = max(run.end_date for run in runs(run_snapshot(airflow_home, DAG_ID), "backfill"))

        # Rerun the first interval (reprocess a completed run): its partition is replaced, not added to.
        backfill(first, "--reprocess-behavior", "completed")
        wait_until(lambda: finished(1, after=first_end), 600, "the rerun backfill run", interval=5)
        check()

        # Every judgement below reads one snapshot: the runs and their tasks as one query saw them.
        def scheduled_done() -> list[RunSnapshot] | None:
            snapshot = run_snapshot(airflow_home, DAG_ID)
            assert not any(run.state == "failed" for run in snapshot), snapshot
            return snapshot if any(r.state == "success" for r in runs(snapshot, "scheduled")) else None

        snapshot = wait_until(scheduled_done, 300, "a scheduled run beside", interval=5)
        backfill_tasks = [run.tasks for run in runs(snapshot, "backfill")]
        assert len(backfill_tasks) == 2, "the rerun reuses its interval's run"
        for tasks in backfill_tasks:
            assert tasks == {"run_job": "success", "check_health": "skipped"}, snapshot
        scheduled = [run.tasks for run in runs(snapshot, "scheduled") if run.state == "success"]
        assert scheduled and all(t["check_health"] == "success" for t in scheduled), snapshot
    finally:
        for process in processes:
            stop_process(process)
        emulator.stop()
