"""The issuer's keys: the folder they live in, the access tokens they sign, and the "Kubernetes" key
that signs workload identities' federated tokens.

The signing key, the tenant and so the issuer (``https://sts.windows.net/<tenant>/``, the service's
v1 form, which Event Hubs and Storage tokens carry) live in one folder, made there on first use and
reused afterwards: ``issuer-key.pem`` (the private key, owner-only), ``issuer.json`` (the issuer and
the public key, which the emulator trusts: ``EntraIdIssuerDir`` / ``--entra-id-issuer-dir``),
``identity-header`` (the App Service endpoint's secret, owner-only) and ``federation-key.pem`` (the
key of the stand-in Kubernetes cluster whose service-account tokens the authority accepts as client
assertions, owner-only). The emulator and the issuer may be started in either order.
"""

from __future__ import annotations

import json
import os
import secrets
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The audience of an Event Hubs token (azure-eventhub asks for ``https://eventhubs.azure.net//.default``).
EVENTHUBS_AUDIENCE = "https://eventhubs.azure.net/"
#: File names inside the issuer's folder.
PRIVATE_KEY, ISSUER_FILE, IDENTITY_HEADER_FILE = "issuer-key.pem", "issuer.json", "identity-header"
#: The key of the stand-in Kubernetes cluster (signs federated service-account tokens).
FEDERATION_KEY = "federation-key.pem"
#: The ``iss`` of that cluster's service-account tokens (an AKS OIDC issuer URL in production).
FEDERATION_ISSUER = "https://kubernetes.hubflow.local/"
#: The audience Entra ID requires of a federated token (Microsoft's documented default).
FEDERATION_AUDIENCE = "api://AzureADTokenExchange"
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
        claims: dict[str, Any] | None = None,
    ) -> tuple[str, int]:
        """A signed RS256 access token and its expiry (epoch seconds); tests vary the claims."""
        import jwt

        issued = int(time.time() if now is None else now)
        expires = issued + max(1, int(lifetime))
        payload: dict[str, Any] = {
            "aud": audience,
            "iss": issuer or self.issuer,
            "iat": issued,
            "nbf": issued,
            "exp": expires,
            "sub": subject,
            "oid": subject,
            "tid": self.tenant_id,
        }
        payload.update(claims or {})
        token = jwt.encode(payload, self.private_key_pem, algorithm="RS256", headers={"kid": self.key_id})
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
    return IssuerKeys("forged", "forged", "forged", "", _new_private_key())


def _new_private_key() -> bytes:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def federation_key(folder: str | Path) -> bytes:
    """The stand-in cluster's private key (PEM) in ``folder``, made there first when missing."""
    path = Path(folder) / FEDERATION_KEY
    if not path.exists():
        with _folder_lock(Path(folder)):
            if not path.exists():
                _write_private(path, _new_private_key())
    return path.read_bytes()


def federated_token(
    folder: str | Path,
    subject: str,
    lifetime: float = 3600.0,
    *,
    audience: str = FEDERATION_AUDIENCE,
    now: float | None = None,
) -> str:
    """A service-account token of the stand-in cluster for ``subject`` (what the workload identity
    webhook mounts at ``AZURE_FEDERATED_TOKEN_FILE``): an RS256 JWT the authority accepts as a
    client assertion for the client registered with that subject."""
    import jwt

    issued = int(time.time() if now is None else now)
    claims = {
        "iss": FEDERATION_ISSUER,
        "sub": subject,
        "aud": [audience],
        "iat": issued,
        "nbf": issued,
        "exp": issued + max(1, int(lifetime)),
    }
    return jwt.encode(claims, federation_key(folder), algorithm="RS256")


def federation_public_key(folder: str | Path) -> Any:
    """The public half of :func:`federation_key` (what the authority checks assertions with)."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    return load_pem_private_key(federation_key(folder), password=None).public_key()
