"""The generated DAGs load without the data path's heavy imports and run end to end (real Spark, real DB)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.dags.helpers import airflow_env, landing_job, run_airflow, write_registry
from tests.jobs.helpers import write_json_landing_file

pytestmark = pytest.mark.integration

DAGBAG_PROBE = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
# The connector's vocabulary (connection strings, positions, options) is light and shared; its data
# path is not: its Spark data source, readers, receivers and sink.
HEAVY = (
    "pyspark", "delta", "azure.eventhub", "hubflow_jobs.runtime.session",
    "pyspark_eventhubs.data_source", "pyspark_eventhubs.stream_reader", "pyspark_eventhubs.batch_reader",
    "pyspark_eventhubs.client", "pyspark_eventhubs.fast_receiver", "pyspark_eventhubs.writer",
)
bag = DagBag(dag_folder=sys.argv[1])
print(json.dumps({
    "errors": {k: str(v) for k, v in bag.import_errors.items()},
    "dags": sorted(bag.dag_ids),
    "tasks": {d: sorted(t.task_id for t in bag.dags[d].tasks) for d in bag.dag_ids},
    "heavy": sorted(m for m in HEAVY if m in sys.modules),
}))
"""


def test_dagbag_loads_every_generated_dag_without_the_data_path(airflow_home, tmp_path: Path) -> None:
    registry = write_registry(
        tmp_path,
        [
            landing_job(tmp_path, "orders", archive=True, archive_retention="30 days"),
            landing_job(tmp_path, "clicks", streaming=True),
        ],
    )
    env = airflow_env(airflow_home, registry)
    import subprocess
    import sys

    dags_folder = env["AIRFLOW__CORE__DAGS_FOLDER"]
    result = subprocess.run(
        [sys.executable, "-c", DAGBAG_PROBE, dags_folder],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    bag = json.loads(result.stdout.strip().splitlines()[-1])
    assert bag["errors"] == {}
    assert bag["dags"] == [
        "clicks__backfill",
        "clicks__oncall",
        "clicks__supervisor",
        "hubflow__cleanup",
        "orders__available_now",
        "orders__backfill",
    ]
    assert bag["tasks"]["orders__available_now"] == ["archive_processed_files", "check_health", "run_job"]
    assert bag["tasks"]["clicks__supervisor"] == ["check_health", "ensure_running"]
    assert bag["tasks"]["clicks__backfill"] == bag["tasks"]["orders__backfill"] == ["run_job"]
    assert bag["tasks"]["hubflow__cleanup"] == [
        "archive_orders",
        "checkpoint_backups_clicks",
        "checkpoint_backups_orders",
        "delta_maintenance_clicks",
        "delta_maintenance_orders",
    ]
    # Parsing stays cheap because no DAG file imports Spark, Delta or the Event Hubs SDK at parse
    # time (they load in the task that needs them); asserted as imports, not as a parse-time clock.
    assert bag["heavy"] == [], f"DAG parsing imported {bag['heavy']}"


def test_available_now_dag_runs_the_job_checks_health_and_archives(
    airflow_home, spark, tmp_path: Path
) -> None:
    entry = landing_job(tmp_path, "orders", archive=True)
    registry = write_registry(tmp_path, [entry])
    landing = tmp_path / "orders" / "landing"
    expected: set[int] = set()
    for index in range(3):
        expected |= write_json_landing_file(landing, f"part-{index}.json", index * 100, good=20, bad=2)
    env = airflow_env(airflow_home, registry)

    result = run_airflow(env, "dags", "test", "orders__available_now")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    assert "checkpoint of job orders: healthy" in output

    rows = spark.read.parquet(str(tmp_path / "orders" / "lake" / "orders")).collect()
    ids = [row.id for row in rows]
    assert sorted(ids) == sorted(expected), "every good record exactly once"
    quarantined = spark.read.parquet(str(tmp_path / "orders" / "quarantine")).count()
    assert quarantined == 6
    # Every landing file was consumed by a committed batch, so none is left in the landing folder and
    # each is in the archive at its landing path (the layout of Spark's own cleanSource=archive).
    assert sorted(p.name for p in landing.iterdir() if not p.name.startswith(".")) == []
    archive_root = Path(str(tmp_path / "orders" / "archive") + str(landing))
    assert sorted(p.name for p in archive_root.iterdir()) == ["part-0.json", "part-1.json", "part-2.json"]


def test_available_now_dag_reads_the_hub_through_the_connector_exactly_once(
    airflow_home, spark, tmp_path: Path
) -> None:
    from tests.jobs.helpers import EmulatedHub, eventhubs_config, write_config
    from tests.support.emulator import start_test_emulator

    with start_test_emulator(tmp_path, telemetry=3) as emulator:
        conn = emulator.connection_string("telemetry")
        hub = EmulatedHub("telemetry", conn, 3)
        sent = hub.send_numbered(0, 300)
        config = eventhubs_config(
            tmp_path,
            hub,
            "HUBFLOW_EVENTHUBS_CONNECTION_STRING",
            name="telemetry",
            source={"max_events_per_trigger": 120},
        )
        registry = write_registry(
            tmp_path,
            [
                {
                    "name": "telemetry",
                    "application": "eventhubs_to_lake",
                    "config": str(write_config(tmp_path / "telemetry.yaml", config)),
                    "mode": "scheduled",
                    "schedule": "@hourly",
                    "eventhubs_conn_id": "eventhubs_default",
                }
            ],
        )
        env = airflow_env(airflow_home, registry)
        env["AIRFLOW_CONN_EVENTHUBS_DEFAULT"] = json.dumps({"conn_type": "generic", "password": conn})

        result = run_airflow(env, "dags", "test", "telemetry__available_now")
        output = result.stdout + result.stderr
        assert result.returncode == 0, output[-6000:]
        assert "checkpoint of job telemetry: healthy" in output
        assert "SAS_KEY_VALUE" not in output, "the key must never reach a task log"

    rows = spark.read.parquet(str(tmp_path / "lake" / "bronze")).select("partition", "sequenceNumber", "body")
    rows = rows.collect()
    assert len(rows) == 300
    assert len({(r.partition, r.sequenceNumber) for r in rows}) == 300, "no duplicate"
    assert {bytes(r.body) for r in rows} == sent, "no loss"
    last_batch = json.loads((tmp_path / "status" / "telemetry" / "status.json").read_text())["last_progress"]
    assert last_batch["batch_id"] == 2, "300 events at most 120 per trigger: three batches"
