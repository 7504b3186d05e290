"""SaslHandshake and SaslAuthenticate: PLAIN (a connection string) or OAUTHBEARER (an Entra ID token).

A client authenticates once per connection; with OAUTHBEARER the session lasts as long as the token
(SaslAuthenticate v1+ tells the client ``session_lifetime_ms``, the token's remaining lifetime, as the
service does), the client re-authenticates on the same connection before then (KIP-368: a new
SaslHandshake with the same mechanism and a new token), and a connection whose session has lapsed
is closed at its next request (:func:`session_expired`), as a Kafka broker with
``connections.max.reauth.ms`` does. PLAIN sessions do not expire (``session_lifetime_ms`` 0).
"""

from __future__ import annotations

import time

from .handlers import ClientState, Context
from .protocol import ErrorCode
from .sasl import MECHANISMS, OAUTHBEARER, SaslRefused, check_oauthbearer, check_plain


def sasl_handshake(ctx: Context, version: int, req: dict) -> dict:
    """Agree on PLAIN or OAUTHBEARER (both advertised); a re-authentication must keep the mechanism."""
    state = ctx.state
    mechanism = req["mechanism"]
    ok = mechanism in MECHANISMS
    if ok and state.authenticated:
        ok = mechanism == state.mechanism  # KIP-368: re-authentication uses the first mechanism
    state.handshake_done = ok
    state.failed_auth = not ok  # as a Kafka broker: the answer, then the connection closes
    if ok:
        state.mechanism = mechanism
    error = ErrorCode.NONE if ok else ErrorCode.UNSUPPORTED_SASL_MECHANISM
    return {"error_code": error, "mechanisms": list(MECHANISMS)}


def sasl_authenticate(ctx: Context, version: int, req: dict) -> dict:
    """Check the credentials of the agreed mechanism; an OAUTHBEARER session lasts as long as its token."""
    state = ctx.state
    if not state.handshake_done:
        state.failed_auth = True
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "error_message": "SaslHandshake first"}
    mechanism = state.mechanism
    state.handshake_done = False  # one SaslAuthenticate per handshake
    expires_at = None
    try:
        if mechanism == OAUTHBEARER:
            grant = check_oauthbearer(req["auth_bytes"] or b"", ctx.broker, (ctx.host,))
            expires_at = grant.expires_at
        else:
            check_plain(req["auth_bytes"] or b"", ctx.broker.config)
    except SaslRefused as exc:
        state.failed_auth = True
        return {
            "error_code": ErrorCode.SASL_AUTHENTICATION_FAILED,
            "error_message": f"Authentication failed: {exc}",
        }
    state.authenticated = True
    state.session_expires_at = expires_at
    lifetime_ms = 0 if expires_at is None else max(1, int((expires_at - time.time()) * 1000))
    return {"error_code": ErrorCode.NONE, "error_message": None, "session_lifetime_ms": lifetime_ms}


def session_expired(state: ClientState, now: float | None = None) -> bool:
    """Whether an authenticated connection's OAUTHBEARER session (its token) has lapsed."""
    expires_at = state.session_expires_at
    return expires_at is not None and (time.time() if now is None else now) >= expires_at
