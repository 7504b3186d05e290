"""What the driver writes goes out masked (hubflow.redaction): its Python log lines, tracebacks
included, and the free texts of status.json (exception, outcome, start failure), which the status
page, ``hubflow run`` and Airflow task logs quote. No Spark."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hubflow.status import JobStatus, StatusFolder

SECRET = "Zq9vS3cr3tW4lue"

_LOGS_A_FAILURE = f"""
import logging
from hubflow_jobs.runtime.runner import configure_logging

configure_logging()
log = logging.getLogger("hubflow_jobs")
log.info("storage extras: account_key=%s", "{SECRET}")
try:
    raise ConnectionError("GET https://mgmt/ns failed, headers Authorization: Bearer {SECRET}")
except ConnectionError:
    log.exception("job orders failed via postgresql://airflow:{SECRET}@db/airflow")
"""


def test_the_drivers_log_lines_and_tracebacks_are_masked() -> None:
    run = subprocess.run(
        [sys.executable, "-c", _LOGS_A_FAILURE], capture_output=True, text=True, timeout=120, check=True
    )
    assert SECRET not in run.stderr, run.stderr
    assert "INFO hubflow_jobs: storage extras: account_key=***" in run.stderr
    assert "Authorization: Bearer ***" in run.stderr and "Traceback (most recent call last)" in run.stderr
    assert "postgresql://airflow:***@db/airflow" in run.stderr


def test_status_json_free_texts_are_written_masked(tmp_path: Path) -> None:
    folder = StatusFolder(str(tmp_path / "status" / "orders"))
    status = JobStatus(folder, "orders")
    status.update(state="failed", exception=f"ValueError: shared_access_key={SECRET}")
    status.update(exit_code=1, outcome=f"job orders failed: 401 (Authorization: Basic {SECRET})")
    status.restart_query(2, f"cannot reach redis://:{SECRET}@cache:6379")

    written = (tmp_path / "status" / "orders" / "status.json").read_text()
    assert SECRET not in written
    document = folder.status() or {}
    assert document["exception"] is None  # a new attempt clears it
    assert document["outcome"] == "job orders failed: 401 (Authorization: Basic ***)"
    assert document["start_failure"] == "cannot reach redis://:***@cache:6379"
