"""Backfill from `airflow backfill create`, run by a real scheduler beside the DAG's scheduled runs:
each interval's events land once, a rerun replaces its interval, and a backfill run never judges
the streaming checkpoint nor archives (its ``check_health`` is skipped).

The job is a pipeline of a user's own (``tests/support/pipelines/tagged_events.py``, found through
``$HUBFLOW_PIPELINES_DIR``, no hubflow module edited; issue #26) reading one hub into a Delta table:
a backfill run replaces the rows of its interval's events (``replaceWhere`` on ``enqueuedTime``) once
the scheduled run's stream has read past the interval. The file job's backfill, its reruns and files
archived while it reads are covered by ``tests/jobs/test_backfill_files.py``.

Every run that committed announces the table as an Airflow Asset (named after its folder,
``telemetry_bronze``, its ``file://`` URI) with the versions it added, and the DAG of a user's own
that docs/airflow.md shows, scheduled on ``Asset.ref(name="telemetry_bronze")``, runs on those
events, each event consumed once (issue #27).
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.dags.helpers import (
    REPO_ROOT,
    RunSnapshot,
    airflow_env,
    asset_events,
    run_airflow,
    run_snapshot,
    start_airflow_services,
    write_registry,
)
from tests.jobs.helpers import EmulatedHub
from tests.jobs.pipelines_support import pipeline_config
from tests.support.emulator import start_test_emulator
from tests.support.processes import stop_processes, wait_until

pytestmark = pytest.mark.integration
ENV_VAR = "HUBFLOW_EVENTHUBS_CONNECTION_STRING"
HOUR = timedelta(hours=1)
NAME = "tagged"
DAG_ID = f"{NAME}__available_now"
PIPELINES = REPO_ROOT / "tests" / "support" / "pipelines"
TABLE = "telemetry_bronze"  # the table's (and so its asset's) name: docs/airflow.md's example DAG uses it
DOWNSTREAM = "after_bronze"


def _downstream_dag(table: Path) -> str:
    """The DAG of a user's own that docs/airflow.md shows, downstream of the hubflow table
    ``telemetry_bronze``: Airflow runs it on the table's asset events (an EmptyOperator: the
    scheduler records which events each run consumed). Taken from the doc as written, with the
    test's table location for the stack's."""
    doc = (REPO_ROOT / "docs" / "airflow.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", doc, flags=re.S)
    (dag,) = [block for block in blocks if f'DAG("{DOWNSTREAM}"' in block]
    documented = f'Asset(name="{TABLE}", uri="file:///opt/hubflow/data/lake/{TABLE}")'
    assert documented in dag
    return dag.replace(documented, f'Asset(name="{TABLE}", uri="file://{table}")')


def _delta_commits(table: Path) -> dict[int, tuple[dict[str, Any], set[str]]]:
    """Each commit of the Delta table: its commitInfo and the names of the files it added."""
    commits = {}
    for path in sorted((table / "_delta_log").glob("*.json")):
        info: dict[str, Any] = {}
        added: set[str] = set()
        for line in path.read_text(encoding="utf-8").splitlines():
            action = json.loads(line)
            if "commitInfo" in action:
                info = action["commitInfo"]
            elif "add" in action:
                added.add(Path(action["add"]["path"]).name)
        commits[int(path.stem)] = (info, added)
    return commits


def _is_backfill(info: dict[str, Any]) -> bool:
    """A backfill's commit: an overwrite of the rows a predicate selects (``replaceWhere``)."""
    parameters = info.get("operationParameters") or {}
    return parameters.get("mode") == "Overwrite" and bool(parameters.get("predicate"))


