"""The job↔supervisor contract (``hubflow.status``): status.json, conditional storage, the
lease (concurrent starters, takeover only after expiry, a stale holder fenced), markers, the hold,
the kill request obeyed from another host, and the driver log copied into the status folder.

Processes that must look like another host run in their own UTS namespace (``unshare --uts``,
root only) with another host name: the same code path as a driver on another machine.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hubflow import status as contract
from hubflow.config import RuntimeConfig
from hubflow.status import (
    LEASE_FILE,
    JobState,
    JobStatus,
    Lease,
    LeaseHeldError,
    LeaseTiming,
    StatusFolder,
    pid_alive,
    process_identity,
)
from hubflow.status.exit_codes import EXIT_KILLED, EXIT_LEASE_LOST, EXIT_LOCKED, EXIT_OK
from hubflow.storage.document_stores import FsspecStore, LocalStore
from hubflow_jobs.runtime.runner import clear_leftover_requests
from hubflow_jobs.runtime.stop import StopRequest
from hubflow_jobs.runtime.watchdog import Watchdog
from tests.support.processes import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
HOLDER = Path(__file__).with_name("lease_holder.py")


def _dead_process() -> dict[str, object]:
    """The identity fields of a process of this space that has just exited (pid, start time, space)."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    fields = {**process_identity.process_fields(process.pid), **process_identity.this_space()}
    process.kill()
    process.wait()
    return fields


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "jobs")])}


def _can_fake_another_host() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    result = subprocess.run(["unshare", "--uts", "true"], capture_output=True, check=False)
    return result.returncode == 0


another_host = pytest.mark.skipif(
    not _can_fake_another_host(), reason="needs root and unshare to run a process under another host name"
)


def _holder(status_dir: Path, timing: tuple[float, float, float], *extra: str, host: str | None = None):
    """Start tests/jobs/lease_holder.py (on ``host``: in a UTS namespace with that host name)."""
    command = [sys.executable, str(HOLDER), str(status_dir), "--timing", *map(str, timing), *extra]
    if host:
        script = 'hostname "$0" && exec "$@"'
        command = ["unshare", "--uts", "sh", "-c", script, host, *command]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env())


def _read_until(process: subprocess.Popen, prefix: str | tuple[str, ...], timeout: float) -> str:
    """The first output line of ``process`` starting with ``prefix`` (or one of them)."""
    found: list[str] = []

    def read() -> None:
        for line in process.stdout:
            if line.startswith(prefix):
                found.append(line.strip())
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    assert found, f"no {prefix!r} line within {timeout:.0f} s"
    return found[0]


# status.json ---------------------------------------------------------------------------------------


def test_status_json_is_rewritten_whole_and_states_only_move_forward(tmp_path: Path) -> None:
    folder = StatusFolder(str(tmp_path / "status" / "job_a"))
    status = JobStatus(folder, "job_a")
    status.update(state=JobState.RUNNING, query_id="q1")
    first = json.loads((tmp_path / "status" / "job_a" / "status.json").read_text())
    assert first["state"] == "running" and first["job"] == "job_a" and first["query_id"] == "q1"
    assert {"pid", "host", "heartbeat", "run_id", "last_progress", "exception", "input_rows"} <= set(first)
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
    with pytest.raises(ValueError, match="unknown job state"):
        status.update(state=JobState.HELD)  # derived by supervisors, never written by the job


# Storage primitives --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["local", "fsspec-fallback"])
def test_conditional_writes_of_a_store(tmp_path: Path, kind: str) -> None:
    store = LocalStore(str(tmp_path / "f")) if kind == "local" else FsspecStore(f"memory://{tmp_path}/f")
    first = store.create("doc", b"one")
    assert first is not None
    assert store.create("doc", b"two") is None, "create-if-absent refuses an existing name"
    assert store.read("doc").data == b"one"
    assert store.replace("doc", b"two", "not-the-version") is None
    second = store.replace("doc", b"two", first)
    assert second is not None and second != first and store.read("doc").version == second
    assert store.replace("doc", b"three", first) is None, "a stale version no longer matches"
    assert not store.delete("doc", first)
    assert store.delete("doc", second) and store.read("doc") is None
    assert store.replace("doc", b"x", second) is None, "nothing to replace"
    store.write("doc", b"whole")
    assert store.read("doc").data == b"whole" and store.names() == {"doc"} | (
        {LocalStore.LOCK_FILE} if kind == "local" else set()
    )


