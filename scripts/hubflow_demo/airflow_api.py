"""Airflow 3's REST API, as the demo uses it: DAGs known, unpaused, triggered, their runs."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


class Api:
    """Airflow 3's REST API, as the demo's only user (every user is admin: GET /auth/token)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.token = json.loads(self._request("GET", "/auth/token", auth=False))["access_token"]

    def _request(self, method: str, path: str, body: Any = None, auth: bool = True) -> bytes:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base_url + path, data=data, method=method, headers=headers)
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.read()

    def call(self, method: str, path: str, body: Any = None) -> Any:
        return json.loads(self._request(method, path, body) or b"null")

    def dag_known(self, dag_id: str) -> bool:
        try:
            self.call("GET", f"/api/v2/dags/{dag_id}")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return False
            raise
        return True

    def unpause(self, dag_id: str) -> None:
        self.call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})

    def trigger(self, dag_id: str) -> None:
        self.call("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None})

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        """The DAG's runs, newest first."""
        path = f"/api/v2/dags/{dag_id}/dagRuns?order_by=-run_after&limit=100"
        return self.call("GET", path)["dag_runs"]
