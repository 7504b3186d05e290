"""Upgrades through the on-call core, the supervisor's way: check, back up, start, readiness, rollback.

No Spark: a stand-in driver (tests/support/fake_driver.py, real detached processes writing a real
status folder and checkpoint logs) behaves as its version's pipeline module says (``BEHAVIOUR``:
commit, hang or die), so each path of an upgrade is driven in seconds. What Spark does with a
restored checkpoint is proven on Spark in tests/plugins/operators/test_upgrade_live.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from hubflow.operations.audit import read_audit
from hubflow.operations.oncall import LaunchOverrides, OnCall, OnCallRefused, OnCallRequest
from hubflow.operations.upgrade import UpgradeRolledBack
from hubflow.progress.job_snapshots import job_version
from hubflow.registry import RegisteredJob, load_registry
from hubflow.repository import PIPELINES_DIR_ENV
from hubflow.status import HoldKind, StatusFolder
from hubflow.supervision.detached_process import start_detached
from hubflow.supervision.supervisor import job_fingerprint
from hubflow.supervision.upgrades import deployed_file
from tests.support.processes import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
MODULE = "clicks_pipeline"


@pytest.fixture
def job_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A pipeline job ``clicks`` (module ``clicks_pipeline``, files in, parquet out) under tmp_path."""
    (tmp_path / "landing").mkdir()
    (tmp_path / "pipelines").mkdir()
    monkeypatch.setenv(PIPELINES_DIR_ENV, str(tmp_path / "pipelines"))
    _deploy(tmp_path, "commit")
    _write_config(tmp_path)
    _write_registry(tmp_path)
    yield tmp_path
    folder = StatusFolder(str(tmp_path / "status" / "clicks"))
    folder.request_stop("end of test")
    status = folder.status() or {}
    if isinstance(status.get("pid"), int):
        try:
            os.kill(status["pid"], 9)
        except ProcessLookupError:
            pass


def _deploy(base: Path, behaviour: str, note: str = "") -> None:
    (base / "pipelines" / f"{MODULE}.py").write_text(
        f'BEHAVIOUR = "{behaviour}"  {("# " + note) if note else ""}\n\n\n'
        "def run(orders):\n    return orders\n",
        encoding="utf-8",
    )


def _write_config(base: Path, **sinks: Any) -> Path:
    config = {
        "name": "clicks",
        "trigger": {"processingTime": "1 second"},
        "checkpoint_root": str(base / "checkpoints"),
        "status_root": str(base / "status"),
        "sources": {
            "orders": {
                "kind": "files",
                "path": str(base / "landing"),
                "format": "json",
                "schema": "id BIGINT",
            }
        },
        "sinks": {"lake": {"kind": "parquet", "output_path": str(base / "lake")}, **sinks},
    }
    path = base / "clicks.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def _write_registry(base: Path, **keys: Any) -> Path:
    entry = {
        "name": "clicks",
        "application": f"{MODULE}:run",
        "config": str(base / "clicks.yaml"),
        "mode": "streaming",
        "ready_within": "6 seconds",
        "max_upgrade_failures": 2,
        **keys,
    }
    path = base / "registry.yaml"
    path.write_text(yaml.safe_dump({"jobs": [entry]}, sort_keys=False), encoding="utf-8")
    return path


def _job(base: Path) -> RegisteredJob:
    return load_registry(base / "registry.yaml").job("clicks")


def _launcher(base: Path) -> Any:
    def launch(log_path: Path, ship_to: str | None, overrides: LaunchOverrides) -> subprocess.Popen:
        config = overrides.config or base / "clicks.yaml"
        command = [sys.executable, "-m", "tests.support.fake_driver", "--config", str(config)]
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **overrides.environment}
        return start_detached([*command, "--pipeline", f"{MODULE}:run"], log_path, env)

    return launch


def _act(base: Path, action: str = "ensure_running", **options: Any) -> dict[str, Any]:
    lines: list[str] = []
    request = OnCallRequest(
        action,
        who="supervisor (test)",
        source="airflow",
        stop_wait=timedelta(seconds=10),
        start_timeout=timedelta(seconds=30),
        **options,
    )
    oncall = OnCall(
        _job(base),
        request,
        launch=_launcher(base),
        log=lambda message, *args: lines.append(message % args if args else message),
        warn=lambda message, *args: lines.append(message % args if args else message),
    )
    result = oncall.run()
    result["log"] = lines
    return result


