"""The paths the mission names, through Airflow 3.3's own UI in headless Chromium
(``tests/support/airflow_ui.py``), on a real api-server, scheduler and DAG processor (PostgreSQL),
logged in as the on-call person ``alice`` (issue #27 item 6):

- **On-call from the Trigger form**: the job's own ``clicks__oncall`` starts a streaming job, stops
  it with a reason (held: who and why in the hold and on the status page inside Airflow's UI) and starts it
  again; every record lands once. Each action's dry run (restart, stop, start; and rewind, of
  ``readings``, a streaming job reading the hub) succeeds, its log says what it would do, nothing
  changes, and the audit trail keeps it marked as a dry run.
- **Backfill from the DAG's Trigger dialog**, run by the scheduler beside the DAG's scheduled runs:
  each interval's events land once, a rerun (reprocess "All Runs") replaces its interval, and a
  backfill run never judges the streaming checkpoint nor archives (its ``check_health`` is skipped).
  The job is a pipeline of a user's own (``tests/support/pipelines/tagged_events.py``, found through
  ``$HUBFLOW_PIPELINES_DIR``, no hubflow module edited; issue #26) reading one hub into a Delta
  table: a backfill run replaces the rows of its interval's events (``replaceWhere`` on
  ``enqueuedTime``) once the scheduled run's stream has read past the interval. The file job's
  backfill, its reruns and files archived while it reads are covered by
  ``tests/jobs/test_backfill_files.py``.
- **The table as an Asset**: every run that committed announces the table (named after its folder,
  ``telemetry_bronze``, its ``file://`` URI) with the versions it added; the DAG of a user's own that
  docs/airflow.md shows, scheduled on it, runs on those events, each consumed once; the asset's page
  in the UI lists them.
- **Runs when events arrive** (``schedule: events``, issue #27 item 2; the triggerer runs too): the
  watcher over the job's hub announces new events as asset events, each event in one announcement,
  the runs they queue land each event once, and nothing is announced while nothing arrives.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.dags.helpers import (
    REPO_ROOT,
    RunSnapshot,
    airflow_env,
    asset_events,
    job_status,
    kill_job,
    lake_ids,
    landing_job,
    pid_alive,
    query_db,
    run_airflow,
    run_snapshot,
    simple_auth_user,
    start_airflow_services,
    start_service,
    stop_service,
    write_registry,
)
from tests.jobs.helpers import EmulatedHub, eventhubs_config, write_config, write_json_landing_file
from tests.jobs.pipelines_support import pipeline_config
from tests.support.airflow_ui import browser
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
STREAMING = "clicks"
ARRIVALS = "arrivals"  # a job run when events arrive on its hub (schedule: events)
ARRIVALS_DAG = f"{ARRIVALS}__available_now"
ARRIVALS_POLL = 2.0
ONCALL = f"{STREAMING}__oncall"
REWINDS = "readings"  # a streaming Event Hubs job (clicks reads files, and only those jobs rewind)
USER = "alice"
REASON = "sink storage account failing over; hold until it is back"


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


@dataclass(frozen=True)
class Deployment:
    """Airflow's services on one registry (the hourly pipeline ``tagged``, the streaming ``clicks``),
    the emulator holding the hub ``tagged`` reads, and the UI's URL and ``alice``'s password."""

    base: Path
    env: dict[str, str]
    url: str
    password: str
    emulator: Any
    hub: EmulatedHub
    table: Path
    arrivals: EmulatedHub
    #: The Airflow services' processes (a test may restart one in place).
    services: list


@pytest.fixture(scope="module")
def deployment(airflow_home, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    base = tmp_path_factory.mktemp("ui")
    emulator = start_test_emulator(base, telemetry=2, arrivals=2)
    processes: list = []
    try:
        conn = emulator.connection_string("telemetry")
        table = base / "lake" / TABLE
        sources = {"events": {"kind": "eventhubs", "connection_string_env": ENV_VAR}}
        sinks = {NAME: {"kind": "delta", "output_path": str(table)}}
        tagged = {
            "name": NAME,
            "application": "tagged_events:tagged",
            "config": str(pipeline_config(base, NAME, sources=sources, sinks=sinks)),
            "mode": "scheduled",
            "schedule": "@hourly",
            "eventhubs_conn_id": "eventhubs_default",
        }
        clicks = landing_job(base, STREAMING, streaming=True, sink={"format": "delta"})
        arrivals_conn = emulator.connection_string(ARRIVALS)
        arrivals = {
            **tagged,
            "name": ARRIVALS,
            "config": str(
                pipeline_config(
                    base,
                    ARRIVALS,
                    sources=sources,
                    sinks={ARRIVALS: {"kind": "delta", "output_path": str(base / "lake" / ARRIVALS)}},
                )
            ),
            "schedule": f"events({ARRIVALS_POLL:g} seconds)",
            "eventhubs_conn_id": "eventhubs_arrivals",
        }
        # A streaming job reading the hub, never started: the one of these that can rewind.
        rewinds = eventhubs_config(base / REWINDS, EmulatedHub("telemetry", conn, 2), ENV_VAR, name=REWINDS)
        rewinds["trigger"] = {"processingTime": "1 second"}
        readings = {
            "name": REWINDS,
            "application": "eventhubs_to_lake",
            "config": str(write_config(base / f"{REWINDS}.yaml", rewinds)),
            "mode": "streaming",
            "eventhubs_conn_id": "eventhubs_default",
        }
        env = airflow_env(airflow_home, write_registry(base, [tagged, clicks, arrivals, readings]))
        env["AIRFLOW_CONN_EVENTHUBS_DEFAULT"] = json.dumps({"conn_type": "generic", "password": conn})
        env["AIRFLOW_CONN_EVENTHUBS_ARRIVALS"] = json.dumps(
            {"conn_type": "generic", "password": arrivals_conn}
        )
        env["HUBFLOW_PIPELINES_DIR"] = str(PIPELINES)
        # The simple auth manager with one named user: the UI's login page, and the runs she
        # triggers carry her name (the hold says who).
        password = simple_auth_user(env, base, USER)
        dags = base / "dags"
        dags.mkdir()
        (dags / "hubflow_dags.py").symlink_to(REPO_ROOT / "dags" / "hubflow_dags.py")
        (dags / f"{DOWNSTREAM}.py").write_text(_downstream_dag(table), encoding="utf-8")
        env["AIRFLOW__CORE__DAGS_FOLDER"] = str(dags)
        # DAGs start paused: the scheduler runs nothing until a test unpauses (or the form's
        # "Unpause on trigger" does). The services are ready (API server, scheduler, DAG processor)
        # before any of that, so no task is queued while its API server does not answer yet.
        assert run_airflow(env, "dags", "reserialize").returncode == 0
        processes, env = start_airflow_services(env, base / "airflow-logs", triggerer=True)
        yield Deployment(
            base,
            env,
            env["AIRFLOW__API__BASE_URL"],
            password,
            emulator,
            EmulatedHub("telemetry", conn, 2),
            table,
            EmulatedHub(ARRIVALS, arrivals_conn, 2),
            processes,
        )
    finally:
        stop_processes(processes)
        emulator.stop()


def _run_succeeded(airflow_home: Any, dag_id: str, run_id: str) -> RunSnapshot:
    """Wait for the run to succeed; a failed run fails at once with its task logs' tails."""

    def done() -> RunSnapshot | None:
        (run,) = [run for run in run_snapshot(airflow_home, dag_id) if run.run_id == run_id]
        if run.state == "failed":
            logs = Path(airflow_home.path) / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
            tails = [path.read_text(errors="replace")[-3000:] for path in sorted(logs.rglob("*.log"))]
            raise AssertionError(f"{dag_id} run {run_id} failed: {run.tasks}\n" + "\n".join(tails))
        return run if run.state == "success" else None

    return wait_until(done, 600, f"{dag_id} run {run_id} to succeed", interval=2)


