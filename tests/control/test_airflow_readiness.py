"""When Airflow counts as ready: the health endpoint's answer judged, and the wait's failures named.

A real API server, scheduler and DAG processor pass through the same wait in every test that starts
them (``tests/dags/helpers.start_airflow_services``); here the judgement itself, on the answer shape
Airflow 3's ``GET /api/v2/monitor/health`` returns, and the wait against a port nothing listens on.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from hubflow.supervision.airflow_readiness import (
    RUNS_DAGS,
    AirflowNotReady,
    Service,
    not_ready,
    wait_until_ready,
)
from tests.support.processes import free_port

STARTED = datetime(2026, 11, 25, 6, 0, tzinfo=UTC)


def _health(
    scheduler: str | None = "healthy", beat: datetime | None = STARTED, dag_processor: str | None = "healthy"
):
    stamp = beat.isoformat() if beat else None
    return {
        "metadatabase": {"status": "healthy"},
        "scheduler": {"status": scheduler, "latest_scheduler_heartbeat": stamp},
        "triggerer": {"status": None, "latest_triggerer_heartbeat": None},
        "dag_processor": {"status": dag_processor, "latest_dag_processor_heartbeat": stamp},
    }


def test_ready_when_every_asked_service_is_healthy_and_beat_since_the_start() -> None:
    assert not_ready(_health(beat=STARTED + timedelta(seconds=1)), RUNS_DAGS, STARTED) == []
    # The triggerer was not asked for: its absence does not matter.
    assert not_ready(_health(), RUNS_DAGS, None) == []


def test_each_missing_part_is_named() -> None:
    assert not_ready(None, RUNS_DAGS, STARTED) == ["the API server does not answer"]
    assert not_ready(_health(scheduler="unhealthy"), [Service.SCHEDULER], None) == [
        "the scheduler is unhealthy"
    ]
    assert not_ready(_health(dag_processor=None), [Service.DAG_PROCESSOR], None) == [
        "the dag_processor is not running"
    ]
    assert not_ready(_health(), [Service.TRIGGERER], None) == ["the triggerer is not running"]
    broken = {**_health(), "metadatabase": {"status": "unhealthy"}}
    assert not_ready(broken, [], None) == ["the metadata database is not healthy"]


def test_a_heartbeat_from_before_the_start_belongs_to_an_earlier_process() -> None:
    """A scheduler of an earlier test that shared the database still looks healthy for a while."""
    earlier = _health(beat=STARTED - timedelta(seconds=5))
    assert not_ready(earlier, [Service.SCHEDULER], STARTED) == [
        f"the scheduler has not heartbeaten since {STARTED.isoformat()}"
    ]
    # Airflow writes naive UTC times on some databases: read as UTC.
    naive = _health(beat=None)
    naive["scheduler"]["latest_scheduler_heartbeat"] = (
        (STARTED + timedelta(seconds=2)).replace(tzinfo=None).isoformat()
    )
    assert not_ready(naive, [Service.SCHEDULER], STARTED) == []


def test_the_wait_names_what_never_came_and_stops_at_once_when_a_service_exits() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(AirflowNotReady, match=r"not ready after 1 s: the API server does not answer"):
        wait_until_ready(url, timeout=1, interval=0.2)
    began = time.monotonic()
    with pytest.raises(AirflowNotReady, match="cannot become ready: airflow scheduler exited with code 1"):
        wait_until_ready(url, timeout=60, still_starting=lambda: "airflow scheduler exited with code 1")
    assert time.monotonic() - began < 30, "an exited service ends the wait, not the timeout"
