"""Who may see which job on the status page: the user's permissions on the job's own DAG.

Runs in the API server, per request. A job's row, snapshot and charts follow read access to its DAG
(``RegisteredJob.dag_id``); its driver log follows read access to that DAG's task logs, as Airflow's
own log view does. The answer comes from Airflow's configured auth manager, so the page follows
whatever a deployment set up (the Simple auth manager's roles, FAB's per-DAG permissions, Keycloak).
Served outside Airflow (tests, ``require_login=False``), everyone sees everything.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class JobAccess(Protocol):
    """What one request's user may see."""

    def readable(self, jobs: Sequence[Any]) -> list[Any]:
        """The ``jobs`` whose DAG the user may read, in the given order."""

    def refusal(self, job: Any, *, logs: bool = False) -> str | None:
        """Why the user may not read ``job`` (its task logs, with ``logs``), or None when they may."""


class EveryoneSeesAll:
    """No login asked (the app served outside Airflow)."""

    def readable(self, jobs: Sequence[Any]) -> list[Any]:
        return list(jobs)

    def refusal(self, job: Any, *, logs: bool = False) -> str | None:
        return None


class AirflowDagAccess:
    """The logged-in Airflow ``user``'s access, asked of Airflow's auth manager."""

    def __init__(self, user: Any) -> None:
        self.user = user

    def readable(self, jobs: Sequence[Any]) -> list[Any]:
        from airflow.api_fastapi.app import get_auth_manager

        allowed = get_auth_manager().filter_authorized_dag_ids(
            dag_ids={job.dag_id for job in jobs}, user=self.user, method="GET"
        )
        return [job for job in jobs if job.dag_id in allowed]

    def refusal(self, job: Any, *, logs: bool = False) -> str | None:
        from airflow.api_fastapi.app import get_auth_manager
        from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

        entity = DagAccessEntity.TASK_LOGS if logs else None
        if get_auth_manager().is_authorized_dag(
            method="GET", access_entity=entity, details=DagDetails(id=job.dag_id), user=self.user
        ):
            return None
        what = f"the task logs of DAG {job.dag_id!r}" if logs else f"DAG {job.dag_id!r}"
        name = self.user.get_name() if hasattr(self.user, "get_name") else "this user"
        return (
            f"user {name!r} may not read {what} (job {job.name}); "
            "ask an Airflow admin for read access to that DAG"
        )
