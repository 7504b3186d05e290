"""The $cbs and $management nodes: put-token (SAS or Entra ID JWT), and READ of event hub and partition
properties.

Replies carry exactly the fields and types the SDK parses: ``status-code`` (int),
``status-description`` (and ``statusDescription``, which the SDK reads on $management), and for READ an
amqp-value map (offsets as strings, times as AMQP timestamps).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from .auth import (
    EVENTHUBS_AUDIENCES,
    JWT_TOKEN_TYPE,
    Grant,
    TokenError,
    audience_path,
    grant_covers,
    verify_jwt,
    verify_sas_token,
)
from .codec import Int, StringArray, Timestamp
from .messages import (
    HUB_TYPE,
    LAST_ENQUEUED_OFFSET,
    LAST_ENQUEUED_SEQUENCE_NUMBER,
    LAST_ENQUEUED_TIME_UTC,
    PARTITION_TYPE,
)
from .store import Broker


def put_token(broker: Broker, props: dict, token: Any) -> tuple[int, str, Grant | None]:
    """Answer a $cbs put-token request: (status code, description, the grant when accepted).

    As on the service: a bad or expired token is 401, and a token for an event hub the namespace does
    not have is 404 "could not be found" (the client fails at once instead of attaching). A token for
    the whole namespace (no path) is accepted.
    """
    if props.get("operation") != "put-token":
        operation = props.get("operation")
        return 400, f"Unsupported $cbs operation {operation!r}; only put-token is supported.", None
    name = props.get("name")
    if props.get("type") == JWT_TOKEN_TYPE:
        try:
            grant = verify_token(broker, token, name if isinstance(name, str) else "")
        except TokenError as exc:
            return 401, f"{exc}.", None
        hub_name = grant.path.split("/", 1)[0]
        if hub_name and broker.hub(hub_name) is None:
            return 404, entity_not_found(str(name), hub_name), None
        return 202, "Accepted", grant
    try:
        grant = verify_sas_token(str(token), broker.config.key_name, broker.config.key)
    except TokenError as exc:
        return 401, f"InvalidSignature: {exc}.", None
    if isinstance(name, str) and audience_path(name) != grant.path:
        return 401, "InvalidAudience: the token's audience does not match the 'name' of the request.", None
    hub_name = grant.path.split("/", 1)[0]
    if hub_name and broker.hub(hub_name) is None:
        return 404, entity_not_found(name if isinstance(name, str) else grant.path, hub_name), None
    return 202, "Accepted", grant


def verify_token(
    broker: Broker, token: Any, scope: str, audiences: tuple[str, ...] = EVENTHUBS_AUDIENCES
) -> Grant:
    """Verify a SAS token or an Entra ID JWT (for ``scope``, the entity it is put for; its ``aud`` one
    of ``audiences``); raise TokenError. The Kafka endpoint's OAUTHBEARER checks tokens here too."""
    text = str(token)
    if text.startswith("SharedAccessSignature "):
        return verify_sas_token(text, broker.config.key_name, broker.config.key)
    folder = broker.config.entra_id_issuer_dir
    if not folder:
        raise TokenError(
            "Unauthorized: the emulator trusts no Entra ID token issuer (set "
            "UserConfig.EmulatorExtras.EntraIdIssuerDir or --entra-id-issuer-dir)"
        )
    trust = issuer_trust(folder)
    return verify_jwt(text, trust.issuer, trust.public_key_pem, scope, audiences=audiences)


@functools.lru_cache(maxsize=8)
def issuer_trust(folder: str) -> Any:
    """The trusted issuer published in ``folder`` (``token_issuer.IssuerTrust``), read once."""
    from .token_issuer import load_trust

    return load_trust(folder)


def entity_not_found(audience: str, hub_name: str) -> str:
    """The put-token description for a token whose audience names an event hub that does not exist.

    The first sentence is the service's (it names the audience, e.g. ``sb://<namespace host>/<hub>``);
    the emulator adds which setting to change.
    """
    return (
        f"The messaging entity '{audience}' could not be found. To know more visit "
        f"https://aka.ms/sbResourceMgrExceptions. (Emulator: event hub '{hub_name}' is not configured; "
        f"add it to the namespace's Entities in Config.json.)"
    )


def read(broker: Broker, props: dict, authorized: Callable[[str], bool]) -> tuple[int, str, Any]:
    """Answer a $management READ: (status code, description, amqp-value body).

    ``authorized(entity_path)`` says whether the connection holds a $cbs token for the entity; it is
    used when the request carries no ``security_token`` of its own.
    """
    name = props.get("name")
    token = props.get("security_token")
    if props.get("operation") != "READ":
        return (
            400,
            f"Unsupported $management operation {props.get('operation')!r}; only READ is supported.",
            None,
        )
    if not isinstance(name, str):
        return 400, "The request has no 'name' (event hub name).", None
    hub = broker.hub(name)
    if hub is None:
        return 404, f"The messaging entity '{name}' could not be found.", None
    try:
        if token is not None:
            grant = verify_token(broker, token, "")
            if not grant_covers(grant.path, hub.name.lower()):
                raise TokenError("the token's audience does not cover this event hub")
        elif not authorized(hub.name.lower()):
            raise TokenError("no valid token was put on $cbs for this event hub")
    except TokenError as exc:
        return 401, f"Unauthorized: {exc}", None
    kind = props.get("type")
    if kind == HUB_TYPE:
        return (
            200,
            "OK",
            {
                "name": hub.name,
                "type": HUB_TYPE,
                "created_at": Timestamp(hub.created_ms),
                "partition_count": Int(len(hub.partitions)),
                "partition_ids": StringArray(hub.partition_ids()),
            },
        )
    if kind == PARTITION_TYPE:
        pid = str(props.get("partition"))
        log_ = hub.partitions.get(pid)
        if log_ is None:
            return 404, f"Partition '{pid}' does not exist in event hub '{hub.name}'.", None
        last = log_.last_event()
        return (
            200,
            "OK",
            {
                "name": hub.name,
                "type": PARTITION_TYPE,
                "partition": pid,
                "begin_sequence_number": log_.begin_seq,
                LAST_ENQUEUED_SEQUENCE_NUMBER: log_.next_seq - 1,
                LAST_ENQUEUED_OFFSET: str(log_.last_enqueued_offset()),
                LAST_ENQUEUED_TIME_UTC: Timestamp(last[2] if last else log_.last_enqueued_ms),
                "is_partition_empty": log_.is_empty,
            },
        )
    return 400, f"Unknown $management type {kind!r}.", None
