"""The storage account of a job: an Airflow connection of the Microsoft Azure provider's types.

A job's checkpoint, status folder, landing and lake live in Azure storage; the registry names the
Airflow connection that reaches it (``storage_conn_id``). The connection is the provider's
(``apache-airflow-providers-microsoft-azure``): type ``wasb`` (Azure Blob Storage) or ``adls``
(Azure Data Lake Storage V2), entered in Airflow's connection form, the CLI, ``AIRFLOW_CONN_*`` or a
secrets backend. :class:`AzureStorageHook` is the provider's ``WasbHook`` (its connection form and
``get_conn()``: the provider's ``BlobServiceClient``, or for an ``adls`` connection the
``AzureDataLakeStorageV2Hook``'s ``DataLakeServiceClient``) plus the one thing the provider lacks:
the connection as a :class:`hubflow.storage.azure.AzureStorageAccess`, which fsspec/adlfs,
the Blob SDK and a job's Spark driver (hadoop-azure) all take.

The credential is the one the provider's ``get_conn()`` picks, in the provider's order
(``tests/plugins/hooks/test_azure_storage.py`` checks it against the provider's own clients):

* ``wasb``: ``extra.connection_string``; ``extra.tenant_id`` (a service principal: ``login`` and
  ``password`` are its client id and secret); ``extra.shared_access_key``; ``extra.sas_token``;
  ``password``; ``extra.account_key``; otherwise a managed identity
  (``extra.managed_identity_client_id`` picks a user-assigned one) or, with
  ``extra.workload_identity_tenant_id``, a Kubernetes workload identity;
* ``adls``: ``extra.connection_string``; ``extra.tenant_id``; ``password``; otherwise a managed or
  workload identity, as above.

The account: for ``wasb`` the provider's account URL (``host``: ``https://<account>.blob.core.windows.net``
or a path-style emulator URL such as Azurite's ``http://127.0.0.1:10000/devstoreaccount1``, else
``login``); for ``adls`` ``host`` (the account name) or ``extra.account_url``. hubflow also takes
``extra.account_name``, a bare account name in a ``wasb`` connection's ``host``,
``extra.blob_endpoint`` (or ``extra.account_host``) for a private endpoint or an emulator, and
``extra.client_secret_auth_config.authority`` (or ``extra.authority_host``) for another Entra ID host.

Every secret is registered with Airflow's log masker before it is used. Airflow-side code gets the
job's access with :func:`use_job_storage` (archive, backups, status folder and checkpoint reads open
their URLs through :func:`hubflow.storage.azure.url_to_fs`); the driver receives it only through
its environment (:func:`job_storage_env`, ``hubflow.storage.azure.STORAGE_ACCESS_ENV``).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from airflow.providers.microsoft.azure.hooks.wasb import WasbHook
from airflow.providers.microsoft.azure.utils import get_field, parse_blob_account_url

from hubflow.storage.azure import AzureStorageAccess, StorageAccessError, env_for, use_access


class AzureStorageHook(WasbHook):
    """The provider's ``WasbHook`` for a job's storage connection, giving hubflow's storage access too.

    :param storage_conn_id: the ``wasb`` or ``adls`` connection (a job's ``storage_conn_id``).
    :param public_read: as ``WasbHook``'s: ``get_conn()`` reads anonymously.
    """

    conn_name_attr = "storage_conn_id"
    default_conn_name = "hubflow_storage_default"

    def __init__(self, storage_conn_id: str = default_conn_name, public_read: bool = False) -> None:
        super().__init__(wasb_conn_id=storage_conn_id, public_read=public_read)
        self.storage_conn_id = storage_conn_id

    def get_conn(self) -> Any:
        """The provider's client of the account: ``WasbHook``'s ``BlobServiceClient``, or for an
        ``adls`` connection ``AzureDataLakeStorageV2Hook``'s ``DataLakeServiceClient``."""
        if self.get_connection(self.conn_id).conn_type == "adls":
            # imported here: the module costs about a second (the Data Lake SDKs), and DAG files
            # import this one
            from airflow.providers.microsoft.azure.hooks.data_lake import AzureDataLakeStorageV2Hook

            adls = AzureDataLakeStorageV2Hook(adls_conn_id=self.conn_id, public_read=self.public_read)
            return adls.get_conn()
        return super().get_conn()

    def access(self) -> AzureStorageAccess:
        """The connection as an :class:`AzureStorageAccess`, its secrets masked in every log."""
        conn = self.get_connection(self.storage_conn_id)
        try:
            access = access_from_connection(
                conn_type=conn.conn_type or self.conn_type,
                host=conn.host,
                login=conn.login,
                password=conn.password,
                extra=conn.extra_dejson or {},
                conn_id=self.storage_conn_id,
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
    :func:`hubflow.storage.azure.url_to_fs`); returns ``job``."""
    access = job_storage_access(job)
    if access is not None:
        use_access(access)
    return job


def job_storage_env(job: Any) -> dict[str, str]:
    """The driver's environment entry holding the job's storage access (secret), or ``{}``."""
    access = job_storage_access(job)
    return env_for([access]) if access is not None else {}


def access_from_connection(
    *,
    conn_type: str,
    host: str | None,
    login: str | None,
    password: str | None,
    extra: dict[str, Any],
    conn_id: str = "",
) -> AzureStorageAccess:
    """The storage access a connection's fields describe, the credential chosen in the order of the
    provider's ``get_conn()`` for the connection's type (see the module docstring)."""
    adls = conn_type == "adls"

    def field(name: str) -> Any:
        # the provider's reader: the plain name, else the older ``extra__<type>__<name>``
        return get_field(conn_id=conn_id, conn_type=conn_type, extras=extra, field_name=name) or None

    connection_string = field("connection_string")
    if connection_string:
        _mask([connection_string])
        return AzureStorageAccess(connection_string=connection_string)
    tenant_id = field("tenant_id")
    sas_token = None if adls else field("sas_token")
    sas_url = sas_token if isinstance(sas_token, str) and sas_token.startswith("https") else None
    account, endpoint = _account(
        host=sas_url or (field("account_url") if adls else None) or host,
        login=None if tenant_id else login,  # with tenant_id, login is the service principal
    )
    account = field("account_name") or account
    if not account:
        raise StorageAccessError(
            "names no storage account: set "
            + ("host to the account name" if adls else "login (or host) to the account name or URL")
            + " (or extra.account_name)"
            + (" (with tenant_id set, login is the service principal's client id)" if tenant_id else "")
        )
    values: dict[str, Any] = {"account_name": account}
    if tenant_id:
        values.update(tenant_id=tenant_id, client_id=login or field("client_id"), client_secret=password)
    elif not adls and field("shared_access_key"):
        values["account_key"] = field("shared_access_key")
    elif sas_token:
        # a whole SAS URL (the provider's account_url=sas_token) carries the token in its query
        values["sas_token"] = urlsplit(sas_url).query if sas_url else sas_token
    elif password or (not adls and field("account_key")):
        values["account_key"] = password or field("account_key")
    elif field("workload_identity_tenant_id"):
        values.update(
            workload_identity=True,
            tenant_id=field("workload_identity_tenant_id"),
            client_id=field("managed_identity_client_id") or login,
            federated_token_file=field("federated_token_file"),
        )
    else:  # a managed identity: the system-assigned one, or the user-assigned one named
        values.update(client_id=field("managed_identity_client_id"), msi_endpoint=field("msi_endpoint"))
    auth_config = field("client_secret_auth_config")
    authority = field("authority_host") or (
        auth_config.get("authority") if isinstance(auth_config, dict) else None
    )
    if authority:
        values["authority_host"] = authority
    endpoint = (
        field("blob_endpoint")
        or (f"https://{field('account_host')}" if field("account_host") else None)
        or endpoint
    )
    if endpoint:
        values["blob_endpoint"] = endpoint
    return AzureStorageAccess(**{k: v for k, v in values.items() if v is not None})


def _account(*, host: str | None, login: str | None) -> tuple[str | None, str | None]:
    """The account and, for a path-style emulator URL, the Blob endpoint a connection names.

    ``host`` is an account URL (``https://<account>.blob.core.windows.net``, a DNS name without the
    scheme, or a path-style emulator URL such as ``http://127.0.0.1:10000/devstoreaccount1``, which
    is then the endpoint too) or a bare account name (``adls``); without it, the provider's account
    URL from ``login``.
    """
    host = (host or "").strip()
    if host and "://" not in host and "." not in host.strip("/"):
        return host.strip("/"), None
    if not host and not login:
        return None, None
    # the provider's account URL (WasbHook.get_conn); a URL with a scheme is taken as written
    url = host if "://" in host else parse_blob_account_url(host or None, login)
    parts = urlsplit(url)
    path = parts.path.strip("/")
    if path:  # path-style: an emulator
        return path.split("/", 1)[0], url.rstrip("/")
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