def _folder(base: Path) -> StatusFolder:
    return StatusFolder(str(base / "status" / "clicks"))


def _state(base: Path) -> dict[str, Any]:
    return _folder(base).read_json("supervisor.json") or {}


def _starts(base: Path) -> list[str]:
    path = base / "starts.log"
    return path.read_text(encoding="utf-8").split("\n")[:-1] if path.exists() else []


def _batches(base: Path, log: str, checkpoint: Path | None = None) -> list[int]:
    folder = (checkpoint or base / "checkpoints" / "clicks") / log
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else []


def _backups(base: Path) -> list[Path]:
    root = base / "checkpoints" / "_backups" / "clicks"
    return sorted(p for p in root.iterdir() if (p / "_hubflow_backup.json").exists()) if root.is_dir() else []


def _started_v1(base: Path) -> str:
    """Start version 1 (commits batch 0); return its digest."""
    _act(base)
    wait_until(lambda: _batches(base, "commits") == [0], 30, "version 1 commits batch 0")
    return _state(base)["fingerprint"]["digest"]


def test_a_compatible_upgrade_copies_the_checkpoint_and_resumes_it(job_dir: Path) -> None:
    v1 = _started_v1(job_dir)
    pid = _folder(job_dir).status()["pid"]
    assert _folder(job_dir).exists(deployed_file(v1)), "each started version keeps a deployed copy"
    assert _state(job_dir)["plan"] == {
        "sources": {"orders": "files"},
        "sinks": {"lake": f"parquet {job_dir / 'lake'}"},
    }

    _deploy(job_dir, "commit", "version 2")
    result = _act(job_dir)
    state = _state(job_dir)
    v2 = state["fingerprint"]["digest"]
    assert v2 != v1
    assert result["done"][0].startswith("what the job runs changed since it was started"), result
    assert f"upgrade job clicks from version {v1[:12]} to {v2[:12]} (last-state)" in result["done"]
    assert any("it resumes the checkpoint" in line for line in result["done"]), result
    assert (
        result["done"][-1]
        == f"job clicks: upgraded from version {v1[:12]} to {v2[:12]}; the new version is ready"
    )
    assert _folder(job_dir).status()["pid"] != pid, "the new version runs in a new driver"
    assert _batches(job_dir, "commits") == [0, 1], "the new version resumed after batch 0"
    [backup] = _backups(job_dir)
    assert _batches(job_dir, "commits", backup) == [0], "the backup is the checkpoint as version 1 left it"
    assert state["upgrade"]["outcome"] == "ready" and state["upgrade"]["committed_before"] == 0
    assert state["version"]["digest"] == v2 and state["previous_version"]["digest"] == v1

    assert _act(job_dir)["done"] == ["already running; nothing to do"], "an upgrade happens once"
    assert _as_documented(job_dir, result["done"], v1, v2) == _runbook("### Upgrades", 0).splitlines()

    _deploy(job_dir, "commit", "version 3")
    _act(job_dir)
    v3 = _state(job_dir)["fingerprint"]["digest"]
    assert _state(job_dir)["upgrade"]["outcome"] == "ready"
    kept = sorted(p.name for p in (job_dir / "status" / "clicks").glob("version-*.json"))
    assert kept == sorted([deployed_file(v2), deployed_file(v3)]), "only a rollback's targets are kept"


