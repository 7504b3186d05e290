"""Real streaming jobs for the status page tests: Event Hubs and file streams on the local Spark.

Each run writes what a hubflow job leaves behind: a Spark checkpoint, and ``status.json`` and
``progress_history.jsonl`` (one ``last_progress`` block per progress event, the history the status
page reads first) through the jobs runtime's own ``StatusListener``. ``with_history=False`` removes
the history afterwards, as for a job whose status folder cannot take appends.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml

from hubflow.status import JobStatus, StatusFolder
from hubflow_jobs.runtime.listener import StatusListener
from pyspark_eventhubs import EventPosition

EARLIEST = EventPosition.start_of_stream().to_json()


def job_config(base: Path, name: str, source: dict[str, Any]) -> Path:
    """A valid job config whose roots are under ``base``: eventhubs_to_lake when ``source`` names a
    ``connection_string_env``, else files_to_lake (``source`` keys override a JSON landing folder)."""
    sink: dict[str, Any] = {"output_path": str(base / "lake" / name), "format": "parquet"}
    if "connection_string_env" not in source:
        source = {
            "format": "json",
            "schema": "id BIGINT, name STRING",
            "archive_dir": str(base / "archive" / name),
            **source,
        }
        sink["quarantine_path"] = str(base / "quarantine" / name)
    config = {
        "name": name,
        "trigger": {"processingTime": "5 seconds"},
        "checkpoint_root": str(base / "checkpoints"),
        "status_root": str(base / "status"),
        "source": source,
        "sink": sink,
    }
    path = base / "configs" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def write_registry(base: Path, jobs: list[dict[str, Any]]) -> Path:
    """The registry file listing ``jobs``."""
    path = base / "registry.yaml"
    path.write_text(yaml.safe_dump({"jobs": jobs}, sort_keys=False), encoding="utf-8")
    return path


def run_job(
    spark: Any, base: Path, name: str, df: Any, *, with_history: bool, final_state: str = "stopped"
) -> list[dict[str, Any]]:
    """Run ``df`` as job ``name`` (availableNow into parquet) and return every progress dict.

    status.json is written by the runtime's StatusListener; the run ends as ``final_state``, as the
    runtime marks a finished run.
    """
    status = JobStatus(StatusFolder(str(base / "status" / name)), name)
    history = base / "status" / name / "progress_history.jsonl"
    listener = StatusListener(status)
    spark.streams.addListener(listener)
    try:
        query = (
            df.writeStream.format("parquet")
            .option("path", str(base / "lake" / name))
            .option("checkpointLocation", str(base / "checkpoints" / name))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(180), f"job {name} did not finish"
        if query.exception():
            raise AssertionError(f"job {name} failed: {query.exception()}")
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
        _wait_for_status(base / "status" / name / "status.json", progress[-1]["batchId"])
        _wait_for_lines(history, len(query.recentProgress))
    finally:
        spark.streams.removeListener(listener)
    if not with_history:
        history.unlink()
    status.update(state=final_state)
    return progress


def _wait_for_status(path: Path, batch_id: int, timeout: float = 30.0) -> None:
    """Listener events are asynchronous: wait until status.json shows ``batch_id``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            last = json.loads(path.read_text())["last_progress"] or {}
            if last.get("batch_id", -1) >= batch_id:
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"{path} never showed batch {batch_id}")


def _wait_for_lines(path: Path, count: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().splitlines()) >= count:
            return
        time.sleep(0.2)
    raise AssertionError(f"{path} never reached {count} lines")
