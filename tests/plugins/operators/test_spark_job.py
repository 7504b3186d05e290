"""SparkJobOperator's backfill rules, called directly (no scheduler, no Spark): a backfill run needs
a data interval and an application that can read one again. Real runs are in tests/dags."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from hubflow_plugins.operators.spark_job import SparkJobOperator
from tests.dags.helpers import landing_job, write_registry

pytestmark = pytest.mark.integration


def _backfill(start: datetime | None, end: datetime | None) -> dict[str, Any]:
    dag_run = SimpleNamespace(run_type="backfill", run_id="backfill__1", triggering_user_name=None)
    return {
        "dag_run": dag_run,
        "run_id": "backfill__1",
        "data_interval_start": start,
        "data_interval_end": end,
    }


def test_a_backfill_run_needs_a_data_interval(registry: Path) -> None:
    operator = SparkJobOperator(task_id="run_job", job_name="orders")
    noon = datetime(2026, 11, 22, 12, tzinfo=UTC)
    with pytest.raises(AirflowFailException, match="backfill run without a data interval"):
        operator.execute(_backfill(None, None))
    with pytest.raises(AirflowFailException, match="backfill run without a data interval"):
        operator.execute(_backfill(noon, noon))


def test_a_backfill_of_an_application_that_cannot_reread_its_input_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = landing_job(tmp_path, "replay", application="lake_to_eventhubs")
    monkeypatch.setenv("HUBFLOW_REGISTRY", str(write_registry(tmp_path, [entry])))
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    start, end = datetime(2026, 11, 22, 10, tzinfo=UTC), datetime(2026, 11, 22, 11, tzinfo=UTC)
    with pytest.raises(
        AirflowFailException,
        match="backfill runs are supported for eventhubs_to_lake, files_to_lake jobs, not lake_to_eventhubs",
    ):
        SparkJobOperator(task_id="run_job", job_name="replay").execute(_backfill(start, end))