def test_an_incompatible_upgrade_is_refused_and_the_old_version_keeps_running(job_dir: Path) -> None:
    v1 = _started_v1(job_dir)
    pid = _folder(job_dir).status()["pid"]
    _write_config(job_dir, audit={"kind": "parquet", "output_path": str(job_dir / "audit")})

    dry = _act(job_dir, "restart", dry_run=True)
    assert any(line.startswith("would refuse: job clicks: the upgrade from version") for line in dry["done"])
    with pytest.raises(OnCallRefused) as refused:
        _act(job_dir)
    text = str(refused.value)
    assert f"the upgrade from version {v1[:12]} to " in text and "is refused" in text
    assert f"sink audit (parquet {job_dir / 'audit'}) added" in text, text
    assert "upgrade_mode: fresh" in text and "rewind" in text, "the two ways on are named"
    v2 = _state(job_dir)["upgrade"]["after"]
    documented = _runbook("#### A refused upgrade", 0).replace("\n", " ")
    assert _as_documented(job_dir, [text], v1, v2) == [documented]
    assert _folder(job_dir).status()["pid"] == pid and _folder(job_dir).liveness(30).alive
    assert _backups(job_dir) == [], "nothing was backed up or changed"
    assert _state(job_dir)["upgrade"]["outcome"] == "refused"
    entry = read_audit(_folder(job_dir))[-1]
    assert entry.action == "ensure_running" and entry.outcome.startswith("refused: job clicks: the upgrade")
    assert _state(job_dir)["fingerprint"]["digest"] == v1

    again = _act(job_dir)
    assert again["done"][-1] == f"job clicks keeps running version {v1[:12]}", again
    assert read_audit(_folder(job_dir))[-1] == entry, "a run that changes nothing is not in the trail"
    assert _folder(job_dir).status()["pid"] == pid, "the supervisor does not try that version again"

    _write_config(job_dir)  # the change is reverted
    assert _act(job_dir)["done"] == ["already running; nothing to do"]
    assert _state(job_dir)["upgrade"]["outcome"] == "ready", "the failure is over: its alert resolves"


def test_an_on_call_start_of_a_held_job_upgrades_it_and_a_refusal_keeps_the_hold(job_dir: Path) -> None:
    v1 = _started_v1(job_dir)
    _act(job_dir, "stop", reason="deploying")
    _write_config(job_dir, audit={"kind": "parquet", "output_path": str(job_dir / "audit")})
    with pytest.raises(OnCallRefused, match="is refused"):
        _act(job_dir, "start")
    hold = _folder(job_dir).hold()
    assert hold is not None and hold.kind == HoldKind.STOP, "a refused start leaves the job as it was"
    assert not _folder(job_dir).liveness(30).alive and _state(job_dir)["fingerprint"]["digest"] == v1

    _write_config(job_dir)
    _deploy(job_dir, "commit", "version 2")
    started = _act(job_dir, "start")
    assert any(line.startswith("released the hold") for line in started["done"]), started
    assert started["done"][-1].endswith("the new version is ready") and _folder(job_dir).hold() is None


def test_a_version_that_never_commits_is_rolled_back_after_ready_within(job_dir: Path) -> None:
    v1 = _started_v1(job_dir)
    _deploy(job_dir, "hang", "version 2")
    began = time.monotonic()
    with pytest.raises(UpgradeRolledBack) as rolled:
        _act(job_dir)
    assert time.monotonic() - began >= 6, "ready_within is waited out"
    text = str(rolled.value)
    v2 = _state(job_dir)["upgrade"]["after"]
    assert "rolled back because it was not ready within 6 seconds (no batch committed)" in text, text
    assert f"version {v2[:12]} (new) and {v1[:12]} (previous)" in text
    assert _starts(job_dir) == ["commit -", "hang -", "commit -"], (
        "version 1 runs again, from its deployed copy"
    )
    # Batch 1 was planned by version 2 and not committed: kept, so version 1 ran it with those offsets.
    assert "kept the job's query batch 1" in text, text
    wait_until(lambda: _batches(job_dir, "commits") == [0, 1], 30, "version 1 commits batch 1")
    state = _state(job_dir)
    assert state["fingerprint"]["digest"] == v1 and state["upgrade"]["outcome"] == "rolled-back"
    shown = job_version(str(job_dir / "status" / "clicks"))["text"]  # the status page, hubflow status
    assert shown.startswith(f"{v1[:12]} since ") and f"(before: {v2[:12]}, " in shown, shown
    assert f"; upgrade from version {v1[:12]} to {v2[:12]}: rolled-back (since " in shown, shown

    entry = read_audit(_folder(job_dir))[-1]  # the supervisor's run, in the audit trail
    assert entry.action == "ensure_running" and entry.outcome.startswith("failed: UpgradeRolledBack: ")
    assert f"version {v2[:12]} (new) and {v1[:12]} (previous)" in entry.outcome and entry.version == v1[:12]

    kept = _act(job_dir)
    assert kept["done"][-1] == f"job clicks keeps running version {v1[:12]}", kept
    assert _starts(job_dir)[-1] == "commit -" and len(_starts(job_dir)) == 3

    os.kill(_folder(job_dir).status()["pid"], 9)  # version 1 dies while version 2 is still deployed
    wait_until(lambda: not _folder(job_dir).liveness(30).alive, 30, "version 1 is found dead")
    restarted = _act(job_dir)
    assert restarted["done"][-1].startswith("started job clicks"), restarted
    assert _starts(job_dir)[-1] == "commit -" and len(_starts(job_dir)) == 4, "version 1 again, not 2"
    assert _state(job_dir)["fingerprint"]["digest"] == v1


