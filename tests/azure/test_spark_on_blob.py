"""Spark itself on Blob (Azurite, hadoop-azure's ABFS driver on the Blob endpoint): a file-to-Delta
stream whose landing folder (``cleanSource=archive``), checkpoint, Delta table and status folder all
live in one container; its driver is killed at a random moment after its first batch, and a rerun
finishes: every event is in the table exactly once, every landing file is in landing or the archive
exactly once, and hubflow's archive, inspector and status folder work on the same URLs."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from hubflow.checkpoints.inspector import Verdict, inspect_checkpoint
from hubflow.operations.archive import archive_processed_files
from hubflow.status import StatusFolder
from hubflow.storage.azure import env_for
from tests.support.azurite import Azurite

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
FILES, EVENTS_PER_FILE = 6, 5


def _child(azurite: Azurite, mode: str, urls: dict[str, str]) -> subprocess.Popen:
    env = {
        **os.environ,
        **env_for([azurite.access()]),
        "PYTHONPATH": os.pathsep.join(str(REPO_ROOT / p) for p in ("", "jobs", "plugins")),
        "PYTHONUNBUFFERED": "1",
    }
    args = [urls[k] for k in ("landing", "checkpoint", "archive", "table", "status")]
    return subprocess.Popen(
        [sys.executable, "-m", "tests.azure.stream_on_blob_child", mode, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO_ROOT,
        start_new_session=True,  # its own process group: the kill takes the JVM with it
    )


def _lines(process: subprocess.Popen, out: list[str]) -> threading.Thread:
    def read() -> None:
        for line in process.stdout:
            out.append(line.rstrip())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return reader


def _wait_for(process: subprocess.Popen, out: list[str], prefix: str, seconds: float) -> None:
    """Wait until the child prints a line starting with ``prefix``; fail if it dies or ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    while not any(line.startswith(prefix) for line in out):
        assert process.poll() is None, f"child exited before {prefix}:\n" + "\n".join(out[-40:])
        assert time.monotonic() < deadline, f"no {prefix} within {seconds:.0f} s:\n" + "\n".join(out[-40:])
        time.sleep(0.2)


def _blob_names(container: Any, prefix: str) -> list[str]:
    return [
        b.name
        for b in container.list_blobs(name_starts_with=prefix, include=["metadata"])
        if (b.metadata or {}).get("hdi_isfolder") != "true" and b.name.endswith(".json")
    ]


def test_a_file_to_delta_stream_on_blob_keeps_every_event_once_across_a_driver_kill(
    azurite: Azurite, blob_access: Any
) -> None:
    from azure.storage.blob import ContainerClient

    name = azurite.new_container("spark")
    container = ContainerClient.from_connection_string(azurite.connection_string, name)
    urls = {k: azurite.url(name, k) for k in ("landing", "checkpoint", "archive", "table")}
    urls["status"] = azurite.url(name, "status/orders")
    expected = list(range(FILES * EVENTS_PER_FILE))
    for f in range(FILES):
        rows = "".join(json.dumps({"id": f * EVENTS_PER_FILE + i}) + "\n" for i in range(EVENTS_PER_FILE))
        container.upload_blob(f"landing/part-{f}.json", rows.encode())

    streaming, out = _child(azurite, "stream", urls), []
    reader = _lines(streaming, out)
    try:
        _wait_for(streaming, out, "STARTED", seconds=600)  # the JVM's start-up, however long it takes
        _wait_for(streaming, out, "COMMITTED", seconds=120)  # one batch, timed from the query's start
        time.sleep(random.uniform(0.0, 3.0))  # somewhere in a later batch (or between batches)
    finally:
        os.killpg(streaming.pid, signal.SIGKILL)
        streaming.wait()
        reader.join(10)

    finishing, out2 = _child(azurite, "finish", urls), []
    reader = _lines(finishing, out2)
    assert finishing.wait(600) == 0, "\n".join(out2[-60:])
    reader.join(10)
    ids = json.loads(next(line for line in out2 if line.startswith("IDS "))[4:])
    assert ids == expected, "every event exactly once in the Delta table"

    landing, archived = _blob_names(container, "landing/"), _blob_names(container, "archive/")
    moved = sorted(n.rsplit("/", 1)[-1] for n in landing + archived)
    assert moved == sorted(f"part-{f}.json" for f in range(FILES)), "each file in landing or archive, once"

    result = archive_processed_files(urls["checkpoint"], urls["landing"], urls["archive"], log=lambda s: None)
    assert not result.errors and not result.conflicts, result
    assert _blob_names(container, "landing/") == [], "hubflow archived what Spark had not yet"
    assert len(_blob_names(container, "archive/")) == FILES

    report = inspect_checkpoint(urls["checkpoint"], stalled_after=timedelta(hours=1))
    assert report.verdict == Verdict.HEALTHY, report.reason
    # One file per file-source log entry (maxFilesPerTrigger 1), so the committed entry is the last
    # file's. Batch ids can be one fewer than files: a kill between the source's log entry and the
    # offsets log leaves an entry that the rerun's first batch plans together with the next file.
    assert [log.committed_log_offset for log in report.file_source_logs] == [FILES - 1], report
    assert StatusFolder(urls["status"]).status()["state"] == "stopped"
