"""Backfill from `airflow backfill create`, run by a real scheduler beside the DAG's scheduled runs:
each interval's events land once, a rerun replaces its interval, and a backfill run never judges
the streaming checkpoint nor archives (its ``check_health`` is skipped).

The job is a pipeline of a user's own (``tests/support/pipelines/tagged_events.py``, found through
``$HUBFLOW_PIPELINES_DIR``; issue #26) reading one hub into a Delta table: a backfill run replaces
the rows its interval's events made (``replaceWhere`` on ``enqueuedTime``), once the scheduled
runs' stream has read past the interval. The file job's backfill, its reruns and files archived
while it reads are covered by ``tests/jobs/test_backfill_files.py``.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.dags.helpers import (
    REPO_ROOT,
    RunSnapshot,
    airflow_env,
    run_airflow,
    run_snapshot,
    start_airflow_services,
    write_registry,
)
from tests.jobs.helpers import EmulatedHub, receive_all, write_config
from tests.support.emulator import start_test_emulator
from tests.support.processes import stop_processes, wait_until

pytestmark = pytest.mark.integration
ENV_VAR = "HUBFLOW_EVENTHUBS_CONNECTION_STRING"
INTERVAL = 15  # seconds: two intervals of events take half a minute to produce
NAME = "tagged"
DAG_ID = f"{NAME}__available_now"
PIPELINES = REPO_ROOT / "tests" / "support" / "pipelines"


def _next_boundary(now: datetime) -> datetime:
    """The next interval start after ``now``, to the second (intervals align to multiples of INTERVAL)."""
    return datetime.fromtimestamp((int(now.timestamp()) // INTERVAL + 1) * INTERVAL, UTC)


def _sleep_until(moment: datetime) -> None:
    time.sleep(max(0.0, (moment - datetime.now(UTC)).total_seconds()))


def _interval_of(moment: datetime) -> datetime:
    return datetime.fromtimestamp(int(moment.timestamp()) // INTERVAL * INTERVAL, UTC)


def _send_events(hub: EmulatedHub, first: datetime) -> None:
    """10 events a few seconds into the interval starting at ``first``, 20 into the next one, and 7
    into the one after (which no backfill covers)."""
    number = 0
    for index, count in enumerate((10, 20, 7)):
        _sleep_until(first + timedelta(seconds=INTERVAL * index + 2))
        hub.send_numbered(number, count)
        number += count


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
        table = tmp_path / "lake" / "tagged"
        config = {
            "name": NAME,
            "trigger": {"availableNow": True},
            "checkpoint_root": str(tmp_path / "checkpoints"),
            "status_root": str(tmp_path / "status"),
            "spark_conf": {"spark.sql.shuffle.partitions": 2, "spark.ui.enabled": False},
            "runtime": {"heartbeat_interval": "1 second", "poll_interval": "200 ms"},
            "sources": {"events": {"kind": "eventhubs", "connection_string_env": ENV_VAR}},
            "sinks": {"tagged": {"kind": "delta", "output_path": str(table)}},
        }
        entry = {
            "name": NAME,
            "application": "tagged_events:tagged",
            "config": str(write_config(tmp_path / f"{NAME}.yaml", config)),
            "mode": "scheduled",
            "schedule": f"{INTERVAL} seconds",
            "eventhubs_conn_id": "eventhubs_default",
        }
        env = airflow_env(airflow_home, write_registry(tmp_path, [entry]))
        env["AIRFLOW_CONN_EVENTHUBS_DEFAULT"] = json.dumps({"conn_type": "generic", "password": conn})
        env["HUBFLOW_PIPELINES_DIR"] = str(PIPELINES)
        # The DAG processor parses the (still paused) DAG every few seconds, so the run the scheduler
        # starts once it is unpaused (the newest finished interval as of the last parse) comes soon
        # after the events' intervals have passed.
        env["AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL"] = "3"

        # The events go out while Airflow starts: in two consecutive intervals and one more after.
        # Which interval an event belongs to is read back from the hub (its enqueued time), so a
        # send delayed on a loaded machine changes what is expected, never the verdict.
        first = _next_boundary(datetime.now(UTC))
        with ThreadPoolExecutor(1) as sender:
            sending = sender.submit(_send_events, hub, first)
            processes, env = start_airflow_services(env, tmp_path / "airflow-logs")
            sending.result()
        enqueued = Counter[datetime]()
        sent: dict[datetime, set[bytes]] = {}
        for _, event in receive_all(conn):
            interval = _interval_of(event.enqueued_time)
            enqueued[interval] += 1
            sent.setdefault(interval, set()).add(b"".join(event.body))
        backfilled = [first, first + timedelta(seconds=INTERVAL)]
        assert all(sent.get(interval) for interval in backfilled), enqueued
        assert max(enqueued) > backfilled[-1], f"no event after the two intervals: {enqueued}"

        # The scheduler starts no run of a paused DAG, backfill runs included. Once unpaused it runs
        # the newest finished interval as of the DAG's last parse, and a backfill skips dates that
        # have a run: unpause once that interval lies after the two (read from the DAG's row).
        def next_run_after_the_intervals() -> bool:
            import sqlalchemy

            engine = sqlalchemy.create_engine(airflow_home.sql_alchemy_conn)
            try:
                with engine.connect() as connection:
                    start = connection.execute(
                        sqlalchemy.text(
                            "SELECT next_dagrun_data_interval_start FROM dag WHERE dag_id = :dag"
                        ),
                        {"dag": DAG_ID},
                    ).scalar()
            finally:
                engine.dispose()
            if start is None:
                return False
            start = start if start.tzinfo else start.replace(tzinfo=UTC)
            return start > backfilled[-1]

        wait_until(next_run_after_the_intervals, 300, "a parse of the DAG after the intervals", interval=1)
        assert run_airflow(env, "dags", "unpause", DAG_ID).returncode == 0

        def runs(snapshot: list[RunSnapshot], kind: str) -> list[RunSnapshot]:
            return [run for run in snapshot if run.run_type == kind]

        # Every judgement below reads one snapshot: the runs and their tasks as one query saw them.
        def scheduled_done() -> list[RunSnapshot] | None:
            snapshot = run_snapshot(airflow_home, DAG_ID)
            assert not any(run.state == "failed" for run in snapshot), snapshot
            return snapshot if any(r.state == "success" for r in runs(snapshot, "scheduled")) else None

        # A backfill of a Delta table waits for the stream to have read past its interval (else the
        # stream would later append the interval's events again): a scheduled run first.
        wait_until(scheduled_done, 600, "a scheduled run that read every event", interval=2)

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
            """``count`` backfill runs ended well after ``after``; no run of either kind failed."""
            snapshot = run_snapshot(airflow_home, DAG_ID)
            assert not any(run.state == "failed" for run in snapshot), snapshot
            done = [
                run
                for run in runs(snapshot, "backfill")
                if run.state == "success" and (after is None or (run.end_date and run.end_date > after))
            ]
            return len(done) >= count

        def check() -> dict[datetime, int]:
            """Every event once, each interval's as the hub enqueued them, and each backfilled
            interval's rows in files one backfill commit (``replaceWhere``) added; returns that
            commit's version per backfilled interval. The stream wrote every event before, so an
            event a backfill wrote outside its interval, or added instead of replacing, would be
            there twice."""
            frame = spark.read.format("delta").load(str(table))
            columns = ["partition", "sequenceNumber", "body", "enqueuedTime"]
            rows = frame.select(*columns, F.input_file_name().alias("file")).collect()
            assert Counter((r.partition, r.sequenceNumber) for r in rows).most_common(1)[0][1] == 1
            assert len(rows) == sum(enqueued.values())
            commits = _delta_commits(table)
            added_by = {name: version for version, (_, added) in commits.items() for name in added}
            writers: dict[datetime, int] = {}
            for interval, bodies in sent.items():
                mine = [r for r in rows if _interval_of(r.enqueuedTime.astimezone(UTC)) == interval]
                assert sorted(bytes(r.body) for r in mine) == sorted(bodies), interval
                versions = {added_by[Path(r.file).name] for r in mine}
                if interval in backfilled:
                    infos = [commits[version][0] for version in versions]
                    assert all(_is_backfill(info) for info in infos), (interval, infos)
                    assert len(versions) == 1, "one backfill run's commit per interval"
                    writers[interval] = versions.pop()
            return writers

        backfill(backfilled[-1])  # logical dates from..to: two intervals
        wait_until(lambda: finished(2), 600, "two successful backfill runs", interval=3)
        writers = check()
        first_end = max(run.end_date for run in runs(run_snapshot(airflow_home, DAG_ID), "backfill"))

        # Rerun the first interval (reprocess a completed run): its rows are replaced, not added to.
        backfill(first, "--reprocess-behavior", "completed")
        wait_until(lambda: finished(1, after=first_end), 600, "the rerun backfill run", interval=3)
        rewritten = check()
        assert rewritten[first] > max(writers.values()), "the rerun's commit wrote the first interval"

        snapshot = wait_until(scheduled_done, 300, "a scheduled run beside", interval=2)
        backfill_tasks = [run.tasks for run in runs(snapshot, "backfill")]
        assert len(backfill_tasks) == 2, "the rerun reuses its interval's run"
        for tasks in backfill_tasks:
            assert tasks == {"run_job": "success", "check_health": "skipped"}, snapshot
        scheduled = [run.tasks for run in runs(snapshot, "scheduled") if run.state == "success"]
        assert scheduled and all(t["check_health"] == "success" for t in scheduled), snapshot
    finally:
        stop_processes(processes)
        emulator.stop()
