"""``hubflow oncall``: on-call actions from a terminal, on the same core as the ``<job>__oncall`` DAG.

Refusals (exit 2: the command or the job; exit 3: another action in progress; exit 1: the action
refused) change nothing; a stop while another action holds the job's lock still holds the job;
every action is in the audit trail with ``source: cli`` and this machine's user. Live: start
launches a detached driver that outlives the command, restart replaces it, stop holds it, and every
landed record is in the lake exactly once.
"""

from __future__ import annotations

import getpass
import os
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest

from hubflow.operations.audit import read_audit
from hubflow.status import StatusFolder
from hubflow.status.action_lock import ActionLock
from tests.cli.helpers import HUBFLOW, hubflow, output
from tests.dags.helpers import job_status, lake_ids, landing_job, pid_alive, write_registry
from tests.jobs.helpers import write_json_landing_file
from tests.support.processes import wait_until

pytestmark = pytest.mark.integration

WHO = f"{getpass.getuser()} (hubflow oncall on host {socket.gethostname()})"
REPO = Path(__file__).resolve().parents[2]
#: The Airflow user of docs/cli.md's example, and the ISO times its output holds.
DOC_USER = "alice (run manual__2026-11-28T10:00:00+00:00)"
TIME = re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+\+00:00")


def _registry(tmp_path: Path) -> Path:
    return write_registry(
        tmp_path,
        [landing_job(tmp_path, "clicks", streaming=True, cores_max=1), landing_job(tmp_path, "orders")],
    )


def _folder(tmp_path: Path) -> StatusFolder:
    return StatusFolder(str(tmp_path / "clicks" / "status" / "clicks"))


def test_oncall_refusals_dry_runs_and_a_stop_beside_an_action_in_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = _registry(tmp_path)
    folder = _folder(tmp_path)

    def oncall(*args: str) -> tuple[int, str]:
        result = hubflow("oncall", *args, "--registry", registry)
        return result.returncode, output(result)

    code, text = oncall("nosuch", "stop")
    assert code == 2 and "no job named 'nosuch' in the registry" in text
    code, text = oncall("orders", "stop")
    assert code == 2 and "job orders is a scheduled job (orders__available_now)" in text
    code, text = oncall("clicks", "start", "--force")
    assert code == 2 and "force takes over a hold another action placed: give a reason too" in text
    code, text = oncall("clicks", "stop", "--dry-run", "--reason", "sink full")
    assert code == 0, text
    assert f"would hold job clicks ({WHO}: sink full) and stop it" in text
    assert folder.hold() is None, "a dry run changes nothing"
    code, text = oncall("clicks", "rewind", "--rewind-to-enqueued-time", "2026-11-22T10:00:00Z")
    assert code == 1 and "job clicks has no eventhubs_conn_id: only Event Hubs jobs rewind" in text

    # docs/cli.md's example, run as written (the registry from $HUBFLOW_REGISTRY): its output is the
    # doc's but for the times.
    doc = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    example = doc[doc.index("## `hubflow oncall`") :]
    example = example[example.index("```console\n") + len("```console\n") :]
    example = example[: example.index("```")].splitlines()
    commands: list[tuple[str, list[str]]] = []
    for line in example:
        if line.startswith("$ "):
            commands.append((line[2:], []))
        else:
            commands[-1][1].append(line)
    assert [command for command, _ in commands] == [
        "hubflow oncall clicks start",
        'hubflow oncall clicks stop --reason "sink full"',
    ]
    monkeypatch.setenv("HUBFLOW_REGISTRY", str(registry))
    monkeypatch.setenv("PATH", f"{HUBFLOW.parent}{os.pathsep}{os.environ['PATH']}")
    with ActionLock(folder, "clicks", "rewind", DOC_USER, "airflow").held():
        for command, shown in commands:
            result = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120)
            printed = [line for line in output(result).splitlines() if line.startswith("hubflow oncall:")]
            assert [TIME.sub("T", line) for line in printed] == [TIME.sub("T", line) for line in shown]
            assert result.returncode == (3 if command.endswith("start") else 0), output(result)
    hold = folder.hold()
    assert (hold.kind, hold.by, hold.reason) == ("stop", WHO, "sink full")

    trail = read_audit(folder)
    assert [(e.action, e.dry_run, e.outcome.split(":")[0]) for e in trail] == [
        ("stop", True, "done"),
        ("rewind", False, "refused"),
        ("start", False, "refused"),
        ("stop", False, "done"),
    ]
    assert all(e.by == WHO and e.source == "cli" for e in trail), [e.line() for e in trail]


@pytest.mark.timeout(900)
def test_oncall_start_restart_and_stop_a_live_job_every_record_once(spark, tmp_path: Path) -> None:
    registry = _registry(tmp_path)
    folder = _folder(tmp_path)
    landing = tmp_path / "clicks" / "landing"
    expected = write_json_landing_file(landing, "a.json", 0, good=20, bad=0)

    def oncall(*args: str) -> str:
        result = hubflow(
            "oncall", "clicks", *args, "--registry", registry, "--master", "local[1]", timeout=600
        )
        assert result.returncode == 0, output(result)[-6000:]
        return output(result)

    def landed(count: int, what: str) -> None:
        wait_until(lambda: len(lake_ids(spark, tmp_path, "clicks", "parquet")) >= count, 300, what)

    try:
        text = oncall("start")
        assert "started job clicks" in text
        first = job_status(tmp_path, "clicks")["pid"]
        assert pid_alive(first), "the driver outlives the command"
        landed(len(expected), "batch a in the lake")

        expected |= write_json_landing_file(landing, "b.json", 1000, good=20, bad=0)
        text = oncall("restart", "--reason", "pick up the new storage key")
        assert "stopped gracefully" in text and "started job clicks" in text
        second = job_status(tmp_path, "clicks")["pid"]
        assert second != first and pid_alive(second) and not pid_alive(first), "the driver was replaced"

        expected |= write_json_landing_file(landing, "c.json", 2000, good=20, bad=0)
        landed(len(expected), "batches b and c in the lake")
        time.sleep(2)  # a duplicate would show up in the next micro-batch
        oncall("stop", "--reason", "end of test")
        assert not pid_alive(second) and folder.hold().by == WHO
        ids = lake_ids(spark, tmp_path, "clicks", "parquet")
        assert sorted(ids) == sorted(expected), "every record exactly once across the restart"
    finally:
        from tests.dags.helpers import kill_job

        kill_job(tmp_path, "clicks")
    trail = read_audit(folder)
    assert [(e.action, e.outcome.split(":")[0]) for e in trail] == [
        ("start", "done"),
        ("restart", "done"),
        ("stop", "done"),
    ], [e.line() for e in trail]
    assert trail[1].reason == "pick up the new storage key" and trail[2].hold_after.startswith(f"by {WHO}")
    version = folder.read_json("supervisor.json")["version"]["digest"][:12]
    assert [e.version for e in trail] == [version] * 3, "each entry names the version started"