def test_contract_imports_neither_spark_nor_airflow() -> None:
    probe = (
        "import sys, hubflow_jobs, hubflow.status, hubflow_jobs.runtime.driver_log; "
        "print(sorted(m for m in ('pyspark', 'airflow', 'py4j') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=_env())
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# The lease -----------------------------------------------------------------------------------------


def test_of_eight_concurrent_starters_exactly_one_wins(tmp_path: Path) -> None:
    status_dir, go = tmp_path / "status" / "job_a", tmp_path / "go"
    starters = [_holder(status_dir, (30, 1, 20), "--go", str(go)) for _ in range(8)]
    try:
        for starter in starters:
            _read_until(starter, "READY", 60)
        go.touch()
        outcomes = [_read_until(starter, ("ACQUIRED", "REFUSED"), 60) for starter in starters]
        winners = [s for s, line in zip(starters, outcomes, strict=True) if line.startswith("ACQUIRED")]
        assert len(winners) == 1, outcomes
        losers = [s for s in starters if s not in winners]
        assert [s.wait(60) for s in losers] == [EXIT_LOCKED] * 7
        assert all("is already running: pid" in line for line in outcomes if line.startswith("REFUSED"))
        owner = json.loads((status_dir / LEASE_FILE).read_text())
        assert owner["pid"] == winners[0].pid
        StatusFolder(str(status_dir)).request_stop("test over")
        assert winners[0].wait(30) == EXIT_OK
        assert not (status_dir / LEASE_FILE).exists(), "released on a clean exit"
    finally:
        for starter in starters:
            if starter.poll() is None:
                starter.kill()
                starter.wait()


def test_on_this_host_a_dead_holder_is_replaced_at_once_and_a_live_one_refuses(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = StatusFolder(str(tmp_path / "job_a"))
    holder = _dead_process()
    dead = holder["pid"]
    (tmp_path / "job_a").mkdir()
    (tmp_path / "job_a" / LEASE_FILE).write_text(
        json.dumps({**holder, "started_at": "2026-01-01T00:00:00+00:00"})
    )
    timing = LeaseTiming(duration=600, refresh_interval=10, fence_after=300)
    lease = Lease(folder, "job_a", timing)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="hubflow.status"):
        lease.acquire()
    assert time.monotonic() - started < 5, "a dead pid on this host needs no waiting"
    assert f"taking over the lease of job job_a from pid {dead} on host" in caplog.text
    assert f"pid {dead} is not running on this host" in caplog.text
    second = Lease(folder, "job_a", timing)
    with pytest.raises(LeaseHeldError) as refused:
        second.acquire()
    message = str(refused.value)
    assert f"job job_a is already running: pid {os.getpid()} on host {contract.this_host()}" in message
    assert "STOP" in message and "600 s" in message
    lease.release()
    assert not folder.exists(LEASE_FILE)
    second.acquire()
    assert second.held


def test_a_lease_from_another_host_is_taken_only_after_it_stays_unchanged_for_its_duration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = StatusFolder(str(tmp_path / "job_a"))
    # The holder renews every 0.2 s; 5 s of lease leave a loaded machine room to show it alive.
    timing = LeaseTiming(duration=5.0, refresh_interval=0.2, fence_after=3.0)
    monkeypatch.setattr(process_identity, "this_host", lambda: "host-a")
    holder = Lease(folder, "job_a", timing)
    holder.acquire()
    renewing = threading.Event()

    def renew_while_set() -> None:
        while renewing.is_set():
            assert holder.renew()
            time.sleep(timing.refresh_interval)

    monkeypatch.setattr(process_identity, "this_host", lambda: "host-b")
    renewing.set()
    renewer = threading.Thread(target=renew_while_set, daemon=True)
    renewer.start()
    taker = Lease(folder, "job_a", timing)
    started = time.monotonic()
    with pytest.raises(LeaseHeldError, match="renewed while we watched"):
        taker.acquire()
    assert time.monotonic() - started < timing.duration, "a renewing holder is recognised as alive"

    renewing.clear()  # the holder's host goes silent (frozen, cut off): it renews no more
    renewer.join()
    started = time.monotonic()
    taker.acquire()
    assert time.monotonic() - started >= timing.duration, "taken over only after a whole lease duration"
    assert json.loads((tmp_path / "job_a" / LEASE_FILE).read_text())["host"] == "host-b"
    assert not holder.renew(), "the stale holder's refresh fails"
    assert holder.lost_to["holder"] == taker.token
    holder.release()
    assert taker.renew(), "and it leaves the new holder's lease alone"


@another_host
def test_a_frozen_holder_on_another_host_is_taken_over_after_the_lease_and_fences_itself(
    tmp_path: Path,
) -> None:
    status_dir = tmp_path / "status" / "job_a"
    duration, refresh, fence = 6.0, 0.5, 4.0
    holder = _holder(status_dir, (duration, refresh, fence), host="other-host")
    taker = None
    try:
        _read_until(holder, "ACQUIRED", 60)
        assert json.loads((status_dir / LEASE_FILE).read_text())["host"] == "other-host"
        holder.send_signal(signal.SIGSTOP)  # its host freezes: no renewal, no signal reaches us
        started = time.monotonic()
        taker = _holder(status_dir, (duration, refresh, fence))
        acquired = _read_until(taker, "ACQUIRED", 60)
        assert time.monotonic() - started >= duration
        assert float(acquired.split()[1]) >= duration, "the taker watched the lease for its duration"
        holder.send_signal(signal.SIGCONT)  # the host comes back
        assert holder.wait(15) == EXIT_LEASE_LOST
        output = holder.stdout.read()
        assert "exiting hard (exit code 5)" in output
        assert "could not renew its lease" in output or "lost its lease" in output
        assert taker.poll() is None, taker.stdout.read()
        assert json.loads((status_dir / LEASE_FILE).read_text())["pid"] == taker.pid
    finally:
        for process in (holder, taker):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.kill()
                process.wait()


@another_host
def test_stop_from_a_host_that_cannot_signal_the_driver_ends_in_an_obeyed_kill_request(
    tmp_path: Path,
) -> None:
    from hubflow.operations.job_control import JobControl

    status_dir = tmp_path / "status" / "job_a"
    job = _holder(status_dir, (30, 1, 20), "--ignore-stop", host="other-host")
    try:
        _read_until(job, "ACQUIRED", 60)
        control = JobControl("job_a", str(status_dir))
        wait_until(lambda: control.liveness().alive, 30, "the stand-in driver to report running")
        lines: list[str] = []
        how = control.stop(timedelta(seconds=1), lines.append, requested_by="tester", poll_seconds=0.1)
        assert how.startswith("killed on request (KILL marker)")
        assert job.wait(30) == EXIT_KILLED
        assert any("KILL request" in line and "other-host" in line for line in lines), lines
        status = json.loads((status_dir / "status.json").read_text())
        assert status["state"] == "stopped" and status["stop_reason"].startswith("killed on request")
        assert "by tester" in status["stop_reason"]
        assert not (status_dir / LEASE_FILE).exists(), "the killed job released its lease"
        assert not control.liveness().alive
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()


def test_a_job_that_cannot_renew_asks_to_stop_then_fences_itself_before_the_lease_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = StatusFolder(str(tmp_path / "job_a"))
    runtime = RuntimeConfig.model_validate(
        {
            "poll_interval": "50 ms",
            "lease_duration": "3 s",
            "lease_refresh_interval": "200 ms",
            "lease_fence_after": "1 s",
        }
    )
    lease = Lease(folder, "job_a", runtime.lease_timing())
    lease.acquire()
    stop, fenced = StopRequest(), []
    watchdog = Watchdog(
        folder,
        JobStatus(folder, "job_a"),
        stop,
        runtime,
        lambda r, c: fenced.append((r, c, time.monotonic())),
        lease,
    )

    def unreachable(*_args: object) -> None:
        raise OSError("storage unreachable")

    monkeypatch.setattr(lease.store, "replace", unreachable)
    started = lease.last_success
    watchdog.start()
    try:
        wait_until(lambda: stop.requested, 10, "a stop request")
        asked = time.monotonic()
        wait_until(lambda: bool(fenced), 10, "the fence")
    finally:
        watchdog.close()
    assert "could not renew its lease" in (stop.reason or "")
    reason, code, at = fenced[0]
    assert 0.5 <= asked - started <= at - started, "a graceful stop first, at half lease_fence_after"
    assert code == EXIT_LEASE_LOST and "lease_fence_after 1 s" in reason
    assert 1.0 <= at - started < 3.0, "fenced after lease_fence_after, before lease_duration"


# Markers, hold, restarts ---------------------------------------------------------------------------


def test_markers_the_hold_and_liveness(tmp_path: Path) -> None:
    folder = StatusFolder(str(tmp_path / "job_a"))
    assert not folder.liveness(120).alive and folder.liveness(120).shown_state is None
    status = JobStatus(folder, "job_a")
    status.update(state=JobState.RUNNING)
    assert folder.liveness(120).alive
    hold = folder.place_hold("disk full on the sink", by="alice (run manual__1)")
    folder.request_stop("on-call stop", by="alice")
    assert folder.markers_present() == {"HOLD", "STOP"}
    live = folder.liveness(120)
    assert live.alive and live.shown_state == JobState.RUNNING, "held but still running: not yet held"
    status.update(state=JobState.STOPPED)
    live = folder.liveness(120)
    assert not live.alive and live.shown_state == JobState.HELD
    assert live.hold == hold and "by alice (run manual__1) at" in live.reason
    assert "disk full on the sink" in live.reason
    assert folder.marker("STOP").by == "alice"
    (tmp_path / "job_a" / "KILL").touch()  # an empty marker (by hand) counts too
    assert folder.marker("KILL") is not None and folder.marker("KILL").by is None
    assert clear_leftover_requests(folder) == ["KILL", "STOP"]
    assert folder.markers_present() == {"HOLD"}, "the hold outlives requests meant for one run"
    assert folder.release_hold() == hold and folder.hold() is None


def test_a_driver_whose_lease_expired_is_dead_before_its_heartbeat_times_out(tmp_path: Path) -> None:
    """A driver on a host that vanished (docker kill of its worker) is judged by its lease: dead once
    the lease is older than lease_duration, not only after the supervisor's heartbeat timeout."""
    folder = StatusFolder(str(tmp_path / "job_a"))
    JobStatus(folder, "job_a").update(state=JobState.RUNNING, host="gone-host", pid=4242)
    lease = {"pid": 4242, "host": "gone-host", "lease_duration_seconds": 60.0}
    now = datetime.now(UTC)
    folder.write_json(LEASE_FILE, {**lease, "renewed_at": (now - timedelta(seconds=30)).isoformat()})
    assert folder.liveness(120, now).alive, "a lease renewed within its duration: still running"
    folder.write_json(LEASE_FILE, {**lease, "renewed_at": (now - timedelta(seconds=61)).isoformat()})
    live = folder.liveness(120, now)
    assert not live.alive and "lease was last renewed 61 s ago (lease_duration 60 s)" in live.reason
    # A new driver waiting out that old lease is judged by its own heartbeat, not the old lease.
    JobStatus(folder, "job_a").update(state=JobState.STARTING, host="new-host", pid=7)
    assert folder.liveness(120, now + timedelta(seconds=1)).alive


def test_restarts_are_counted_within_a_window(tmp_path: Path) -> None:
    folder = StatusFolder(str(tmp_path / "job_a"))
    now = datetime.now(UTC)
    for minutes in (90, 30, 5):
        folder.record_restart(now - timedelta(minutes=minutes))
    assert folder.restarts_within(3600, now) == 2
    assert len(folder.read_json("restarts.json")["restarts"]) == 3


def test_a_zombie_driver_is_not_alive() -> None:
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


# The driver log ------------------------------------------------------------------------------------


def test_the_driver_log_is_copied_into_the_status_folder_while_the_driver_runs_and_at_its_end(
    tmp_path: Path,
) -> None:
    """A remote status folder gets the log through hubflow_jobs.runtime.driver_log (here a file:// URL)."""
    local_log, gate = tmp_path / "worker" / "driver.log", tmp_path / "gate"
    local_log.parent.mkdir()
    status_url = f"file://{tmp_path}/status/job_a"
    driver = (
        "import pathlib, sys, time\n"
        "print('first line', flush=True)\n"
        f"while not pathlib.Path({str(gate)!r}).exists(): time.sleep(0.05)\n"
        "print('last line', flush=True)\n"
        "sys.exit(3)\n"
    )
    command = [sys.executable, "-m", "hubflow_jobs.runtime.driver_log", "--status-dir", status_url]
    command += ["--local-log", str(local_log), "--copy-every", "0.2", "--", sys.executable, "-c", driver]
    with open(local_log, "ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=_env())
    copied = tmp_path / "status" / "job_a" / "driver.log"
    try:
        wait_until(lambda: copied.exists() and "first line" in copied.read_text(), 30, "the first copy")
        assert "last line" not in copied.read_text()
        gate.touch()
        assert process.wait(30) == 3, "the driver's exit code is passed on"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert copied.read_text() == local_log.read_text()
    assert copied.read_text().splitlines()[-1] == "last line"


def test_a_driver_log_copy_to_a_non_local_filesystem_keeps_its_tail(tmp_path: Path) -> None:
    from hubflow_jobs.runtime.driver_log import copy_log

    local_log = tmp_path / "driver.log"
    local_log.write_text("".join(f"line {n}\n" for n in range(1000)))
    folder = StatusFolder(f"memory://{tmp_path}/status/job_a")
    assert isinstance(folder.store, FsspecStore) and not folder.is_local
    assert copy_log(local_log, folder)
    assert folder.driver_log_tail(1 << 20) == local_log.read_bytes()
    folder.store.upload(local_log, "short.log", max_bytes=20)
    assert folder.store.read("short.log").data == local_log.read_bytes()[-20:]
    assert not copy_log(tmp_path / "missing.log", folder)
