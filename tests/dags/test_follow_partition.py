"""Downstream follows the changed partition (issue #51 item 2), on a real api-server, scheduler and
DAG processor (PostgreSQL), the emulator's hub, Spark and Delta:

bronze (``telemetry_bronze``, the streaming Event Hubs job) and silver (``telemetry_silver``, the
built-in ``bronze_to_silver`` scheduled on ``asset(telemetry_bronze)``, the shipped config with the
test's paths). Events of two past hours land in bronze (the stream) and silver (its incremental run
on the supervisor's ordinary event). Then bronze's first hour is backfilled from the UI (Trigger ->
Backfill of ``telemetry_bronze__backfill``): its run carries the hour as partition key, so does its
table's event, and that event runs ``telemetry_silver__follow`` once, which replaces silver's rows of
that hour once (every event once, parsed again); the other hour is untouched, and the incremental
``telemetry_silver__available_now`` is not run by the partitioned event. A later incremental run
skips bronze's replacement (``skip_change_commits``) and adds nothing.

Downstream of silver, ``telemetry_gold`` (a user's pipeline on silver's table,
``tests/support/pipelines/silver_rows.py``, scheduled on ``asset(telemetry_silver)``) follows both
ways a scheduled job's table changes an hour: silver's follow run (the chain goes on) and a backfill
of silver's own ``telemetry_silver__backfill`` (a scheduled job's hours are followed too).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hubflow.partitions import partition_key
from tests.dags.helpers import (
    REPO_ROOT,
    airflow_env,
    asset_events,
    pid_alive,
    query_db,
    run_airflow,
    run_snapshot,
    simple_auth_user,
    start_airflow_services,
    write_registry,
)
from tests.jobs.helpers import EmulatedHub, eventhubs_config, write_config
from tests.jobs.pipelines_support import pipeline_config
from tests.support.airflow_ui import browser
from tests.support.emulator import start_test_emulator
from tests.support.lake import spark_rows
from tests.support.processes import stop_processes, wait_until

pytestmark = pytest.mark.integration
ENV_VAR = "HUBFLOW_EVENTHUBS_CONNECTION_STRING"
HOUR = timedelta(hours=1)
BRONZE, SILVER, GOLD = "telemetry_bronze", "telemetry_silver", "telemetry_gold"
BACKFILL_DAG, FOLLOW_DAG, INCREMENTAL_DAG = (
    f"{BRONZE}__backfill",
    f"{SILVER}__follow",
    f"{SILVER}__available_now",
)
SILVER_BACKFILL_DAG, GOLD_FOLLOW_DAG, GOLD_INCREMENTAL_DAG = (
    f"{SILVER}__backfill",
    f"{GOLD}__follow",
    f"{GOLD}__available_now",
)
PIPELINES = REPO_ROOT / "tests" / "support" / "pipelines"
USER = "alice"
#: Silver's columns that tell an event (partition, sequence number) and when silver parsed it.
SILVER_COLUMNS = {
    "partition": "value",
    "sequenceNumber": "value",
    "device": "value",
    "_ingested_at": "timestamp",
}
GOLD_COLUMNS = {"partition": "value", "sequenceNumber": "value", "device": "value", "_gold_at": "timestamp"}


@dataclass(frozen=True)
class Lake:
    base: Path
    env: dict[str, str]
    url: str
    password: str
    emulator: Any
    hub: EmulatedHub
    bronze: Path
    silver: Path
    gold: Path


@pytest.fixture(scope="module")
def lake(airflow_home, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:

    base = tmp_path_factory.mktemp("follow")
    emulator = start_test_emulator(base, telemetry=2)
    processes: list = []
    try:
        conn = emulator.connection_string("telemetry")
        bronze = base / "lake" / BRONZE
        bronze_config = eventhubs_config(
            base / "bronze",
            EmulatedHub("telemetry", conn, 2),
            ENV_VAR,
            name=BRONZE,
            sink={"output_path": str(bronze), "format": "delta"},
        )
        bronze_config["trigger"] = {"processingTime": "1 second"}
        shipped = (REPO_ROOT / "jobs" / "configs" / f"{SILVER}.yaml").read_text(encoding="utf-8")
        assert "skip_change_commits: true" in shipped and "interval_column: enqueuedTime" in shipped
        silver_config = base / f"{SILVER}.yaml"
        silver_config.write_text(shipped.replace("/opt/hubflow/data", str(base)), encoding="utf-8")
        jobs = [
            {
                "name": BRONZE,
                "application": "eventhubs_to_lake",
                "config": str(write_config(base / f"{BRONZE}.yaml", bronze_config)),
                "mode": "streaming",
                "supervise_every": "1 hour",  # run by the test (airflow dags test), not the clock
                "eventhubs_conn_id": "eventhubs_default",
            },
            {
                "name": SILVER,
                "application": "bronze_to_silver",
                "config": str(silver_config),
                "mode": "scheduled",
                "schedule": f"asset({BRONZE})",
                "retries": 0,
            },
            {
                "name": GOLD,
                "application": "silver_rows:gold",
                "config": str(
                    pipeline_config(
                        base,
                        GOLD,
                        sources={
                            "silver": {
                                "kind": "delta",
                                "path": str(base / "lake" / SILVER),
                                "interval_column": "enqueuedTime",
                                "skip_change_commits": True,
                            }
                        },
                        sinks={GOLD: {"kind": "delta", "output_path": str(base / "lake" / GOLD)}},
                    )
                ),
                "mode": "scheduled",
                "schedule": f"asset({SILVER})",
                "retries": 0,
            },
        ]
        env = airflow_env(airflow_home, write_registry(base, jobs))
        env["HUBFLOW_PIPELINES_DIR"] = str(PIPELINES)
        env["AIRFLOW_CONN_EVENTHUBS_DEFAULT"] = json.dumps({"conn_type": "generic", "password": conn})
        env["AIRFLOW__SCHEDULER__PARSING_CLEANUP_INTERVAL"] = "5"  # a new table's asset active soon
        password = simple_auth_user(env, base, USER)
        assert run_airflow(env, "dags", "reserialize").returncode == 0
        processes, env = start_airflow_services(env, base / "airflow-logs")
        yield Lake(
            base,
            env,
            env["AIRFLOW__API__BASE_URL"],
            password,
            emulator,
            EmulatedHub("telemetry", conn, 2),
            bronze,
            base / "lake" / SILVER,
            base / "lake" / GOLD,
        )
    finally:
        stop_processes(processes)
        _stop_stream(base)
        emulator.stop()


def _stop_stream(base: Path) -> None:
    import os
    import signal

    try:
        status = json.loads((base / "bronze" / "status" / BRONZE / "status.json").read_text())
    except (OSError, ValueError):
        return
    for pid in (status.get("jvm_pid"), status.get("pid")):
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


def _send_in_hour(lake: Lake, start: datetime, first: int, count: int) -> None:
    """``count`` JSON readings (devices ``d<first>``...) enqueued a minute into the hour ``start``."""
    lake.emulator.faults.shift_clock((start + timedelta(minutes=1) - datetime.now(UTC)).total_seconds())
    bodies: dict[str, list[bytes]] = {"0": [], "1": []}
    for n in range(first, first + count):
        bodies[str(n % 2)].append(json.dumps({"device": f"d{n}", "reading": n, "celsius": 20.5}).encode())
    lake.hub.send(bodies)
    lake.emulator.faults.shift_clock(0)


def _supervise(lake: Lake) -> None:
    """One supervisor run: starts bronze's stream if it is not running, announces its new commits."""
    result = run_airflow(lake.env, "dags", "test", f"{BRONZE}__supervisor")
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]


