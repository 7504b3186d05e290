"""What the status page shows of a job's driver log and status.json goes through the one secrets
grammar (hubflow.redaction), for every written form of issue #50 item 4; a driver log tail that
starts inside a line does not show that line's cut-off end. No Spark: the files are written here."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from fastapi import FastAPI
from fastapi.testclient import TestClient

from hubflow.registry import load_registry
from hubflow.status import StatusFolder
from hubflow_plugins.status_page.status_app import DRIVER_LOG_TAIL_BYTES, create_app
from tests.dags.helpers import landing_job, write_registry

SECRET = "Zq9vS3cr3tW4lue"

#: A driver log's lines, each holding SECRET the way a library or Spark writes it.
LEAKY_LINES = [
    f"azure.storage: using {{'account_name': 'acct', 'account_key': '{SECRET}'}}",
    f"wasb extras: shared_access_key={SECRET} container=landing",
    f"HTTP 401 for GET https://mgmt/ns (Authorization: Bearer {SECRET})",
    f"sqlalchemy.exc.OperationalError: postgresql://airflow:{SECRET}@postgres:5432/airflow refused",
    f"Endpoint=sb://ns/;SharedAccessKeyName=Root;SharedAccessKey={SECRET};EntityPath=hub1",
]


def _client(tmp_path: Path) -> tuple[TestClient, StatusFolder]:
    registry = write_registry(tmp_path, [landing_job(tmp_path, "orders")])
    folder = StatusFolder(load_registry(registry).job("orders").paths.status_dir)
    Path(folder.path("x")).parent.mkdir(parents=True, exist_ok=True)
    parent = FastAPI()
    parent.mount("/hubflow", create_app(registry))
    return TestClient(parent), folder


def test_driver_log_and_status_exception_show_no_secret(tmp_path: Path) -> None:
    client, folder = _client(tmp_path)
    Path(folder.path("driver.log")).write_text("job orders starting\n" + "\n".join(LEAKY_LINES) + "\nlast\n")
    folder.write_json(
        "status.json",
        {
            "job": "orders",
            "state": "failed",
            "updated_at": datetime.now(UTC).isoformat(),
            "exception": " | ".join(LEAKY_LINES),
        },
    )

    log = client.get("/hubflow/api/jobs/orders/driver-log")
    job = client.get("/hubflow/api/jobs/orders")
    page = client.get("/hubflow/")

    assert log.status_code == job.status_code == page.status_code == 200
    assert log.text.startswith("job orders starting") and log.text.rstrip().endswith("last")
    for shown in (log.text, json.dumps(job.json()), page.text):
        assert SECRET not in shown
    assert "'account_key': '***'" in log.text and "Authorization: Bearer ***" in log.text
    assert "postgresql://airflow:***@postgres:5432/airflow" in log.text
    assert "shared_access_key=***" in job.json()["exception"]


def test_a_tail_cut_inside_a_line_does_not_show_that_line(tmp_path: Path) -> None:
    """The tail of a long log starts at a byte offset: inside ``SharedAccessKey=...`` it would start with
    ``ey=<secret>``, which names no key. The partial first line is left out."""
    client, folder = _client(tmp_path)
    cut = f"ey={SECRET};EntityPath=hub1\n"
    last = "the driver's last line\n"
    filler = "x" * (DRIVER_LOG_TAIL_BYTES - len(cut) - len(last) - 1) + "\n"
    tail = cut + filler + last
    assert len(tail.encode()) == DRIVER_LOG_TAIL_BYTES  # the tail starts right after "SharedAccessK"
    Path(folder.path("driver.log")).write_text("y" * 1000 + "\nconn: Endpoint=sb://ns/;SharedAccessK" + tail)

    text = client.get("/hubflow/api/jobs/orders/driver-log").text

    assert SECRET not in text
    assert text == filler + last
