"""Build Airflow's own API server app (plugins loaded) and call the status page through it.

Run by ``test_airflow_plugin.py`` in a child process with the test Airflow home's environment, so
Airflow's configuration and plugin manager start fresh. Prints one JSON document of status codes
and bodies. Logs in with the Simple auth manager's generated admin password.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from airflow.api_fastapi.app import create_app
from fastapi.testclient import TestClient


def main() -> None:
    client = TestClient(create_app())
    result: dict[str, object] = {"anonymous": client.get("/hubflow/api/jobs").status_code}
    passwords = Path(os.environ["AIRFLOW_HOME"]) / "simple_auth_manager_passwords.json.generated"
    user, password = next(iter(json.loads(passwords.read_text()).items()))
    token = client.post("/auth/token", json={"username": user, "password": password}).json()["access_token"]
    with_header = client.get("/hubflow/api/jobs", headers={"Authorization": f"Bearer {token}"})
    result["bearer"] = {"status": with_header.status_code, "body": with_header.json()}
    client.cookies.set("_token", token)  # what the UI's iframe sends
    page = client.get("/hubflow/")
    result["cookie_page"] = {"status": page.status_code, "has_charts": 'class="chart"' in page.text}
    result["plugins"] = client.get("/api/v2/plugins").json()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