def _rows(spark: Any, table: Path, columns: dict[str, str]) -> list[tuple]:
    from pyspark.errors import AnalysisException

    try:
        return spark_rows(spark, table, columns)
    except AnalysisException:  # nothing committed yet
        return []


def _succeeded(airflow_home: Any, dag_id: str, count: int) -> list | None:
    """The DAG's runs once ``count`` have succeeded and none failed (a failure fails the test)."""
    runs = run_snapshot(airflow_home, dag_id)
    failed = [run for run in runs if run.state == "failed"]
    if failed:
        logs = Path(airflow_home.path) / "logs" / f"dag_id={dag_id}"
        tails = [p.read_text(errors="replace")[-3000:] for p in sorted(logs.rglob("*.log"))]
        raise AssertionError(f"{dag_id}: {failed}\n" + "\n".join(tails))
    return runs if sum(run.state == "success" for run in runs) >= count else None


def _commit_infos(table: Path) -> dict[int, tuple[dict[str, Any], set[str]]]:
    """Each Delta commit: its commitInfo and the names of the files it added."""
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


def _writers(spark: Any, table: Path, start: datetime) -> set[int]:
    """The versions whose files hold the table's rows enqueued in the hour ``start``."""
    from pyspark.sql import functions as F

    frame = spark.read.format("delta").load(str(table)).select("enqueuedTime", F.input_file_name().alias("f"))
    files = {
        Path(r.f).name for r in frame.collect() if start <= r.enqueuedTime.astimezone(UTC) < start + HOUR
    }
    return {v for v, (_, added) in _commit_infos(table).items() if added & files}


