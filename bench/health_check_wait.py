"""The cost of a deferred health check against a poked one, on a real Airflow (issue #27 item 5).

    .venv/bin/python bench/health_check_wait.py [--checks 4] [--wait 60] [--reps 3] [--poke-interval 10]

One DAG per side, each with ``--checks`` ``check_health`` tasks (``CheckpointHealthSensor``, a
scheduled job's judgment: ``healthy`` accepted), one per job of a registry of file jobs; the only
difference between the sides is ``deferrable``. Each repetition gives every job a checkpoint with a
batch in flight (offsets written, no commit: the sensor waits), triggers the side's DAG, commits the
batches ``--wait`` seconds later, and waits for the run to succeed. Measured per repetition:

- **worker slots held**: the seconds the checks spent ``running`` (a LocalExecutor slot, a process),
  summed over the checks, from the metadata DB sampled every 0.5 s; time ``deferred`` (in the
  triggerer) is reported beside it;
- **CPU**: the machine's CPU seconds (``/proc/stat``, user + system) from the trigger to the run's
  end, everything Airflow's services and their task processes spend (run it on a quiet machine);
- **answered**: seconds from the commit to the run's success (what the wait costs in latency).

``--wait 0`` commits before the trigger: every check answers at its first judgment, where the
deferrable sensor judges once in the worker before it would defer. Sides alternate (poke first,
then deferred, per repetition) on one set of services: PostgreSQL (``scripts/postgres.sh``), an
api-server, scheduler, DAG processor and triggerer. Medians (min-max) and the ratio deferred/poke.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "jobs"), str(REPO_ROOT / "plugins")]

from hubflow.registry import load_registry  # noqa: E402
from hubflow.supervision.airflow_readiness import RUNS_DAGS, Service, wait_until_ready  # noqa: E402
from tests.dags.helpers import (  # noqa: E402
    AIRFLOW,
    airflow_env,
    landing_job,
    query_db,
    run_airflow,
    start_airflow_services,
    write_registry,
)
from tests.support.airflow_db import create_airflow_home, remove_airflow_home  # noqa: E402
from tests.support.file_source_checkpoint import checkpoint_files  # noqa: E402
from tests.support.processes import start_background, stop_processes  # noqa: E402

SIDES = ("poke", "deferred")
DAG_TEMPLATE = """
from datetime import datetime
from airflow.sdk import DAG
from hubflow_plugins.sensors.checkpoint_health import CheckpointHealthSensor