def _task_log(airflow_home: Any, dag_id: str, run_id: str) -> str:
    """The task logs of one run, as Airflow wrote them."""
    logs = Path(airflow_home.path) / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
    return "\n".join(path.read_text(errors="replace") for path in sorted(logs.rglob("*.log")))


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes ({} when it does not exist)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _dry_run(ui: Any, airflow_home: Any, dag_id: str, params: dict[str, Any], *said: str) -> str:
    """Trigger ``dag_id`` from the form with Dry run on; wait for the run to succeed and its task log
    to say each of ``said``; return the run's id."""
    run = ui.trigger(dag_id, {**params, "dry_run": True})
    _run_succeeded(airflow_home, dag_id, run)
    try:  # the log file may be completed a moment after the task's state
        wait_until(
            lambda: all(line in _task_log(airflow_home, dag_id, run) for line in said),
            120,
            f"{dag_id} run {run}'s log to say what it would do",
        )
    except TimeoutError as exc:
        log = _task_log(airflow_home, dag_id, run)
        missing = [line for line in said if line not in log]
        raise AssertionError(f"{exc}; missing {missing} in:\n{log[-4000:]}") from None
    return run


@pytest.mark.timeout(900)
def test_oncall_from_the_trigger_form_starts_stops_with_a_reason_and_starts_again(
    deployment: Deployment, airflow_home, spark
) -> None:
    from hubflow.operations.audit import read_audit
    from hubflow.status import StatusFolder

    base = deployment.base
    landing = base / STREAMING / "landing"
    hold_file = base / STREAMING / "status" / STREAMING / "HOLD"
    checkpoint = base / STREAMING / "checkpoints" / STREAMING
    expected = write_json_landing_file(landing, "a.json", 0, good=30, bad=0)
    try:
        with browser(deployment.url, base / "ui-artifacts" / "oncall") as ui:
            ui.log_in(USER, deployment.password)
            # Start: the form's defaults are a dry run; on-call switches it off.
            run = ui.trigger(ONCALL, {"action": "start", "dry_run": False})
            _run_succeeded(airflow_home, ONCALL, run)
            first_pid = job_status(base, STREAMING)["pid"]
            wait_until(
                lambda: sorted(lake_ids(spark, base, STREAMING)) == sorted(expected),
                300,
                "batch a in the lake",
            )

            # Each action's dry run (issue #47 item 7), Dry run on: each run succeeds and its log
            # says what it would do; nothing changes (no hold, the same driver, the checkpoint as it
            # was: no new input arrives meanwhile, so the running job writes no batch either).
            running = _files(checkpoint)
            dry_runs = [
                _dry_run(
                    ui,
                    airflow_home,
                    ONCALL,
                    {"action": "restart"},
                    f"would stop job {STREAMING} (pid {first_pid} on ",
                    f"would start job {STREAMING} from checkpoint ",
                ),
                _dry_run(
                    ui,
                    airflow_home,
                    ONCALL,
                    {"action": "stop", "reason": REASON},
                    f"would hold job {STREAMING} ({USER} (run ",
                    f"would stop job {STREAMING} (pid {first_pid} on ",
                ),
            ]
            assert not hold_file.exists() and job_status(base, STREAMING)["pid"] == first_pid
            assert pid_alive(first_pid) and _files(checkpoint) == running

            # Stop with a reason: the job stops gracefully and is held, saying who and why.
            expected |= write_json_landing_file(landing, "b.json", 1000, good=30, bad=0)
            run = ui.trigger(ONCALL, {"action": "stop", "dry_run": False, "reason": REASON})
            _run_succeeded(airflow_home, ONCALL, run)
            hold = json.loads(hold_file.read_text(encoding="utf-8"))
            assert hold["by"] == f"{USER} (run {run})" and hold["reason"] == REASON, hold
            assert job_status(base, STREAMING)["state"] == "stopped" and not pid_alive(first_pid)
            page = ui.text("/hubflow/", "Held by")
            assert f"Held by {USER} (run {run}) at " in page and REASON in page, page

            # A start's dry run would release that hold and start the job; the hold stays.
            stopped, held = _files(checkpoint), hold_file.read_bytes()
            dry_runs.append(
                _dry_run(
                    ui,
                    airflow_home,
                    ONCALL,
                    {"action": "start"},
                    f"would release the hold by {USER} (run {run}) at ",
                    f"would start job {STREAMING} from checkpoint ",
                )
            )
            assert hold_file.read_bytes() == held and _files(checkpoint) == stopped
            assert job_status(base, STREAMING)["pid"] == first_pid

            # A rewind's dry run, of the job that reads the hub: the hub is asked, the plan said,
            # nothing held, backed up or written.
            rewind_run = _dry_run(
                ui,
                airflow_home,
                f"{REWINDS}__oncall",
                {"action": "rewind", "rewind_to_sequence_numbers": '{"0": 0, "1": 0}'},
                "found: hub telemetry, next sequence number per partition ",
                f"dry run, would: hold job {REWINDS} while it rewinds",
                "dry run, would: write a new checkpoint that resumes at sequence numbers {'0': 0, '1': 0}",
                f"dry run, would: release the hold and start job {REWINDS}",
            )
            assert not (base / REWINDS / "checkpoints").exists(), "no checkpoint written or backed up"
            left = {p.name for p in (base / REWINDS / "status" / REWINDS).iterdir()}
            assert left - {".storage.lock"} == {"audit.jsonl"}, "no hold, lease or status: the audit only"

            # Each dry run is in its job's audit trail, marked as one.
            trail = [
                (e.action, e.by, e.dry_run, e.outcome.split(": ")[0])
                for e in read_audit(StatusFolder(str(hold_file.parent)))
            ]
            assert trail[1:] == [
                ("restart", f"{USER} (run {dry_runs[0]})", True, "done"),
                ("stop", f"{USER} (run {dry_runs[1]})", True, "done"),
                ("stop", f"{USER} (run {run})", False, "done"),
                ("start", f"{USER} (run {dry_runs[2]})", True, "done"),
            ], trail
            (rewound,) = read_audit(StatusFolder(str(base / REWINDS / "status" / REWINDS)))
            assert (rewound.action, rewound.by, rewound.dry_run) == (
                "rewind",
                f"{USER} (run {rewind_run})",
                True,
            )
            assert rewound.outcome.startswith("done: would hold job"), rewound

            # Start again: the hold is released and the job resumes from its checkpoint.
            expected |= write_json_landing_file(landing, "c.json", 2000, good=30, bad=0)
            run = ui.trigger(ONCALL, {"action": "start", "dry_run": False})
            _run_succeeded(airflow_home, ONCALL, run)
            assert not hold_file.exists(), "start released the hold"
            assert "Held by" not in ui.text("/hubflow/", STREAMING)
        second_pid = job_status(base, STREAMING)["pid"]
        assert second_pid != first_pid and pid_alive(second_pid)
        wait_until(
            lambda: len(lake_ids(spark, base, STREAMING)) >= len(expected), 300, "batches b and c in the lake"
        )
        time.sleep(2)  # a duplicate would show up in the next micro-batch
        assert sorted(lake_ids(spark, base, STREAMING)) == sorted(expected), (
            "every record once across stop and start"
        )
    finally:
        kill_job(base, STREAMING)


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
    deployment: Deployment, airflow_home, spark
) -> None:
    from pyspark.sql import functions as F

    emulator, hub, table, env = deployment.emulator, deployment.hub, deployment.table, deployment.env
    with browser(deployment.url, deployment.base / "ui-artifacts" / "backfill") as ui:
        ui.log_in(USER, deployment.password)
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

        # The scheduler starts no run of a paused DAG, backfill runs included. Once unpaused it runs
        # the newest finished hour (catchup is off), after the two.
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

        def backfill(last: datetime, reprocess: str, runs_said: str) -> None:
            """A backfill from the DAG's Trigger dialog over logical dates ``first``..``last``, once the
            one before has ended (until the scheduler marks it complete, Airflow refuses another)."""
            pending = "SELECT count(*) FROM backfill WHERE dag_id = :dag AND completed_at IS NULL"
            wait_until(
                lambda: query_db(airflow_home, pending, dag=DAG_ID)[0][0] == 0, 300, "no backfill running"
            )
            assert ui.backfill(DAG_ID, first, last, reprocess) == runs_said

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

        backfill(first + HOUR, "Missing Runs", "2 runs will be triggered.")  # two intervals
        wait_until(lambda: finished(2), 600, "two successful backfill runs", interval=3)
        writers = check()
        first_end = max(run.end_date for run in runs(run_snapshot(airflow_home, DAG_ID), "backfill"))

        # Rerun the first interval (reprocess a completed run): its rows are replaced, not added to.
        backfill(first, "All Runs", "1 run will be triggered.")
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

        (asset_id,) = query_db(airflow_home, "SELECT id FROM asset WHERE uri = :uri", uri=f"file://{table}")[
            0
        ]
        # The asset's page in the UI lists the same events: each from the job's DAG, each having
        # triggered a run of the user's DAG.
        ui.text(f"/assets/{asset_id}", "4 Asset Events")
        # The whole list, scrolled out of view or not (Selenium's text is only what is on screen).
        listed = re.sub(r"\s+", " ", ui.driver.execute_script("return document.body.textContent"))
        assert len(re.findall(rf"Source: ?{DAG_ID}", listed)) == 4, listed
        assert len(re.findall(rf"Triggered Dag Run: ?{DOWNSTREAM}", listed)) == 4, listed

        snapshot = run_snapshot(airflow_home, DAG_ID)
        backfill_tasks = [run.tasks for run in runs(snapshot, "backfill")]
        assert len(backfill_tasks) == 2, "the rerun reuses its interval's run"
        for tasks in backfill_tasks:
            assert tasks == {"run_job": "success", "check_health": "skipped"}, snapshot
        scheduled = [run.tasks for run in runs(snapshot, "scheduled") if run.state == "success"]
        assert scheduled and all(t["check_health"] == "success" for t in scheduled), snapshot


