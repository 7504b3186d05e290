"""`make demo` end to end: emulator, Airflow standalone, local Spark. A supervised streaming job is
killed and restarted by its supervisor after its backoff, the restart-loop alert reaches the demo's
receiver, the silver job runs by its Asset, and the summary reads back every table."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import fsspec
import pytest

from eventhubs_emulator.config import DEFAULT_KEY
from hubflow.progress.history import read_history_file
from tests.support.processes import wait_until

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _processes_mentioning(text: str) -> list[str]:
    """Command lines of the running processes that mention ``text`` (this test's demo home)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{proc.name}: {cmdline[:300]}")
    return found


@pytest.mark.timeout(1200)
def test_demo_supervises_a_killed_stream_alerts_runs_silver_by_asset_and_reports_every_row(
    tmp_path: Path,
) -> None:
    home = tmp_path / "demo"
    env = dict(os.environ, HUBFLOW_DEMO_HOME=str(home))
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "demo.py"), "run"],
        env=env,
        capture_output=True,
        text=True,
        timeout=1100,
        cwd=REPO,
    )
    out = result.stdout
    assert result.returncode == 0, out[-6000:] + result.stderr[-4000:]

    # The summary: every table read back with delta-rs.
    assert re.search(r"orders rows out\s+│\s+200\b", out)
    assert re.search(r"orders rows quarantined\s+│\s+10\b", out)
    assert re.search(r"landing files archived\s+│\s+5 of 5", out)
    assert re.search(r"Event Hubs events in\s+│\s+2000\b", out)
    assert re.search(r"telemetry rows out\s+│\s+2000 \(2000 distinct events\)", out), "exactly once"
    assert re.search(r"silver rows out\s+│\s+2000 \(2000 distinct readings\)", out)
    assert "DAG landing_orders__available_now: success" in out

    # Supervised: started, killed, the backoff said by the supervisor's run, restarted.
    assert "telemetry_bronze__supervisor started telemetry_bronze" in out
    assert "killed the driver of telemetry_bronze" in out
    assert "the next start is due at" in out, "a supervisor run waited out the backoff and said so"
    assert "restarted telemetry_bronze from its checkpoint" in out
    status = home / "data" / "status" / "telemetry_bronze"
    restarts = json.loads((status / "restarts.json").read_text())["restarts"]
    assert len(restarts) == 2, restarts  # the first start and the restart after the kill

    # The alert reached the demo's receiver (a RESOLVED may follow: a supervisor run that finds the
    # job held by the demo's stop judges no restart loop).
    assert "alert received by the demo's webhook receiver" in out
    assert re.search(r"\| \*\[hubflow\] ALERT telemetry_bronze: restart loop\*", out), out[-6000:]
    assert "(restart-loop)" in out
    assert re.search(r"alerts received\s+│\s+[1-9]", out)

    # The silver job ran by its Asset (not triggered by the demo), and succeeded.
    with sqlite3.connect(home / "data" / "airflow" / "airflow.db") as db:
        query = "SELECT run_type, state, triggered_by FROM dag_run WHERE dag_id = ?"
        runs = db.execute(query, ("telemetry_silver__available_now",)).fetchall()
    assert runs and {run[0] for run in runs} == {"asset_triggered"}, runs
    assert any(state == "success" for _, state, _ in runs), runs

    # The status page's backlog chart has data for the streaming job: its history's points (what the
    # page charts) carry the events and seconds the Event Hubs source reported.
    points = read_history_file(fsspec.filesystem("file"), str(status)) or []
    assert [p for p in points if p["lag"] is not None], points[-5:]
    assert [p for p in points if p["lag_seconds"] is not None], points[-5:]
    assert re.search(r"status page: http://127\.0\.0\.1:\d+/hubflow/", out)
    assert re.search(r"demo took \d+ s", out)  # its time is reported (measured, not asserted: README)

    # Everything stopped; no connection-string key in any log.
    assert "stack stopped" in out
    assert not (home / "pids.json").exists(), "every process the demo started is stopped"
    # The demo's last SIGKILLs (a driver's group, what is left of Airflow's) return before the
    # processes are gone: a killed JVM still shows in /proc while it tears down.
    left: list[str] = []

    def none_left() -> bool:
        left[:] = _processes_mentioning(str(home))
        return not left

    try:
        wait_until(none_left, 60, "every process the demo started to exit")
    except TimeoutError as timeout:
        raise AssertionError(f"{timeout}; still running: {left}") from None
    # Not in any file the demo leaves (Airflow's logs and DB, task logs, driver logs, status
    # folders), nor in its output; only the emulator's own log shows its connection strings, as the
    # emulator prints them when it starts.
    assert DEFAULT_KEY not in out + result.stderr
    for path in home.rglob("*"):
        if path.is_file() and path != home / "logs" / "emulator.log":
            assert DEFAULT_KEY.encode() not in path.read_bytes(), f"key in {path}"
