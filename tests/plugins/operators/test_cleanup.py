"""The cleanup operators called directly on real folders (no scheduler, no Spark): what each one
deletes, moves or skips. The cleanup DAG's run through Airflow is in tests/dags/test_cleanup.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from hubflow.checkpoints.backups import backup_checkpoint, checkpoint_backups_root
from hubflow_plugins.operators.cleanup import (
    ArchiveOperator,
    CheckpointBackupRetentionOperator,
    DeltaMaintenanceOperator,
)
from tests.dags.helpers import write_registry
from tests.jobs.helpers import eventhubs_config, write_config

pytestmark = pytest.mark.integration

SCHEDULED = {
    "dag_run": SimpleNamespace(run_type="scheduled", run_id="scheduled__1"),
    "run_id": "scheduled__1",
}


def test_checkpoint_backup_retention_deletes_only_the_backups_past_it(registry: Path, tmp_path: Path) -> None:
    checkpoint = tmp_path / "orders" / "checkpoints" / "orders"
    now = datetime.now(UTC)
    taken = {}
    for age_days in (45, 3):
        (checkpoint / "offsets").mkdir(parents=True)
        (checkpoint / "offsets" / "0").write_text("v1\n{}\n")
        taken[age_days] = backup_checkpoint(str(checkpoint), now - timedelta(days=age_days))
    operator = CheckpointBackupRetentionOperator(task_id="checkpoint_backups_orders", job_name="orders")

    deleted = operator.execute(SCHEDULED)  # the registry's default checkpoint_backup_retention: 30 days

    assert deleted == [taken[45]]
    left = sorted(p.name for p in Path(checkpoint_backups_root(str(checkpoint))).iterdir())
    assert left == [Path(taken[3]).name]


def test_archiving_needs_a_landing_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = write_config(
        tmp_path / "hub.yaml", eventhubs_config(tmp_path, None, "HUB_CONNECTION", name="hub")
    )
    entry = {"name": "hub", "application": "eventhubs_to_lake", "config": str(config), "mode": "scheduled"}
    monkeypatch.setenv("HUBFLOW_REGISTRY", str(write_registry(tmp_path, [{**entry, "schedule": "@hourly"}])))
    with pytest.raises(AirflowFailException, match=r"job hub has no source.path / source.archive_dir in "):
        ArchiveOperator(task_id="archive_processed_files", job_name="hub").execute(SCHEDULED)


def test_delta_maintenance_skips_a_job_without_delta_tables_before_any_spark(registry: Path) -> None:
    # No Spark connection exists here (the registry fixture removed it): reaching spark-submit would fail.
    operator = DeltaMaintenanceOperator(task_id="delta_maintenance_orders", job_name="orders")
    with pytest.raises(AirflowSkipException, match="job orders writes no Delta table: nothing to maintain"):
        operator.execute(SCHEDULED)
