"""Pipelines of test modules: their source files, their configs, and a run on the shared session."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any

from hubflow_jobs.pipeline.job import load_pipeline
from hubflow_jobs.pipeline.streams import start_pipeline
from hubflow_jobs.runtime.runner import run_job
from hubflow_jobs.runtime.stop import StopRequest

from .helpers import last_log_line, log_ids, write_config

#: Numbers each event with a Python UDF: its module must reach the executors (``ship_module``). The
#: return type is a DataType: a DDL string ("long") needs a session when the module is imported.
NUMBER_EVENTS = """
from pyspark.sql import functions as F
from pyspark.sql.types import LongType


@F.udf(LongType())
def event_number(body):
    return int(bytes(body).decode().rsplit("-", 1)[1])


def numbered(telemetry):
    return telemetry.select("partition", "sequenceNumber", "body", event_number("body").alias("number"))
"""


def write_module(folder: Path, name: str, text: str) -> None:
    """Write the pipeline module ``<folder>/<name>.py`` (``text`` dedented)."""
    (folder / f"{name}.py").write_text(textwrap.dedent(text), encoding="utf-8")


def pipeline_config(base: Path, name: str, **sections: Any) -> Path:
    """A pipeline config under ``base`` (availableNow, quick runtime) with ``sections``; its path."""
    config: dict[str, Any] = {
        "name": name,
        "trigger": {"availableNow": True},
        "checkpoint_root": str(base / "checkpoints"),
        "status_root": str(base / "status"),
        "spark_conf": {"spark.sql.shuffle.partitions": 2, "spark.ui.enabled": False},
        "runtime": {"heartbeat_interval": "1 second", "poll_interval": "200 ms"},
        **sections,
    }
    return write_config(base / f"{name}.yaml", config)


def run_on_session(spark: Any, reference: str, config_path: Path) -> tuple[int, str]:
    """Run the pipeline on the shared session as ``jobs/pipeline.py`` would, without its process."""
    config, binding = load_pipeline(reference, str(config_path))
    return run_job(spark, config, functools.partial(start_pipeline, binding=binding), StopRequest())


def wait_for_listener_events(spark: Any, timeout: float = 120) -> None:
    """Wait (at most ``timeout`` seconds) until Spark's listener bus has handed every event posted so
    far to its listeners.

    Streaming progress reaches listeners on the bus's own thread, after the batch. When ``run_job``
    returns, the runner's status listener has written the main query's last progress, but a
    pipeline's own progress listener (``observe()`` counts, late rows, watermark), which runs after
    it, and the listeners of a helper session's queries (eventhubs_aggregate's quarantine) may not
    have: read those status.json fields of an in-process run after this.
    """
    from py4j.protocol import Py4JJavaError

    try:
        spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(int(timeout * 1000))
    except Py4JJavaError as exc:
        raise AssertionError(
            f"Spark's listener bus still held undelivered events after {timeout:.0f} s: {exc.java_exception}"
        ) from None


def kill_after_first_commit(driver: subprocess.Popen, checkpoint: Path, log: Path) -> list[int]:
    """kill -9 the ``spark-submit`` driver's process group once its query has committed a batch,
    while it still has batches to do; the batch ids committed by then."""
    try:
        deadline = time.monotonic() + 300
        while not log_ids(checkpoint / "commits"):
            assert driver.poll() is None, f"the run ended (exit {driver.returncode}): {last_log_line(log)}"
            assert time.monotonic() < deadline, "no batch committed in time"
            time.sleep(0.02)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
    assert driver.returncode == -signal.SIGKILL
    committed = log_ids(checkpoint / "commits")
    assert 1 <= len(committed) < 5, f"the kill must leave batches to do; committed {committed}"
    return committed


def query_id(checkpoint: Path) -> str:
    """The id of the streaming query whose checkpoint this is."""
    return json.loads((checkpoint / "metadata").read_text(encoding="utf-8"))["id"]


def recorded_batches(table: Path, query_id: str) -> list[int]:
    """The batch id each version of the Delta table records for the query (its ``txn``), in order."""
    batches = []
    for commit in sorted((table / "_delta_log").glob("*.json")):
        for line in commit.read_text(encoding="utf-8").splitlines():
            txn = json.loads(line).get("txn")
            if txn and txn["appId"] == query_id:
                batches.append(txn["version"])
    return batches


def numbered_events(spark: Any, table: Path) -> list[tuple[str, int, bytes, int]]:
    """(partition, sequenceNumber, body, number) of every row of a Delta table of NUMBER_EVENTS."""
    frame = spark.read.format("delta").load(str(table))
    rows = frame.select("partition", "sequenceNumber", "body", "number").collect()
    return [(r["partition"], r["sequenceNumber"], bytes(r["body"]), r["number"]) for r in rows]


def check_events_once(rows: list[tuple[str, int, bytes, int]], expected: set[bytes], partitions: int) -> None:
    """Each expected event once by (partition, sequenceNumber), none other; numbers match bodies."""
    identities = [(partition, sequence) for partition, sequence, _, _ in rows]
    assert len(identities) == len(set(identities)), "an event was written twice"
    assert sorted(body for _, _, body, _ in rows) == sorted(expected)
    for partition, _, body, number in rows:
        assert body == f"event-{number}".encode() and partition == str(number % partitions), (partition, body)