#: ``ready_within`` for the tests that count deaths: two starts of a stand-in driver on a loaded
#: machine can outlast the 6 s of the default test registry, and then lateness decides first.
COUNTED_READY_WITHIN = "5 minutes"


def test_a_version_that_dies_is_retried_then_rolled_back(job_dir: Path) -> None:
    _write_registry(job_dir, ready_within=COUNTED_READY_WITHIN)
    _started_v1(job_dir)
    _deploy(job_dir, "die", "version 2")
    with pytest.raises(UpgradeRolledBack) as rolled:
        _act(job_dir)
    assert "rolled back because it failed 2 times" in str(rolled.value)
    assert _starts(job_dir) == ["commit -", "die -", "die -", "commit -"]
    history = _state(job_dir)["upgrade"]["history"]
    assert len(history) == 2 and all("this version is broken" in line for line in history), history


def test_without_a_deployed_copy_the_rollback_holds_the_job(job_dir: Path) -> None:
    v1 = _started_v1(job_dir)
    Path(_folder(job_dir).path(deployed_file(v1))).unlink()
    _deploy(job_dir, "die", "version 2")
    with pytest.raises(UpgradeRolledBack) as rolled:
        _act(job_dir)
    assert "the previous version cannot be started from here (no deployed copy)" in str(rolled.value)
    hold = _folder(job_dir).hold()
    assert hold is not None and hold.kind == HoldKind.UPGRADE
    assert not _folder(job_dir).liveness(30).alive and _state(job_dir)["upgrade"]["outcome"] == "held"
    assert _batches(job_dir, "commits") == [0], "the checkpoint is version 1's again"


def test_when_the_previous_version_does_not_start_again_the_rollback_holds_the_job(job_dir: Path) -> None:
    v1 = _started_v1(job_dir)
    copy = _folder(job_dir).read_json(deployed_file(v1))
    copy["module_source"] = copy["module_source"].replace('"commit"', '"crash"')  # it broke meanwhile
    _folder(job_dir).write_json(deployed_file(v1), copy)
    _deploy(job_dir, "die", "version 2")
    with pytest.raises(UpgradeRolledBack) as rolled:
        _act(job_dir)
    assert "and the previous version did not start again (job clicks exited with code 1" in str(rolled.value)
    hold = _folder(job_dir).hold()
    assert hold is not None and hold.kind == HoldKind.UPGRADE and "did not start again either" in hold.reason
    assert _state(job_dir)["upgrade"]["outcome"] == "held", "not left in progress"
    assert _starts(job_dir) == ["commit -", "die -", "die -", "crash -"]


def test_fresh_starts_a_new_checkpoint_at_upgrade_from(job_dir: Path) -> None:
    _started_v1(job_dir)
    _write_registry(job_dir, upgrade_mode="fresh", upgrade_from="2026-11-28T06:00:00Z")
    _write_config(job_dir, audit={"kind": "parquet", "output_path": str(job_dir / "audit")})
    result = _act(job_dir)
    assert any(
        "fresh: a new checkpoint, the Event Hubs sources at 2026-11-28T06:00:00Z" in line
        for line in result["done"]
    )
    assert _starts(job_dir) == ["commit -", "commit 2026-11-28T06:00:00Z"], "the position reaches the driver"
    [backup] = _backups(job_dir)
    assert _batches(job_dir, "commits", backup) == [0], "the old checkpoint is set aside whole"
    assert _batches(job_dir, "commits") == [0], "the new checkpoint starts at batch 0"
    assert _state(job_dir)["upgrade"]["outcome"] == "ready"


