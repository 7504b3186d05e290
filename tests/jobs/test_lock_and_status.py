"""The status folder: atomic status.json, the single-instance lock and its stale takeover."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hubflow_jobs.lock import JobLock, LockHeldError
from hubflow_jobs.runner import clear_leftover_stop_marker
from hubflow_jobs.status import LOCK_FILE, JobStatus, StatusFolder
from hubflow_jobs.stop import StopRequest


def _dead_pid() -> int:
    """The pid of a process that has just exited (so nothing runs under it)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _write_lock(folder: StatusFolder, **fields) -> None:
    document = {
        "job": "job_a",
        "pid": 1,
        "host": socket.gethostname(),
        "started_at": "2026-01-01T00:00:00+00:00",
    }
    document.update(fields)
    (Path(folder.root) / LOCK_FILE).write_text(json.dumps(document))


def test_status_json_is_rewritten_whole_and_states_only_move_forward(tmp_path: Path) -> None:
    folder = StatusFolder(str(tmp_path / "status" / "job_a"))
    status = JobStatus(folder, "job_a")
    status.update(state="running", query_id="q1")
    first = json.loads((tmp_path / "status" / "job_a" / "status.json").read_text())
    assert first["state"] == "running" and first["job"] == "job_a" and first["query_id"] == "q1"
    assert {"pid", "host", "heartbeat", "run_id", "last_progress", "exception"} <= set(first)
    status.update(state="stopping")
    status.update(state="running")  # a late progress event must not undo the stop
    time.sleep(0.01)
    status.heartbeat()
    second = json.loads((tmp_path / "status" / "job_a" / "status.json").read_text())
    assert second["state"] == "stopping"
    assert second["heartbeat"] > first["heartbeat"]
    assert [p.name for p in (tmp_path / "status" / "job_a").iterdir()] == ["status.json"], (
        "no temp files left"
    )
    with pytest.raises(ValueError, match="unknown job state"):
        status.update(state="sleeping")


def test_second_instance_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    folder = StatusFolder(str(tmp_path / "job_a"))
    first = JobLock(folder, "job_a", stale_after_seconds=60)
    first.acquire()
    second = JobLock(folder, "job_a", stale_after_seconds=60)
    with pytest.raises(LockHeldError) as refused:
        second.acquire()
    message = str(refused.value)
    assert "job job_a is already running" in message
    assert f"pid {first._document['pid']} on host {socket.gethostname()}" in message
    assert "STOP" in message and "SIGTERM" in message
    first.release()
    assert not folder.exists(LOCK_FILE)
    second.acquire()
    assert second.held


def test_lock_of_a_dead_pid_on_this_host_is_taken_over(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = StatusFolder(str(tmp_path / "job_a"))
    dead = _dead_pid()
    _write_lock(folder, pid=dead, heartbeat=datetime.now(UTC).isoformat())
    lock = JobLock(folder, "job_a", stale_after_seconds=600)
    with caplog.at_level(logging.WARNING, logger="hubflow_jobs.lock"):
        lock.acquire()
    assert lock.held
    assert f"taking over stale lock of job job_a (pid {dead} on host" in caplog.text
    assert f"pid {dead} is not running on this host" in caplog.text
    assert json.loads((Path(folder.root) / LOCK_FILE).read_text())["token"] == lock.token


def test_lock_with_an_old_heartbeat_on_another_host_is_taken_over(tmp_path: Path, caplog) -> None:
    folder = StatusFolder(str(tmp_path / "job_a"))
    old = (datetime.now(UTC) - timedelta(minutes=5)).isoformat()
    _write_lock(folder, host="some-other-host", pid=4242, heartbeat=old)
    with caplog.at_level(logging.WARNING, logger="hubflow_jobs.lock"):
        JobLock(folder, "job_a", stale_after_seconds=120).acquire()
    assert "heartbeat is 300 s old (stale after 120 s)" in caplog.text


def test_fresh_lock_on_another_host_is_respected(tmp_path: Path) -> None:
    folder = StatusFolder(str(tmp_path / "job_a"))
    _write_lock(folder, host="some-other-host", pid=4242, heartbeat=datetime.now(UTC).isoformat())
    with pytest.raises(LockHeldError, match="pid 4242 on host some-other-host"):
        JobLock(folder, "job_a", stale_after_seconds=120).acquire()


def test_refresh_notices_a_takeover_and_release_keeps_the_new_owner(tmp_path: Path) -> None:
    folder = StatusFolder(str(tmp_path / "job_a"))
    lock = JobLock(folder, "job_a", stale_after_seconds=120)
    lock.acquire()
    before = json.loads((Path(folder.root) / LOCK_FILE).read_text())["heartbeat"]
    assert lock.refresh()
    assert json.loads((Path(folder.root) / LOCK_FILE).read_text())["heartbeat"] >= before
    _write_lock(folder, pid=4242, token="someone-else", heartbeat=datetime.now(UTC).isoformat())
    assert not lock.refresh()
    assert not lock.held
    lock.release()
    assert json.loads((Path(folder.root) / LOCK_FILE).read_text())["token"] == "someone-else"


def test_stop_marker_requests_a_stop_once(tmp_path: Path) -> None:
    folder = StatusFolder(str(tmp_path / "job_a"))
    stop = StopRequest()
    assert not stop.check_marker(folder)
    (Path(folder.root) / "STOP").touch()
    assert stop.check_marker(folder)
    stop.request("later reason")
    assert "stop marker" in (stop.reason or "")


def test_a_leftover_stop_marker_is_cleared_before_the_next_run(tmp_path: Path, caplog) -> None:
    folder = StatusFolder(str(tmp_path / "job_a"))
    assert not clear_leftover_stop_marker(folder)
    (Path(folder.root) / "STOP").touch()
    with caplog.at_level(logging.WARNING, logger="hubflow_jobs"):
        assert clear_leftover_stop_marker(folder)
    assert not folder.exists("STOP")
    assert "left for an earlier run" in caplog.text


def test_lock_file_is_created_exclusively(tmp_path: Path) -> None:
    """Two starters racing past the 'is there a lock?' check: only one creates the file."""
    folder = StatusFolder(str(tmp_path / "job_a"))
    first, second = JobLock(folder, "job_a", 60), JobLock(folder, "job_a", 60)
    assert first._create()
    assert not second._create()
    assert json.loads((Path(folder.root) / LOCK_FILE).read_text())["token"] == first.token


def test_a_zombie_driver_does_not_hold_the_lock() -> None:
    from hubflow_jobs.lock import pid_alive

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    wait_until_exited = time.monotonic() + 10
    while time.monotonic() < wait_until_exited:
        with open(f"/proc/{child.pid}/stat") as handle:
            if handle.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.05)
    assert not pid_alive(child.pid), "exited but not yet reaped"
    assert pid_alive(os.getpid())
    child.wait()
    assert not pid_alive(child.pid)