@pytest.mark.timeout(1200)
def test_backfill_beside_scheduled_runs_writes_each_interval_once_and_a_rerun_replaces_it(
    airflow_home, spark, tmp_path: Path
) -> None:
    from pyspark.sql import functions as F

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

        table = tmp_path / "lake" / TABLE
        sources = {"events": {"kind": "eventhubs", "connection_string_env": ENV_VAR}}
        sinks = {NAME: {"kind": "delta", "output_path": str(table)}}
        entry = {
            "name": NAME,
            "application": "tagged_events:tagged",
            "config": str(pipeline_config(tmp_path, NAME, sources=sources, sinks=sinks)),
            "mode": "scheduled",
            "schedule": "@hourly",
            "eventhubs_conn_id": "eventhubs_default",
        }
        env = airflow_env(airflow_home, write_registry(tmp_path, [entry]))
        env["AIRFLOW_CONN_EVENTHUBS_DEFAULT"] = json.dumps({"conn_type": "generic", "password": conn})
        env["HUBFLOW_PIPELINES_DIR"] = str(PIPELINES)
        dags = tmp_path / "dags"
        dags.mkdir()
        (dags / "hubflow_dags.py").symlink_to(REPO_ROOT / "dags" / "hubflow_dags.py")
        (dags / f"{DOWNSTREAM}.py").write_text(_downstream_dag(table), encoding="utf-8")
        env["AIRFLOW__CORE__DAGS_FOLDER"] = str(dags)
        # The scheduler starts no run of a paused DAG, backfill runs included. Once unpaused it runs
        # the newest finished hour (catchup is off), after the two. The services are ready (API server,
        # scheduler, DAG processor) before the DAG is unpaused, so no task is queued while its API
        # server does not answer yet.
        assert run_airflow(env, "dags", "reserialize").returncode == 0
        processes, env = start_airflow_services(env, tmp_path / "airflow-logs")
        assert run_airflow(env, "dags", "unpause", DAG_ID).returncode == 0
        assert run_airflow(env, "dags", "unpause", DOWNSTREAM).returncode == 0

        def runs(snapshot: list[RunSnapshot], kind: str) -> list[RunSnapshot]:
            return [run for run in snapshot if run.run_type == kind]

        # Every judgement below reads one snapshot: the runs and their tasks as one query saw them.
        def scheduled_done() -> list[RunSnapshot] | None:
            snapshot = run_snapshot(airflow_home, DAG_ID)
            assert not any(run.state == "failed" for run in snapshot), snapshot
            return snapshot if any(r.state == "success" for r in runs(snapshot, "scheduled")) else None

        # A backfill of a Delta table waits until the stream has read past its interval (else the
        # stream would append the interval's events again later; the job refuses it): the scheduled
        # run, which reads every event the hub holds, first.
        wait_until(scheduled_done, 600, "the scheduled run", interval=3)
        enqueued = sum(len(bodies) for bodies in sent.values()) + 7

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

        def finished(count: int, after: datetime | None = None) -> bool:
            """``count`` backfill runs ended after ``after``; no run of either kind failed."""
            snapshot = run_snapshot(airflow_home, DAG_ID)
            assert not any(run.state == "failed" for run in snapshot), snapshot
            done = [
                run
                for run in runs(snapshot, "backfill")
                if run.state == "success" and (after is None or (run.end_date and run.end_date > after))
            ]
            return len(done) >= count

        def check() -> dict[str, int]:
            """Every event once; each interval's rows the events enqueued in it; each backfilled
            interval's rows in files one backfill commit (``replaceWhere``) added. Returns that
            commit's version per interval. The stream wrote every event before, so an event a
            backfill wrote outside its interval, or added instead of replacing, would be there twice."""
            frame = spark.read.format("delta").load(str(table))
            columns = ["partition", "sequenceNumber", "body", "enqueuedTime"]
            rows = frame.select(*columns, F.input_file_name().alias("file")).collect()
            assert len({(r.partition, r.sequenceNumber) for r in rows}) == len(rows) == enqueued
            commits = _delta_commits(table)
            added_by = {name: version for version, (_, added) in commits.items() for name in added}
            writers: dict[str, int] = {}
            for window, bodies in sent.items():
                start = datetime.strptime(window, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
                mine = [r for r in rows if start <= r.enqueuedTime.astimezone(UTC) < start + HOUR]
                assert sorted(bytes(r.body) for r in mine) == sorted(bodies), window
                versions = {added_by[Path(r.file).name] for r in mine}
                infos = [commits[version][0] for version in versions]
                assert all(_is_backfill(info) for info in infos), (window, infos)
                assert len(versions) == 1, "one backfill run's commit per interval"
                writers[window] = versions.pop()
            return writers

        backfill(first + HOUR)  # logical dates from..to: two intervals
        wait_until(lambda: finished(2), 600, "two successful backfill runs", interval=3)
        writers = check()
        first_end = max(run.end_date for run in runs(run_snapshot(airflow_home, DAG_ID), "backfill"))

        # Rerun the first interval (reprocess a completed run): its rows are replaced, not added to.
        backfill(first, "--reprocess-behavior", "completed")
        wait_until(lambda: finished(1, after=first_end), 600, "the rerun backfill run", interval=3)
        rewritten = check()
        first_window = first.strftime("%Y-%m-%dT%H:%M:%SZ")
        assert rewritten[first_window] > max(writers.values()), "the rerun's commit wrote the first interval"
        assert {w: v for w, v in rewritten.items() if w != first_window} == {
            w: v for w, v in writers.items() if w != first_window
        }, "the rerun left the other interval as it was"

        # The table as an Asset: one event per run that committed, naming the versions it wrote
        # (the scheduled run's stream commits; each backfill run's replaceWhere commit), so every
        # version is announced once; the user's DAG ran on them, each event consumed by one run.
        def all_consumed() -> list[dict[str, Any]] | None:
            events = asset_events(airflow_home, f"file://{table}")
            consumed = all(len(e["consumed_by"]) == 1 and e["consumed_by"][0][2] == "success" for e in events)
            return events if len(events) == 4 and consumed else None

        events = wait_until(all_consumed, 300, "the user's DAG to run on every asset event", interval=3)
        assert all(event["consumed_by"][0][0] == DOWNSTREAM for event in events), events
        assert all(event["extra"]["job"] == NAME for event in events), events
        versions = {run: [] for run in ("scheduled", "backfill")}
        for event in events:
            versions[event["extra"]["run"]].append(event["extra"]["versions"])
        assert len(versions["scheduled"]) == 1 and len(versions["backfill"]) == 3, events
        backfilled_versions = sorted(v for announced in versions["backfill"] for v in announced)
        assert backfilled_versions == sorted({*writers.values(), *rewritten.values()}), (events, writers)
        every_version = sorted(
            v for announced in (*versions["scheduled"], *versions["backfill"]) for v in announced
        )
        assert every_version == sorted(_delta_commits(table)), "every version of the table announced once"

        snapshot = run_snapshot(airflow_home, DAG_ID)
        backfill_tasks = [run.tasks for run in runs(snapshot, "backfill")]
        assert len(backfill_tasks) == 2, "the rerun reuses its interval's run"
        for tasks in backfill_tasks:
            assert tasks == {"run_job": "success", "check_health": "skipped"}, snapshot
        scheduled = [run.tasks for run in runs(snapshot, "scheduled") if run.state == "success"]
        assert scheduled and all(t["check_health"] == "success" for t in scheduled), snapshot
    finally:
        stop_processes(processes)
        emulator.stop()
