"""A local Entra ID (Azure AD) token issuer: real RS256 JWTs for the emulator, through a real credential flow.

It serves the managed-identity endpoint of Azure App Service (``GET <IDENTITY_ENDPOINT>?api-version=
2019-08-01&resource=...`` with the ``X-IDENTITY-HEADER`` secret), which azure-identity's
``ManagedIdentityCredential`` (and so ``DefaultAzureCredential``) calls unmodified when the
environment has ``IDENTITY_ENDPOINT`` and ``IDENTITY_HEADER`` (:meth:`TokenIssuer.environment`). As on
App Service, the endpoint is plain HTTP on loopback.

Its signing key, its tenant and so its issuer (``https://sts.windows.net/<tenant>/``, the service's
v1 form) live in one folder, made there on first use and reused afterwards: ``issuer-key.pem`` (the
private key, owner-only), ``issuer.json`` (the issuer and the public key, which the emulator trusts:
``UserConfig.EmulatorExtras.EntraIdIssuerDir`` / ``--entra-id-issuer-dir``) and ``identity-header``
(the endpoint's secret, owner-only). The emulator and the issuer may be started in either order.

Run it alone with ``python -m eventhubs_emulator.token_issuer --dir <folder> [--port 0] [--lifetime
3600]``. Needs ``cryptography`` and ``PyJWT`` (``pip install eventhubs-emulator[entra]``).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

#: The audience of an Event Hubs token (azure-eventhub asks for ``https://eventhubs.azure.net//.default``).
EVENTHUBS_AUDIENCE = "https://eventhubs.azure.net/"
#: File names inside the issuer's folder.
PRIVATE_KEY, ISSUER_FILE, IDENTITY_HEADER_FILE = "issuer-key.pem", "issuer.json", "identity-header"
#: The path of the managed-identity endpoint.
TOKEN_PATH = "/msi/token"
#: The App Service managed-identity API version azure-identity/msal call.
API_VERSION = "2019-08-01"
DEFAULT_LIFETIME = 3600.0


class IssuerSetupError(RuntimeError):
    """The issuer's folder cannot be used or made; the message says what to do."""


@dataclass(frozen=True)
class IssuerKeys:
    """The issuer's identity: its ``iss``, tenant, key id, public key (PEM) and private key (PEM)."""

    issuer: str
    tenant_id: str
    key_id: str
    public_key_pem: str
    private_key_pem: bytes

    def mint(
        self,
        audience: str = EVENTHUBS_AUDIENCE,
        lifetime: float = DEFAULT_LIFETIME,
        *,
        now: float | None = None,
        subject: str = "emulator-managed-identity",
        issuer: str | None = None,
    ) -> tuple[str, int]:
        """A signed RS256 access token and its expiry (epoch seconds); tests vary the claims."""
        import jwt

        issued = int(time.time() if now is None else now)
        expires = issued + max(1, int(lifetime))
        claims = {
            "aud": audience,
            "iss": issuer or self.issuer,
            "iat": issued,
            "nbf": issued,
            "exp": expires,
            "sub": subject,
            "oid": subject,
            "tid": self.tenant_id,
        }
        token = jwt.encode(claims, self.private_key_pem, algorithm="RS256", headers={"kid": self.key_id})
        return token, expires


@dataclass(frozen=True)
class IssuerTrust:
    """What a verifier needs: the trusted ``iss`` and public key (``issuer.json``)."""

    issuer: str
    public_key_pem: str


def load_trust(folder: str | Path) -> IssuerTrust:
    """The trust an issuer folder publishes, making the folder's keys first when missing."""
    keys = ensure_issuer_keys(folder)
    return IssuerTrust(keys.issuer, keys.public_key_pem)


def ensure_issuer_keys(folder: str | Path) -> IssuerKeys:
    """The issuer's keys in ``folder``, made there first when missing (an RSA key and a new tenant)."""
    folder = Path(folder)
    info_path, key_path = folder / ISSUER_FILE, folder / PRIVATE_KEY
    if not (info_path.exists() and key_path.exists()):
        with _folder_lock(folder):  # the issuer and the emulator may both start now
            if not (info_path.exists() and key_path.exists()):
                _make_keys(folder)
    try:
        info = json.loads(info_path.read_text(encoding="utf-8"))
        return IssuerKeys(
            issuer=info["issuer"],
            tenant_id=info["tenant_id"],
            key_id=info["kid"],
            public_key_pem=info["public_key"],
            private_key_pem=key_path.read_bytes(),
        )
    except (OSError, ValueError, KeyError) as exc:
        raise IssuerSetupError(
            f"the token issuer's folder {str(folder)!r} cannot be read ({type(exc).__name__}); "
            "remove it to make new keys"
        ) from None


@contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """An exclusive lock on ``folder`` (made if missing) while its keys are made."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle = open(folder / ".lock", "a")
    except OSError as exc:
        raise IssuerSetupError(
            f"cannot make the token issuer's folder {str(folder)!r}: {exc.strerror}"
        ) from None
    try:
        try:
            import fcntl

            fcntl.flock(handle, fcntl.LOCK_EX)
        except ImportError:  # pragma: no cover - Windows: no lock, start one process first
            pass
        yield
    finally:
        handle.close()


def _make_keys(folder: Path) -> None:
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
    except ImportError:
        raise IssuerSetupError(
            "the token issuer needs the cryptography package: pip install 'eventhubs-emulator[entra]'"
        ) from None
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise IssuerSetupError(
            f"cannot make the token issuer's folder {str(folder)!r}: {exc.strerror}"
        ) from None
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    tenant = str(uuid.uuid4())
    info = {
        "issuer": f"https://sts.windows.net/{tenant}/",
        "tenant_id": tenant,
        "kid": secrets.token_hex(8),
        "public_key": public.decode(),
    }
    _write_private(folder / PRIVATE_KEY, private)
    _write_private(folder / IDENTITY_HEADER_FILE, secrets.token_urlsafe(24).encode())
    tmp = folder / f".{ISSUER_FILE}.{os.getpid()}"
    tmp.write_text(json.dumps(info, indent=2), encoding="utf-8")
    os.replace(tmp, folder / ISSUER_FILE)  # last: its presence means the folder is complete


def _write_private(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.replace(tmp, path)


#: Faults :attr:`TokenIssuer.fault` can inject: tokens the service refuses, each for one reason.
FAULTS = ("wrong-audience", "expired", "bad-signature")


def _throwaway_keys() -> IssuerKeys:
    """Keys of no trusted issuer (made in memory): their signature is what the service refuses."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return IssuerKeys("forged", "forged", "forged", "", private)


