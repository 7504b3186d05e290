"""A rewind's hold is its own, and a rewind never moves a live checkpoint.

No Spark and no hub: a real lease holder (tests/jobs/lease_holder.py, the real lease and watchdog)
stands in for a driver that a supervisor starts at the worst moment, and writes the checkpoint as
Spark would while it holds the lease.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from hubflow.checkpoints.backups import BackupError, backup_checkpoint
from hubflow.operations.job_control import JobControl
from hubflow.operations.rewind import REWIND_HOLD_REASON, RewindError, rewind_job
from hubflow.registry import RegisteredJob
from hubflow.status import LEASE_FILE, HoldKind
from tests.control.test_rewind import ENV_VAR, _old_checkpoint
from tests.jobs.helpers import EmulatedHub, eventhubs_config, write_config
from tests.support.processes import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
HOLDER = REPO_ROOT / "tests" / "jobs" / "lease_holder.py"
#: lease_duration, lease_refresh_interval, lease_fence_after of the stand-in driver (seconds).
TIMING = ("30", "0.5", "20")


def _job(tmp_path: Path) -> tuple[RegisteredJob, JobControl]:
    """Job ``telemetry`` with a checkpoint of batches 6 (committed) and 7 (planned) on hub ``hub``."""
    config = eventhubs_config(tmp_path, EmulatedHub("hub", "unused", 2), ENV_VAR, name="telemetry")
    job = RegisteredJob(
        name="telemetry",
        application="eventhubs_to_lake",
        config=str(write_config(tmp_path / "telemetry.yaml", config)),
        mode="streaming",
    )
    _old_checkpoint(tmp_path)
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "backup").rename(job.paths.checkpoint_location)
    return job, JobControl(job.name, job.paths.status_dir)


def _rewind(
    job: RegisteredJob,
    control: JobControl,
    *,
    to: str = '{"0": 5}',
    log: Callable[..., Any] = lambda *args: None,
    start: Callable[[], str] = lambda: "started job telemetry",
    stop_wait: float = 10.0,
    **extra: Any,
) -> dict:
    return rewind_job(
        job,
        control,
        control.liveness(),
        hub="hub",
        latest={"0": 1000, "1": 1000},
        connection_string="",
        to_enqueued_time=None,
        to_sequence_numbers=to,
        dry_run=False,
        who=extra.pop("who", "bob"),
        stop_wait=timedelta(seconds=stop_wait),
        start=start,
        log=log,
        **extra,
    )


def _holder(status_dir: str, *extra: str) -> subprocess.Popen:
    env_path = os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "jobs")])
    return subprocess.Popen(
        [sys.executable, str(HOLDER), status_dir, "--timing", *TIMING, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": env_path},
    )


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _end(process: subprocess.Popen) -> str:
    if process.poll() is None:
        process.kill()
    output, _ = process.communicate(timeout=30)
    return output


def test_a_stop_placed_during_a_rewind_survives_its_end_and_the_job_is_not_started(tmp_path: Path) -> None:
    job, control = _job(tmp_path)
    started: list[str] = []
    stop: list[Any] = []

    def log(message: str, *args: object) -> None:
        if (message % args if args else message).startswith("checkpoint moved to"):
            stop.append(control.folder.place_hold("sink full", by="alice", kind=HoldKind.STOP))

    result = _rewind(job, control, log=log, start=lambda: started.append("start") or "started")
    assert started == [], "the job was held by a stop during the rewind: not started"
    assert control.folder.hold() == stop[0], "the stop survives the rewind's end"
    assert result["held"]["by"] == "alice" and result["held"]["kind"] == "stop"
    assert result["done"][-1].startswith("job telemetry is held by alice for a stop since ")
    assert result["done"][-1].endswith(
        "placed during the rewind: the hold stays and the job is not started; the new checkpoint is in "
        "place for its next start"
    )
    assert (Path(job.paths.checkpoint_location) / "offsets" / "7").exists(), "the new checkpoint is there"


def test_a_rewind_takes_over_another_kind_of_hold_only_with_force(tmp_path: Path) -> None:
    job, control = _job(tmp_path)
    quarantine = control.folder.place_hold("bad events", by="carol", kind=HoldKind.QUARANTINE)
    before = _files(Path(job.paths.checkpoint_location))
    with pytest.raises(RewindError) as refused:
        _rewind(job, control)
    assert str(refused.value) == (
        f"job telemetry is held by carol for a quarantine since {quarantine.at} (bad events); a rewind "
        "replaces only a stop hold: pass force with a reason to take over"
    )
    assert control.folder.hold() == quarantine
    assert _files(Path(job.paths.checkpoint_location)) == before

    result = _rewind(job, control, force=True, reason="producer fixed, replay from 5")
    assert result["done"][0].endswith(
        f"(bob took over the hold of carol for a quarantine since {quarantine.at} (bad events): "
        "producer fixed, replay from 5)"
    )
    assert control.folder.hold() is None and result["done"][-1] == "started job telemetry"


def test_a_supervisor_start_between_the_rewinds_read_and_its_hold_is_stopped_before_the_move(
    tmp_path: Path,
) -> None:
    """The race of issue #47: the rewind reads the job dead, a supervisor starts a driver, then the
    rewind places its hold. The rewind reads liveness again, stops the driver, waits for its lease,
    plans again from the checkpoint the driver left, and only then moves it: every batch the driver
    wrote is in the backup, none lands in the new checkpoint, and the partitions not rewound resume
    exactly after the driver's last commit (nothing read twice, nothing skipped)."""
    job, control = _job(tmp_path)
    checkpoint = Path(job.paths.checkpoint_location)
    place_hold = control.folder.place_hold
    holders: list[subprocess.Popen] = []
    moved_while: list[object] = []

    def start_then_hold(*args: Any, **kwargs: Any) -> Any:
        # The supervisor's start lands here: a real driver takes the lease and writes batches.
        holder = _holder(control.status_dir, "--checkpoint", str(checkpoint), "hub")
        holders.append(holder)
        wait_until(lambda: (checkpoint / "commits" / "10").exists(), 30, "the driver to commit batch 10")
        assert control.folder.read_json(LEASE_FILE) is not None
        return place_hold(*args, **kwargs)

    control.folder.place_hold = start_then_hold  # type: ignore[method-assign]
    lines: list[str] = []

    def log(message: str, *args: object) -> None:
        line = message % args if args else message
        lines.append(line)
        if line.startswith("backing up "):
            moved_while.append((holders[0].poll(), control.folder.read_json(LEASE_FILE)))

    try:
        assert not control.liveness().alive
        result = _rewind(job, control, log=log)
        output = _end(holders[0])
    finally:
        for holder in holders:
            _end(holder)
    assert moved_while == [(0, None)], "the driver had exited and released its lease before the move"
    written = sorted(int(line.split()[1]) for line in output.splitlines() if line.startswith("BATCH "))
    last = written[-1]
    assert written == list(range(7, last + 1)), "batch 7, planned and never committed, again first"
    assert "found: job telemetry was started since it was last read" in " ".join(lines), lines
    assert any(line.startswith("stopped gracefully") for line in result["done"]), result["done"]

    backup = Path(result["backup"])
    assert sorted(int(p.name) for p in (backup / "offsets").iterdir() if p.name.isdigit()) == [
        6,
        *written,
    ], "every batch the driver planned is in the backup"
    assert sorted(int(p.name) for p in (backup / "commits").iterdir() if p.name.isdigit()) == [6, *written]
    assert set(_files(checkpoint)) == {
        *(f"{log}/{batch}" for log in ("commits", "offsets") for batch in (last - 1, last)),
        "metadata",
    }, "the seeded batch and the one before it, which Spark reads back when it resumes"
    seeded = (checkpoint / "offsets" / str(last)).read_text().split("\n")[2]
    end = 10 * (last + 1)
    assert json.loads(seeded) == {"hub": {"0": 5, "1": end}}, "partition 1 resumes after the last commit"
    assert control.folder.hold() is None and result["done"][-1] == "started job telemetry"


