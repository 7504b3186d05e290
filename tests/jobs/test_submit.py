"""files_to_lake as a real ``spark-submit`` process: a dead holder's lease taken over, second
instance refused, graceful stop by the STOP marker and by SIGTERM to spark-submit, a kill request
ending the driver hard, failure reason on the last line."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from hubflow.status import pid_alive, process_identity
from hubflow.status.exit_codes import EXIT_FAILED, EXIT_KILLED, EXIT_LOCKED, EXIT_OK
from tests.support.processes import wait_until

from .helpers import (
    landing_config,
    last_log_line,
    log_ids,
    read_lake,
    read_status,
    spark_submit,
    write_config,
    write_json_landing_file,
)

pytestmark = pytest.mark.integration


def _streaming_config(base: Path, files: int) -> tuple[Path, set[int]]:
    config = landing_config(
        base,
        trigger={"availableNow": False, "processingTime": "1 second"},
        source={"max_files_per_trigger": 1},
    )
    ids: set[int] = set()
    for index in range(files):
        ids |= write_json_landing_file(base / "landing", f"f{index}.json", index * 100, good=5, bad=1)
    return write_config(base / "job.yaml", config), ids


def _wait(process: subprocess.Popen, log: Path, timeout: float = 120) -> int:
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        pytest.fail(f"spark-submit did not end within {timeout:.0f} s; log tail:\n{last_log_line(log)}")


def _status_or_none(base: Path, jvm_pid: int | None = None) -> dict[str, Any] | None:
    """status.json; with ``jvm_pid``, only once that driver reports running or idle."""
    try:
        status = read_status(base)
    except (FileNotFoundError, ValueError):
        return None
    if jvm_pid is not None and (
        status.get("jvm_pid") != jvm_pid or status["state"] not in ("running", "idle")
    ):
        return None
    return status


def _wait_started(job: subprocess.Popen, log: Path, base: Path) -> None:
    """Wait until ``job``'s driver reports running: a JVM start on a loaded machine takes a while,
    so this deadline is kept apart from the ones that measure the job's work."""
    wait_until(
        lambda: _status_or_none(base, jvm_pid=job.pid) is not None or job.poll() is not None,
        300,
        "the driver to start and report running",
    )
    assert job.poll() is None, last_log_line(log)


