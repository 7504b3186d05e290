"""The job↔supervisor contract on the real Blob API (Azurite): ``hubflow.status`` on an
``abfs://`` folder uses :class:`~hubflow.storage.blob_document_store.BlobStore`, whose conditions the service
enforces: exactly one of 8 concurrent starters (separate processes) wins, a stale holder's renewal and
release fail, readers never see a half-written status.json, STOP/HOLD/KILL requests round-trip."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from hubflow.config import RuntimeConfig
from hubflow.status import LEASE_FILE, JobState, JobStatus, Lease, StatusFolder
from hubflow.status.exit_codes import EXIT_LOCKED, EXIT_OK
from hubflow.storage.azure import env_for
from hubflow.storage.blob_api import BlobObjects
from hubflow.storage.blob_document_store import BlobStore
from hubflow.storage.document_stores import store_for
from hubflow_jobs.runtime.runner import clear_leftover_requests
from tests.support.azurite import Azurite

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
HOLDER = REPO_ROOT / "tests" / "jobs" / "lease_holder.py"


@pytest.fixture
def folder_url(azurite: Azurite, blob_access: Any) -> str:
    return azurite.url(azurite.new_container("status"), "status/job_a")


def test_an_azure_status_folder_gets_the_blob_store_and_its_conditions_hold(folder_url: str) -> None:
    store = store_for(folder_url)
    assert isinstance(store, BlobStore) and isinstance(StatusFolder(folder_url).store, BlobStore)
    first = store.create("doc", b"one")
    assert first is not None and store.read("doc").version == first, "the version is the ETag"
    assert store.create("doc", b"two") is None, "If-None-Match: * refuses an existing blob"
    assert store.replace("doc", b"two", '"0x0"') is None
    second = store.replace("doc", b"two", first)
    assert second is not None and second != first
    assert store.replace("doc", b"three", first) is None, "If-Match on a stale ETag fails"
    assert not store.delete("doc", first) and store.read("doc").data == b"two"
    assert store.delete("doc", second) and store.read("doc") is None
    assert store.replace("doc", b"x", second) is None, "nothing to replace"
    store.write("doc", b"whole")
    store.append_line("log", "a", rotate_above=4)
    store.append_line("log", "b", rotate_above=4)
    store.append_line("log", "c", rotate_above=4)  # 4 bytes: not above, appended
    store.append_line("log", "d", rotate_above=4)  # 6 bytes: rotated first
    assert store.read("log").data == b"d\n" and store.read("log.1").data == b"a\nb\nc\n"
    assert store.names() == {"doc", "log", "log.1"}
    assert store.read_tail("log.1", 2) == b"c\n" and store.size("log.1") == 6


def _holder(url: str, go: Path, access: Any) -> subprocess.Popen:
    env = {
        **os.environ,
        **env_for([access]),
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "jobs")]),
    }
    command = [sys.executable, str(HOLDER), url, "--timing", "30", "1", "20", "--go", str(go)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def _read_until(process: subprocess.Popen, prefixes: tuple[str, ...], timeout: float) -> str:
    found: list[str] = []

    def read() -> None:
        for line in process.stdout:
            if line.startswith(prefixes):
                found.append(line.strip())
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    assert found, f"no {prefixes!r} line within {timeout:.0f} s"
    return found[0]


def test_of_eight_concurrent_starters_on_blob_exactly_one_wins(
    folder_url: str, blob_access: Any, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    starters = [_holder(folder_url, go, blob_access) for _ in range(8)]
    try:
        for starter in starters:
            _read_until(starter, ("READY",), 120)
        go.touch()
        outcomes = [_read_until(starter, ("ACQUIRED", "REFUSED"), 120) for starter in starters]
        winners = [s for s, line in zip(starters, outcomes, strict=True) if line.startswith("ACQUIRED")]
        assert len(winners) == 1, outcomes
        losers = [s for s in starters if s not in winners]
        assert [s.wait(60) for s in losers] == [EXIT_LOCKED] * 7
        folder = StatusFolder(folder_url)
        assert folder.read_json(LEASE_FILE)["pid"] == winners[0].pid
        folder.request_stop("test over", by="pytest")
        assert winners[0].wait(60) == EXIT_OK
        assert folder.read_json(LEASE_FILE) is None, "released on a clean exit"
        assert folder.status()["state"] == "stopped"
    finally:
        for starter in starters:
            if starter.poll() is None:
                starter.kill()
                starter.wait()


def test_a_stale_holder_can_neither_renew_nor_release(folder_url: str) -> None:
    timing = RuntimeConfig().lease_timing()
    folder = StatusFolder(folder_url)
    stale = Lease(folder, "job_a", timing)
    stale.acquire()
    assert stale.renew(), "the holder renews while its ETag matches"
    # Another instance takes the lease over (as after lease_duration without renewal): a new ETag.
    current = folder.store.read(LEASE_FILE)
    taken = json.dumps({"job": "job_a", "holder": "new", "pid": 1, "host": "elsewhere"}).encode()
    assert folder.store.replace(LEASE_FILE, taken, current.version) is not None
    assert not stale.renew(), "If-Match on the old ETag fails: the stale holder learns it lost"
    assert stale.lost_to["holder"] == "new"
    stale.held, stale._version = True, current.version  # even if it still believed it held it
    stale.release()
    assert folder.read_json(LEASE_FILE)["holder"] == "new", "a stale release leaves the new lease alone"


def test_readers_never_see_a_half_written_status(folder_url: str) -> None:
    folder = StatusFolder(folder_url)
    status = JobStatus(folder, "job_a")
    status.update(state=JobState.RUNNING)
    stop, seen, bad = threading.Event(), set(), []

    def read() -> None:
        while not stop.is_set():
            data = folder.store.read("status.json")
            try:
                seen.add(json.loads(data.data)["note_id"] if b"note_id" in data.data else -1)
            except ValueError as exc:
                bad.append(f"{exc}: {data.data[:80]!r}")

    readers = [threading.Thread(target=read) for _ in range(3)]
    for reader in readers:
        reader.start()
    try:
        for note_id in range(20):  # documents of 0.1-1 MB
            status.update(note_id=note_id, padding="x" * (100_000 * (1 + note_id % 10)))
    finally:
        stop.set()
        for reader in readers:
            reader.join()
    assert not bad, bad[:3]
    assert len(seen) > 3, "the readers overlapped the writes"
    assert folder.status()["note_id"] == 19


def test_stop_hold_and_kill_requests_on_blob(folder_url: str) -> None:
    folder = StatusFolder(folder_url)
    JobStatus(folder, "job_a").update(state=JobState.RUNNING)
    hold = folder.place_hold("disk full on the sink", by="alice")
    folder.request_stop("on-call stop", by="alice")
    folder.request_kill("stuck", by="bob", target="pid 7")
    assert folder.markers_present() == {"HOLD", "STOP", "KILL"}
    assert folder.marker("KILL").by == "bob" and folder.hold() == hold
    BlobObjects().write(f"{folder_url}/STOP", b"")  # an empty marker (by hand) counts too
    assert folder.marker("STOP") is not None and folder.marker("STOP").by is None
    assert clear_leftover_requests(folder) == ["KILL", "STOP"]
    assert folder.markers_present() == {"HOLD"}, "the hold outlives requests meant for one run"
    assert folder.release_hold() == hold and folder.hold() is None


def test_audit_appends_from_four_processes_on_blob_lose_no_entry(
    folder_url: str, blob_access: Any, tmp_path: Path
) -> None:
    """The audit trail's append is a replace-if-unchanged on the ETag (``If-Match``): writers that
    lose a race read again and retry, so every entry of every writer lands, in its order."""
    from tests.control.test_audit import assert_every_entry_landed, concurrent_appends

    env = {
        **os.environ,
        **env_for([blob_access]),
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "control")]),
    }
    attempts = concurrent_appends(folder_url, tmp_path / "go", writers=4, count=25, env=env)
    assert_every_entry_landed(StatusFolder(folder_url), writers=4, count=25)
    assert attempts >= 100, "one conditional write per entry at least"


def test_the_action_lock_on_blob_refuses_a_second_action_and_expires(folder_url: str) -> None:
    """One action at a time on a Blob status folder: the lock is created ``If-None-Match: *``, a
    second action is refused naming the first, an expired lock is taken over on its ETag and its
    old holder can neither renew nor remove the new one."""
    from datetime import timedelta

    from hubflow.status.action_lock import ActionInProgress, ActionLock, action_in_progress

    folder = StatusFolder(folder_url)
    first = ActionLock(folder, "job_a", "rewind", "alice", "airflow", ttl=timedelta(seconds=1))
    first.acquire()
    with pytest.raises(ActionInProgress, match="job job_a: a rewind started by alice"):
        ActionLock(folder, "job_a", "start", "bob", "cli").acquire()
    second = ActionLock(folder, "job_a", "start", "bob", "cli")
    second.acquire(wait=timedelta(seconds=30))  # the first expires after 1 s and is taken over
    assert not first.renew()
    first.release()
    assert action_in_progress(folder)["by"] == "bob"
    second.release()
    assert action_in_progress(folder) is None
