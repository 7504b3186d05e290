"""The SASL mechanisms the service takes on its Kafka endpoint, checked like the AMQP side's tokens.

* ``PLAIN``: user ``$ConnectionString``, password a connection string for the namespace with its key
  (not a SAS token: the service refuses those on Kafka);
* ``OAUTHBEARER`` (RFC 7628): an Entra ID access token for ``https://<namespace host>/.default`` (or
  Event Hubs' own audience), checked by the AMQP side's ``$cbs`` code (signature with the trusted
  issuer's key, issuer, audience, expiry).
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable

from ..auth import EVENTHUBS_AUDIENCES, Grant, TokenError
from ..config import EmulatorConfig
from ..store import Broker
from .protocol import SASL_USER

#: The mechanisms served, in the order SaslHandshake advertises them.
PLAIN, OAUTHBEARER = "PLAIN", "OAUTHBEARER"
MECHANISMS = (PLAIN, OAUTHBEARER)


class SaslRefused(Exception):
    """The credentials are not acceptable; the message says why without repeating any secret."""


def parse_connection_string(text: str) -> dict[str, str]:
    """``Key=Value;...`` pairs, keys lower case (a value may itself hold ``=``)."""
    parts: dict[str, str] = {}
    for item in text.split(";"):
        if "=" in item:
            key, value = item.split("=", 1)
            parts[key.strip().lower()] = value.strip()
    return parts


def check_plain(auth_bytes: bytes, config: EmulatorConfig) -> None:
    """Accept a SASL PLAIN message (``[authzid] NUL user NUL password``) or raise SaslRefused."""
    fields = auth_bytes.split(b"\x00")
    if len(fields) != 3:
        raise SaslRefused("malformed SASL PLAIN message (expected [authzid] NUL user NUL password)")
    user, password = fields[1], fields[2]
    if user != SASL_USER.encode():
        raise SaslRefused(f"the SASL user name must be {SASL_USER} (the password is the connection string)")
    try:
        parts = parse_connection_string(password.decode("utf-8"))
    except UnicodeDecodeError:
        raise SaslRefused("the password is not a UTF-8 connection string") from None
    if "endpoint" not in parts:
        raise SaslRefused("the password is not an Event Hubs connection string (no Endpoint=)")
    if "sharedaccesssignature" in parts:
        # the service's Kafka endpoint takes no SAS tokens (Microsoft's Event Hubs for Kafka FAQ)
        raise SaslRefused(
            "Event Hubs' Kafka endpoint does not take a SharedAccessSignature token; give a connection "
            "string with SharedAccessKeyName and SharedAccessKey, or sign in with OAUTHBEARER"
        )
    name = parts.get("sharedaccesskeyname", "")
    key = parts.get("sharedaccesskey", "")
    name_ok = hmac.compare_digest(name.encode(), config.key_name.encode())
    key_ok = hmac.compare_digest(key.encode(), config.key.encode())
    if not (name_ok and key_ok):
        raise SaslRefused(
            "the connection string's SharedAccessKeyName/SharedAccessKey do not match the namespace's key"
        )


def namespace_audiences(config: EmulatorConfig, hosts: Iterable[str]) -> tuple[str, ...]:
    """The ``aud`` an OAUTHBEARER token may carry: ``https://<host>`` for the namespace's service name
    (``<namespace>.servicebus.windows.net``) and each name clients reach the endpoint by (the resource
    Microsoft documents for Kafka clients), then Event Hubs' own audience (as on AMQP)."""
    names = [f"{config.namespace.lower()}.servicebus.windows.net", *(h.lower() for h in hosts if h)]
    audiences = [form for name in dict.fromkeys(names) for form in (f"https://{name}", f"https://{name}/")]
    return (*audiences, *EVENTHUBS_AUDIENCES)


def bearer_token(auth_bytes: bytes) -> str:
    """The token of an RFC 7628 client initial response (``n,[a=authzid],\x01auth=Bearer <token>\x01
    [key=value\x01...]\x01``), or SaslRefused saying what is malformed (never the bytes themselves)."""
    try:
        text = auth_bytes.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslRefused("the OAUTHBEARER message is not UTF-8") from None
    header, sep, rest = text.partition("\x01")
    if not sep or not header.startswith("n,") or not rest.endswith("\x01"):
        raise SaslRefused(
            "malformed OAUTHBEARER message (expected RFC 7628's 'n,,^Aauth=Bearer <token>^A^A')"
        )
    fields = dict(item.partition("=")[::2] for item in rest.split("\x01") if item)
    scheme, _, token = fields.get("auth", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise SaslRefused("the OAUTHBEARER message has no 'auth=Bearer <token>'")
    return token.strip()


def check_oauthbearer(auth_bytes: bytes, broker: Broker, hosts: Iterable[str]) -> Grant:
    """Accept an OAUTHBEARER client response whose Entra ID token the namespace trusts, or raise SaslRefused
    with the service's reason (``InvalidAudience: ...``, ``ExpiredToken: ...``; no token echoed)."""
    from ..management import verify_token

    token = bearer_token(auth_bytes)
    if token.startswith("SharedAccessSignature"):
        raise SaslRefused("OAUTHBEARER takes an Entra ID access token; a SAS token goes in PLAIN's password")
    try:
        return verify_token(broker, token, "", audiences=namespace_audiences(broker.config, hosts))
    except TokenError as exc:
        raise SaslRefused(str(exc)) from None
