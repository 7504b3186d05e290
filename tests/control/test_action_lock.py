"""The per-job action lock (``hubflow.status.action_lock``) on a real local status folder: one holder
at a time across processes, a refusal that names the action in progress, who and since when, a
bounded wait, renewal, and takeover of a lock whose holder is gone or whose expiry has passed.
The same lock on Azure Blob (Azurite) is in tests/azure/test_status_folder_on_blob.py."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from datetime import timedelta
from itertools import pairwise
from pathlib import Path

import pytest

from hubflow.status import StatusFolder
from hubflow.status.action_lock import (
    ActionInProgress,
    ActionLock,
    action_in_progress,
    refuse_if_in_progress,
)
from hubflow.status.names import ACTION_LOCK_FILE


def _lock(folder: StatusFolder, action: str = "rewind", by: str = "alice", **kwargs) -> ActionLock:
    return ActionLock(folder, "clicks", action, by, "airflow", **kwargs)


def test_a_second_action_is_refused_naming_the_action_in_progress_who_and_when(tmp_path: Path) -> None:
    folder = StatusFolder(str(tmp_path / "clicks"))
    first = _lock(folder)
    with first.held():
        holder = action_in_progress(folder)
        assert holder is not None and (holder["action"], holder["by"]) == ("rewind", "alice")
        with pytest.raises(ActionInProgress) as refused:
            _lock(folder, "start", "bob").acquire()
        message = str(refused.value)
        assert message.startswith(f"job clicks: a rewind started by alice (airflow) at {holder['at']}")
        assert "the start is refused" in message and "audit trail" in message
        with pytest.raises(ActionInProgress, match="the backfill is refused"):
            refuse_if_in_progress(folder, "clicks", "backfill")
    assert action_in_progress(folder) is None and not folder.exists(ACTION_LOCK_FILE), "released"
    refuse_if_in_progress(folder, "clicks", "backfill")  # nothing in progress: no refusal
    with _lock(folder, "start", "bob").held():
        assert action_in_progress(folder)["by"] == "bob"


def test_a_waiting_action_takes_the_lock_once_released_and_gives_up_at_its_bound(tmp_path: Path) -> None:
    folder = StatusFolder(str(tmp_path / "clicks"))
    first = _lock(folder)
    first.acquire()
    started = time.monotonic()
    with pytest.raises(ActionInProgress, match=r"refused after a wait of 0:00:01"):
        _lock(folder, "start", "bob").acquire(wait=timedelta(seconds=1))
    assert time.monotonic() - started >= 1.0

    releaser = threading.Timer(1.0, first.release)
    releaser.start()
    second = _lock(folder, "start", "bob")
    second.acquire(wait=timedelta(minutes=2))  # returns once the first is released, long before the bound
    releaser.join()
    assert second.is_held and action_in_progress(folder)["by"] == "bob"


def test_a_lock_past_its_expiry_or_of_a_gone_holder_is_taken_over_and_its_old_holder_keeps_off(
    tmp_path: Path,
) -> None:
    folder = StatusFolder(str(tmp_path / "clicks"))
    stale = _lock(folder, ttl=timedelta(seconds=1))
    stale.acquire()
    time.sleep(1.2)
    assert action_in_progress(folder) is None, "expired"
    fresh = _lock(folder, "start", "bob")
    fresh.acquire()
    assert not stale.renew(), "the expired holder learns it lost the lock"
    stale.release()  # and does not remove the new holder's lock
    assert action_in_progress(folder)["by"] == "bob"
    fresh.release()

    # A holder that ran in this process space and is gone (killed with its task) is taken over at once.
    script = (
        "import sys; from hubflow.status import StatusFolder; "
        "from hubflow.status.action_lock import ActionLock; "
        "ActionLock(StatusFolder(sys.argv[1]), 'clicks', 'restart', 'carol', 'cli').acquire()"
    )
    subprocess.run([sys.executable, "-c", script, folder.url], check=True, timeout=120)
    left = json.loads(Path(folder.path(ACTION_LOCK_FILE)).read_text())
    assert left["by"] == "carol", "the process exited without releasing it"
    assert action_in_progress(folder) is None, "its holder is gone"
    with _lock(folder, "start", "bob").held():
        assert action_in_progress(folder)["by"] == "bob"


def test_the_holder_renews_its_lock_while_it_works(tmp_path: Path) -> None:
    folder = StatusFolder(str(tmp_path / "clicks"))
    lock = _lock(folder, ttl=timedelta(seconds=1.5))
    with lock.held():
        first = action_in_progress(folder)["expires_at"]
        time.sleep(2.5)  # past the first expiry: renewed every 0.5 s meanwhile
        holder = action_in_progress(folder)
        assert holder is not None and holder["expires_at"] > first


def test_of_many_processes_starting_at_once_never_two_hold_the_lock(tmp_path: Path) -> None:
    folder = StatusFolder(str(tmp_path / "clicks"))
    script = (
        "import sys, time; from hubflow.status import StatusFolder; "
        "from hubflow.status.action_lock import ActionInProgress, ActionLock\n"
        "lock = ActionLock(StatusFolder(sys.argv[1]), 'clicks', 'start', sys.argv[2], 'cli')\n"
        "try:\n"
        "    lock.acquire()\n"
        "except ActionInProgress:\n"
        "    print('refused'); sys.exit(0)\n"
        "held = time.time(); time.sleep(2); released = time.time()\n"
        "lock.release(); print('held', held, released)\n"
    )
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", script, folder.url, f"user{n}"], stdout=subprocess.PIPE, text=True
        )
        for n in range(4)
    ]
    outputs = [run.communicate(timeout=180)[0].split() for run in runs]
    held = sorted((float(out[1]), float(out[2])) for out in outputs if out[0] == "held")
    assert held and len(held) + sum(out == ["refused"] for out in outputs) == 4, outputs
    # A process starting after a release (a slow start on a loaded machine) may hold it in turn,
    # but the times each held it never overlap.
    assert all(earlier[1] <= later[0] for earlier, later in pairwise(held)), held