def _dead_process() -> dict[str, Any]:
    """The identity fields (pid, start time, process space) of a process that has just exited."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    fields = {**process_identity.process_fields(process.pid), **process_identity.this_space()}
    process.kill()
    process.wait()
    return fields


def test_marker_stop_second_instance_and_a_dead_holders_lease(spark: Any, tmp_path: Path) -> None:
    config, _ = _streaming_config(tmp_path, files=3)
    status_dir = tmp_path / "status" / "files_to_lake"
    status_dir.mkdir(parents=True)
    holder = _dead_process()
    dead = holder["pid"]
    (status_dir / "lease").write_text(
        json.dumps(
            {
                **holder,
                "started_at": "2026-01-01T00:00:00+00:00",
                "heartbeat": datetime.now(UTC).isoformat(),
            }
        )
    )
    checkpoint = tmp_path / "checkpoints" / "files_to_lake"
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"

    first = spark_submit(config, first_log)
    try:
        _wait_started(first, first_log, tmp_path)
        wait_until(
            lambda: len(log_ids(checkpoint / "commits")) >= 3 or first.poll() is not None,
            120,
            "the first instance to commit all three files",
        )
        assert first.poll() is None, last_log_line(first_log)
        log_text = first_log.read_text()
        assert (
            f"taking over the lease of job files_to_lake from pid {dead} on host {socket.gethostname()}"
            in log_text
        )
        owner = json.loads((status_dir / "lease").read_text())
        status = read_status(tmp_path)
        assert owner["pid"] == status["pid"] != dead

        second = spark_submit(config, second_log)
        assert _wait(second, second_log) == EXIT_LOCKED
        refusal = last_log_line(second_log)
        assert "refusing to start: job files_to_lake is already running: " in refusal
        assert f"pid {owner['pid']} on host {socket.gethostname()}" in refusal

        # Idle now (no files left) yet alive: the heartbeat keeps moving.
        beat = read_status(tmp_path)["heartbeat"]
        wait_until(lambda: read_status(tmp_path)["heartbeat"] > beat, 10, "a fresh heartbeat while idle")
        assert read_status(tmp_path)["state"] in ("running", "idle")

        (status_dir / "STOP").touch()
        assert _wait(first, first_log) == EXIT_OK, last_log_line(first_log)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert "job files_to_lake stopped gracefully: stop marker" in last_log_line(first_log)
    final = read_status(tmp_path)
    assert final["state"] == "stopped" and final["last_progress"]["sources"][0]["end_offset"] == {
        "logOffset": 2
    }
    assert not (status_dir / "lease").exists(), "the lease is released on exit"
    assert len(read_lake(spark, tmp_path / "quarantine")) == 3


def test_sigterm_to_spark_submit_lets_the_batch_finish(spark: Any, tmp_path: Path) -> None:
    config, ids = _streaming_config(tmp_path, files=20)
    checkpoint = tmp_path / "checkpoints" / "files_to_lake"
    log = tmp_path / "job.log"

    job = spark_submit(config, log)
    try:
        _wait_started(job, log, tmp_path)
        wait_until(
            lambda: len(log_ids(checkpoint / "commits")) >= 1 or job.poll() is not None,
            120,
            "the first committed batch",
        )
        assert job.poll() is None, last_log_line(log)
        job.send_signal(signal.SIGTERM)  # spark-submit's pid is the driver JVM
        assert _wait(job, log) == EXIT_OK, last_log_line(log)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()

    assert "job files_to_lake stopped gracefully: SIGTERM received by the driver JVM" in last_log_line(log)
    status = read_status(tmp_path)
    assert status["state"] == "stopped" and "SIGTERM" in status["stop_reason"]
    planned, committed = log_ids(checkpoint / "offsets"), log_ids(checkpoint / "commits")
    assert planned[: len(committed)] == committed and len(planned) - len(committed) <= 1
    landed = [r["id"] for r in read_lake(spark, tmp_path / "lake" / "orders")]
    assert len(landed) == len(set(landed)) == 5 * len(committed)
    assert set(landed) <= ids


def test_a_kill_request_ends_the_driver_hard(spark: Any, tmp_path: Path) -> None:
    """The watchdog in the driver halts the JVM on a KILL request (spark-submit's exit code is the
    job's), then records why and releases the lease. (A lost lease takes the same hard exit; see
    tests/jobs/test_lock_and_status.py and test_files_to_lake.py.)"""
    config, _ = _streaming_config(tmp_path, files=2)
    status_dir = tmp_path / "status" / "files_to_lake"
    log = tmp_path / "job.log"
    job = spark_submit(config, log)
    try:
        _wait_started(job, log, tmp_path)  # spark-submit's pid is the driver JVM the status names
        python_driver = read_status(tmp_path)["pid"]
        (status_dir / "KILL").write_text(json.dumps({"by": "tester", "reason": "stuck"}))
        killed_at = time.monotonic()
        assert _wait(job, log, timeout=60) == EXIT_KILLED
        assert time.monotonic() - killed_at < 30
        # spark-submit ends with the JVM, which goes first; the Python driver then records why and
        # releases the lease before it exits itself: judge the folder once that process is gone.
        wait_until(lambda: not pid_alive(python_driver), 30, "the Python driver to finish its hard exit")
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert "killed on request: kill marker" in log.read_text()
    status = read_status(tmp_path)
    assert (
        status["state"] == "stopped"
        and "by tester" in status["stop_reason"]
        and "stuck" in status["stop_reason"]
    )
    assert not (status_dir / "lease").exists(), "the killed run released its lease (its JVM is gone)"


def test_failure_exits_non_zero_with_the_reason_last_and_in_status(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "job.yaml", landing_config(tmp_path, source={"schema": "id BIGNUMBER, name STRING"})
    )
    log = tmp_path / "job.log"
    started = time.monotonic()
    job = spark_submit(config, log)
    assert _wait(job, log) == EXIT_FAILED
    last = last_log_line(log)
    assert "ERROR hubflow_jobs: job files_to_lake failed to start its query: " in last
    assert "BIGNUMBER" in last
    status = read_status(tmp_path)
    assert status["state"] == "failed"
    assert status["exit_code"] == EXIT_FAILED and status["outcome"] in last, status
    assert not (tmp_path / "status" / "files_to_lake" / "lease").exists()
    assert time.monotonic() - started < 120
