"""Read a storage connection from Airflow's metadata database with hubflow's hook, and use it.

Run by ``test_storage_connection_form.py`` in a child process with the test Airflow home's
environment and ``_AIRFLOW_PROCESS_CONTEXT=server`` (the connection comes from the metadata database,
as in the API server, where the status page reads a job's storage). Arguments: pairs of a connection
id and an ``abfs://`` URL of Azurite to write and read back through its access. Prints one JSON
document (by connection id), which says too whether every secret of the access is registered with
Airflow's masker (what hides it in task logs: Airflow's services do not mask their own log lines).
"""

from __future__ import annotations

import json
import sys

from hubflow.storage.azure import forget_accesses, url_to_fs, use_access
from hubflow_plugins.hooks.azure_storage import AzureStorageHook


def read(conn_id: str, url: str) -> dict[str, object]:
    hook = AzureStorageHook(conn_id)
    access = hook.access()
    # the masker task logs go through (airflow.sdk.log.mask_logs)
    from airflow.sdk._shared.secrets_masker import redact

    masked = bool(access.secrets()) and all(redact(f"<{s}>") == "<***>" for s in access.secrets())
    forget_accesses()
    use_access(access)
    fs, path = url_to_fs(url)
    fs.pipe_file(path, b"written with the connection\n")
    return {
        "account_name": access.account_name,
        "kind": "key" if access.account_key else "sas" if access.sas_token else "other",
        "blob_endpoint": access.blob_endpoint,
        "read_back": fs.cat_file(path).decode(),
        "masked": masked,
    }


def main(arguments: list[str]) -> None:
    pairs = zip(arguments[::2], arguments[1::2], strict=True)
    print(json.dumps({conn_id: read(conn_id, url) for conn_id, url in pairs}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
