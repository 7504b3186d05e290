"""The issuer's HTTP endpoints: Entra ID's authority and the two managed-identity endpoints.

One server (plain HTTP, or HTTPS with the emulator's CA: ``tls_dir``) answers, in Azure's shapes:

* ``GET /msi/token?api-version=2019-08-01&resource=...`` with ``X-IDENTITY-HEADER`` - App Service's
  managed-identity endpoint (``IDENTITY_ENDPOINT``/``IDENTITY_HEADER``: :meth:`TokenIssuer.environment`);
* ``GET /metadata/identity/oauth2/token?api-version=2018-02-01&resource=...[&client_id=...]`` with
  ``Metadata: true`` - the VM's IMDS, as hadoop-azure's ``MsiTokenProvider``
  (``fs.azure.account.oauth2.msi.endpoint``) and azure-identity (``AZURE_POD_IDENTITY_AUTHORITY_HOST``)
  call it; refused without the header, as IMDS does;
* ``GET /{tenant}/v2.0/.well-known/openid-configuration`` (and the v1 form without ``v2.0``) and
  ``GET /{tenant}/discovery/v2.0/keys`` - what MSAL reads before asking for a token;
* ``POST /{tenant}/oauth2/v2.0/token`` (``scope=<resource>/.default``) and ``POST /{tenant}/oauth2/token``
  (``resource=...``, hadoop-azure's ``ClientCredsTokenProvider``): ``client_credentials`` with a
  ``client_secret`` (in the form, or as HTTP Basic as Kafka's OAUTHBEARER login sends it) or a
  ``client_assertion`` (a workload identity's federated token, signed by the stand-in cluster's
  key, :func:`~.keys.federated_token`).

MSAL asks ``login.microsoftonline.com`` to vouch for any authority host it does not know (instance
discovery) unless the credential is made with ``disable_instance_discovery=True``; clients of this
issuer pass that. Tokens last ``lifetime`` seconds; :attr:`TokenIssuer.tokens_by_client` counts the
tokens each client got (tests prove renewal with it). Secrets never reach a log or an answer.
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from .authority import Directory, RegisteredClient, entra_error
from .keys import (
    DEFAULT_LIFETIME,
    FAULTS,
    FEDERATION_AUDIENCE,
    FEDERATION_ISSUER,
    IDENTITY_HEADER_FILE,
    _throwaway_keys,
    ensure_issuer_keys,
    federation_public_key,
)

#: The path of App Service's managed-identity endpoint, and the API version azure-identity calls.
TOKEN_PATH, API_VERSION = "/msi/token", "2019-08-01"
#: The path of IMDS's token endpoint, and the API version hadoop-azure and azure-identity call.
IMDS_PATH, IMDS_API_VERSION = "/metadata/identity/oauth2/token", "2018-02-01"

Answer = tuple[int, dict[str, Any]]

#: Bounds of the issuer's HTTP server, as the emulator's admin API has them: a request body (a token
#: request's form is well under 8 KiB), the connections served at once (a thread each; a test stack
#: has a few clients with a pooled connection or two each), and the time one request may take to
#: arrive and be answered - which is also how long a kept-alive connection may wait for its next one.
#: Read at use time (a test may lower one before it makes a TokenIssuer).
MAX_BODY_BYTES = 64 * 1024
MAX_CONNECTIONS = 64
REQUEST_SECONDS = 10.0
#: What App Service's managed-identity endpoint answers a resource it cannot get a token for (HTTP
#: 500; msal notes "Empirically, wrong resource ends up with a vague statusCode=500").
APP_SERVICE_TOKEN_ERROR = "An unexpected error occured while fetching the AAD Token."


class TokenIssuer:
    """The local Entra ID on loopback, handing out tokens of ``lifetime`` seconds.

    ``clients`` are the tenant's registered applications (none: only managed identities);
    ``audiences`` the resources tokens may be asked for on the authority and IMDS endpoints;
    ``tls_dir`` serves HTTPS with the certificates of :func:`eventhubs_emulator.tls.ensure_certificates`.
    """

    def __init__(
        self,
        folder: str | Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        lifetime: float = DEFAULT_LIFETIME,
        clients: Iterable[RegisteredClient] = (),
        audiences: Iterable[str] | None = None,
        tls_dir: str | Path | None = None,
    ) -> None:
        self.folder = Path(folder)
        self.keys = ensure_issuer_keys(self.folder)
        self.lifetime = lifetime
        self.identity_header = (self.folder / IDENTITY_HEADER_FILE).read_text(encoding="utf-8").strip()
        self.directory = Directory(self.keys.tenant_id, {c.client_id: c for c in clients})
        if audiences is not None:
            self.directory.audiences = tuple(audiences)
        self._federation_key = federation_public_key(self.folder)
        self.tokens_issued = 0  # successful token requests (tests count refreshes with it)
        self.tokens_by_client: Counter[str] = Counter()  # ... and per client id
        # (client id, endpoint, User-Agent) of every token handed out: tells a JVM's requests
        # (hadoop-azure: "Java/...") from Python's (azure-identity: "azsdk-python-identity/...")
        self.token_requests: list[tuple[str, str, str]] = []
        # A fault the service must refuse (tests): one of FAULTS, or None for good tokens.
        self.fault: str | None = None
        self._lock = threading.Lock()
        self._server = _BoundedHTTPServer((host, port), _handler(self), MAX_CONNECTIONS)
        self.scheme = "http"
        if tls_dir is not None:
            from ..tls import ensure_certificates

            context = ensure_certificates(tls_dir, host).server_context()
            # the handshake happens in the request's thread, not in the accepting one
            self._server.socket = context.wrap_socket(
                self._server.socket, server_side=True, do_handshake_on_connect=False
            )
            self.scheme = "https"
        self._thread: threading.Thread | None = None

    # -- where clients find it -------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """``http[s]://host:port``: the authority host (``AZURE_AUTHORITY_HOST``) and IMDS host."""
        host, port = self._server.server_address[:2]
        return f"{self.scheme}://{host}:{port}"

    @property
    def url(self) -> str:
        """App Service's managed-identity endpoint (``IDENTITY_ENDPOINT``)."""
        return f"{self.base_url}{TOKEN_PATH}"

    @property
    def imds_endpoint(self) -> str:
        """IMDS's token endpoint (hadoop-azure's ``fs.azure.account.oauth2.msi.endpoint``)."""
        return f"{self.base_url}{IMDS_PATH}"

    @property
    def tenant_id(self) -> str:
        return self.keys.tenant_id

    def environment(self) -> dict[str, str]:
        """The variables that make azure-identity's managed identity use this issuer."""
        return {"IDENTITY_ENDPOINT": self.url, "IDENTITY_HEADER": self.identity_header}

    # -- life ------------------------------------------------------------------------------------

    def start(self) -> TokenIssuer:
        """Serve in a background thread; returns self."""
        self._thread = threading.Thread(target=self._server.serve_forever, name="token-issuer", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the port."""
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> TokenIssuer:
        return self.start()

    def __exit__(self, *_: Any) -> None:
        self.stop()

    # -- tokens ----------------------------------------------------------------------------------

    def _mint(self, resource: str, client_id: str, route: str = "", agent: str = "") -> tuple[str, int]:
        """A token for ``resource`` as :attr:`fault` says; the ``expires_on`` the client sees is always
        the normal one, so a faulty token reaches the service instead of being refused by the client."""
        claims = {"appid": client_id, "azp": client_id}
        token, expires = self.keys.mint(resource, self.lifetime, subject=client_id, claims=claims)
        if self.fault == "wrong-audience":
            token, _ = self.keys.mint("https://management.azure.com/", self.lifetime, subject=client_id)
        elif self.fault == "expired":
            token, _ = self.keys.mint(resource, 60, now=time.time() - 3600, subject=client_id)
        elif self.fault == "bad-signature":
            token, _ = _throwaway_keys().mint(resource, self.lifetime, issuer=self.keys.issuer)
        elif self.fault is not None:
            raise ValueError(f"unknown token issuer fault {self.fault!r}; one of {', '.join(FAULTS)}")
        with self._lock:
            self.tokens_issued += 1
            self.tokens_by_client[client_id] += 1
            self.token_requests.append((client_id, route, agent))
        return token, expires

    def _check_assertion(self, assertion: str, client: RegisteredClient) -> Answer | None:
        """None for a federated token of the stand-in cluster naming ``client``'s subject."""
        import jwt

        try:
            claims = jwt.decode(
                assertion,
                self._federation_key,
                algorithms=["RS256"],
                audience=FEDERATION_AUDIENCE,
                options={"require": ["exp", "iss", "sub", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            return entra_error(
                401, "invalid_client", 700024, "Client assertion is not within its valid time range."
            )
        except jwt.InvalidSignatureError:
            return entra_error(
                401,
                "invalid_client",
                700027,
                "Client assertion failed signature validation: it is not signed by a key of a "
                "federated identity credential's issuer.",
            )
        except jwt.InvalidAudienceError:
            return entra_error(
                400,
                "invalid_request",
                700212,
                f"No matching federated identity record found for presented assertion audience; "
                f"the audience must be '{FEDERATION_AUDIENCE}'.",
            )
        except jwt.PyJWTError as exc:
            return entra_error(
                400, "invalid_request", 50027, f"Invalid JWT token in client assertion: {type(exc).__name__}."
            )
        if claims.get("iss") != FEDERATION_ISSUER or claims.get("sub") != client.federated_subject:
            return entra_error(
                400,
                "invalid_request",
                70021,
                "No matching federated identity record found for presented assertion. Assertion "
                f"Issuer: '{claims.get('iss')}'. Assertion Subject: '{claims.get('sub')}'. Assertion "
                f"Audience: '{FEDERATION_AUDIENCE}'.",
            )
        return None

    # -- the endpoints ---------------------------------------------------------------------------

    def answer(self, method: str, path: str, headers: Any, body: bytes = b"") -> Answer:
        """The (status, JSON body) for one request."""
        parts = urlsplit(path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        segments = [s for s in parts.path.split("/") if s]
        if method == "GET" and parts.path == TOKEN_PATH:
            return self._app_service(query, headers)
        if method == "GET" and parts.path == IMDS_PATH:
            return self._imds(query, headers)
        if method == "GET" and segments[1:] in (
            ["v2.0", ".well-known", "openid-configuration"],
            [".well-known", "openid-configuration"],
        ):
            return self.directory.tenant_error(segments[0]) or (200, self._openid(segments[0], segments))
        if method == "GET" and segments[1:] == ["discovery", "v2.0", "keys"]:
            return self.directory.tenant_error(segments[0]) or (200, self._jwks())
        if method == "POST" and segments[1:] in (["oauth2", "v2.0", "token"], ["oauth2", "token"]):
            form = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
            form = {**_basic_credentials(headers), **form}  # a form's own client_id/secret win
            agent = str(headers.get("User-Agent") or "")
            return self.directory.tenant_error(segments[0]) or self._token(form, agent, v2=len(segments) == 4)
        return 404, {"error": "not_found", "error_description": f"no endpoint {method} {parts.path}"}

    def _app_service(self, query: dict[str, str], headers: Any) -> Answer:
        if not secrets.compare_digest(str(headers.get("X-IDENTITY-HEADER") or ""), self.identity_header):
            return 401, {"statusCode": 401, "message": "X-IDENTITY-HEADER is missing or wrong"}
        if query.get("api-version") != API_VERSION:
            return 400, {"statusCode": 400, "message": f"api-version must be {API_VERSION}"}
        resource = query.get("resource", "")
        if not resource:
            return 400, {"statusCode": 400, "message": "the 'resource' parameter is required"}
        refusal = self.directory.resource_error(resource)
        if refusal:  # App Service's shape and words, then Entra ID's reason (the one the service hides)
            return 500, {
                "statusCode": 500,
                "message": f"{APP_SERVICE_TOKEN_ERROR} {refusal[1]['error_description']}",
                "correlationId": str(uuid.uuid4()),
            }
        identity = query.get("client_id") or "emulator-managed-identity"
        token, expires = self._mint(resource, identity, "app-service", str(headers.get("User-Agent") or ""))
        return 200, {
            "access_token": token,
            "expires_on": str(expires),
            "resource": resource,
            "token_type": "Bearer",
            "client_id": identity,
        }

    def _imds(self, query: dict[str, str], headers: Any) -> Answer:
        if str(headers.get("Metadata") or "").lower() != "true":
            return _imds_error("Required metadata header not specified")
        if "api-version" not in query:
            return 400, {
                "error": "invalid_request",
                "error_description": "Required query variable 'api-version' is missing",
            }
        if query["api-version"] != IMDS_API_VERSION:
            return 400, {
                "error": "invalid_request",
                "error_description": f"Invalid API version {query['api-version']}; use {IMDS_API_VERSION}",
            }
        resource = query.get("resource", "")
        if not resource:
            return _imds_error("Required query variable 'resource' is missing")
        if self.directory.resource_error(resource):
            return _imds_error(f"Resource {resource} is not known", "invalid_resource")
        identity = self.directory.managed_identity(query.get("client_id"))
        if identity is None:
            return _imds_error("Identity not found")
        token, expires = self._mint(resource, identity, "imds", str(headers.get("User-Agent") or ""))
        return 200, {
            "access_token": token,
            "client_id": identity,
            "expires_in": str(int(self.lifetime)),
            "expires_on": str(expires),
            "ext_expires_in": str(int(self.lifetime)),
            "not_before": str(expires - int(self.lifetime)),
            "resource": resource,
            "token_type": "Bearer",
        }

    def _openid(self, tenant: str, segments: list[str]) -> dict[str, Any]:
        v2 = "/v2.0" if "v2.0" in segments else ""
        base = f"{self.base_url}/{tenant}"
        return {
            "token_endpoint": f"{base}/oauth2{v2}/token",
            "authorization_endpoint": f"{base}/oauth2{v2}/authorize",
            "device_authorization_endpoint": f"{base}/oauth2{v2}/devicecode",
            "issuer": f"{base}{v2}" if v2 else self.keys.issuer,
            "jwks_uri": f"{base}/discovery/v2.0/keys",
            "token_endpoint_auth_methods_supported": ["client_secret_post", "private_key_jwt"],
            "response_types_supported": ["code", "id_token", "code id_token", "id_token token"],
            "subject_types_supported": ["pairwise"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "scopes_supported": ["openid", "profile", "email", "offline_access"],
            "tenant_region_scope": None,
            "cloud_instance_name": "hubflow.local",
        }

    def _jwks(self) -> dict[str, Any]:
        from cryptography.hazmat.primitives.serialization import load_pem_public_key
        from jwt.algorithms import RSAAlgorithm

        jwk = RSAAlgorithm.to_jwk(load_pem_public_key(self.keys.public_key_pem.encode()), as_dict=True)
        jwk.update({"kid": self.keys.key_id, "use": "sig", "issuer": self.keys.issuer})
        return {"keys": [jwk]}

    def _token(self, form: dict[str, str], agent: str, *, v2: bool) -> Answer:
        if v2:
            scope = form.get("scope", "").split()
            resources = [s.removesuffix("/.default") for s in scope if s.endswith("/.default")]
            if len(resources) != 1 or len(scope) != 1:
                return entra_error(
                    400,
                    "invalid_scope",
                    1002012,
                    f"The provided value for scope {form.get('scope', '')} is not valid. Client "
                    "credential flows must have a scope value with /.default suffixed to the resource "
                    "identifier (application ID URI).",
                )
            resource = resources[0]
        else:
            resource = form.get("resource", "")
            if not resource:
                return entra_error(
                    400,
                    "invalid_request",
                    900144,
                    "The request body must contain the following parameter: 'resource'.",
                )
        refusal = self.directory.resource_error(resource)
        if refusal:
            return refusal
        client, refusal = self.directory.authenticate(form, self._check_assertion)
        if refusal or client is None:
            return refusal or entra_error(500, "server_error", 90000, "no client")
        token, expires = self._mint(resource, client.client_id, "v2" if v2 else "v1", agent)
        lifetime = int(self.lifetime)
        body: dict[str, Any] = {
            "token_type": "Bearer",
            "expires_in": lifetime,
            "ext_expires_in": lifetime,
            "access_token": token,
        }
        if not v2:  # the v1 endpoint's strings, as hadoop-azure parses them
            body = {
                "token_type": "Bearer",
                "expires_in": str(lifetime),
                "ext_expires_in": str(lifetime),
                "expires_on": str(expires),
                "not_before": str(expires - lifetime),
                "resource": resource,
                "access_token": token,
            }
        return 200, body


def _basic_credentials(headers: Any) -> dict[str, str]:
    """``client_id``/``client_secret`` from ``Authorization: Basic`` (RFC 6749 2.3.1's
    client_secret_basic, which Entra ID takes and Kafka's OAuthBearerLoginCallbackHandler sends), or {}."""
    scheme, _, value = str(headers.get("Authorization") or "").partition(" ")
    if scheme.lower() != "basic":
        return {}
    try:
        client_id, sep, secret = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")
    except (ValueError, UnicodeDecodeError):
        return {}
    return {"client_id": unquote(client_id), "client_secret": unquote(secret)} if sep else {}


def _imds_error(description: str, error: str = "invalid_request") -> Answer:
    """A refusal in IMDS's words."""
    return 400, {"error": error, "error_description": description}


class _BoundedHTTPServer(ThreadingHTTPServer):
    """A thread per connection, at most ``max_connections`` of them: a connection beyond is closed
    at once (its client retries, as after any dropped connection)."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type, max_connections: int) -> None:
        super().__init__(address, handler)
        self._slots = threading.BoundedSemaphore(max_connections)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection cut off (time-out, reset) is no error worth a traceback on stderr."""
        return None


def _body_refusal(headers: Any) -> tuple[Answer | None, int]:
    """(a refusal, None) of a request body the issuer does not read, or (None, its length)."""
    if str(headers.get("Transfer-Encoding") or "identity").lower() != "identity":
        return (411, _http_error("send the body with a Content-Length (no Transfer-Encoding)")), 0
    raw = str(headers.get("Content-Length") or "0").strip()
    if not raw.isdigit():
        return (400, _http_error(f"Content-Length {raw!r} is not a number of bytes")), 0
    length = int(raw)
    if length > MAX_BODY_BYTES:
        return (413, _http_error(f"the body ({length} bytes) is larger than {MAX_BODY_BYTES} bytes")), 0
    return None, length


def _http_error(description: str) -> dict[str, Any]:
    return {"error": "invalid_request", "error_description": description}


def _handler(issuer: TokenIssuer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            self.timeout = REQUEST_SECONDS  # each read and write of the socket (StreamRequestHandler)
            super().setup()

        def handle_one_request(self) -> None:
            """One request, from the wait for its first line to the answer, within REQUEST_SECONDS
            in all (a client sending a byte at a time would pass each read's time-out)."""
            timer = threading.Timer(REQUEST_SECONDS, self._cut_off)
            timer.daemon = True
            timer.start()
            try:
                super().handle_one_request()
            finally:
                timer.cancel()

        def _cut_off(self) -> None:
            self.close_connection = True
            with contextlib.suppress(OSError):  # the socket's own shutdown, also under TLS
                socket.socket.shutdown(self.connection, socket.SHUT_RDWR)

        def _reply(self, method: str) -> None:
            refusal, length = _body_refusal(self.headers)
            if refusal is not None:  # the body stays unread: the connection ends with the answer
                status, document = refusal
                self.close_connection = True
            else:
                body = self.rfile.read(length) if length > 0 else b""
                status, document = issuer.answer(method, self.path, self.headers, body)
            data = json.dumps(document).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._reply("GET")

        def do_POST(self) -> None:
            self._reply("POST")

        def log_message(self, *_: Any) -> None:  # bodies hold secrets; keep stderr quiet
            return None

    return Handler
