"""A registered job's storage credentials the Azure way: its ``storage_conn_id`` names an Airflow
``wasb`` connection (account key, or SAS) to Azurite; the job is submitted the way the operators do
(``build_submit_hook`` + ``driver_secrets``, a real spark-submit), its driver reaches the storage
through the Hadoop settings it derives from its environment, and the Airflow side reads the job's
status folder and checkpoint (and the status page its snapshot) through the same connection. While
the job runs, the secret is nowhere on a command line of its process tree (``/proc/<pid>/cmdline``,
what ``ps`` shows), Spark's environment page (REST ``/api/v1/applications/<id>/environment``) shows
every Azure key name redacted, and status.json holds no secret."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from hubflow.checkpoints.inspector import inspect_checkpoint
from hubflow.invocation import JobInvocation
from hubflow.registry import load_registry
from hubflow.status import JobState, StatusFolder
from hubflow.storage.azure import forget_accesses
from hubflow_plugins.hooks.azure_storage import use_job_storage
from hubflow_plugins.hooks.spark_submit import build_submit_hook, driver_secrets
from hubflow_plugins.operators.cleanup import ArchiveOperator, CheckpointBackupRetentionOperator
from hubflow_plugins.status_page.status_app import create_app
from tests.azure.submitted_jobs import REDACTED, files_job_registry, get_json, orders_json, session_cmdlines
from tests.support.azurite import ACCOUNT, ACCOUNT_KEY, Azurite
from tests.support.processes import free_port, stop_process

pytestmark = pytest.mark.integration

HOST = f"{ACCOUNT}.dfs.core.windows.net"


def _sas_token(azurite: Azurite) -> str:
    """An account SAS for the development account (read, write, list, delete, create; 2 hours)."""
    from azure.storage.blob import AccountSasPermissions, ResourceTypes, generate_account_sas

    return generate_account_sas(
        ACCOUNT,
        ACCOUNT_KEY,
        resource_types=ResourceTypes(service=True, container=True, object=True),
        permission=AccountSasPermissions(
            read=True, write=True, delete=True, list=True, add=True, create=True, update=True
        ),
        expiry=datetime.now(UTC) + timedelta(hours=2),
    )


def _connection(azurite: Azurite, kind: str) -> tuple[dict[str, Any], str]:
    """A ``wasb`` connection of the given credential kind, and its secret."""
    if kind == "key":
        document = {
            "conn_type": "wasb",
            "login": ACCOUNT,
            "password": ACCOUNT_KEY,
            "extra": {"blob_endpoint": azurite.blob_endpoint},
        }
        return document, ACCOUNT_KEY
    sas = _sas_token(azurite)
    document = {
        "conn_type": "wasb",
        "login": ACCOUNT,
        "extra": {"sas_token": sas, "blob_endpoint": azurite.blob_endpoint},
    }
    return document, sas


@pytest.mark.parametrize("kind", ["key", "sas"])
def test_a_job_on_its_storage_connection_keeps_the_secret_out_of_sight(
    kind: str, tmp_path: Path, azurite: Azurite, monkeypatch: pytest.MonkeyPatch
) -> None:
    container = azurite.new_container("conn")
    document, secret = _connection(azurite, kind)
    ui_port = free_port()
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_STORAGE", json.dumps(document))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    registry = files_job_registry(tmp_path, "blobjob", lambda path: azurite.url(container, path), ui_port)
    monkeypatch.setenv("HUBFLOW_REGISTRY", str(registry))
    monkeypatch.delenv("HUBFLOW_AZURE_STORAGE", raising=False)
    forget_accesses()
    from azure.storage.blob import BlobServiceClient

    blobs = BlobServiceClient.from_connection_string(azurite.connection_string).get_container_client(
        container
    )
    blobs.upload_blob("landing/orders-1.json", orders_json(0, 3))

    job = load_registry().job("blobjob")
    secrets = driver_secrets(job)  # what the operators hand the driver
    assert secret in secrets["HUBFLOW_AZURE_STORAGE"]
    hook = build_submit_hook(job, JobInvocation.run(job, secrets=secrets))
    log_path = tmp_path / "driver.log"
    process = hook.launch_detached(log_path)
    try:
        # The Airflow side: the status folder and the checkpoint through the same connection.
        use_job_storage(job)
        folder = StatusFolder(job.paths.status_dir)
        deadline = time.monotonic() + 150
        status: dict[str, Any] = {}
        while not (status.get("last_progress") or {}).get("num_input_rows"):
            assert process.poll() is None, "the job died:\n" + log_path.read_text(errors="replace")[-4000:]
            assert time.monotonic() < deadline, "no batch with rows:\n" + log_path.read_text()[-4000:]
            time.sleep(0.5)
            status = folder.status() or {}
        assert (
            inspect_checkpoint(
                job.paths.checkpoint_location, stalled_after=timedelta(minutes=5)
            ).latest_commit_batch_id
            is not None
        )
        written = [
            b.name for b in blobs.list_blobs(name_starts_with="lake/orders/") if b.name.endswith(".parquet")
        ]
        assert written, "the job wrote its output to Azurite"

        # ps and /proc/<pid>/cmdline of every process of the job: no secret, no Azure key setting.
        commands = session_cmdlines(process.pid)
        assert any("spark-submit" in c or "SparkSubmit" in c for c in commands.values()), commands
        for pid, command in commands.items():
            assert secret not in command, f"process {pid}'s command line holds the {kind}"
            assert "fs.azure.account" not in command and "fs.azure.sas" not in command, command

        # Spark's environment page (its REST form): the Azure keys are there, their values redacted.
        base = f"http://127.0.0.1:{ui_port}/api/v1/applications"
        app_id = get_json(base)[0]["id"]
        environment = get_json(f"{base}/{app_id}/environment")
        text = json.dumps(environment)
        assert secret not in text and secret.replace("/", "\\/") not in text
        spark = dict(environment["sparkProperties"])
        secret_key = (
            f"spark.hadoop.fs.azure.account.key.{HOST}"
            if kind == "key"
            else f"spark.hadoop.fs.azure.sas.fixed.token.{HOST}"
        )
        assert spark[secret_key] == REDACTED
        # Spark's default pattern matches neither key: hubflow's (SPARK_REDACTION_REGEX) is in force.
        assert f"spark.hadoop.fs.azure.account.auth.type.{HOST}" in spark
        hadoop = dict(environment.get("hadoopProperties") or [])
        hadoop_key = secret_key.removeprefix("spark.hadoop.")
        if hadoop_key in hadoop:
            assert hadoop[hadoop_key] == REDACTED

        # The status page's view of the job: a fresh process knowing nothing but the connection.
        forget_accesses()
        response = TestClient(create_app()).get("/api/jobs/blobjob")
        assert response.status_code == 200, response.text
        snapshot = response.json()
        # running, or idle once its batch is done and nothing more landed (a loaded machine's pace)
        assert snapshot["error"] is None and snapshot["state"] in (JobState.RUNNING, JobState.IDLE), snapshot
        assert snapshot["last_batch"] is not None

        raw_status = blobs.download_blob("_status/blobjob/status.json").readall().decode()
        assert secret not in raw_status and "fs.azure" not in raw_status
    finally:
        stop_process(process)
        forget_accesses()
    # Airflow's cleanup operators, each in a process that knows only the connection
    summary = ArchiveOperator(task_id="archive", job_name="blobjob").execute({})
    forget_accesses()
    assert CheckpointBackupRetentionOperator(task_id="backups", job_name="blobjob").execute({}) == []
    forget_accesses()
    assert summary["job"] == "blobjob"
    assert not [b.name for b in blobs.list_blobs(name_starts_with="landing/") if b.name.endswith(".json")]
    assert [
        b.name for b in blobs.list_blobs(name_starts_with="_archive/") if b.name.endswith("orders-1.json")
    ]
    assert secret not in log_path.read_text(errors="replace"), "the driver log holds the secret"
    event_logs = list((tmp_path / "events").rglob("events_*"))  # a rolling log: a folder of parts
    assert event_logs, "Spark wrote its event log"
    text = "".join(event_log.read_text(errors="replace") for event_log in event_logs)
    assert "fs.azure.account.auth.type" in text, "the environment update is in the event log"
    assert secret not in text, f"the event log holds the {kind}"
