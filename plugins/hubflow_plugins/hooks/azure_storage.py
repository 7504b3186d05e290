"""The storage account of a job as an Airflow connection of the Microsoft Azure provider's types.

A job's checkpoint, status folder, landing and lake live in Azure storage; the registry names the
Airflow connection that reaches it (``storage_conn_id``). The connection is read the way the
provider's ``WasbHook`` reads its ``wasb`` connections (and ``adls`` ones the same way), in the same
order, so an existing one works as is:

* ``extra.connection_string`` — a storage connection string; it wins over everything else;
* ``extra.tenant_id`` — a service principal: ``login``/``password`` are its client id and secret
  (the account then comes from ``host`` or ``extra.account_name``);
* ``extra.shared_access_key`` — the account key;
* ``extra.sas_token`` — a SAS;
* ``password`` (or ``extra.account_key``) — the account key;
* none of these: a managed identity (``extra.managed_identity_client_id`` picks a user-assigned
  one), or a Kubernetes workload identity with ``extra.workload_identity_tenant_id``;
* the account: ``login``, or ``host`` (the account name, its ``https://<account>.blob.core.windows.net``
  URL, or a path-style emulator URL such as Azurite's), or ``extra.account_name``;
* ``extra.blob_endpoint`` — the Blob service URL when it is not ``https://<account>.blob.core.windows.net``
  (Azurite, private endpoints; ``extra.account_host`` names a custom host the same way);
* ``extra.client_secret_auth_config.authority`` (or ``extra.authority_host``) — another Entra ID host.

Every secret is registered with Airflow's log masker before it is used. Airflow-side code gets the
job's access with :func:`use_job_storage` (archive, backups, status folder and checkpoint reads open
their URLs through :func:`hubflow_jobs.storage.azure.url_to_fs`); the driver receives it only through
its environment (:func:`job_storage_env`, ``hubflow_jobs.storage.azure.STORAGE_ACCESS_ENV``).

The provider itself is not installed (docs/deployment.md, "Storage credentials"): it would add 49
packages to the image for the connection form; the ``wasb``/``adls`` connection types are entered
by the CLI, the environment or a secrets backend.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from airflow.sdk import BaseHook

from hubflow_jobs.storage.azure import AzureStorageAccess, StorageAccessError, env_for, use_access


class AzureStorageHook(BaseHook):
    """Turns an Airflow connection into the storage access every hubflow client uses."""

    conn_name_attr = "storage_conn_id"
    default_conn_name = "hubflow_storage_default"
    conn_type = "wasb"
    hook_name = "Azure storage (hubflow)"

    def __init__(self, storage_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.storage_conn_id = storage_conn_id

    def get_conn(self) -> Any:
        return self.get_connection(self.storage_conn_id)

    def access(self) -> AzureStorageAccess:
        """The connection as an :class:`AzureStorageAccess`, its secrets masked in every log."""
        conn = self.get_conn()
        try:
            access = access_from_connection(
                conn_type=conn.conn_type or self.conn_type,
                host=conn.host,
                login=conn.login,
                password=conn.password,
                extra=conn.extra_dejson or {},
            )
        except (StorageAccessError, ValueError) as exc:
            raise ValueError(f"Airflow connection {self.storage_conn_id!r}: {_without_input(exc)}") from None
        _mask(access.secrets())
        return access


def job_storage_access(job: Any) -> AzureStorageAccess | None:
    """The storage access of a registered job (its ``storage_conn_id``), or None when it names none.

    A missing or unusable connection raises an error naming the job, the registry key and the
    connection, without any of its values.
    """
    conn_id = getattr(job, "storage_conn_id", None)
    if not conn_id:
        return None
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        return AzureStorageHook(conn_id).access()
    except AirflowNotFoundException:
        raise AirflowNotFoundException(
            f"job {job.name}: storage_conn_id {conn_id!r} in the registry names no Airflow connection. "
            f"Create it (type wasb or adls: login = account name, password = account key, or extra "
            f"sas_token, or tenant_id + client id/secret, or managed_identity_client_id), e.g. "
            f"`airflow connections add {conn_id} --conn-type wasb --conn-login ACCOUNT --conn-password KEY`"
        ) from None
    except ValueError as exc:
        raise ValueError(f"job {job.name}: storage_conn_id {conn_id!r}: {exc}") from None


def use_job_storage(job: Any) -> Any:
    """Authenticate this process's later requests to the job's storage account with its connection
    (archive, backups, status folder, checkpoint inspection all open URLs through
    :func:`hubflow_jobs.storage.azure.url_to_fs`); returns ``job``."""
    access = job_storage_access(job)
    if access is not None:
        use_access(access)
    return job


def job_storage_env(job: Any) -> dict[str, str]:
    """The driver's environment entry holding the job's storage access (secret), or ``{}``."""
    access = job_storage_access(job)
    return env_for([access]) if access is not None else {}


def access_from_connection(
    *, conn_type: str, host: str | None, login: str | None, password: str | None, extra: dict[str, Any]
) -> AzureStorageAccess:
    """The storage access a connection's fields describe (see the module docstring)."""

    def field(name: str) -> Any:
        for key in (name, f"extra__{conn_type}__{name}"):
            value = extra.get(key)
            if value not in (None, ""):
                return value
        return None

    connection_string = field("connection_string")
    pasted = password or ""
    if not connection_string and ("AccountKey=" in pasted or "SharedAccessSignature=" in pasted):
        connection_string = pasted  # a whole connection string pasted into the password
    if connection_string:
        _mask([connection_string])
        return AzureStorageAccess(connection_string=connection_string)
    tenant_id = field("tenant_id")
    host_account, host_endpoint = _account_from_host(host)
    account = field("account_name") or host_account or (login if not tenant_id else None)
    if not account:
        raise StorageAccessError(
            "names no storage account: set login (or host, or extra.account_name) to the account name"
            + (" (with tenant_id set, login is the service principal's client id)" if tenant_id else "")
        )
    values: dict[str, Any] = {"account_name": account}
    # The provider's order (WasbHook.get_conn): service principal, shared key, SAS, the password as
    # a key, extra.account_key, then a managed or workload identity.
    key = field("shared_access_key") or (password if not tenant_id else None) or field("account_key")
    if tenant_id:
        values.update(tenant_id=tenant_id, client_id=login or field("client_id"), client_secret=password)
    elif field("shared_access_key"):
        values["account_key"] = field("shared_access_key")
    elif field("sas_token"):
        values["sas_token"] = field("sas_token")
    elif key:
        values["account_key"] = key
    elif field("workload_identity_tenant_id"):
        values.update(
            workload_identity=True,
            tenant_id=field("workload_identity_tenant_id"),
            client_id=field("managed_identity_client_id") or login,
        )
    elif field("managed_identity_client_id"):
        values["client_id"] = field("managed_identity_client_id")
    auth_config = field("client_secret_auth_config")
    authority = field("authority_host") or (
        auth_config.get("authority") if isinstance(auth_config, dict) else None
    )
    if authority:
        values["authority_host"] = authority
    endpoint = (
        field("blob_endpoint")
        or (f"https://{field('account_host')}" if field("account_host") else None)
        or host_endpoint
    )
    if endpoint:
        values["blob_endpoint"] = endpoint
    return AzureStorageAccess(**{k: v for k, v in values.items() if v is not None})


def _account_from_host(host: str | None) -> tuple[str | None, str | None]:
    """The account and Blob endpoint a connection's host names: a bare account name (``adls``), an
    account URL ``https://<account>.blob.core.windows.net`` (``wasb``) or a path-style emulator URL
    ``http://127.0.0.1:10000/<account>`` (which is also the endpoint)."""
    if not host:
        return None, None
    host = host.strip().rstrip("/")
    if "://" not in host:
        return (host, None) if "." not in host else (host.split(".", 1)[0] or None, None)
    parts = urlsplit(host)
    path = parts.path.strip("/")
    if path:  # path-style: an emulator
        return path.split("/", 1)[0], host
    return (parts.hostname or "").split(".", 1)[0] or None, None


def _without_input(error: Exception) -> str:
    """The problem without the offending value (pydantic quotes its input, which may be a secret)."""
    errors = getattr(error, "errors", None)
    if callable(errors):
        return "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in errors())
    return str(error)


def _mask(secrets: list[str]) -> None:
    try:
        from airflow.sdk.log import mask_secret
    except ImportError:  # pragma: no cover - older task SDK layout
        from airflow.sdk.execution_time.secrets_masker import mask_secret
    for secret in secrets:
        if secret:
            mask_secret(secret)
