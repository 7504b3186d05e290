"""Airflow retries a failed availableNow run with the same spark-submit command (issue #25): a retry
after a crash that followed a commit must do none of the committed work again.

Backfill runs are retried the same way; that running one interval twice leaves each of its rows
once is proven where backfills are tested: tests/jobs/test_delta_backfill.py (the Delta table,
the same interval backfilled twice) and tests/dags/test_airflow_ui.py (through Airflow, the rerun of
a finished interval).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from hubflow.status.exit_codes import EXIT_OK
from tests.support.lake import delta_version, spark_rows

from .helpers import (
    landing_config,
    last_log_line,
    log_ids,
    read_status,
    spark_submit,
    write_config,
    write_json_landing_file,
)
from .pipelines_support import query_id, recorded_batches

pytestmark = pytest.mark.integration

FILES = 4
#: Each landing file: 4 good records and 1 broken one (quarantined).
GOOD, BAD = 4, 1


def _crash_after_first_commit(process: Any, commits: Path, timeout: float = 300) -> None:
    """SIGKILL the job's process group as soon as its first batch has committed, as a dying task
    host would kill it; fail if the run ends by itself or never commits."""
    deadline = time.monotonic() + timeout
    while not log_ids(commits):
        assert process.poll() is None, f"the run ended (exit {process.returncode}) before its first commit"
        assert time.monotonic() < deadline, "no batch committed in time"
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


@pytest.mark.timeout(900)
def test_a_retried_available_now_run_does_not_redo_the_batches_committed_before_the_crash(
    spark: Any, tmp_path: Path
) -> None:
    raw = landing_config(tmp_path, source={"max_files_per_trigger": 1}, sink={"format": "delta"})
    config = write_config(tmp_path / "job.yaml", raw)
    landing = tmp_path / "landing"
    good: set[int] = set()
    for n in range(FILES):
        good |= write_json_landing_file(landing, f"f{n}.json", n * 100, good=GOOD, bad=BAD)
    checkpoint = tmp_path / "checkpoints" / "files_to_lake"
    output, quarantine = Path(raw["sink"]["output_path"]), Path(raw["sink"]["quarantine_path"])

    first = spark_submit(config, tmp_path / "first.log")
    _crash_after_first_commit(first, checkpoint / "commits")
    assert first.returncode == -signal.SIGKILL
    committed = log_ids(checkpoint / "commits")
    assert 1 <= len(committed) < FILES, f"the crash must leave batches to do; committed {committed}"
    before = delta_version(output)

    retry = spark_submit(config, tmp_path / "retry.log")  # the same command, as Airflow's retry runs it
    assert retry.wait(timeout=420) == EXIT_OK, last_log_line(tmp_path / "retry.log")

    # Every record once, by identity: good ones in the table, broken ones in the quarantine.
    ids = [row[0] for row in spark_rows(spark, output, {"id": "value"})]
    assert sorted(ids) == sorted(good)
    raw_records = [row[0] for row in spark_rows(spark, quarantine, {"raw_record": "value"})]
    assert sorted(raw_records) == sorted(f"not json f{n}.json 0" for n in range(FILES))
    # One batch per file; each wrote one Delta version of each table, none twice.
    assert log_ids(checkpoint / "commits") == list(range(FILES))
    query = query_id(checkpoint)
    for table in (output, quarantine):
        assert recorded_batches(table, query) == list(range(FILES)), table
    assert delta_version(output) == FILES - 1 and before >= committed[-1]
    # The retry read only the files of the batches that had not committed: nothing committed twice.
    assert read_status(tmp_path)["counts"]["read"] == (FILES - len(committed)) * (GOOD + BAD)