@pytest.mark.timeout(1800)
def test_a_backfilled_bronze_hour_is_replaced_once_in_silver_and_other_hours_stay(
    lake: Lake, airflow_home, spark
) -> None:
    this_hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    first, second = this_hour - 3 * HOUR, this_hour - 2 * HOUR
    _send_in_hour(lake, first, 0, 10)
    _send_in_hour(lake, second, 10, 14)
    sent = 24

    # The ordinary path: the stream lands every event in bronze; the supervisor's (unpartitioned)
    # event runs silver's incremental DAG, which parses them all.
    for dag in (
        INCREMENTAL_DAG,
        FOLLOW_DAG,
        BACKFILL_DAG,
        SILVER_BACKFILL_DAG,
        GOLD_INCREMENTAL_DAG,
        GOLD_FOLLOW_DAG,
    ):
        assert run_airflow(lake.env, "dags", "unpause", dag).returncode == 0
    _supervise(lake)
    wait_until(lambda: len(_rows(spark, lake.bronze, {"body": "value"})) == sent, 300, "bronze's stream")
    _supervise(lake)
    wait_until(
        lambda: _succeeded(airflow_home, INCREMENTAL_DAG, 1), 600, "silver's incremental run", interval=3
    )
    before = _rows(spark, lake.silver, SILVER_COLUMNS)
    assert len(before) == len({(r[0], r[1]) for r in before}) == sent, before
    incremental_runs = len(run_snapshot(airflow_home, INCREMENTAL_DAG))
    silver_versions = set(_commit_infos(lake.silver))
    # silver's ordinary event runs gold's incremental DAG in turn (before any hour is replaced).
    wait_until(
        lambda: _succeeded(airflow_home, GOLD_INCREMENTAL_DAG, 1), 600, "gold's incremental run", interval=3
    )
    gold_before = _rows(spark, lake.gold, GOLD_COLUMNS)
    assert sorted(r[:3] for r in gold_before) == sorted(r[:3] for r in before), "gold holds silver's rows"

    # Backfill bronze's first hour from the UI: one run, the hour as its partition key.
    with browser(lake.url, lake.base / "ui-artifacts") as ui:
        ui.log_in(USER, lake.password)
        assert ui.backfill(BACKFILL_DAG, first, first) == "1 run will be triggered."
    wait_until(lambda: _succeeded(airflow_home, BACKFILL_DAG, 1), 600, "bronze's backfill run")
    key = partition_key(first)
    keys = query_db(
        airflow_home, "SELECT run_type, partition_key FROM dag_run WHERE dag_id = :d", d=BACKFILL_DAG
    )
    assert [tuple(row) for row in keys] == [("backfill", key)], keys
    bronze_events = [e["extra"] for e in asset_events(airflow_home, f"file://{lake.bronze}")]
    assert bronze_events[-1]["run"] == "backfill", bronze_events
    (bronze_replaced,) = bronze_events[-1]["versions"]
    assert _writers(spark, lake.bronze, first) == {bronze_replaced}, "bronze's hour replaced by the backfill"

    # The command line docs/airflow.md shows, as a dry run: one hour is from and to the same hour.
    hour = second.strftime("%Y-%m-%dT%H:%M:%S")
    dry = run_airflow(
        lake.env,
        "backfill",
        "create",
        "--dag-id",
        BACKFILL_DAG,
        "--from-date",
        hour,
        "--to-date",
        hour,
        "--dry-run",
    )
    assert dry.returncode == 0, (dry.stdout + dry.stderr)[-3000:]
    doc = " ".join((REPO_ROOT / "docs" / "airflow.md").read_text(encoding="utf-8").split())
    documented = f"airflow backfill create --dag-id {BACKFILL_DAG} --from-date 2026-11-28T10:00:00 --to-date"
    assert f"{documented} 2026-11-28T10:00:00" in doc
    keys_said = [k for k in (partition_key(second + n * HOUR) for n in (-1, 0, 1)) if k in dry.stdout]
    assert keys_said == [partition_key(second)], dry.stdout

    # silver__follow runs once, for that hour, and replaces silver's rows of it once.
    (follow,) = wait_until(
        lambda: _succeeded(airflow_home, FOLLOW_DAG, 1), 600, "silver's follow run", interval=3
    )
    follows = query_db(
        airflow_home, "SELECT run_type, partition_key FROM dag_run WHERE dag_id = :d", d=FOLLOW_DAG
    )
    assert [tuple(row) for row in follows] == [("asset_triggered", key)], follows
    after = _rows(spark, lake.silver, SILVER_COLUMNS)
    assert sorted((r[0], r[1], r[2]) for r in after) == sorted((r[0], r[1], r[2]) for r in before), (
        "each once"
    )
    devices_of_first = {f"d{n}" for n in range(10)}
    replaced = [r for r in after if r[2] in devices_of_first]
    kept = [r for r in before if r[2] in devices_of_first]
    assert len(replaced) == 10 and all(new[3] > old[3] for new, old in zip(replaced, kept, strict=True)), (
        "the hour's rows parsed again"
    )
    assert [r for r in after if r[2] not in devices_of_first] == [
        r for r in before if r[2] not in devices_of_first
    ], "the other hour untouched"
    new_versions = set(_commit_infos(lake.silver)) - silver_versions
    (follow_commit,) = [v for v in new_versions if _commit_infos(lake.silver)[v][1]]  # adds silver files
    info = _commit_infos(lake.silver)[follow_commit][0]
    assert info.get("userMetadata", "").startswith(f"airflow:{FOLLOW_DAG}/{follow.run_id}/"), info
    assert _writers(spark, lake.silver, first) == {follow_commit}, "one replacement of the hour"
    silver_events = [
        e for e in asset_events(airflow_home, f"file://{lake.silver}") if e["extra"]["run"] == "backfill"
    ]
    assert len(silver_events) == 1, silver_events

    # The chain goes on: silver's follow run's event carries the hour, and gold follows it.
    wait_until(
        lambda: _succeeded(airflow_home, GOLD_FOLLOW_DAG, 1), 600, "gold's first follow run", interval=3
    )
    gold_after_chain = _rows(spark, lake.gold, GOLD_COLUMNS)
    _assert_hour_replaced(gold_before, gold_after_chain, devices_of_first)
    # The scheduler creates the runs one event queues in one loop: had silver's partitioned event
    # queued gold's incremental DAG, its run would exist beside the follow run by now.
    assert len(run_snapshot(airflow_home, GOLD_INCREMENTAL_DAG)) == 1, "only ordinary events run it"

    # The partitioned event ran no incremental run; the next ordinary one skips bronze's replacement.
    assert len(run_snapshot(airflow_home, INCREMENTAL_DAG)) == incremental_runs
    assert run_airflow(lake.env, "dags", "trigger", INCREMENTAL_DAG).returncode == 0
    wait_until(
        lambda: _succeeded(airflow_home, INCREMENTAL_DAG, incremental_runs + 1),
        600,
        "an incremental run",
        interval=3,
    )
    assert _rows(spark, lake.silver, SILVER_COLUMNS) == after, "nothing added twice"

    # A scheduled job's hours are followed too: silver's second hour backfilled through its own
    # __backfill DAG (the command line docs/airflow.md shows), then gold replaces that hour once.
    silver_backfill = run_airflow(
        lake.env,
        "backfill",
        "create",
        "--dag-id",
        SILVER_BACKFILL_DAG,
        "--from-date",
        hour,
        "--to-date",
        hour,
    )
    assert silver_backfill.returncode == 0, (silver_backfill.stdout + silver_backfill.stderr)[-3000:]
    wait_until(lambda: _succeeded(airflow_home, SILVER_BACKFILL_DAG, 1), 600, "silver's backfill run")
    silver_keys = query_db(
        airflow_home, "SELECT run_type, partition_key FROM dag_run WHERE dag_id = :d", d=SILVER_BACKFILL_DAG
    )
    assert [tuple(row) for row in silver_keys] == [("backfill", partition_key(second))], silver_keys
    devices_of_second = {f"d{n}" for n in range(10, 24)}
    # silver's rows are parsed from bronze's unchanged rows again: the same rows, written by one
    # commit of the backfill run (their _ingested_at is bronze's, so it stays).
    assert _rows(spark, lake.silver, SILVER_COLUMNS) == after, "each event once"
    (silver_replaced,) = _writers(spark, lake.silver, second)
    info = _commit_infos(lake.silver)[silver_replaced][0]
    assert info.get("userMetadata", "").startswith(f"airflow:{SILVER_BACKFILL_DAG}/"), info
    wait_until(
        lambda: _succeeded(airflow_home, GOLD_FOLLOW_DAG, 2), 600, "gold's second follow run", interval=3
    )
    gold_follows = query_db(
        airflow_home,
        "SELECT run_type, partition_key FROM dag_run WHERE dag_id = :d ORDER BY id",
        d=GOLD_FOLLOW_DAG,
    )
    assert [tuple(row) for row in gold_follows] == [
        ("asset_triggered", key),
        ("asset_triggered", partition_key(second)),
    ], gold_follows
    _assert_hour_replaced(gold_after_chain, _rows(spark, lake.gold, GOLD_COLUMNS), devices_of_second)


def _assert_hour_replaced(before: list[tuple], after: list[tuple], devices: set[str]) -> None:
    """``after`` holds the events of ``before`` once each (partition, sequence number, device);
    the rows of ``devices`` were written again (a later last column), the others are unchanged."""
    assert sorted(r[:3] for r in after) == sorted(r[:3] for r in before), "each event once"
    old = {r[:3]: r[3] for r in before}
    replaced = [r for r in after if r[2] in devices]
    assert replaced and all(r[3] > old[r[:3]] for r in replaced), "the hour's rows written again"
    assert sorted(r for r in after if r[2] not in devices) == sorted(
        r for r in before if r[2] not in devices
    ), "the other hours untouched"
