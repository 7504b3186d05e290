"""Azure storage URLs and credentials: the one place that turns them into what each client needs.

hubflow reaches the same storage account from three kinds of clients, and each wants the credential
in its own shape:

* fsspec/adlfs (the Airflow side: inspector, archive, status folders) — storage options;
* the Azure Blob SDK (conditional writes, server-side copies) — an account URL and a credential;
* Spark's ABFS driver (hadoop-azure: checkpoints, landing, lake) — ``fs.azure.*`` Hadoop settings.

:class:`AzureStorageAccess` holds one account's credential once and gives all three. It is never
written to a log: its ``repr`` masks every secret, and it travels to a job's driver only as the
environment variable :data:`STORAGE_ACCESS_ENV` (set by the supervisor from an Airflow connection,
like the Event Hubs connection string), never on a command line or in a config file.

A process keeps the accesses it was given in a small registry keyed by account
(:func:`use_access`; the driver's environment is read on first use), so any code that opens an Azure
URL — :func:`url_to_fs`, :func:`blob_service_for` — authenticates without passing credentials
around. URLs name their account (``abfss://<container>@<account>.dfs.core.windows.net/<path>``);
``az://<container>/<path>`` and ``abfs://<container>/<path>`` use the only registered account.
With no registered access, adlfs and the SDK fall back to ``DefaultAzureCredential`` (managed
identity, workload identity, ``AZURE_*`` environment variables).

No Spark and no Airflow import here; the Azure SDK is imported only when a client is built.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from pydantic import BaseModel, ConfigDict, SecretStr, model_validator

#: URL schemes that name Azure storage (adlfs registers all three; Spark's ABFS driver reads the
#: ``abfs``/``abfss`` ones).
AZURE_PROTOCOLS = ("abfs", "abfss", "az")
#: The driver's environment variable holding its storage access (JSON, secret).
STORAGE_ACCESS_ENV = "HUBFLOW_AZURE_STORAGE"
#: ``spark.redaction.regex`` of every hubflow job (its one owner; :mod:`hubflow_jobs.runtime.session`
#: sets it): Spark's default, the Event Hubs connector's words (``pyspark_eventhubs.redaction``, of
#: which it is a superset) and the Hadoop/Azure storage keys Spark's default does not match -
#: ``fs.azure.account.key.<host>`` and ``fs.azure.sas.*`` (the OAuth client secret, SAS fixed token
#: and refresh token already match ``secret``/``token``), and Kafka's ``sasl.jaas.config`` (Spark's
#: Kafka source option ``kafka.sasl.jaas.config`` of a ``kind: eventhubs_kafka`` source holds the
#: connection string; masked by its key whatever login module it names). Keys and values that match
#: are shown as ``*********(redacted)`` in the Spark UI's environment page, the REST API and event logs.
SPARK_REDACTION_REGEX = (
    r"(?i)secret|password|token|access[.]?key|connectionstring|sharedaccesssignature"
    r"|account[.]key|fs[.]azure[.]sas|sasl[.]jaas"
)

_DFS_SUFFIX = ".dfs.core.windows.net"
_BLOB_SUFFIX = ".blob.core.windows.net"


class StorageAccessError(ValueError):
    """A storage credential or URL cannot be used; the message names the field and the fix."""


@dataclass(frozen=True)
class BlobUrl:
    """An Azure storage URL split into account (None when the URL names none), container and path.

    ``path`` has no leading or trailing ``/``; it is ``""`` for the container's root.
    """

    protocol: str
    account: str | None
    container: str
    path: str

    @classmethod
    def parse(cls, url: str) -> BlobUrl | None:
        """The parts of ``url``, or None when it is not an Azure storage URL (a local path...)."""
        if "://" not in url:
            return None
        parts = urlsplit(url)
        protocol = parts.scheme.lower()
        if protocol not in AZURE_PROTOCOLS:
            return None
        path = unquote(parts.path).strip("/")
        if "@" in parts.netloc:
            container, host = parts.netloc.split("@", 1)
            host = host.lower()
            for suffix in (_DFS_SUFFIX, _BLOB_SUFFIX):
                if host.endswith(suffix):
                    host = host[: -len(suffix)]
            account: str | None = host.split(".", 1)[0] or None
        else:
            container, account = parts.netloc, None
        if not container:
            raise StorageAccessError(
                f"{url} names no container: write {protocol}://<container>@<account>.dfs.core.windows.net/<path>"
            )
        return cls(protocol, account, container, path)

    def child(self, *names: str) -> BlobUrl:
        """The URL of ``names`` below this one."""
        path = "/".join(p.strip("/") for p in (self.path, *names) if p.strip("/"))
        return BlobUrl(self.protocol, self.account, self.container, path)

    def __str__(self) -> str:
        host = f"{self.container}@{self.account}{_DFS_SUFFIX}" if self.account else self.container
        return f"{self.protocol}://{host}/{self.path}"


class AzureStorageAccess(BaseModel):
    """How to reach one storage account. Exactly one way to authenticate, or none (DefaultAzureCredential).

    Fields (the names of Airflow's ``wasb``/``adls`` connection extras):

    * ``account_name`` — the storage account;
    * ``account_key`` — shared key; or ``sas_token``; or ``tenant_id`` + ``client_id`` +
      ``client_secret`` (service principal); or ``workload_identity`` with ``tenant_id`` +
      ``client_id`` (Kubernetes workload identity: the federated token file named by
      ``AZURE_FEDERATED_TOKEN_FILE`` in the driver's environment); or none of them: a managed
      identity (``client_id`` picks a user-assigned one);
    * ``authority_host`` — the Entra ID host tokens come from when it is not
      ``https://login.microsoftonline.com`` (sovereign clouds; a local token issuer in tests). A host
      MSAL does not know is used without instance discovery (MSAL would ask
      ``login.microsoftonline.com`` to vouch for it): naming it is the trust;
    * ``msi_endpoint`` — a managed identity's token endpoint for Spark (hadoop-azure's
      ``MsiTokenProvider``, IMDS form) when it is not ``http://169.254.169.254/metadata/identity/oauth2/token``;
      the Python side's azure-identity finds IMDS through ``AZURE_POD_IDENTITY_AUTHORITY_HOST``
      (or App Service's ``IDENTITY_ENDPOINT``) instead;
    * ``federated_token_file`` — a workload identity's federated token file when the driver's
      ``AZURE_FEDERATED_TOKEN_FILE`` does not name it (read again at every token renewal);
    * ``connection_string`` — instead of the above (``AccountName=...;AccountKey=...``);
    * ``blob_endpoint`` — the Blob service URL when it is not ``https://<account>.blob.core.windows.net``
      (Azurite: ``http://127.0.0.1:10000/devstoreaccount1``, path-style; private endpoints).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    account_name: str
    account_key: SecretStr | None = None
    sas_token: SecretStr | None = None
    tenant_id: str | None = None
    client_id: str | None = None
    client_secret: SecretStr | None = None
    workload_identity: bool = False
    authority_host: str | None = None
    msi_endpoint: str | None = None
    federated_token_file: str | None = None
    blob_endpoint: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_connection_string(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not data.get("connection_string"):
            return data
        data = dict(data)
        text = data.pop("connection_string")
        text = text.get_secret_value() if isinstance(text, SecretStr) else str(text)
        fields = parse_connection_string(text)
        mapped = {
            "account_name": fields.get("AccountName"),
            "account_key": fields.get("AccountKey"),
            "sas_token": fields.get("SharedAccessSignature"),
            "blob_endpoint": fields.get("BlobEndpoint"),
        }
        if not mapped["blob_endpoint"] and fields.get("EndpointSuffix"):
            protocol = fields.get("DefaultEndpointsProtocol", "https")
            mapped["blob_endpoint"] = f"{protocol}://{mapped['account_name']}.blob.{fields['EndpointSuffix']}"
        if mapped["blob_endpoint"] == f"https://{mapped['account_name']}{_BLOB_SUFFIX}":
            mapped["blob_endpoint"] = None
        if not mapped["account_name"] and mapped["blob_endpoint"]:
            mapped["account_name"] = _account_from_endpoint(mapped["blob_endpoint"])
        for key, value in mapped.items():
            if value and not data.get(key):
                data[key] = value
        return data

    @model_validator(mode="after")
    def _one_credential(self) -> AzureStorageAccess:
        ways = [
            name
            for name, present in (
                ("account_key", self.account_key is not None),
                ("sas_token", self.sas_token is not None),
                ("client_secret", self.client_secret is not None),
            )
            if present
        ]
        if len(ways) > 1:
            raise StorageAccessError(
                f"storage account {self.account_name}: give one credential, not {' and '.join(ways)}"
            )
        if self.client_secret is not None and not (self.tenant_id and self.client_id):
            raise StorageAccessError(
                f"storage account {self.account_name}: a client_secret needs tenant_id and client_id"
            )
        if self.workload_identity and (ways or not (self.tenant_id and self.client_id)):
            raise StorageAccessError(
                f"storage account {self.account_name}: a workload identity needs tenant_id and client_id "
                "and no other credential"
            )
        if self.msi_endpoint is not None and (ways or self.workload_identity):
            raise StorageAccessError(
                f"storage account {self.account_name}: msi_endpoint ({self.msi_endpoint}) is for a managed "
                "identity; remove it, or remove the other credential"
            )
        if self.msi_endpoint is not None and urlsplit(self.msi_endpoint).scheme not in ("http", "https"):
            raise StorageAccessError(
                f"storage account {self.account_name}: msi_endpoint {self.msi_endpoint!r} is not an http(s) "
                "URL; write e.g. http://169.254.169.254/metadata/identity/oauth2/token"
            )
        if self.federated_token_file is not None and not self.workload_identity:
            raise StorageAccessError(
                f"storage account {self.account_name}: federated_token_file is for a workload identity "
                "(workload_identity with tenant_id and client_id)"
            )
        return self

    # -- what each client needs ---------------------------------------------------------------

    @property
    def blob_account_url(self) -> str:
        """The Blob service URL of the account (path-style for Azurite)."""
        return (self.blob_endpoint or f"https://{self.account_name}{_BLOB_SUFFIX}").rstrip("/")

    @property
    def authority(self) -> str:
        """The Entra ID host tokens are asked of (``authority_host``, else ``AZURE_AUTHORITY_HOST``)."""
        host = (
            self.authority_host
            or os.environ.get("AZURE_AUTHORITY_HOST")
            or "https://login.microsoftonline.com"
        )
        return host.rstrip("/")

    @property
    def token_file(self) -> str | None:
        """A workload identity's federated token file (``federated_token_file``, else
        ``AZURE_FEDERATED_TOKEN_FILE`` of this process)."""
        return self.federated_token_file or os.environ.get("AZURE_FEDERATED_TOKEN_FILE") or None

    @property
    def is_emulator(self) -> bool:
        """True for a path-style endpoint such as Azurite's ``http://127.0.0.1:10000/<account>``."""
        return bool(self.blob_endpoint) and urlsplit(self.blob_endpoint or "").path.strip("/") != ""

    def connection_string(self) -> str | None:
        """A connection string for a shared key or SAS (secret: never log it), else None."""
        if self.account_key is not None:
            return (
                f"DefaultEndpointsProtocol={urlsplit(self.blob_account_url).scheme};"
                f"AccountName={self.account_name};AccountKey={self.account_key.get_secret_value()};"
                f"BlobEndpoint={self.blob_account_url};"
            )
        if self.sas_token is not None:
            return (
                f"BlobEndpoint={self.blob_account_url};"
                f"SharedAccessSignature={self.sas_token.get_secret_value().lstrip('?')}"
            )
        return None

    def fsspec_options(self) -> dict[str, Any]:
        """adlfs storage options (``fsspec.core.url_to_fs(url, **options)``); they hold the secret."""
        connection_string = self.connection_string()
        if connection_string is not None:
            return {"connection_string": connection_string, "account_name": self.account_name}
        options: dict[str, Any] = {"account_name": self.account_name, "anon": False}
        if self.client_secret is not None or self.workload_identity or self.client_id:
            # one token credential per identity in the process, renewing its token for every client
            options["credential"] = self.credential()
        if self.blob_endpoint:
            options["account_host"] = urlsplit(self.blob_endpoint).netloc
        return options

    def credential(self) -> Any:
        """The credential the Blob SDK takes for this account (a key, a SAS or a token credential)."""
        if self.account_key is not None:
            return {"account_name": self.account_name, "account_key": self.account_key.get_secret_value()}
        if self.sas_token is not None:
            return self.sas_token.get_secret_value().lstrip("?")
        secret = self.client_secret.get_secret_value() if self.client_secret is not None else None
        kind = "principal" if secret else "workload" if self.workload_identity else "managed"
        token_file = self.token_file if kind == "workload" else None
        return _token_credential(kind, self.tenant_id, self.client_id, secret, self.authority, token_file)

    def hadoop_conf(self) -> dict[str, str]:
        """Hadoop settings (``fs.azure.*``) for Spark's ABFS driver to reach this account.

        Per-account keys for ``<account>.dfs.core.windows.net``. An identity gets hadoop-azure's token
        provider for it: ``ClientCredsTokenProvider`` (a service principal: the v1 token endpoint
        ``<authority>/<tenant>/oauth2/token``), ``WorkloadIdentityTokenProvider`` (a client assertion
        read from the token file, posted to ``<authority>/<tenant>/oauth2/v2.0/token``) or
        ``MsiTokenProvider`` (IMDS, or ``msi_endpoint``). Each asks for a new token when the one it has
        has less than 5 minutes left (``AccessTokenProvider.FIVE_MINUTES``). An emulator endpoint
        (Azurite) also gets the settings that make ABFS speak plain HTTP to the Blob endpoint of a
        flat-namespace account at that host and port (``fs.azure.abfs.endpoint`` is global: one
        emulator per job).
        """
        host = f"{self.account_name}{_DFS_SUFFIX}"
        conf: dict[str, str] = {}
        if self.account_key is not None:
            conf[f"fs.azure.account.auth.type.{host}"] = "SharedKey"
            conf[f"fs.azure.account.key.{host}"] = self.account_key.get_secret_value()
        elif self.sas_token is not None:
            conf[f"fs.azure.account.auth.type.{host}"] = "SAS"
            conf[f"fs.azure.sas.fixed.token.{host}"] = self.sas_token.get_secret_value().lstrip("?")
        else:
            conf[f"fs.azure.account.auth.type.{host}"] = "OAuth"
            if self.client_secret is not None:
                conf[f"fs.azure.account.oauth.provider.type.{host}"] = (
                    "org.apache.hadoop.fs.azurebfs.oauth2.ClientCredsTokenProvider"
                )
                conf[f"fs.azure.account.oauth2.client.endpoint.{host}"] = (
                    f"{self.authority}/{self.tenant_id}/oauth2/token"
                )
                conf[f"fs.azure.account.oauth2.client.id.{host}"] = self.client_id or ""
                conf[f"fs.azure.account.oauth2.client.secret.{host}"] = self.client_secret.get_secret_value()
            elif self.workload_identity:
                conf[f"fs.azure.account.oauth.provider.type.{host}"] = (
                    "org.apache.hadoop.fs.azurebfs.oauth2.WorkloadIdentityTokenProvider"
                )
                conf[f"fs.azure.account.oauth2.msi.tenant.{host}"] = self.tenant_id or ""
                conf[f"fs.azure.account.oauth2.client.id.{host}"] = self.client_id or ""
                conf[f"fs.azure.account.oauth2.msi.authority.{host}"] = f"{self.authority}/"
                token_file = self.token_file  # the workload identity webhook sets it in the pod
                if token_file:
                    conf[f"fs.azure.account.oauth2.token.file.{host}"] = token_file
            else:
                conf[f"fs.azure.account.oauth.provider.type.{host}"] = (
                    "org.apache.hadoop.fs.azurebfs.oauth2.MsiTokenProvider"
                )
                if self.msi_endpoint:
                    conf[f"fs.azure.account.oauth2.msi.endpoint.{host}"] = self.msi_endpoint
                if self.tenant_id:
                    conf[f"fs.azure.account.oauth2.msi.tenant.{host}"] = self.tenant_id
                    # hadoop-azure sends <authority><tenant> as IMDS's "authority" parameter
                    conf[f"fs.azure.account.oauth2.msi.authority.{host}"] = f"{self.authority}/"
                if self.client_id:
                    conf[f"fs.azure.account.oauth2.client.id.{host}"] = self.client_id
        if self.is_emulator:
            endpoint = urlsplit(self.blob_endpoint or "")
            conf.update(
                {
                    "fs.azure.abfs.endpoint": endpoint.netloc,
                    "fs.azure.always.use.https": str(endpoint.scheme == "https").lower(),
                    f"fs.azure.account.hns.enabled.{host}": "false",
                    "fs.azure.fns.account.service.type": "BLOB",
                    # The default Apache HTTP client of ABFS insists on TLS; the JDK one speaks HTTP.
                    "fs.azure.networking.library": "JDK_HTTP_URL_CONNECTION",
                }
            )
        return conf

    def to_json(self) -> str:
        """The access as JSON, secrets included: only for :data:`STORAGE_ACCESS_ENV`."""
        document = self.model_dump(exclude_none=True)
        for key, value in list(document.items()):
            if isinstance(value, SecretStr):
                document[key] = value.get_secret_value()
        return json.dumps(document, sort_keys=True)

    def secrets(self) -> list[str]:
        """Every secret value of this access (to register with a log masker)."""
        values = [s.get_secret_value() for s in (self.account_key, self.sas_token, self.client_secret) if s]
        connection_string = self.connection_string()
        return values + ([connection_string] if connection_string else [])


def known_to_msal(authority: str) -> bool:
    """True when MSAL knows ``authority``'s host (Azure's public and sovereign clouds); MSAL asks
    ``login.microsoftonline.com`` to vouch for any other host (instance discovery), which fails
    for a private authority, so hubflow turns that off for a host the user named."""
    from msal.authority import WELL_KNOWN_AUTHORITY_HOSTS

    return (urlsplit(authority).hostname or "").lower() in WELL_KNOWN_AUTHORITY_HOSTS


@functools.lru_cache(maxsize=32)
def _token_credential(
    kind: str,
    tenant_id: str | None,
    client_id: str | None,
    secret: str | None,
    authority: str,
    token_file: str | None = None,
) -> Any:
    """One azure-identity credential per identity in this process: it caches its token and asks for
    a new one before the old expires, so every client sharing it renews together."""
    import azure.identity as identity

    if kind == "principal":
        return identity.ClientSecretCredential(
            tenant_id or "",
            client_id or "",
            secret or "",
            authority=authority,
            disable_instance_discovery=not known_to_msal(authority),
        )
    if kind == "workload":
        return identity.WorkloadIdentityCredential(
            tenant_id=tenant_id, client_id=client_id, authority=authority, token_file_path=token_file
        )
    if client_id:
        return identity.ManagedIdentityCredential(client_id=client_id)
    return identity.DefaultAzureCredential()


def parse_connection_string(text: str) -> dict[str, str]:
    """``Key=Value;Key=Value`` as a dict (values may contain ``=``, e.g. base64 keys)."""
    fields: dict[str, str] = {}
    for part in text.strip().strip(";").split(";"):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep:
            raise StorageAccessError(
                "the storage connection string is not Key=Value;Key=Value... (a part has no '=')"
            )
        fields[key.strip()] = value.strip()
    return fields


def _account_from_endpoint(endpoint: str) -> str | None:
    parts = urlsplit(endpoint)
    path = parts.path.strip("/")
    return path.split("/", 1)[0] if path else (parts.hostname or "").split(".", 1)[0] or None


# -- the process's accesses ---------------------------------------------------------------------

_lock = threading.Lock()
_accesses: dict[str, AzureStorageAccess] = {}
_env_loaded = False


def use_access(access: AzureStorageAccess) -> None:
    """Authenticate this process's later Azure requests to ``access.account_name`` with ``access``."""
    with _lock:
        key = access.account_name.lower()
        if _accesses.get(key) != access:  # an equal one keeps its clients (and their connections)
            _accesses[key] = access


def forget_accesses() -> None:
    """Drop every registered access (tests); the environment is read again on next use."""
    global _env_loaded
    with _lock:
        _accesses.clear()
        _env_loaded = False
    _token_credential.cache_clear()


def accesses_from_env(environ: dict[str, str] | None = None) -> list[AzureStorageAccess]:
    """The accesses in :data:`STORAGE_ACCESS_ENV` (one JSON object or a list of them)."""
    text = (os.environ if environ is None else environ).get(STORAGE_ACCESS_ENV, "").strip()
    if not text:
        return []
    try:
        value = json.loads(text)
    except ValueError:
        raise StorageAccessError(f"{STORAGE_ACCESS_ENV} is not valid JSON") from None
    documents = value if isinstance(value, list) else [value]
    try:
        return [AzureStorageAccess.model_validate(document) for document in documents]
    except ValueError as exc:
        # The pydantic message would quote the input, secrets included: name the fields only.
        fields = sorted({str(e.get("loc", ("?",))[0]) for e in getattr(exc, "errors", list)()})
        raise StorageAccessError(
            f"{STORAGE_ACCESS_ENV} holds an invalid storage access (fields: {', '.join(fields) or '?'})"
        ) from None


def spark_hadoop_conf(accesses: list[AzureStorageAccess]) -> dict[str, str]:
    """``spark.hadoop.fs.azure.*`` settings for a session reaching every account of ``accesses``.

    Set on the session builder inside the driver (never as spark-submit ``--conf``): Spark hands
    ``spark.hadoop.*`` to its executors over RPC, and :data:`SPARK_REDACTION_REGEX` masks the secret ones
    wherever Spark shows its configuration.
    """
    return {
        f"spark.hadoop.{key}": value for access in accesses for key, value in access.hadoop_conf().items()
    }


def env_for(accesses: list[AzureStorageAccess]) -> dict[str, str]:
    """The environment that gives a child process (a job's driver) these accesses."""
    if not accesses:
        return {}
    documents = [json.loads(access.to_json()) for access in accesses]
    return {STORAGE_ACCESS_ENV: json.dumps(documents[0] if len(documents) == 1 else documents)}


def _registered() -> dict[str, AzureStorageAccess]:
    global _env_loaded
    with _lock:
        if not _env_loaded:
            _env_loaded = True
            for access in accesses_from_env():
                _accesses.setdefault(access.account_name.lower(), access)
        return dict(_accesses)


def access_for(url: str | BlobUrl) -> AzureStorageAccess | None:
    """The registered access for the account ``url`` names (the only one when it names none)."""
    parsed = BlobUrl.parse(url) if isinstance(url, str) else url
    if parsed is None:
        return None
    registered = _registered()
    if parsed.account:
        return registered.get(parsed.account.lower())
    return next(iter(registered.values())) if len(registered) == 1 else None


def all_accesses() -> list[AzureStorageAccess]:
    """Every access this process knows (registered or from its environment)."""
    return list(_registered().values())


def url_to_fs(url: str, storage_options: dict[str, Any] | None = None) -> tuple[Any, str]:
    """``fsspec.core.url_to_fs`` that authenticates Azure URLs with the registered access.

    Explicit ``storage_options`` win. Azure listings are never cached (see below). Local paths and
    other schemes are passed through unchanged.
    """
    import fsspec

    options = dict(storage_options or {})
    if BlobUrl.parse(url) is not None:
        if not options:
            access = access_for(url)
            options = access.fsspec_options() if access is not None else {}
        # adlfs keeps every listing for the life of the (cached) filesystem object: a long-lived
        # reader such as the status page would never see a new batch. Always list afresh.
        options.setdefault("use_listings_cache", False)
    return fsspec.core.url_to_fs(url, **options)


def blob_service_for(url: str | BlobUrl) -> Any:
    """A ``BlobServiceClient`` for the account of ``url`` (shared per account in this process)."""
    parsed = BlobUrl.parse(url) if isinstance(url, str) else url
    if parsed is None:
        raise StorageAccessError(f"{url} is not an Azure storage URL (abfss://, abfs:// or az://)")
    access = access_for(parsed)
    if access is None and parsed.account is None:
        raise StorageAccessError(
            f"{url} names no storage account and no single account is configured: write "
            f"{parsed.protocol}://{parsed.container}@<account>.dfs.core.windows.net/..."
        )
    key = (access.account_name if access else parsed.account or "").lower()
    with _lock:
        client = _clients.get(key)
        if client is None or _client_access.get(key) is not access:
            client = _new_service_client(access, parsed.account)
            _clients[key], _client_access[key] = client, access
        return client


_clients: dict[str, Any] = {}
_client_access: dict[str, AzureStorageAccess | None] = {}


#: HTTP connections kept per account: enough for the parallel copies of archive and backup runs.
CONNECTION_POOL_SIZE = 64


def _new_service_client(access: AzureStorageAccess | None, account: str | None) -> Any:
    import requests
    from azure.core.pipeline.transport import RequestsTransport
    from azure.storage.blob import BlobServiceClient

    session = requests.Session()
    adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=CONNECTION_POOL_SIZE)
    for prefix in ("http://", "https://"):
        session.mount(prefix, adapter)
    pool = {"transport": RequestsTransport(session=session, session_owner=True)}
    if access is None:
        from azure.identity import DefaultAzureCredential

        return BlobServiceClient(
            f"https://{account}{_BLOB_SUFFIX}", credential=DefaultAzureCredential(), **pool
        )
    return BlobServiceClient(access.blob_account_url, credential=access.credential(), **pool)
