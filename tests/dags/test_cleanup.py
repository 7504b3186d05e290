"""The cleanup DAG maintains a job's Delta tables through spark-submit, as the job itself runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hubflow_jobs.lake.maintenance import table_sizes
from tests.dags.helpers import airflow_env, landing_job, run_airflow, write_registry
from tests.jobs.test_lake_maintenance import small_files_table
from tests.support.lake import spark_rows

pytestmark = pytest.mark.integration


def test_cleanup_dag_compacts_vacuums_and_checkpoints_a_delta_job_and_skips_a_parquet_one(
    airflow_home, spark, tmp_path: Path
) -> None:
    delta_job = landing_job(
        tmp_path,
        "orders",
        vacuum_retention="0 hours",
        delta_checkpoint_after_commits=5,
    )
    config = Path(delta_job["config"])
    config.write_text(config.read_text().replace("format: parquet", "format: delta"))
    table = tmp_path / "orders" / "lake" / "orders"
    small_files_table(spark, table, commits=6)
    rows = spark_rows(spark, table, {"id": "value"})
    before = table_sizes(spark, str(table))
    registry = write_registry(tmp_path, [delta_job, landing_job(tmp_path, "clicks")])
    env = airflow_env(airflow_home, registry)

    result = run_airflow(env, "dags", "test", "hubflow__cleanup", "-c", json.dumps({"dry_run": False}))
    text = result.stdout + result.stderr
    assert result.returncode == 0, text[-6000:]
    assert "lake_maintenance.py" in text and "--vacuum-retention-hours 0" in text
    assert f"before: version {before.version}, 12 live files" in text
    assert "compacted 12 files into 2" in text and "wrote a log checkpoint" in text
    assert "job clicks writes no Delta table: nothing to maintain" in text, "the parquet job is skipped"
    after = table_sizes(spark, str(table))
    assert after.live_files == 2 and after.stored_files < before.stored_files
    assert after.commits_since_checkpoint == 0
    assert spark_rows(spark, table, {"id": "value"}) == rows
