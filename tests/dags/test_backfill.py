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
    airflow_env,
    dag_runs,
    run_airflow,
    start_airflow_services,
    task_states,
    write_registry,
)
from tests.jobs.helpers import EmulatedHub, eventhubs_config, write_config
from tests.support.emulator import start_test_emulator
from tests.support.processes import stop_process, wait_until

pytestmark = pytest.mark.integration
ENV_VAR = "HUBFLOW_EVENTHUBS_CONNECTION_STRING"
INTERVAL = 15  # seconds: two intervals of events take half a minute to produce
DAG_ID = "telemetry__available_now"


def _next_boundary(now: datetime) -> datetime:
    """The next interval start after ``now``, to the second (intervals align to multiples of INTERVAL)."""
    return datetime.fromtimestamp((int(now.timestamp()) // INTERVAL + 1) * INTERVAL, UTC)


def _sleep_until(moment: datetime) -> None:
    time.sleep(max(0.0, (moment - datetime.now(UTC)).total_seconds()))


@pytest.mark.timeout(1200)
def test_backfill_beside_scheduled_runs_writes_each_interval_once_and_a_rerun_replaces_it(
    airflow_home, spark, tmp_path: Path
) -> None:
    emulator = start_test_emulator(tmp_path, telemetry=2)
    processes: list = []
    try:
        conn = emulator.connection_string("telemetry")
        hub = EmulatedHub("telemetry", conn, 2)
        # Events in two consecutive intervals, 10 and 20 of them, a few seconds inside each.
        first = _next_boundary(datetime.now(UTC))
        sent: dict[str, set[bytes]] = {}
        number = 0
        for index, count in enumerate((10, 20)):
            start = first + timedelta(seconds=INTERVAL * index)
            _sleep_until(start + timedelta(seconds=2))
            sent[start.strftime("%Y-%m-%dT%H:%M:%SZ")] = hub.send_numbered(number, count)
            number += count
        _sleep_until(first + timedelta(seconds=2 * INTERVAL))
        hub.send_numbered(number, 7)  # after the second interval: must not be backfilled

        config = eventhubs_config(tmp_path, hub, ENV_VAR, name="telemetry")
        entry = {
            "name": "telemetry",
            "application": "eventhubs_to_lake",
            "config": str(write_config(tmp_path / "telemetry.yaml", config)),
            "mode": "scheduled",
            "schedule": f"{INTERVAL} seconds",
            "eventhubs_conn_id": "eventhubs_default",
        }
        env = airflow_env(airflow_home, write_registry(tmp_path, [entry]))
        env["AIRFLOW_CONN_EVENTHUBS_DEFAULT"] = json.dumps({"conn_type": "generic", "password": conn})
        # The scheduler starts no run of a paused DAG, backfill runs included. Once unpaused it also
        # runs the newest finished interval as of the DAG's serialization, and a backfill skips dates
        # that have a run: serialize and unpause only when that interval lies after the two.
        _sleep_until(first + timedelta(seconds=3 * INTERVAL + 1))
        assert run_airflow(env, "dags", "reserialize").returncode == 0
        assert run_airflow(env, "dags", "unpause", DAG_ID).returncode == 0
        processes, env = start_airflow_services(env, tmp_path / "airflow-logs")

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

        def runs(kind: str) -> list[dict]:
            return [r for r in dag_runs(env, DAG_ID) if r["run_id"].startswith(f"{kind}__")]

        def finished(count: int, after: str = "") -> bool:
            """``count`` backfill runs ended well after ``after``; no run of either kind failed."""
            every = runs("backfill") + runs("scheduled")
            assert not any(r["state"] == "failed" for r in every), every
            done = [r for r in runs("backfill") if r["state"] == "success" and (r["end_date"] or "") > after]
            return len(done) >= count

        def check() -> None:
            output = tmp_path / "lake" / "bronze_backfill"
            rows = spark.read.parquet(str(output)).select("window_start", "body").collect()
            assert Counter(r.window_start for r in rows) == {w: len(bodies) for w, bodies in sent.items()}
            for window, bodies in sent.items():
                assert sorted(bytes(r.body) for r in rows if r.window_start == window) == sorted(bodies)

        backfill(first + timedelta(seconds=INTERVAL))  # logical dates from..to: two intervals
        wait_until(lambda: finished(2), 600, "two successful backfill runs", interval=5)
        check()
        first_end = max(r["end_date"] for r in runs("backfill"))

        # Rerun the first interval (reprocess a completed run): its partition is replaced, not added to.
        backfill(first, "--reprocess-behavior", "completed")
        wait_until(lambda: finished(1, after=first_end), 600, "the rerun backfill run", interval=5)
        check()

        wait_until(lambda: bool(runs("scheduled")) and finished(0), 300, "a scheduled run beside", interval=5)
        states = task_states(airflow_home, DAG_ID)
        backfill_states = [states[r["run_id"]] for r in runs("backfill")]
        assert len(backfill_states) == 2, "the rerun reuses its interval's run"
        for tasks in backfill_states:
            assert tasks == {"run_job": "success", "check_health": "skipped"}, backfill_states
        scheduled = [states[r["run_id"]] for r in runs("scheduled") if r["state"] == "success"]
        assert scheduled and all(t["check_health"] == "success" for t in scheduled), scheduled
    finally:
        for process in processes:
            stop_process(process)
        emulator.stop()