def _arrival_bodies(spark: Any, base: Path) -> list[bytes]:
    """The bodies in the ``arrivals`` job's Delta table, duplicates kept ([] before its first commit)."""
    from pyspark.errors import AnalysisException

    try:
        frame = spark.read.format("delta").load(str(base / "lake" / ARRIVALS))
        return sorted(bytes(row.body) for row in frame.select("body").collect())
    except AnalysisException:
        return []


def _arrivals_settled(airflow_home: Any, spark: Any, base: Path, sent: set[bytes], runs_before: int) -> Any:
    """The job's runs once more than ``runs_before`` exist, all succeeded and the lake holds ``sent``
    (a failed run fails the test with its logs); None until then."""
    runs = run_snapshot(airflow_home, ARRIVALS_DAG)
    for run in runs:
        if run.state == "failed":
            _run_succeeded(airflow_home, ARRIVALS_DAG, run.run_id)  # raises with the task logs
    if len(runs) <= runs_before or any(run.state != "success" for run in runs):
        return None
    return runs if _arrival_bodies(spark, base) == sorted(sent) else None


#: (partition, sequence number) of the ten events the events test sends, five to each partition.
ARRIVAL_POSITIONS = {(p, n) for p in ("0", "1") for n in range(5)}


def _positions(payload: dict[str, Any]) -> list[tuple[str, int]]:
    """The (partition, sequence number) pairs one announcement names."""
    return [(p, n) for p, (first, end) in payload["partitions"].items() for n in range(first, end)]


