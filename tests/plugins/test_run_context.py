"""What a run replaces: a partitioned run's hour (its key), a backfill run's data interval, else
nothing; a key that names no hour fails the task without retry, saying what a key looks like."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import AirflowFailException

from hubflow_plugins.run_context import backfill_window


def _context(run_type: str, key: str | None = None, start=None, end=None) -> dict:
    run = SimpleNamespace(run_type=run_type, partition_key=key)
    return {"dag_run": run, "partition_key": key, "data_interval_start": start, "data_interval_end": end}


def test_a_partitioned_run_replaces_the_hour_its_key_names_whatever_triggered_it() -> None:
    hour = ("2026-11-28T10:00:00+00:00", "2026-11-28T11:00:00+00:00")
    assert backfill_window(_context("backfill", "2026-11-28T10:00:00")) == hour, "a __backfill run"
    assert backfill_window(_context("asset_triggered", "2026-11-28T10:00:00")) == hour, "a __follow run"


def test_an_unpartitioned_backfill_run_replaces_its_data_interval_and_other_runs_nothing() -> None:
    start, end = datetime(2026, 11, 28, 10, tzinfo=UTC), datetime(2026, 11, 28, 11, 30, tzinfo=UTC)
    assert backfill_window(_context("backfill", None, start, end)) == (start.isoformat(), end.isoformat())
    assert backfill_window(_context("scheduled", None, start, end)) is None
    assert backfill_window(_context("asset_triggered")) is None


def test_a_key_that_names_no_hour_fails_the_run_naming_the_key() -> None:
    with pytest.raises(AirflowFailException, match="partition key 'EU-west' names no hour"):
        backfill_window(_context("asset_triggered", "EU-west"))
