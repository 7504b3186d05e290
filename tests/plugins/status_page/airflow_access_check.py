"""Call the status page through Airflow's own API server app as each configured user.

Run by ``test_airflow_plugin.py`` in a child process with the test Airflow home's environment.
argv[1]: a JSON list of paths. Prints one JSON document ``{user: {path: [status, text]}}``, each
user logged in with the Simple auth manager's generated password (bearer token).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from airflow.api_fastapi.app import create_app
from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
from fastapi.testclient import TestClient


def main() -> None:
    paths = json.loads(sys.argv[1])
    client = TestClient(create_app())
    passwords = json.loads(Path(SimpleAuthManager.get_generated_password_file()).read_text())
    result: dict[str, dict[str, list[object]]] = {}
    for user, password in passwords.items():
        login = client.post("/auth/token", json={"username": user, "password": password})
        headers = {"Authorization": f"Bearer {login.json()['access_token']}"}
        result[user] = {}
        for path in paths:
            response = client.get(path, headers=headers)
            result[user][path] = [response.status_code, response.text]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
