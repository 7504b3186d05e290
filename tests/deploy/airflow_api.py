"""Airflow 3's REST API (``/api/v2``) and hubflow's status page API, as an operator's script uses them."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

import httpx

T = TypeVar("T")


class AirflowApi:
    """A logged-in client of one api-server (Simple auth manager: POST /auth/token)."""

    def __init__(self, base_url: str, username: str, password: str) -> None:
        self.base_url = base_url.rstrip("/")
        token = httpx.post(
            f"{self.base_url}/auth/token", json={"username": username, "password": password}, timeout=30
        )
        token.raise_for_status()
        self.client = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {token.json()['access_token']}"},
            timeout=60,
        )

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.client.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise AssertionError(f"{method} {path}: {response.status_code} {response.text[:1000]}")
        return response.json() if response.content else None

    def unpause(self, dag_id: str) -> None:
        self._call("PATCH", f"/api/v2/dags/{dag_id}", json={"is_paused": False})

    def pause(self, dag_id: str) -> None:
        self._call("PATCH", f"/api/v2/dags/{dag_id}", json={"is_paused": True})

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        """Trigger a manual run now; return its run id."""
        run = self._call(
            "POST", f"/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf or {}}
        )
        return run["dag_run_id"]

    def runs(self, dag_id: str, **params: Any) -> list[dict[str, Any]]:
        """The DAG's runs, newest first."""
        query = {"order_by": "-run_after", "limit": 100, **params}
        return self._call("GET", f"/api/v2/dags/{dag_id}/dagRuns", params=query)["dag_runs"]

    def run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return self._call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        return self._call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
        """The task's log as text (for failure messages)."""
        response = self.client.get(
            f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}",
            params={"full_content": "true"},
            headers={"Accept": "application/json"},  # Airflow 3 serves JSON or NDJSON only
        )
        if response.status_code != 200:
            return f"(task log: HTTP {response.status_code} {response.text[:500]})"
        lines = []
        for entry in response.json().get("content", []):
            if isinstance(entry, dict):
                lines.append(f"{entry.get('timestamp', '')} {entry.get('event', '')}")
                if "error_detail" in entry:
                    lines.append(str(entry["error_detail"]))
            else:
                lines.append(str(entry))
        return "\n".join(lines)

    def create_backfill(
        self, dag_id: str, first: datetime, last: datetime, max_active_runs: int = 1
    ) -> dict[str, Any]:
        """A backfill of the runs with logical dates ``first`` to ``last``, both included (Airflow's
        ``to_date`` is inclusive), rerunning intervals that already ran; ``max_active_runs`` of them
        at once (the UI's Backfill dialog offers 10)."""
        return self._call(
            "POST",
            "/api/v2/backfills",
            json={
                "dag_id": dag_id,
                "from_date": first.isoformat(),
                "to_date": last.isoformat(),
                "reprocess_behavior": "completed",
                "max_active_runs": max_active_runs,
                "run_backwards": False,
            },
        )

    def status_page_jobs(self) -> list[dict[str, Any]]:
        """hubflow's status page (the api-server's /hubflow plugin app): one snapshot per job."""
        return self._call("GET", "/hubflow/api/jobs")["jobs"]

    def status_page_job(self, name: str) -> dict[str, Any]:
        return self._call("GET", f"/hubflow/api/jobs/{name}")


def wait_for(check: Callable[[], T | None], timeout: float, what: str, every: float = 3.0) -> T:
    """Poll ``check`` until it returns something true (not None, False or empty); fail naming ``what``."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = check()
            if value:
                return value
        except Exception as exc:  # a transient API or docker error: try again until the deadline
            last_error = exc
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{detail}")
        time.sleep(every)
