"""`make demo` end to end: emulator, Airflow standalone, local Spark, the summary it prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_demo_runs_both_jobs_through_airflow_and_reports_every_row(tmp_path: Path) -> None:
    env = dict(os.environ, HUBFLOW_DEMO_HOME=str(tmp_path / "demo"))
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "demo.py"), "run"],
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
        cwd=REPO,
    )
    out = result.stdout
    assert result.returncode == 0, out[-4000:] + result.stderr[-4000:]
    assert re.search(r"orders rows out\s+│\s+200\b", out)
    assert re.search(r"orders rows quarantined\s+│\s+10\b", out)
    assert re.search(r"landing files archived\s+│\s+5 of 5", out)
    assert re.search(r"telemetry rows out\s+│\s+2000\b", out)
    assert "DAG landing_orders__available_now: success" in out
    assert "DAG telemetry_bronze__available_now: success" in out
    assert "stack stopped" in out
    assert not (tmp_path / "demo" / "pids.json").exists(), "every process the demo started is stopped"
    logs = tmp_path / "demo" / "data" / "airflow" / "logs"
    for log in logs.rglob("*.log"):
        assert "SAS_KEY_VALUE" not in log.read_text(errors="replace"), f"key in {log}"
