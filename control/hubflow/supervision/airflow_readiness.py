"""Is an Airflow deployment ready to run DAGs? Its API server answers and its services heartbeat.

A DAG unpaused or triggered before the scheduler, the DAG processor and the API server are all up
queues tasks that cannot reach the API server ("Connection refused") and fail. Whoever starts
Airflow (the tests, ``make demo``, the stack proof) waits here first, on the API server's public
health endpoint (``GET /api/v2/monitor/health``, no login): the metadata DB answers, and each
named service has heartbeaten since it was started (a heartbeat older than the start belongs to
an earlier process that shared the database). HTTP only: no Airflow import.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterable
from datetime import datetime
from enum import StrEnum
from typing import Any

from hubflow.status import age_seconds

#: The API server's health endpoint, relative to its base URL.
HEALTH_PATH = "/api/v2/monitor/health"
#: What a ready component reports as its status.
HEALTHY = "healthy"


class Service(StrEnum):
    """The Airflow services the health endpoint reports on, by the key it uses."""

    SCHEDULER = "scheduler"
    DAG_PROCESSOR = "dag_processor"
    TRIGGERER = "triggerer"


#: What runs a scheduled DAG: the scheduler queues its tasks, the DAG processor keeps DAGs current.
RUNS_DAGS: tuple[Service, ...] = (Service.SCHEDULER, Service.DAG_PROCESSOR)


class AirflowNotReady(TimeoutError):
    """Airflow did not become ready in time; the message says which part and what it last answered."""


def read_health(base_url: str, timeout: float = 5.0) -> dict[str, Any] | None:
    """The health endpoint's answer, or None while the API server does not answer with JSON."""
    try:
        with urllib.request.urlopen(base_url.rstrip("/") + HEALTH_PATH, timeout=timeout) as response:
            return json.loads(response.read())
    except (OSError, ValueError):  # refused, timed out, an HTTP error status, or not JSON yet
        return None


def not_ready(
    health: dict[str, Any] | None, services: Iterable[Service], since: datetime | None
) -> list[str]:
    """What is not ready yet in one health answer (empty when everything asked for is ready).

    A service counts as ready when it is healthy and, with ``since``, heartbeat at or after it.
    """
    if health is None:
        return ["the API server does not answer"]
    problems = []
    if (health.get("metadatabase") or {}).get("status") != HEALTHY:
        problems.append("the metadata database is not healthy")
    for service in services:
        report = health.get(service.value) or {}
        heartbeat = report.get(f"latest_{service.value}_heartbeat")
        if report.get("status") != HEALTHY:
            problems.append(f"the {service.value} is {report.get('status') or 'not running'}")
        elif since is not None and not _beat_since(heartbeat, since):
            problems.append(f"the {service.value} has not heartbeaten since {since.isoformat()}")
    return problems


def wait_until_ready(
    base_url: str,
    services: Iterable[Service] = RUNS_DAGS,
    *,
    since: datetime | None = None,
    timeout: float = 300.0,
    interval: float = 1.0,
    still_starting: Callable[[], str | None] | None = None,
) -> dict[str, Any]:
    """Wait until the API server at ``base_url`` answers and every one of ``services`` is ready.

    ``since``: the moment the services were started (heartbeats before it do not count).
    ``still_starting``: called between polls; a text it returns (say, "the scheduler exited with
    code 1") ends the wait at once with that reason, instead of at the timeout.
    Returns the health answer that showed readiness; raises :class:`AirflowNotReady`.
    """
    wanted = tuple(services)
    deadline = time.monotonic() + timeout
    health: dict[str, Any] | None = None
    while True:
        health = read_health(base_url)
        problems = not_ready(health, wanted, since)
        if not problems:
            return health or {}
        failure = still_starting() if still_starting else None
        if failure:
            raise AirflowNotReady(f"Airflow at {base_url} cannot become ready: {failure}")
        if time.monotonic() >= deadline:
            raise AirflowNotReady(
                f"Airflow at {base_url} not ready after {timeout:.0f} s: {'; '.join(problems)} "
                f"(last answer of {HEALTH_PATH}: {json.dumps(health)})"
            )
        time.sleep(interval)


def _beat_since(heartbeat: Any, since: datetime) -> bool:
    """Whether the ISO time ``heartbeat`` (naive = UTC) is at or after ``since``."""
    before = age_seconds(heartbeat, now=since)  # seconds from the heartbeat to ``since``
    return before is not None and before <= 0
