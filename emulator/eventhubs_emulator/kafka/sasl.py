"""SASL PLAIN as the service takes it on its Kafka endpoint: user ``$ConnectionString``, password a
connection string for the namespace with its key (or a SAS token), checked like the AMQP side's."""

from __future__ import annotations

import hmac

from ..auth import TokenError, verify_sas_token
from ..config import EmulatorConfig
from .protocol import SASL_USER


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
        try:
            verify_sas_token(parts["sharedaccesssignature"], config.key_name, config.key)
        except TokenError as exc:
            raise SaslRefused(
                f"the connection string's SharedAccessSignature is not accepted: {exc}"
            ) from None
        return
    name = parts.get("sharedaccesskeyname", "")
    key = parts.get("sharedaccesskey", "")
    name_ok = hmac.compare_digest(name.encode(), config.key_name.encode())
    key_ok = hmac.compare_digest(key.encode(), config.key.encode())
    if not (name_ok and key_ok):
        raise SaslRefused(
            "the connection string's SharedAccessKeyName/SharedAccessKey do not match the namespace's key"
        )
