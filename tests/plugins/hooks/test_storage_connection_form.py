"""The user's view of a job's storage connection (issue #29 item 4), on a real api-server against
PostgreSQL: the connection form Airflow's UI draws offers the Microsoft Azure provider's ``wasb``
and ``adls`` types with their fields, and a ``wasb`` connection posted to the REST API as the form
posts it (an account key; an account SAS) is read by hubflow's hook into an access that reaches
the account (Azurite), with no key or SAS in an API answer or a log."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.airflow_db import AirflowHome
from tests.support.azurite import ACCOUNT, ACCOUNT_KEY, Azurite
from tests.support.processes import run_json_check

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[3]
AIRFLOW = str(Path(sys.executable).parent / "airflow")
SECRET_FIELDS = {"connection_string", "shared_access_key", "sas_token"}


class Api:
    """The api-server's address, a logged-in client and its log."""

    def __init__(self, base_url: str, client: httpx.Client, log: Path, env: dict[str, str]) -> None:
        self.base_url, self.client, self.log, self.env = base_url, client, log, env


@pytest.fixture(scope="module")
def api(airflow_home: AirflowHome, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    from hubflow.supervision.airflow_readiness import wait_until_ready
    from tests.support.processes import free_port, start_background, stop_processes

    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    env = dict(airflow_home.env)
    env.update(
        {
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": base_url,
            "PYTHONPATH": f"{REPO_ROOT / 'plugins'}:{REPO_ROOT / 'jobs'}:{REPO_ROOT}",
        }
    )
    log = tmp_path_factory.mktemp("api-server") / "api-server.log"
    process = start_background([AIRFLOW, "api-server", "--port", str(port)], log, env)

    def exited() -> str | None:
        if process.poll() is None:
            return None
        return f"api-server exited with code {process.returncode}:\n{log.read_text(errors='replace')[-3000:]}"

    try:
        wait_until_ready(base_url, (), timeout=240, still_starting=exited)
        passwords = Path(env["AIRFLOW_HOME"]) / "simple_auth_manager_passwords.json.generated"
        user, password = next(iter(json.loads(passwords.read_text()).items()))
        token = httpx.post(
            f"{base_url}/auth/token", json={"username": user, "password": password}, timeout=60
        )
        token.raise_for_status()
        headers = {"Authorization": f"Bearer {token.json()['access_token']}"}
        with httpx.Client(base_url=base_url, headers=headers, timeout=60) as client:
            yield Api(base_url, client, log, env)
    finally:
        stop_processes([process])


def test_the_connection_form_offers_the_azure_providers_storage_types(api: Api) -> None:
    """What the UI's Add Connection form is drawn from (``GET /ui/connections/hook_meta``)."""
    answer = api.client.get("/ui/connections/hook_meta")
    assert answer.status_code == 200, answer.text[:500]
    types = {meta["connection_type"]: meta for meta in answer.json()}

    wasb, adls = types["wasb"], types["adls"]
    assert wasb["hook_class_name"] == "airflow.providers.microsoft.azure.hooks.wasb.WasbHook"
    assert wasb["hook_name"] == "Azure Blob Storage"
    assert adls["hook_class_name"] == (
        "airflow.providers.microsoft.azure.hooks.data_lake.AzureDataLakeStorageV2Hook"
    )
    identity = {"managed_identity_client_id", "workload_identity_tenant_id"}
    assert set(wasb["extra_fields"]) == SECRET_FIELDS | {"tenant_id"} | identity
    assert set(adls["extra_fields"]) == {"connection_string", "tenant_id"} | identity
    for name in SECRET_FIELDS:  # drawn as password inputs
        assert wasb["extra_fields"][name]["schema"].get("format") == "password", wasb["extra_fields"][name]
    assert wasb["extra_fields"]["tenant_id"]["schema"].get("format") != "password"
    fields = wasb["standard_fields"]
    assert fields["login"]["title"] == "Blob Storage Login (optional)"
    assert fields["password"]["title"] == "Blob Storage Key (optional)"
    assert fields["host"]["title"] == "Account URL (Active Directory Auth)"
    assert fields["port"]["hidden"] and fields["url_schema"]["hidden"]
    assert adls["standard_fields"]["host"]["title"] == "ADLS Gen2 Account Name"


def _account_sas() -> str:
    from azure.storage.blob import AccountSasPermissions, ResourceTypes, generate_account_sas

    return generate_account_sas(
        ACCOUNT,
        ACCOUNT_KEY,
        resource_types=ResourceTypes(service=True, container=True, object=True),
        permission=AccountSasPermissions(read=True, write=True, list=True, add=True, create=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )


def _post_as_the_form_does(api: Api, conn_id: str, azurite: Azurite, password: str, **extra: Any) -> str:
    """POST /api/v2/connections with the body the UI's form sends: the standard fields, empty ones
    left out, and the type's extra fields written into ``extra`` as a JSON text (unset ones null)."""
    fields: dict[str, Any] = dict.fromkeys(SECRET_FIELDS | {"tenant_id", "managed_identity_client_id"})
    fields.update(extra)
    body = {
        "connection_id": conn_id,
        "conn_type": "wasb",
        "host": azurite.blob_endpoint,  # "Account URL": Azurite's path-style Blob endpoint
        "login": ACCOUNT,
        "extra": json.dumps(fields),
    }
    if password:
        body["password"] = password
    answer = api.client.post("/api/v2/connections", json=body)
    assert answer.status_code == 201, answer.text[:500]
    shown = api.client.get(f"/api/v2/connections/{conn_id}")
    assert shown.status_code == 200 and shown.json()["conn_type"] == "wasb"
    return answer.text + shown.text


#: The form's field a credential is entered in, and the kind of access it must give.
FORM_FIELDS = {"password": "key", "shared_access_key": "key", "sas_token": "sas"}


def test_a_wasb_connection_posted_as_the_form_does_is_read_into_the_right_access(
    api: Api, azurite: Azurite
) -> None:
    """The account key in the form's "Blob Storage Key" (password) or "Blob Storage Shared Access
    Key" field, or an account SAS in its "SAS Token" field: one connection each."""
    sas = _account_sas()
    secrets = {field: sas if kind == "sas" else ACCOUNT_KEY for field, kind in FORM_FIELDS.items()}
    answers, arguments = "", []
    for field, secret in secrets.items():
        conn_id = f"lake_storage_{field}"
        if field == "password":
            answers += _post_as_the_form_does(api, conn_id, azurite, password=secret)
        else:
            answers += _post_as_the_form_does(api, conn_id, azurite, password="", **{field: secret})
        arguments += [conn_id, azurite.url(azurite.new_container(), "probe.txt")]

    # read from the metadata database by hubflow's hook, as in the api-server (the status page)
    env = {**api.env, "_AIRFLOW_PROCESS_CONTEXT": "server"}
    read, child = run_json_check("tests.plugins.hooks.storage_connection_check", env, *arguments)
    for field, kind in FORM_FIELDS.items():
        assert read[f"lake_storage_{field}"] == {
            "account_name": ACCOUNT,
            "kind": kind,
            "blob_endpoint": azurite.blob_endpoint,
            "read_back": "written with the connection\n",
            "masked": True,
        }, field
    for text, where in (
        (answers, "the REST API's answers"),
        (child.stdout + child.stderr, "the reading process's output"),
        (api.log.read_text(errors="replace"), "the api-server's log"),
    ):
        for part in (ACCOUNT_KEY, sas, *(p for p in sas.split("&") if p.startswith("sig="))):
            assert part not in text, f"{where} hold a key or SAS"