def _announced_positions(events: list[dict[str, Any]]) -> set[tuple[str, int]]:
    return {position for event in events for position in _positions(event["extra"]["payload"])}


@pytest.mark.timeout(900)
def test_a_job_scheduled_on_events_runs_when_they_arrive_and_lands_each_once(
    deployment: Deployment, airflow_home, spark
) -> None:
    """``schedule: events(2 seconds)`` (issue #27 item 2): the triggerer's watcher over the job's hub
    announces new events as asset events of ``arrivals__events``; each queues a run of the job, which
    lands them once. No event is announced twice, a triggerer restart between an announcement and
    its run included, and no run starts while nothing arrives."""
    base, env = deployment.base, deployment.env
    uri = f"hubflow-events://{ARRIVALS}/"
    assert run_airflow(env, "dags", "unpause", ARRIVALS_DAG).returncode == 0
    sent = deployment.arrivals.send_numbered(0, 6)
    runs = wait_until(
        lambda: _arrivals_settled(airflow_home, spark, base, sent, 0), 600, "the arrivals' first runs"
    )
    # A triggerer restart between an announcement and its run. The scheduler is stopped first, so
    # no run lands the new events meanwhile (the triggerer itself records the asset event): the new
    # triggerer's watcher finds them uncommitted in the job's checkpoint, and only the announcement
    # it reads back from Airflow's asset state store keeps it from announcing them again.
    logs = base / "airflow-logs"
    stop_service(deployment.services, "scheduler")
    announced = len(asset_events(airflow_home, uri))
    sent |= deployment.arrivals.send_numbered(6, 4)
    # Every new event announced (the watcher may see the two partitions' events in different polls,
    # so in more than one announcement) before the triggerer stops.
    wait_until(
        lambda: _announced_positions(asset_events(airflow_home, uri)) == ARRIVAL_POSITIONS,
        300,
        "the new events' announcements",
    )
    announced = len(asset_events(airflow_home, uri))
    stop_service(deployment.services, "triggerer")
    triggerer_log = start_service(deployment.services, "triggerer", env, logs)
    wait_until(
        lambda: "Connection state changed" in triggerer_log.read_text(errors="replace"),
        300,
        "the new triggerer's watcher to ask the hub",
    )
    time.sleep(3 * ARRIVALS_POLL)
    assert len(asset_events(airflow_home, uri)) == announced, "the restarted watcher announced them again"
    start_service(deployment.services, "scheduler", env, logs)
    runs = wait_until(
        lambda: _arrivals_settled(airflow_home, spark, base, sent, len(runs)), 600, "a run for the new events"
    )
    assert {run.run_type for run in runs} == {"asset_triggered"}, runs

    # Nothing arrives: after the last run's commit, no announcement and so no run. (A run queued by
    # an announcement made while the last run was reading may still start, and find nothing: it is
    # created within a scheduler loop, before the first look below.)
    time.sleep(3 * ARRIVALS_POLL)
    announced_then = [event["extra"] for event in asset_events(airflow_home, uri)]
    runs_then = [run.run_id for run in run_snapshot(airflow_home, ARRIVALS_DAG)]
    time.sleep(3 * ARRIVALS_POLL)
    events = asset_events(airflow_home, uri)
    assert [event["extra"] for event in events] == announced_then, "nothing new was announced"
    assert [run.run_id for run in run_snapshot(airflow_home, ARRIVALS_DAG)] == runs_then, "no run started"

    # Every event was announced exactly once: each sequence number in exactly one announcement.
    announced: list[tuple[str, int]] = []
    for event in events:
        assert event["extra"]["from_trigger"] is True
        payload = event["extra"]["payload"]
        assert payload["job"] == ARRIVALS and payload["hub"] == ARRIVALS, payload
        announced += _positions(payload)
        assert event["consumed_by"], f"an announcement no run consumed: {event}"
    assert sorted(announced) == sorted(ARRIVAL_POSITIONS), events
