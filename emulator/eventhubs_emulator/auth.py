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


#: Audiences the service accepts in an Entra ID token for Event Hubs (with and without the slash).
EVENTHUBS_AUDIENCES = ("https://eventhubs.azure.net/", "https://eventhubs.azure.net")
#: The token type azure-eventhub puts on $cbs for an Entra ID token.
JWT_TOKEN_TYPE = "jwt"


def verify_jwt(
    token: str,
    issuer: str,
    public_key_pem: str,
    scope: str,
    now: float | None = None,
    audiences: tuple[str, ...] = EVENTHUBS_AUDIENCES,
) -> Grant:
    """Check an Entra ID access token (RS256) against the trusted issuer; return what it grants.

    As on the service, the signature, ``iss``, ``aud`` (one of ``audiences``: Event Hubs' on AMQP; the
    Kafka endpoint adds the namespace's), ``exp`` and ``nbf`` are checked;
    the descriptions start with the service's error names (``ExpiredToken: The token is expired.``).
    A JWT authorises by role, not by audience path: the grant covers ``scope``, the entity named by
    the put-token request (the namespace when empty).
    """
    try:
        import jwt
    except ImportError:  # pragma: no cover - depends on the installation
        raise TokenError("the emulator needs PyJWT to check Entra ID tokens") from None
    if not isinstance(token, str) or token.count(".") != 2:
        raise TokenError("MalformedToken: the token is not a JSON Web Token")
    try:
        claims = jwt.decode(
            token,
            public_key_pem,
            algorithms=["RS256"],
            options={"verify_aud": False, "verify_iss": False, "verify_exp": False, "verify_nbf": False},
        )
    except jwt.InvalidSignatureError:
        raise TokenError(
            "InvalidSignature: The token signature is invalid (not signed by the trusted issuer's key)"
        ) from None
    except jwt.PyJWTError as exc:
        raise TokenError(f"MalformedToken: the token cannot be read ({type(exc).__name__})") from None
    if claims.get("iss") != issuer:
        raise TokenError(f"InvalidIssuer: Token issuer is invalid; expected '{issuer}'")
    audience = claims.get("aud")
    if audience not in audiences:
        raise TokenError(
            f"InvalidAudience: The token audience '{audience}' is not valid; expected '{audiences[0]}'"
        )
    at = time.time() if now is None else now
    expiry = claims.get("exp")
    if not isinstance(expiry, (int, float)):
        raise TokenError("MalformedToken: the token has no 'exp' claim")
    if expiry <= at:
        stamp = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(expiry))
        raise TokenError(f"ExpiredToken: The token is expired. Expiration time: '{stamp}'")
    not_before = claims.get("nbf")
    if isinstance(not_before, (int, float)) and not_before > at + 300:  # the service allows 5 min skew
        raise TokenError("InvalidToken: The token is not yet valid ('nbf' is in the future)")
    return Grant(path=audience_path(scope) if scope else "", expires_at=float(expiry))
