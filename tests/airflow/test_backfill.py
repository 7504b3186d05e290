"""Backfill from `airflow backfill create`, run by a real scheduler: each interval's output once.

Two scheduled jobs in one Airflow: ``telemetry`` (Event Hubs, the events enqueued in each interval)
and ``orders`` (files, each interval's landing folder - some files already archived by the
scheduled runs that keep going while the backfill runs).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.airflow.helpers import (
    airflow_env,
    dag_runs,
    landing_job,
    run_airflow,
    start_airflow_services,
    write_registry,
)
from tests.jobs.helpers import EmulatedHub, eventhubs_config, write_config, write_json_landing_file
from tests.support.emulator import start_test_emulator
from tests.support.processes import stop_process, wait_until

pytestmark = pytest.mark.integration
ENV_VAR = "HUBFLOW_EVENTHUBS_CONNECTION_STRING"
INTERVAL = 15  # seconds: three intervals of events take under a minute to produce
FOLDER = "%Y%m%dT%H%M%S"  # the orders landing layout: one folder per second


def _next_boundary(now: datetime) -> datetime:
    """The next interval start after ``now``, to the second (intervals align to multiples of INTERVAL)."""
    return datetime.fromtimestamp((int(now.timestamp()) // INTERVAL + 1) * INTERVAL, UTC)


def _land_orders(landing: Path, first: datetime) -> tuple[dict[str, set[int]], Counter]:
    """Files in second-folders of the three intervals (edges included) and one after.

    Each file has one broken record. Returns the good ids and the broken-record count per window.
    """
    ids: dict[str, set[int]] = {}
    broken: Counter = Counter()
    placements = [(0, 0, 4), (0, 7, 3), (1, 3, 5), (2, 14, 6), (3, 0, 9)]  # interval, second, records
    for number, (interval, second, count) in enumerate(placements):
        start = first + timedelta(seconds=INTERVAL * interval)
        folder = landing / (start + timedelta(seconds=second)).strftime(FOLDER)
        folder.mkdir(parents=True, exist_ok=True)
        written = write_json_landing_file(folder, f"orders-{number}.json", number * 100, count, 1)
        if interval < 3:  # the fourth is after the backfilled intervals
            window = start.strftime("%Y-%m-%dT%H:%M:%SZ")
            ids.setdefault(window, set()).update(written)
            broken[window] += 1
    return ids, broken


@pytest.mark.timeout(1500)
def test_backfill_over_three_intervals_writes_each_interval_once_even_when_rerun(
    airflow_home, spark, tmp_path: Path
) -> None:
    emulator = start_test_emulator(tmp_path, telemetry=2)
    processes: list = []
    try:
        conn = emulator.connection_string("telemetry")
        hub = EmulatedHub("telemetry", conn, 2)
        # Events in three consecutive intervals: 10, 20 and 30 of them, a few seconds inside each.
        first = _next_boundary(datetime.now(UTC))
        time.sleep((first - datetime.now(UTC)).total_seconds() + 1)
        sent: dict[str, set[bytes]] = {}
        number = 0
        for index, count in enumerate((10, 20, 30)):
            start = first + timedelta(seconds=INTERVAL * index)
            time.sleep(max(0.0, (start + timedelta(seconds=2) - datetime.now(UTC)).total_seconds()))
            sent[start.strftime("%Y-%m-%dT%H:%M:%SZ")] = hub.send_numbered(number, count)
            number += count
        time.sleep(max(0.0, (first + timedelta(seconds=3 * INTERVAL) - datetime.now(UTC)).total_seconds()))
        hub.send_numbered(number, 7)  # after the third interval: must not be backfilled

        config = eventhubs_config(tmp_path, hub, ENV_VAR, name="telemetry")
        config_path = write_config(tmp_path / "telemetry.yaml", config)
        orders = landing_job(
            tmp_path,
            "orders",
            source={"interval_folder": FOLDER, "max_files_per_trigger": 2},
            schedule=f"{INTERVAL} seconds",
        )
        landed, broken = _land_orders(tmp_path / "orders" / "landing", first)
        registry = write_registry(
            tmp_path,
            [
                {
                    "name": "telemetry",
                    "application": "eventhubs_to_lake",
                    "config": str(config_path),
                    "mode": "scheduled",
                    "schedule": f"{INTERVAL} seconds",
                    "eventhubs_conn_id": "eventhubs_default",
                },
                orders,
            ],
        )
        env = airflow_env(airflow_home, registry)
        env["AIRFLOW_CONN_EVENTHUBS_DEFAULT"] = json.dumps({"conn_type": "generic", "password": conn})
        # The scheduler starts no run of a paused DAG, backfill runs included. Once unpaused it also
        # runs the newest finished interval as of the DAG's serialization, and a backfill skips dates
        # that have a run: serialize and unpause only when that interval lies after the three.
        time.sleep(
            max(0.0, (first + timedelta(seconds=4 * INTERVAL + 1) - datetime.now(UTC)).total_seconds())
        )
        assert run_airflow(env, "dags", "reserialize").returncode == 0
        for dag_id in ("telemetry__available_now", "orders__available_now"):
            assert run_airflow(env, "dags", "unpause", dag_id).returncode == 0
        processes, env = start_airflow_services(env, tmp_path / "airflow-logs")
        last = first + timedelta(seconds=2 * INTERVAL)  # logical dates from..to: three intervals

        def backfill(dag_id: str, *extra: str) -> None:
            args = ["backfill", "create", "--dag-id", dag_id, "--from-date", first.isoformat()]
            args += ["--to-date", last.isoformat(), *extra]
            for _ in range(30):
                result = run_airflow(env, *args)
                # The scheduler marks a finished backfill complete a little later; until then a
                # new one for the same DAG is refused.
                if "AlreadyRunningBackfill" not in result.stderr:
                    break
                time.sleep(3)
            assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]

        def backfill_runs(dag_id: str) -> list[dict]:
            return [r for r in dag_runs(env, dag_id) if r["run_id"].startswith("backfill__")]

        def finished(after: str = "") -> bool:
            """Three backfill runs of each DAG, each succeeded and ended after ``after``."""
            for dag_id in ("telemetry__available_now", "orders__available_now"):
                runs = backfill_runs(dag_id)
                assert not any(r["state"] == "failed" for r in runs), runs
                if len(runs) != 3 or not all(
                    r["state"] == "success" and (r["end_date"] or "") > after for r in runs
                ):
                    return False
            return True

        def scheduled_orders_run_done() -> bool:
            return any(
                r["run_id"].startswith("scheduled__") and r["state"] == "success"
                for r in dag_runs(env, "orders__available_now")
            )

        backfill("telemetry__available_now")
        # The scheduled orders runs archive files as they go: let one finish first, so the backfill
        # finds files in both places (and later runs keep archiving while it reads).
        wait_until(scheduled_orders_run_done, 300, "a scheduled orders run", interval=5)
        assert list((tmp_path / "orders" / "archive").rglob("*.json")), "the scheduled run archived nothing"
        backfill("orders__available_now")
        wait_until(finished, 600, "three successful backfill runs of each DAG", interval=5)

        def check() -> None:
            output = tmp_path / "lake" / "bronze_backfill"
            rows = spark.read.parquet(str(output)).select("window_start", "body").collect()
            per_window = Counter(r.window_start for r in rows)
            assert per_window == {w: len(bodies) for w, bodies in sent.items()}
            for window, bodies in sent.items():
                assert sorted(bytes(r.body) for r in rows if r.window_start == window) == sorted(bodies)
            output = tmp_path / "orders" / "lake" / "orders_backfill"
            rows = spark.read.parquet(str(output)).select("window_start", "id").collect()
            assert {w: sorted(r.id for r in rows if r.window_start == w) for w in landed} == {
                w: sorted(ids) for w, ids in landed.items()
            }
            assert len(rows) == sum(len(ids) for ids in landed.values())  # nothing of the fourth interval
            quarantine = tmp_path / "orders" / "quarantine_backfill"
            per_window = Counter(r.window_start for r in spark.read.parquet(str(quarantine)).collect())
            assert per_window == broken

        check()
        # Rerun every interval (reprocess completed runs): each partition is replaced, not added to.
        first_end = max(
            r["end_date"] for d in ("telemetry", "orders") for r in backfill_runs(f"{d}__available_now")
        )
        backfill("telemetry__available_now", "--reprocess-behavior", "completed")
        backfill("orders__available_now", "--reprocess-behavior", "completed")
        wait_until(
            lambda: finished(after=first_end), 600, "the three rerun backfill runs of each", interval=5
        )
        check()
    finally:
        for process in processes:
            stop_process(process)
        emulator.stop()