def test_a_rewind_never_moves_a_checkpoint_whose_lease_is_still_held(tmp_path: Path) -> None:
    """The driver's status looks dead (its heartbeat too old for this supervisor) but it still
    renews its lease and ignores the stop: the rewind waits ``stop_wait`` for the lease, then fails
    naming the holder; the checkpoint is untouched and the rewind's hold stays."""
    job, control = _job(tmp_path)
    control.heartbeat_timeout = timedelta(0)  # every heartbeat is too old: the job "looks" dead
    checkpoint = Path(job.paths.checkpoint_location)
    before = _files(checkpoint)
    holder = _holder(control.status_dir, "--ignore-stop")
    try:
        wait_until(lambda: control.folder.read_json(LEASE_FILE) is not None, 30, "the lease to be taken")
        assert not control.liveness().alive
        with pytest.raises(RewindError) as failed:
            _rewind(job, control, stop_wait=1.5)
        assert holder.poll() is None
    finally:
        _end(holder)
    message = str(failed.value)
    assert message.startswith(f"job telemetry: cannot rewind: pid {holder.pid} on host ")
    assert "after a wait of 2 s: a driver of job telemetry may still be writing its checkpoint" in message
    assert "The checkpoint was not touched and the rewind's hold stays" in message
    assert _files(checkpoint) == before
    hold = control.folder.hold()
    assert hold is not None and hold.kind == "rewind" and hold.reason == REWIND_HOLD_REASON


def test_a_backup_refuses_while_a_driver_holds_the_lease(tmp_path: Path) -> None:
    job, control = _job(tmp_path)
    checkpoint = Path(job.paths.checkpoint_location)
    before = _files(checkpoint)
    holder = _holder(control.status_dir)
    try:
        wait_until(lambda: control.folder.read_json(LEASE_FILE) is not None, 30, "the lease to be taken")
        with pytest.raises(BackupError) as refused:
            backup_checkpoint(str(checkpoint), status_dir=control.status_dir)
        assert _files(checkpoint) == before
        assert f"checkpoint {checkpoint} is in use: pid {holder.pid} on host " in str(refused.value)
        assert "Stop the job first (on-call stop)" in str(refused.value)
        control.folder.request_stop("test over")
        holder.wait(30)
    finally:
        _end(holder)
    assert backup_checkpoint(str(checkpoint), status_dir=control.status_dir) is not None, "stopped: free"
