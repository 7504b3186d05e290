"""The Event Hubs connection as an Airflow connection, and the hub's latest sequence numbers.

The connection (``eventhubs_default`` unless a job names another) keeps the whole connection
string in its password field, where Airflow encrypts it and masks it in task logs; the extra may
name the hub (``eventhub_name``, the name job configs and the connector use too) when the string
has no EntityPath. The older extra key ``eventhub`` still works, with a deprecation warning. The
secret reaches a job only as an environment variable of its driver.

A connection may carry an Entra ID (Azure AD) credential instead (extra names as the Azure
provider's Service Bus connection): the extra ``fully_qualified_namespace`` (and ``eventhub_name``)
and no connection string; azure-identity's ``DefaultAzureCredential`` then authenticates (managed
identity, workload identity; ``managed_identity_client_id`` / ``workload_identity_tenant_id`` pick
one), or a service principal: client id in the login, secret in the password, extra ``tenant_id``,
handed to the driver as ``AZURE_*`` environment variables (:meth:`EventHubsHook.credential_environment`). Its
"connection string" is then ``Endpoint=sb://<namespace>/;EntityPath=<hub>`` with no key, which the
job reads as ``eventhubs.useAadAuth=true`` (``hubflow_jobs.eventhubs_config``). The extras
``custom_endpoint_address`` and ``connection_verify`` (a CA bundle) reach a non-default endpoint, e.g.
the emulator's TLS port, from the Airflow side.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

from airflow.sdk import BaseHook

from pyspark_eventhubs import DEFAULT_CONSUMER_GROUP, EventHubsConnectionString

log = logging.getLogger(__name__)

#: The connection extra that names the hub, and the key it replaced.
EVENTHUB_NAME_EXTRA = "eventhub_name"
DEPRECATED_EVENTHUB_EXTRA = "eventhub"
#: The extra that makes a connection an Entra ID one (the Azure provider's name for it).
NAMESPACE_EXTRA = "fully_qualified_namespace"
#: Extras of an Entra ID connection: which identity, and where the Airflow side connects.
MANAGED_IDENTITY_EXTRA, WORKLOAD_TENANT_EXTRA = "managed_identity_client_id", "workload_identity_tenant_id"
ENDPOINT_EXTRA, CA_BUNDLE_EXTRA = "custom_endpoint_address", "connection_verify"
#: A service principal's tenant (its client id is the login, its secret the password).
TENANT_EXTRA = "tenant_id"


def eventhub_name_from_extra(extra: dict[str, Any], conn_id: str) -> str | None:
    """The hub named by a connection's extra, or None; the old key ``eventhub`` is read with a warning."""
    new, old = extra.get(EVENTHUB_NAME_EXTRA), extra.get(DEPRECATED_EVENTHUB_EXTRA)
    if old is None:
        return new
    if new is not None:
        raise ValueError(
            f"Airflow connection {conn_id!r}: its extra sets both {EVENTHUB_NAME_EXTRA!r} and the "
            f"deprecated {DEPRECATED_EVENTHUB_EXTRA!r}; keep only {EVENTHUB_NAME_EXTRA!r}"
        )
    message = (
        f"Airflow connection {conn_id!r}: the extra key {DEPRECATED_EVENTHUB_EXTRA!r} is deprecated; "
        f"rename it to {EVENTHUB_NAME_EXTRA!r}"
    )
    log.warning("%s", message)  # in the task log
    warnings.warn(message, DeprecationWarning, stacklevel=2)
    return old


def _parsed(connection_string: str) -> EventHubsConnectionString:
    """The fields of a connection's string; the connector judges a malformed one when a job reads it."""
    return EventHubsConnectionString.parse(connection_string, skip_malformed=True)