def test_a_supervisor_killed_during_an_upgrade_is_followed_by_one_that_judges_it(job_dir: Path) -> None:
    _started_v1(job_dir)
    _deploy(job_dir, "hang", "version 2")
    child = subprocess.Popen(
        [sys.executable, "-c", _SUPERVISE_IN_CHILD, str(job_dir)],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        cwd=REPO_ROOT,
    )
    try:
        wait_until(
            lambda: (_state(job_dir).get("upgrade") or {}).get("outcome") == "in-progress", 60, "upgrade"
        )
        wait_until(lambda: _starts(job_dir)[-1:] == ["hang -"], 60, "version 2 started")
    finally:
        child.kill()
        child.wait()
    assert _state(job_dir)["upgrade"]["outcome"] == "in-progress", "killed before it judged"
    time.sleep(6)  # ready_within passes while nobody supervises
    with pytest.raises(UpgradeRolledBack):
        _act(job_dir)
    assert _starts(job_dir)[-1] == "commit -" and _state(job_dir)["upgrade"]["outcome"] == "rolled-back"


def _runbook(heading: str, block: int) -> str:
    """The ``block``-th ``text`` block of docs/operations.md's section ``heading``."""
    doc = (REPO_ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    section = doc.split(f"\n{heading}\n", 1)[1].split("\n#", 1)[0]
    return re.findall(r"```text\n(.*?)\n```", section, re.S)[block]


def _as_documented(base: Path, lines: list[str], v1: str, v2: str) -> list[str]:
    """``lines`` with this test's versions, paths, times and ages as docs/operations.md writes them."""
    replacements = [
        (v1[:12], "3f2a9c1b0d4e"),
        (v2[:12], "9a8b7c6d5e4f"),
        (f"parquet {base / 'audit'}", "delta /lake/audit"),
        (str(base / "checkpoints"), "/lake/_checkpoints"),
    ]
    documented = []
    for line in lines:
        for actual, shown in replacements:
            line = line.replace(actual, shown)
        line = re.sub(r"/_backups/clicks/\d{8}T\d{6}Z", "/_backups/clicks/20261128T060000Z", line)
        documented.append(re.sub(r"heartbeat \d+ s ago", "heartbeat 0 s ago", line))
    return documented


_SUPERVISE_IN_CHILD = """
import sys
from pathlib import Path
sys.path.insert(0, ".")
import os
os.environ["HUBFLOW_PIPELINES_DIR"] = str(Path(sys.argv[1]) / "pipelines")
from tests.control.test_upgrade import _act
_act(Path(sys.argv[1]))
"""


def test_the_plan_and_failure_records_are_json(job_dir: Path) -> None:
    _started_v1(job_dir)
    json.dumps(_state(job_dir))  # what the status page and hubflow status read


def _kill_driver(base: Path) -> None:
    os.kill(_folder(base).status()["pid"], 9)
    wait_until(lambda: not _folder(base).liveness(30).alive, 30, "the driver is found dead")


def test_the_previous_version_after_a_rollback_restarts_with_the_backoff(job_dir: Path) -> None:
    """Flink's way: the rollback starts the previous version at once; its later deaths follow the
    restart backoff (and count towards quarantine) like any dead job's, the new version deployed
    meanwhile is not a change to start at once."""
    _write_registry(job_dir, restart_backoff="1 hour", max_restart_backoff="2 hours", quarantine_after=3)
    v1 = _started_v1(job_dir)
    _deploy(job_dir, "die", "version 2")
    with pytest.raises(UpgradeRolledBack):
        _act(job_dir)
    assert _starts(job_dir) == ["commit -", "die -", "die -", "commit -"], "the rollback starts v1 at once"

    _kill_driver(job_dir)  # the first death after the rollback: started at once, as for any job
    counted = len(_folder(job_dir).read_json("restarts.json")["restarts"])
    first = _act(job_dir)
    assert first["done"][-1].startswith("started job clicks"), first
    assert len(_starts(job_dir)) == 5 and _state(job_dir)["fingerprint"]["digest"] == v1
    assert len(_folder(job_dir).read_json("restarts.json")["restarts"]) == counted + 1, "a restart"

    _kill_driver(job_dir)  # the second: inside the backoff's pause, nothing starts
    waiting = _act(job_dir)
    assert len(_starts(job_dir)) == 5, waiting
    assert waiting.get("next_start_at") is not None, waiting
    assert ") is 1 h: the next start is due at " in waiting["done"][-1], waiting


def _supervise_until(base: Path, done: Any, what: str) -> dict[str, Any]:
    """Supervisor runs, 0.3 s apart, until one's last line satisfies ``done`` (runs inside the
    backoff's pause start nothing)."""
    results: list[dict[str, Any]] = []

    def ran() -> bool:
        results.append(_act(base))
        if done(results[-1]["done"][-1]):
            return True
        time.sleep(0.3)
        return False

    wait_until(ran, 60, what)
    return results[-1]


def test_a_rolled_back_version_is_quarantined_when_the_previous_one_keeps_dying(job_dir: Path) -> None:
    """The rollback's version followed to its quarantine through real drivers and supervisor runs:
    the first death restarts at once, the next after the backoff's pause, the third is held; the
    version whose upgrade failed is never started again by the supervisor."""
    _write_registry(
        job_dir,
        restart_backoff="1 second",
        max_restart_backoff="2 seconds",
        healthy_after="1 hour",
        quarantine_after=2,
    )
    v1 = _started_v1(job_dir)
    _deploy(job_dir, "die", "version 2")
    with pytest.raises(UpgradeRolledBack):
        _act(job_dir)
    assert _starts(job_dir) == ["commit -", "die -", "die -", "commit -"]
    restarts = _folder(job_dir).read_json("restarts.json")["restarts"]

    for death in (1, 2):  # restarted by the supervisor: at once, then once the 1 s pause is over
        _kill_driver(job_dir)
        started = _supervise_until(
            job_dir, lambda line: line.startswith("started job clicks"), f"start {death}"
        )
        assert _starts(job_dir)[-1] == "commit -", f"death {death}: version 1 again, not the rolled-back one"
    assert len(_folder(job_dir).read_json("restarts.json")["restarts"]) == len(restarts) + 2, started

    _kill_driver(job_dir)  # the third death: its streak has quarantine_after restarts
    held = _supervise_until(job_dir, lambda line: "for a quarantine" in line, "the quarantine")
    assert held["done"][-1].startswith("held job clicks by supervisor (test) at "), held
    hold = _folder(job_dir).hold()
    assert hold is not None and hold.kind == HoldKind.QUARANTINE
    assert "crash-looping: restarted 2 times since " in hold.reason and "(quarantine_after: 2)" in hold.reason
    assert len(_starts(job_dir)) == 6 and not _folder(job_dir).liveness(30).alive

    again = _act(job_dir)  # held: reported, nothing started, the failed upgrade stays recorded
    assert again["done"][-1].startswith("job clicks is held by supervisor (test)"), again
    assert len(_starts(job_dir)) == 6
    state = _state(job_dir)
    assert state["fingerprint"]["digest"] == v1 and state["upgrade"]["outcome"] == "rolled-back"
    assert [e.action for e in read_audit(_folder(job_dir))][-3:] == ["ensure_running"] * 3


def test_a_version_ready_while_idle_that_dies_at_its_first_batch_is_rolled_back(job_dir: Path) -> None:
    """Ready while idle is on probation: the new version's first batch (once data comes) fails it
    (a state schema change, which Spark checks only when it plans a batch), and the next supervisor
    run judges the upgrade again instead of restarting that version by the backoff: started again
    (max_upgrade_failures), then rolled back, the planned batch kept and run by version 1."""
    _write_registry(job_dir, ready_within=COUNTED_READY_WITHIN)
    v1 = _started_v1(job_dir)
    _deploy(job_dir, "idle_then_die", "version 2")
    upgraded = _act(job_dir)
    v2 = _state(job_dir)["fingerprint"]["digest"]
    assert upgraded["done"][-1] == (
        f"job clicks: upgraded from version {v1[:12]} to {v2[:12]}; the new version is ready while idle "
        "(nothing to read): until it commits its first batch, its death is a failed upgrade"
    ), upgraded
    assert _state(job_dir)["upgrade"]["first_batch_pending"] is True
    shown = job_version(str(job_dir / "status" / "clicks"))["text"]  # the status page, hubflow status
    assert shown.endswith(
        f"; upgrade from version {v1[:12]} to {v2[:12]}: ready while idle, on probation until its first batch"
    ), shown
    assert _act(job_dir)["done"] == ["already running; nothing to do"], "alive and idle: left alone"

    (job_dir / "landing" / "a.json").write_text('{"id": 1}\n', encoding="utf-8")  # data comes
    wait_until(lambda: not _folder(job_dir).liveness(30).alive, 30, "version 2 dies at its first batch")
    assert _batches(job_dir, "offsets") == [0, 1] and _batches(job_dir, "commits") == [0]

    dry = _act(job_dir, dry_run=True)  # says what the next run does, and changes nothing
    assert dry["done"] == [
        f"would start version {v2[:12]} of job clicks again: the new version, ready while idle, died "
        "before committing its first batch (failure 1 of max_upgrade_failures 2)"
    ], dry
    assert len(_starts(job_dir)) == 2 and _state(job_dir)["upgrade"]["first_batch_pending"] is True

    with pytest.raises(UpgradeRolledBack) as rolled:
        _act(job_dir)
    text = str(rolled.value)
    assert (
        f"the upgrade from version {v1[:12]} to {v2[:12]} was rolled back because it failed 2 times" in text
    )
    assert "ready while idle (nothing to read), then died at its first batch, before committing it" in text
    assert "[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] Provided key schema does not match" in text, text
    assert "kept the job's query batch 1" in text, text
    assert _starts(job_dir) == ["commit -", "idle_then_die -", "idle_then_die -", "commit -"]
    wait_until(lambda: _batches(job_dir, "commits") == [0, 1], 30, "version 1 commits the planned batch 1")
    state = _state(job_dir)
    assert state["fingerprint"]["digest"] == v1 and state["upgrade"]["outcome"] == "rolled-back"
    assert _act(job_dir)["done"][-1] == f"job clicks keeps running version {v1[:12]}"


def test_a_dry_run_says_a_death_on_probation_at_the_last_allowed_failure_rolls_back(job_dir: Path) -> None:
    _write_registry(job_dir, max_upgrade_failures=1)
    v1 = _started_v1(job_dir)
    _deploy(job_dir, "idle_then_die", "version 2")
    _act(job_dir)
    v2 = _state(job_dir)["fingerprint"]["digest"]
    (job_dir / "landing" / "a.json").write_text('{"id": 1}\n', encoding="utf-8")
    wait_until(lambda: not _folder(job_dir).liveness(30).alive, 30, "version 2 dies at its first batch")
    dry = _act(job_dir, dry_run=True)
    assert dry["done"] == [
        f"would roll back job clicks from version {v1[:12]} to {v2[:12]}: the new version, ready while "
        "idle, died before committing its first batch (failure 1 of max_upgrade_failures 1)"
    ], dry
    assert _state(job_dir)["upgrade"]["first_batch_pending"] is True and len(_starts(job_dir)) == 2
    with pytest.raises(UpgradeRolledBack):  # and the real run does
        _act(job_dir)
    assert _starts(job_dir)[-1] == "commit -"


def test_the_probation_ends_with_the_first_committed_batch(job_dir: Path) -> None:
    """A version ready while idle that then commits its first batch is upgraded for good: a later
    death is restarted like any job's, not judged as a failed upgrade."""
    _started_v1(job_dir)
    _deploy(job_dir, "idle_then_commit", "version 2")
    assert _act(job_dir)["done"][-1].endswith("its death is a failed upgrade")
    (job_dir / "landing" / "a.json").write_text('{"id": 1}\n', encoding="utf-8")
    wait_until(lambda: _batches(job_dir, "commits") == [0, 1], 30, "version 2 commits its first batch")
    assert _act(job_dir)["done"] == ["already running; nothing to do"]
    record = _state(job_dir)["upgrade"]
    assert record["outcome"] == "ready" and record["first_batch_pending"] is False, record

    _kill_driver(job_dir)
    restarted = _act(job_dir)
    assert restarted["done"][-1].startswith("started job clicks"), restarted
    assert _starts(job_dir)[-1] == "idle_then_commit -" and _state(job_dir)["upgrade"]["outcome"] == "ready"


def _deployed_digest(base: Path) -> str:
    job = _job(base)
    return job_fingerprint(job.config_path(), job.application)["digest"]


def test_a_version_deployed_during_a_probation_waits_and_a_death_rolls_back_to_the_stable_one(
    job_dir: Path,
) -> None:
    """Version 3 deployed while version 2 is on probation: the supervisor does not judge version 3
    against version 2 (a refusal would have replaced the probation's record) but waits; version 2
    dying at its first batch is then rolled back to version 1 at once (version 2 is not deployed any
    more, so it is not started again), and the next run upgrades version 1 to version 3."""
    v1 = _started_v1(job_dir)
    _deploy(job_dir, "idle_then_die", "version 2")
    _act(job_dir)
    v2 = _state(job_dir)["fingerprint"]["digest"]
    _deploy(job_dir, "commit", "version 3")
    _write_config(job_dir, audit={"kind": "parquet", "output_path": str(job_dir / "audit")})  # a new sink
    v3 = _deployed_digest(job_dir)
    waiting = (
        f"version {v3[:12]} of job clicks waits: version {v2[:12]}, ready while idle, is on probation until "
        "it commits its first batch (then the supervisor upgrades to the new one; if it dies first, it is "
        "rolled back)"
    )
    assert _act(job_dir, dry_run=True)["done"] == [waiting]
    assert not _state(job_dir)["upgrade"].get("waiting"), "a dry run records nothing"
    assert _act(job_dir)["done"] == [waiting]
    record = _state(job_dir)["upgrade"]
    assert (record["after"], record["outcome"], record["first_batch_pending"]) == (v2, "ready", True), record
    shown = job_version(str(job_dir / "status" / "clicks"))["text"]  # the status page, hubflow status
    assert shown.endswith(
        f"; upgrade from version {v1[:12]} to {v2[:12]}: ready while idle, on probation until its first "
        f"batch; version {v3[:12]}, deployed since, waits for it"
    ), shown
    assert len(_starts(job_dir)) == 2

    (job_dir / "landing" / "a.json").write_text('{"id": 1}\n', encoding="utf-8")  # data comes
    wait_until(lambda: not _folder(job_dir).liveness(30).alive, 30, "version 2 dies at its first batch")
    why = (
        "the new version, ready while idle, died before committing its first batch, and version "
        f"{v3[:12]} is deployed since: that version is not started again; the supervisor upgrades the "
        "previous one to the deployed version next"
    )
    assert _act(job_dir, dry_run=True)["done"] == [
        f"would roll back job clicks from version {v1[:12]} to {v2[:12]}: {why}"
    ]
    with pytest.raises(UpgradeRolledBack) as rolled:
        _act(job_dir)
    assert f"the upgrade from version {v1[:12]} to {v2[:12]} was rolled back because {why}" in str(
        rolled.value
    )
    assert "kept the job's query batch 1" in str(rolled.value)
    assert _starts(job_dir) == ["commit -", "idle_then_die -", "commit -"], "version 1 again, version 2 not"
    wait_until(lambda: _batches(job_dir, "commits") == [0, 1], 30, "version 1 commits the planned batch 1")

    # Next run: version 1 to version 3, judged against version 1's plan (version 3 adds a sink: refused).
    with pytest.raises(OnCallRefused) as refused:
        _act(job_dir)
    assert f"from version {v1[:12]} to {v3[:12]}" in str(refused.value), refused.value
    assert _state(job_dir)["fingerprint"]["digest"] == v1 and _folder(job_dir).liveness(30).alive


def test_a_probation_that_ends_lets_the_version_deployed_meanwhile_upgrade(job_dir: Path) -> None:
    v1 = _started_v1(job_dir)
    _deploy(job_dir, "idle_then_commit", "version 2")
    _act(job_dir)
    v2 = _state(job_dir)["fingerprint"]["digest"]
    _deploy(job_dir, "commit", "version 3")
    v3 = _deployed_digest(job_dir)
    assert _act(job_dir)["done"][0].startswith(f"version {v3[:12]} of job clicks waits: version {v2[:12]}")

    (job_dir / "landing" / "a.json").write_text('{"id": 1}\n', encoding="utf-8")
    wait_until(lambda: _batches(job_dir, "commits") == [0, 1], 30, "version 2 commits its first batch")
    upgraded = _act(job_dir)  # the probation ends, and version 2 is upgraded to version 3 in the same run
    assert upgraded["done"][-1].startswith(f"job clicks: upgraded from version {v2[:12]} to {v3[:12]}"), (
        upgraded
    )
    assert _state(job_dir)["fingerprint"]["digest"] == v3 and v1 != v3