for side, deferrable in (("poke", False), ("deferred", True)):
    with DAG(f"health_{{side}}", schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
        for job in {jobs!r}:
            CheckpointHealthSensor(
                task_id=f"check_{{job}}", job_name=job, deferrable=deferrable,
                poke_interval={poke_interval}, timeout=1800, mode="poke",
            )
    globals()[dag.dag_id] = dag
"""


def machine_cpu_seconds() -> float:
    """User + system CPU seconds of the whole machine since boot (``/proc/stat``)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system = (int(value) for value in fields[:3])
    return (user + nice + system) / os.sysconf("SC_CLK_TCK")


def in_flight(checkpoints: list[str], committed: bool) -> None:
    """Each checkpoint: batch 0 planned (offsets), committed or not."""
    for location in checkpoints:
        root = Path(location)
        for relative, text in checkpoint_files(1, f"file://{root.parent / 'landing'}").items():
            if relative.startswith("commits/"):
                continue
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            (root / relative).write_text(text, encoding="utf-8")
        (root / "commits" / "0").unlink(missing_ok=True)
    if committed:
        commit_batches(checkpoints)


def commit_batches(checkpoints: list[str]) -> None:
    for location in checkpoints:
        commit = Path(location) / "commits" / "0"
        commit.parent.mkdir(parents=True, exist_ok=True)
        commit.write_text('v1\n{"nextBatchWatermarkMs":0}', encoding="utf-8")


def one_run(home, env, side: str, checkpoints: list[str], wait: float) -> dict[str, float]:
    """Trigger the side's DAG, commit after ``wait`` seconds, sample its tasks until it succeeds."""
    dag_id = f"health_{side}"
    in_flight(checkpoints, committed=wait <= 0)
    run_id = f"bench_{side}_{datetime.now(UTC):%H%M%S%f}"
    cpu_start = machine_cpu_seconds()
    result = run_airflow(env, "dags", "trigger", dag_id, "--run-id", run_id)
    assert result.returncode == 0, result.stdout + result.stderr
    started = time.monotonic()
    committed_at = started if wait <= 0 else None
    seconds = {"running": 0.0, "deferred": 0.0}
    last = time.monotonic()
    while True:
        rows = query_db(
            home,
            "SELECT r.state, t.state FROM dag_run r LEFT JOIN task_instance t "
            "ON t.dag_id = r.dag_id AND t.run_id = r.run_id WHERE r.dag_id = :dag AND r.run_id = :run",
            dag=dag_id,
            run=run_id,
        )
        now = time.monotonic()
        for _, state in rows:
            if state in seconds:
                seconds[state] += now - last
        last = now
        run_state = rows[0][0] if rows else None
        if run_state == "success":
            break
        if run_state == "failed":
            raise RuntimeError(f"{dag_id} run {run_id} failed: {rows}")
        if committed_at is None and now - started >= wait:
            commit_batches(checkpoints)
            committed_at = now
        if now - started > 1800:
            raise TimeoutError(f"{dag_id} run {run_id} did not end in 30 minutes: {rows}")
        time.sleep(0.5)
    return {
        "slot_seconds": seconds["running"],
        "deferred_seconds": seconds["deferred"],
        "cpu_seconds": machine_cpu_seconds() - cpu_start,
        "answered_seconds": time.monotonic() - (committed_at or started),
    }


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):7.1f} ({min(values):.1f}-{max(values):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--checks", type=int, default=4, help="health checks per run (one per job)")
    parser.add_argument("--wait", type=float, default=60.0, help="seconds the batches stay in flight")
    parser.add_argument("--reps", type=int, default=3, help="repetitions per side")
    parser.add_argument("--poke-interval", type=int, default=10, help="the sensors' poke_interval")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="hubflow-bench-health-"))
    home = create_airflow_home(work / "airflow-home", REPO_ROOT / "dags", REPO_ROOT / "plugins")
    processes: list = []
    try:
        jobs = [f"job{index}" for index in range(args.checks)]
        registry = write_registry(work, [landing_job(work, name) for name in jobs])
        env = airflow_env(home, registry)
        dags = work / "dags"
        dags.mkdir()
        dag_file = DAG_TEMPLATE.format(jobs=jobs, poke_interval=args.poke_interval)
        (dags / "health_bench.py").write_text(dag_file, encoding="utf-8")
        env["AIRFLOW__CORE__DAGS_FOLDER"] = str(dags)
        env["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"] = "False"
        env["AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC"] = "2"
        os.environ["HUBFLOW_REGISTRY"] = str(registry)
        checkpoints = [load_registry(registry).job(name).paths.checkpoint_location for name in jobs]
        assert run_airflow(env, "dags", "reserialize").returncode == 0
        processes, env = start_airflow_services(env, work / "logs")
        started = datetime.now(UTC)
        processes.append(start_background([AIRFLOW, "triggerer"], work / "logs" / "triggerer.log", env))
        wait_until_ready(env["AIRFLOW__API__BASE_URL"], (*RUNS_DAGS, Service.TRIGGERER), since=started)
        print(
            f"{args.checks} checks per run, batches in flight {args.wait:.0f} s, poke_interval "
            f"{args.poke_interval} s, {args.reps} repetitions per side (interleaved)",
            flush=True,
        )
        results: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
        for rep in range(args.reps):
            for side in SIDES:
                measured = one_run(home, env, side, checkpoints, args.wait)
                results[side].append(measured)
                print(
                    f"  rep {rep + 1} {side:8s} {json.dumps({k: round(v, 1) for k, v in measured.items()})}"
                )
        print(f"\n{'side':9s} {'slots held s':>20s} {'deferred s':>20s} {'CPU s':>20s} {'answered s':>20s}")
        for side in SIDES:
            rows = results[side]
            print(
                f"{side:9s} "
                + " ".join(
                    f"{spread([r[key] for r in rows]):>20s}"
                    for key in ("slot_seconds", "deferred_seconds", "cpu_seconds", "answered_seconds")
                )
            )
        for key in ("slot_seconds", "cpu_seconds", "answered_seconds"):
            poke = statistics.median(r[key] for r in results["poke"])
            deferred = statistics.median(r[key] for r in results["deferred"])
            ratio = deferred / poke if poke else float("nan")
            print(f"deferred / poke, {key}: {ratio:.2f}")
    finally:
        stop_processes(processes)
        remove_airflow_home(home)


if __name__ == "__main__":
    main()