class EventHubsHook(BaseHook):
    """Reads the Event Hubs connection and asks the hub for its partitions' latest positions."""

    conn_name_attr = "eventhubs_conn_id"
    default_conn_name = "eventhubs_default"
    conn_type = "generic"
    hook_name = "Azure Event Hubs (hubflow)"

    def __init__(self, eventhubs_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.eventhubs_conn_id = eventhubs_conn_id

    def get_conn(self) -> Any:
        return self.get_connection(self.eventhubs_conn_id)

    def uses_credential(self) -> bool:
        """Whether the connection carries an Entra ID credential (a namespace, no connection string)."""
        conn = self.get_conn()
        has_string = _parsed(conn.password or "").endpoint is not None
        return not has_string and bool((conn.extra_dejson or {}).get(NAMESPACE_EXTRA))

    def credential_environment(self) -> dict[str, str]:
        """The environment that makes ``DefaultAzureCredential`` use this connection's identity, for a
        job's driver (never its command line): a service principal (login = client id, password =
        client secret, extra ``tenant_id``) as ``AZURE_TENANT_ID`` / ``AZURE_CLIENT_ID`` /
        ``AZURE_CLIENT_SECRET``; a user-assigned managed identity (``managed_identity_client_id``) as
        ``AZURE_CLIENT_ID``. Empty for a connection string or the platform's default identity."""
        if not self.uses_credential():
            return {}
        conn = self.get_conn()
        extra = conn.extra_dejson or {}
        if conn.password:
            if not (conn.login and extra.get(TENANT_EXTRA)):
                raise ValueError(
                    f"Airflow connection {self.eventhubs_conn_id!r}: a service principal needs its client id "
                    f"in the login, its secret in the password and the extra {TENANT_EXTRA!r}"
                )
            self.mask(conn.password)
            return {
                "AZURE_TENANT_ID": str(extra[TENANT_EXTRA]),
                "AZURE_CLIENT_ID": str(conn.login),
                "AZURE_CLIENT_SECRET": conn.password,
            }
        if extra.get(MANAGED_IDENTITY_EXTRA):
            return {"AZURE_CLIENT_ID": str(extra[MANAGED_IDENTITY_EXTRA])}
        return {}

    def connection_string(self) -> str:
        """The connection string, EntityPath added from the extra when the string has none; for an
        Entra ID connection, ``Endpoint=sb://<namespace>/;EntityPath=<hub>`` (no secret in it)."""
        conn = self.get_conn()
        if self.uses_credential():
            extra = conn.extra_dejson or {}
            hub = eventhub_name_from_extra(extra, self.eventhubs_conn_id)
            if not hub:
                raise ValueError(
                    f"Airflow connection {self.eventhubs_conn_id!r} (Entra ID: {NAMESPACE_EXTRA!r} in its "
                    f"extra) must name the hub in its extra {EVENTHUB_NAME_EXTRA!r}"
                )
            return f"Endpoint=sb://{extra[NAMESPACE_EXTRA]}/;EntityPath={hub}"
        secret = conn.password or ""
        if _parsed(secret).endpoint is None:
            raise ValueError(
                f"Airflow connection {self.eventhubs_conn_id!r} must hold the Event Hubs connection string "
                "(Endpoint=sb://...;SharedAccessKeyName=...;SharedAccessKey=...) in its password field"
            )
        hub = eventhub_name_from_extra(conn.extra_dejson or {}, self.eventhubs_conn_id)
        if hub and _parsed(secret).entity_path is None:
            secret = secret.rstrip(";") + f";EntityPath={hub}"
        self.mask(secret)
        return secret

    @staticmethod
    def mask(secret: str) -> None:
        """Register ``secret`` (and its key) with Airflow's secrets masker for every log line."""
        try:
            from airflow.sdk.log import mask_secret
        except ImportError:  # pragma: no cover - older task SDK layout
            from airflow.sdk.execution_time.secrets_masker import mask_secret
        mask_secret(secret)
        key = _parsed(secret).key
        if key:
            mask_secret(key)

    def latest_sequence_numbers(
        self, consumer_group: str = DEFAULT_CONSUMER_GROUP
    ) -> tuple[str, dict[str, int]]:
        """``(hub, {partition: last enqueued sequence number + 1})``: where a reader that is caught up is."""
        from pyspark_eventhubs.positions import latest_sequence_number

        client = self._consumer_client(consumer_group)
        with client:
            hub = client.eventhub_name
            latest = {}
            for partition in client.get_partition_ids():
                props = client.get_partition_properties(partition)
                latest[partition] = latest_sequence_number(props)
        return hub, latest

    def _consumer_client(self, consumer_group: str) -> Any:
        """An SDK consumer client: from the connection string, or with the Entra ID credential."""
        from azure.eventhub import EventHubConsumerClient

        if not self.uses_credential():
            return EventHubConsumerClient.from_connection_string(
                self.connection_string(), consumer_group=consumer_group
            )
        from azure.identity import DefaultAzureCredential

        extra = self.get_conn().extra_dejson or {}
        credential = DefaultAzureCredential(
            managed_identity_client_id=extra.get(MANAGED_IDENTITY_EXTRA),
            workload_identity_tenant_id=extra.get(WORKLOAD_TENANT_EXTRA),
        )
        kwargs: dict[str, Any] = {}
        if extra.get(ENDPOINT_EXTRA):
            from azure.eventhub import TransportType

            kwargs = {"custom_endpoint_address": extra[ENDPOINT_EXTRA], "transport_type": TransportType.Amqp}
        if extra.get(CA_BUNDLE_EXTRA):
            kwargs["connection_verify"] = extra[CA_BUNDLE_EXTRA]
        return EventHubConsumerClient(
            extra[NAMESPACE_EXTRA],
            eventhub_name=eventhub_name_from_extra(extra, self.eventhubs_conn_id),
            consumer_group=consumer_group,
            credential=credential,
            **kwargs,
        )
