"""Which process holds a lease or wrote status.json (``hubflow.status.process_identity``): a pid is
judged only in its own process space (host name, pid namespace, boot) and only together with its start time.

Real processes throughout: a ``sleep`` whose pid a document claims with another start time (the pid
reused after the driver exited), a holder in another pid namespace under the same host name
(``unshare --pid``, root only: containers of one compose service sharing a host name), and a
process whose name holds spaces and parentheses.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hubflow.status import (
    LEASE_FILE,
    STATUS_FILE,
    Lease,
    LeaseHeldError,
    LeaseTiming,
    StatusFolder,
    utc_now,
)
from hubflow.status.process_identity import (
    is_running,
    process_fields,
    same_process_space,
    start_ticks,
    this_host,
    this_process,
    this_space,
)
from tests.support.processes import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]


def _sleep(tmp_path: Path, name: str = "sleep") -> subprocess.Popen:
    """A ``sleep 300`` whose process name (comm) is ``name`` (it is started through a symlink)."""
    link = tmp_path / name
    link.symlink_to(shutil.which("sleep"))
    return subprocess.Popen([str(link), "300"])


def _stopped(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(10)


def test_a_process_is_its_pid_and_start_time_even_when_its_name_holds_spaces_and_parentheses(
    tmp_path: Path,
) -> None:
    name = "a b) c"
    process = _sleep(tmp_path, name)
    try:
        wait_until(lambda: Path(f"/proc/{process.pid}/comm").read_text().strip() == name, 10, "the exec")
        stat = Path(f"/proc/{process.pid}/stat").read_text()
        expected = int(stat.split(f"({name}) ", 1)[1].split()[19])  # field 22, the name known
        assert int(stat.split()[21]) != expected, "a split on spaces would read another field"
        assert start_ticks(process.pid) == expected
        document = {**this_space(), **process_fields(process.pid)}
        assert document["pid_start_ticks"] == expected
        assert same_process_space(document) is True and is_running(document) is True
    finally:
        _stopped(process)
    assert is_running(document) is False, "exited"
    assert start_ticks(process.pid) is None


def test_this_process_names_its_space_and_start_time() -> None:
    me = this_process()
    assert me["pid"] == os.getpid() and me["host"] == this_host()
    assert me["pid_namespace"].startswith("pid:[") and len(me["boot_id"]) == 36
    assert is_running(me) is True
    older = {key: value for key, value in me.items() if key in ("pid", "host")}
    assert same_process_space(older) is None and is_running(older) is None, "an older document: no judgement"


def test_a_lease_whose_pid_now_names_another_process_is_taken_over_and_that_process_left_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The holder exited and its pid was reused: same host, same space, a running pid, another start
    time. The holder is dead (taken over at once), and the process now under that pid is untouched."""
    unrelated = _sleep(tmp_path)
    try:
        wait_until(lambda: start_ticks(unrelated.pid) is not None, 10, "the sleep to start")
        claimed = {
            **this_space(),
            "pid": unrelated.pid,
            "pid_start_ticks": start_ticks(unrelated.pid) - 1,
            "started_at": "2026-01-01T00:00:00+00:00",
        }
        folder = StatusFolder(str(tmp_path / "job_a"))
        folder.write_json(LEASE_FILE, claimed)
        folder.write_json(STATUS_FILE, {**claimed, "state": "running", "heartbeat": utc_now()})
        live = folder.liveness(120)
        assert not live.alive and live.running_here is False
        assert f"its driver pid {unrelated.pid} on this host is another process now" in live.reason

        lease = Lease(folder, "job_a", LeaseTiming(duration=600, refresh_interval=10, fence_after=300))
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="hubflow.status"):
            lease.acquire()
        assert time.monotonic() - started < 5, "a holder known to be gone needs no waiting"
        assert f"taking over the lease of job job_a from pid {unrelated.pid} on host" in caplog.text
        assert "is another process now" in caplog.text
        assert json.loads((tmp_path / "job_a" / LEASE_FILE).read_text())["pid"] == os.getpid()
        assert unrelated.poll() is None, "the unrelated process was not touched"
        lease.release()
    finally:
        _stopped(unrelated)


def _can_unshare_pid() -> str | None:
    """Why a process cannot be started in another pid namespace here, or None when it can."""
    if os.geteuid() != 0:
        return "needs root to create a pid namespace"
    if not shutil.which("unshare"):
        return "needs unshare (util-linux)"
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, text=True, check=False
    )
    return None if probe.returncode == 0 else f"the kernel refuses a pid namespace: {probe.stderr.strip()}"


#: Run in another pid namespace (same host name): write this process's identity to argv[1], wait.
NAMESPACED_HOLDER = """
import json, pathlib, sys, time
from hubflow.status.process_identity import this_process
pathlib.Path(sys.argv[1] + ".tmp").write_text(json.dumps(this_process()))
pathlib.Path(sys.argv[1] + ".tmp").rename(sys.argv[1])
time.sleep(300)
"""


def test_a_holder_in_another_pid_namespace_under_the_same_host_name_is_never_probed_here(
    tmp_path: Path,
) -> None:
    """Two containers of one compose service may share a host name, each with its own pids: the
    holder's pid (1 in its namespace) says nothing here (our pid 1 runs), so only its lease's expiry
    counts."""
    refused = _can_unshare_pid()
    if refused:
        pytest.skip(refused)
    identity_file = tmp_path / "identity.json"
    command = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
    command += [sys.executable, "-c", NAMESPACED_HOLDER, str(identity_file)]
    holder = subprocess.Popen(command, env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "jobs")})
    try:
        wait_until(identity_file.exists, 30, "the namespaced holder to write its identity")
        identity = json.loads(identity_file.read_text())
    finally:
        _stopped(holder)
    assert identity["host"] == this_host(), "same host name"
    assert identity["pid_namespace"] != this_space()["pid_namespace"]
    assert identity["pid"] <= 2 and os.path.exists(f"/proc/{identity['pid']}"), "its pid runs here too"
    assert same_process_space(identity) is False
    assert is_running(identity) is None, "cannot be judged from here"

    folder = StatusFolder(str(tmp_path / "job_a"))
    now = utc_now()
    folder.write_json(LEASE_FILE, {**identity, "started_at": now, "renewed_at": now})
    timing = LeaseTiming(duration=1.5, refresh_interval=0.2, fence_after=1.0)
    lease = Lease(folder, "job_a", timing)
    started = time.monotonic()
    try:
        lease.acquire()
    except LeaseHeldError as exc:
        pytest.fail(f"the holder's pid was probed here: {exc}")
    assert time.monotonic() - started >= timing.duration, "taken over only after its lease expired"
    lease.release()
    folder.write_json(STATUS_FILE, {**identity, "state": "running", "heartbeat": utc_now()})
    live = folder.liveness(120)
    assert live.alive, "judged by its heartbeat"
    assert live.running_here is None, "not by whatever runs under its pid here"