class TokenIssuer:
    """The managed-identity endpoint on loopback, handing out tokens of ``lifetime`` seconds."""

    def __init__(
        self,
        folder: str | Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        lifetime: float = DEFAULT_LIFETIME,
    ) -> None:
        self.folder = Path(folder)
        self.keys = ensure_issuer_keys(self.folder)
        self.lifetime = lifetime
        self.identity_header = (self.folder / IDENTITY_HEADER_FILE).read_text(encoding="utf-8").strip()
        self.tokens_issued = 0  # successful token requests (tests count refreshes with it)
        # A fault the service must refuse (tests): one of FAULTS, or None for good tokens.
        self.fault: str | None = None
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((host, port), _handler(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The managed-identity endpoint (``IDENTITY_ENDPOINT``)."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}{TOKEN_PATH}"

    def environment(self) -> dict[str, str]:
        """The variables that make azure-identity's managed identity use this issuer."""
        return {"IDENTITY_ENDPOINT": self.url, "IDENTITY_HEADER": self.identity_header}

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

    def _mint(self, resource: str) -> tuple[str, int]:
        """A token for ``resource`` as :attr:`fault` says; the ``expires_on`` the client sees is always
        the normal one, so a faulty token reaches the service instead of being refused by the client."""
        token, expires = self.keys.mint(resource, self.lifetime)
        if self.fault == "wrong-audience":
            token, _ = self.keys.mint("https://storage.azure.com/", self.lifetime)
        elif self.fault == "expired":
            token, _ = self.keys.mint(resource, 60, now=time.time() - 3600)
        elif self.fault == "bad-signature":
            forged = _throwaway_keys()
            token, _ = forged.mint(resource, self.lifetime, issuer=self.keys.issuer)
        elif self.fault is not None:
            raise ValueError(f"unknown token issuer fault {self.fault!r}; one of {', '.join(FAULTS)}")
        return token, expires

    def answer(self, path: str, headers: Any) -> tuple[int, dict[str, Any]]:
        """The (status, JSON body) for one request, in App Service's shapes."""
        parts = urlsplit(path)
        if parts.path != TOKEN_PATH:
            return 404, {"statusCode": 404, "message": f"no such endpoint {parts.path!r}; use {TOKEN_PATH}"}
        query = parse_qs(parts.query)
        if not secrets.compare_digest(str(headers.get("X-IDENTITY-HEADER") or ""), self.identity_header):
            return 401, {"statusCode": 401, "message": "X-IDENTITY-HEADER is missing or wrong"}
        if query.get("api-version") != [API_VERSION]:
            return 400, {"statusCode": 400, "message": f"api-version must be {API_VERSION}"}
        resource = (query.get("resource") or [""])[0]
        if not resource:
            return 400, {"statusCode": 400, "message": "the 'resource' parameter is required"}
        token, expires = self._mint(resource)
        with self._lock:
            self.tokens_issued += 1
        body = {
            "access_token": token,
            "expires_on": str(expires),
            "resource": resource,
            "token_type": "Bearer",
            "client_id": "emulator-managed-identity",
        }
        return 200, body


def _handler(issuer: TokenIssuer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = issuer.answer(self.path, self.headers)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: Any) -> None:  # the query holds no secret, but keep stderr quiet
            return None

    return Handler


def main(argv: list[str] | None = None) -> int:
    """Run the issuer until interrupted; print the environment a client needs (the secret by file)."""
    parser = argparse.ArgumentParser(
        prog="python -m eventhubs_emulator.token_issuer",
        description="Local Entra ID token issuer (App Service managed-identity endpoint) for the emulator.",
    )
    parser.add_argument("--dir", required=True, help="folder of the issuer's keys (made on first use)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port (default 0: a free one)")
    parser.add_argument(
        "--lifetime", type=float, default=DEFAULT_LIFETIME, help="token lifetime in seconds (default 3600)"
    )
    args = parser.parse_args(argv)
    if args.lifetime < 10:
        print("token-issuer: --lifetime must be at least 10 seconds", file=sys.stderr)
        return 2
    try:
        issuer = TokenIssuer(args.dir, host=args.host, port=args.port, lifetime=args.lifetime).start()
    except IssuerSetupError as exc:
        print(f"token-issuer: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(
            f"token-issuer: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr
        )
        return 1
    header_file = Path(args.dir) / IDENTITY_HEADER_FILE
    print(f"Token issuer {issuer.keys.issuer} listening on {issuer.url}", flush=True)
    print(f"export IDENTITY_ENDPOINT={issuer.url}", flush=True)
    print(f'export IDENTITY_HEADER="$(cat {header_file})"', flush=True)
    print(f"Emulator: --entra-id-issuer-dir {args.dir}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(0.5):
        pass
    issuer.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
