"""SAS token verification for $cbs put-token and $management requests.

A token looks like ``SharedAccessSignature sr=<url-encoded uri>&sig=<b64 hmac>&se=<expiry>&skn=<key name>``;
the signature is HMAC-SHA256(key, "<sr as sent>\\n<se>"). We check the key name, the signature, the
expiry and that the audience (``sr``) covers the entity the client wants to use.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from dataclasses import dataclass
from urllib.parse import unquote_plus


class TokenError(Exception):
    """The token is not acceptable; the message says why (never echoes the token or key)."""


@dataclass(frozen=True)
class Grant:
    """What a verified token allows: the entity path prefix (lower case) and when it expires."""

    path: str
    expires_at: float


def audience_path(uri: str) -> str:
    """The entity path of an audience or address, lower case.

    ``sb://host/Hub/ConsumerGroups/x`` → ``hub/consumergroups/x``.
    """
    uri = unquote_plus(uri)
    if "://" in uri:
        uri = uri.split("://", 1)[1]
        uri = uri.split("/", 1)[1] if "/" in uri else ""
    return uri.strip("/").lower()


def verify_sas_token(token: str, key_name: str, key: str, now: float | None = None) -> Grant:
    """Check a SAS token against the configured key; return what it grants or raise TokenError."""
    if not isinstance(token, str) or not token.startswith("SharedAccessSignature "):
        raise TokenError("token is not a SharedAccessSignature")
    parts: dict[str, str] = {}
    for item in token[len("SharedAccessSignature ") :].split("&"):
        if "=" in item:
            k, v = item.split("=", 1)
            parts[k.strip()] = v
    for needed in ("sr", "sig", "se", "skn"):
        if needed not in parts:
            raise TokenError(f"token has no '{needed}' field")
    if parts["skn"] != key_name:
        raise TokenError("unknown shared access key name")
    try:
        expiry = int(parts["se"])
    except ValueError:
        raise TokenError("token expiry 'se' is not a number") from None
    expected = base64.b64encode(
        hmac.new(key.encode("utf-8"), f"{parts['sr']}\n{expiry}".encode(), hashlib.sha256).digest()
    ).decode()
    if not hmac.compare_digest(unquote_plus(parts["sig"]), expected):
        raise TokenError("invalid signature: the token was not signed with the configured key")
    if expiry <= (time.time() if now is None else now):
        raise TokenError("token has expired")
    return Grant(path=audience_path(parts["sr"]), expires_at=float(expiry))


def grant_covers(grant_path: str, entity_path: str) -> bool:
    """Whether a token for ``grant_path`` may be used on ``entity_path`` (both lower-case paths)."""
    return grant_path == "" or entity_path == grant_path or entity_path.startswith(grant_path + "/")
