"""azure-eventhub clients built from the connector options (runs wherever a client is needed).

Auth is either the SAS connection string (plain text, as the user gives it — no JVM encryption)
or Azure AD through azure-identity: a service principal, or ``DefaultAzureCredential`` (managed
identity, workload identity, environment, CLI). What the driver asks the broker with them is in
``hub_metadata.py`` (and ``management.py``); executors read with them in ``receiver_cache.py``.
This module imports no other connector module but the options (and the connection string's
parser), so every one of those can import it.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from .connection_string import EventHubsConnectionString
from .options import EventHubsOptions

log = logging.getLogger(__name__)


class EventHubsClientError(RuntimeError):
    """A broker call failed; the message names the hub (namespace/hub) and never a secret."""


def _credential(options: EventHubsOptions) -> Any:
    try:
        from azure.identity import ClientSecretCredential, DefaultAzureCredential
    except ImportError:  # pragma: no cover - depends on the installation
        raise EventHubsClientError(
            "eventhubs.useAadAuth=true needs azure-identity: pip install 'hubflow-connectors[aad]'."
        ) from None
    extra = _authority_kwargs()
    if options.tenant_id and options.client_id and options.client_secret:
        return ClientSecretCredential(options.tenant_id, options.client_id, options.client_secret, **extra)
    return DefaultAzureCredential(**extra)


def _authority_kwargs() -> dict[str, Any]:
    """``disable_instance_discovery`` when ``AZURE_AUTHORITY_HOST`` names a host MSAL does not know.

    MSAL asks ``login.microsoftonline.com`` to vouch for such a host (instance discovery), which fails
    for a private authority (an on-premises or local Entra ID stand-in); the user naming the host in
    the environment is the trust. Azure's public and sovereign clouds keep the check.
    """
    from urllib.parse import urlsplit

    authority = os.environ.get("AZURE_AUTHORITY_HOST", "").strip()
    if not authority:
        return {}
    from msal.authority import WELL_KNOWN_AUTHORITY_HOSTS

    host = (urlsplit(authority if "://" in authority else f"https://{authority}").hostname or "").lower()
    return {} if host in WELL_KNOWN_AUTHORITY_HOSTS else {"disable_instance_discovery": True}


def _common_kwargs(options: EventHubsOptions) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"eventhub_name": options.eventhub_name, "retry_total": 3}
    if options.custom_endpoint_address:
        from azure.eventhub import TransportType

        # The SDK takes a custom endpoint for a WebSocket one unless told otherwise: sb:// and amqps://
        # mean AMQP over TLS (the fast receiver reads it), wss:// and https:// AMQP over WebSockets.
        websocket = options.custom_endpoint_address.lower().startswith(("wss://", "https://"))
        kwargs["custom_endpoint_address"] = options.custom_endpoint_address
        kwargs["transport_type"] = TransportType.AmqpOverWebsocket if websocket else TransportType.Amqp
    if options.connection_verify:
        if not os.path.isfile(options.connection_verify):
            raise EventHubsClientError(
                f"Option 'eventhubs.connectionVerify' names {options.connection_verify!r}, which is not a "
                "file here: give the path of a PEM file of CA certificates that exists on the driver and "
                "on every executor."
            )
        kwargs["connection_verify"] = options.connection_verify
    return kwargs


def consumer_client(options: EventHubsOptions) -> Any:
    """An ``EventHubConsumerClient`` for the options' hub and consumer group."""
    from azure.eventhub import EventHubConsumerClient

    kwargs = _common_kwargs(options)
    if options.use_aad_auth and not _has_key(options):
        return EventHubConsumerClient(
            fully_qualified_namespace=options.namespace,
            consumer_group=options.consumer_group,
            credential=_credential(options),
            **kwargs,
        )
    return EventHubConsumerClient.from_connection_string(
        options.connection_string, consumer_group=options.consumer_group, **kwargs
    )


def producer_client(options: EventHubsOptions) -> Any:
    """An ``EventHubProducerClient`` for the options' hub."""
    from azure.eventhub import EventHubProducerClient

    kwargs = _common_kwargs(options)
    if options.use_aad_auth and not _has_key(options):
        return EventHubProducerClient(
            fully_qualified_namespace=options.namespace,
            credential=_credential(options),
            **kwargs,
        )
    return EventHubProducerClient.from_connection_string(options.connection_string, **kwargs)


def _has_key(options: EventHubsOptions) -> bool:
    conn = EventHubsConnectionString.parse(options.connection_string or "", skip_malformed=True)
    return conn.has_key


def partition_consumer(
    client: Any,
    options: EventHubsOptions,
    partition_id: str,
    position: Any,
    prefetch: int,
    inclusive: bool = True,
    exclusive: bool | None = None,
) -> Any:
    """The SDK's consumer for one partition of ``client``, not yet attached (runs on executors).

    Both receivers (``receiver_cache.PartitionReceiver``, ``fast_receiver.FastPartitionReceiver``)
    read the consumer's link themselves, so its event callback is never called. ``exclusive``
    (default: ``eventhubs.useExclusiveReceiver``) makes it an epoch receiver with owner level 0.
    """
    owner = 0 if (options.use_exclusive_receiver if exclusive is None else exclusive) else None
    return client._create_consumer(
        options.consumer_group,
        partition_id,
        position,
        _never_called,
        prefetch=prefetch,
        owner_level=owner,
        event_position_inclusive=inclusive,
    )


def _never_called(*_: Any) -> None:  # the consumer's callback; the receivers read its link instead
    return None
