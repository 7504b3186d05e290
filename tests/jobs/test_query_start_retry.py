"""A job whose query fails because Spark's Python worker for the eventhubs source did not connect back
in time starts the query again (hubflow_jobs.runtime.query_start), and every event still lands once.

The failure is provoked for real: Spark runs its Python workers with ``PYSPARK_PYTHON``, here a
wrapper that holds back the source's worker (``-m pyspark.sql.streaming.python_streaming_source_runner``)
past Spark's fixed 10 seconds the first times it is started, as a CPU-starved driver host does.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from hubflow.status.exit_codes import EXIT_FAILED, EXIT_OK

from .helpers import (
    EVENTHUBS_TO_LAKE,
    EmulatedHub,
    eventhubs_config,
    last_log_line,
    spark_submit,
    write_config,
)

pytestmark = pytest.mark.integration

ENV_VAR = "HUBFLOW_TEST_EVENTHUBS_CONNECTION"
SOURCE_WORKER = "pyspark.sql.streaming.python_streaming_source_runner"
HELD_BACK = 13  # seconds: past Spark's fixed 10 s wait for the worker to connect back


def _slow_source_worker_python(folder: Path, slow_starts: int) -> tuple[Path, Path]:
    """A ``PYSPARK_PYTHON`` that starts the source's worker ``HELD_BACK`` seconds late the first
    ``slow_starts`` times; returns it and the file counting the source worker's starts."""
    starts = folder / "source-worker-starts"
    wrapper = folder / "slow-source-worker-python"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'if [ "$2" = {SOURCE_WORKER} ]; then\n'
        f"  n=$(cat {shlex.quote(str(starts))} 2>/dev/null || echo 0)\n"
        f"  echo $((n + 1)) > {shlex.quote(str(starts))}\n"
        f'  if [ "$n" -lt {slow_starts} ]; then sleep {HELD_BACK}; fi\n'
        "fi\n"
        f'exec {shlex.quote(sys.executable)} "$@"\n',
        encoding="utf-8",
    )
    wrapper.chmod(0o755)
    return wrapper, starts


def _run_job(
    tmp_path: Path, eventhub: EmulatedHub, slow_starts: int, start_attempts: int
) -> tuple[int, Path]:
    """Run eventhubs_to_lake (availableNow) once with the slow-starting source worker; (exit code, log)."""
    config = eventhubs_config(tmp_path, eventhub, ENV_VAR, runtime={"start_attempts": start_attempts})
    python, _starts = _slow_source_worker_python(tmp_path, slow_starts)
    log = tmp_path / "job.log"
    env = {ENV_VAR: eventhub.connection_string, "PYSPARK_PYTHON": str(python)}
    job = spark_submit(
        write_config(tmp_path / "job.yaml", config), log, script=EVENTHUBS_TO_LAKE, extra_env=env
    )
    return job.wait(300), log


def _status(tmp_path: Path) -> dict[str, Any]:
    return json.loads((tmp_path / "status" / "eventhubs_to_lake" / "status.json").read_text(encoding="utf-8"))


def test_a_source_worker_that_connects_back_too_late_is_started_again_and_nothing_is_lost(
    spark: Any, eventhub: EmulatedHub, tmp_path: Path
) -> None:
    sent = eventhub.send_numbered(0, 800)

    code, log = _run_job(tmp_path, eventhub, slow_starts=1, start_attempts=3)

    text = log.read_text(encoding="utf-8", errors="replace")
    assert code == EXIT_OK, last_log_line(log)
    assert (tmp_path / "source-worker-starts").read_text().strip() == "2", "one slow start, one good one"
    assert "did not connect back within Spark's fixed 10 s" in text
    assert "starting the query again in 5 s (attempt 2 of 3, from the checkpoint)" in text
    status = _status(tmp_path)
    assert status["state"] == "stopped", status
    assert status["exception"] is None
    assert status["start_attempt"] == 2
    assert "Python worker failed to connect back" in status["start_failure"]
    assert status["last_progress"]["sources"][0]["end_offset"] == eventhub.expected_offsets()
    rows = spark.read.parquet(str(tmp_path / "lake" / "bronze")).select("partition", "sequenceNumber", "body")
    identities = [(row["partition"], row["sequenceNumber"]) for row in rows.collect()]
    assert len(identities) == len(set(identities)) == len(sent), "every event exactly once"
    assert {bytes(row["body"]) for row in rows.collect()} == sent


def test_when_every_attempt_times_out_the_job_fails_with_sparks_reason(
    eventhub: EmulatedHub, tmp_path: Path
) -> None:
    eventhub.send_numbered(0, 10)

    code, log = _run_job(tmp_path, eventhub, slow_starts=2, start_attempts=2)

    assert code == EXIT_FAILED
    assert (tmp_path / "source-worker-starts").read_text().strip() == "2", "two attempts, no third"
    assert "job eventhubs_to_lake failed: " in last_log_line(log)
    assert "Python worker failed to connect back" in last_log_line(log)
    assert "(attempt 2 of 2, from the checkpoint)" in log.read_text(encoding="utf-8", errors="replace")
    status = _status(tmp_path)
    assert status["state"] == "failed", status
    assert status["start_attempt"] == 2
    assert not (tmp_path / "lake" / "bronze").exists() or not list(
        (tmp_path / "lake" / "bronze").rglob("*.parquet")
    )
