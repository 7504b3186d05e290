"""``pytest --cpu-burn N`` (``make test-stress``) keeps N processes spinning beside the tests, then stops
them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT


def test_cpu_burn_runs_busy_processes_for_the_session_and_stops_them(tmp_path: Path) -> None:
    out = tmp_path / "burners"
    probe = Path(__file__).with_name("cpu_burn_probe.py")
    env = {**os.environ, "CPU_BURN_PROBE_OUT": str(out)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--cpu-burn", "2", "-p", "no:cacheprovider", "-q", str(probe)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "cpu burn: 2 spinning processes" in result.stdout
    pids = [int(pid) for pid in out.read_text().split()]
    assert len(pids) == 2, "two burners were running while the test ran"
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists(), f"burner {pid} outlived the session"


def test_cpu_burn_rejects_a_negative_count() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--cpu-burn", "-1", "-p", "no:cacheprovider", "--co", "-q"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    assert "--cpu-burn -1: give a number of processes, 0 or more" in result.stderr
