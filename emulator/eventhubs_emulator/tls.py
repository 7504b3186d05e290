"""TLS for the emulator's AMQPS/WSS port: a local CA and a server certificate made on first use.

Clients that insist on TLS (the Java SDK, the Python SDK without ``UseDevelopmentEmulator=true``)
connect to the TLS port and trust ``ca.pem`` (Python: ``connection_verify=<folder>/ca.pem``). The
files live in one folder (``UserConfig.EmulatorExtras.TlsDir`` / ``--tls-dir``); what is there is
reused, so clients keep trusting the same CA across restarts. Keys are written owner-only. The
server certificate names ``localhost``, ``127.0.0.1``, ``::1`` and the host the emulator binds.

Certificates need the ``cryptography`` package (``pip install eventhubs-emulator[tls]``), imported
only when a TLS port is asked for; the plain ports need nothing.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import ssl
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

#: File names inside the TLS folder.
CA_CERT, SERVER_CERT, SERVER_KEY, CA_KEY = "ca.pem", "server.pem", "server-key.pem", "ca-key.pem"
VALID_FOR = timedelta(days=825)  # the longest a server certificate is trusted by Apple/Chrome


class TlsSetupError(RuntimeError):
    """The TLS folder cannot be used or made; the message says what to do."""


@dataclass(frozen=True)
class TlsFiles:
    """The CA clients trust, and the server's certificate chain and key."""

    ca_cert: Path
    server_cert: Path
    server_key: Path

    def server_context(self) -> ssl.SSLContext:
        """The server side of TLS 1.2+ with the emulator's certificate."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.server_cert, self.server_key)
        return context


def ensure_certificates(folder: str | Path, host: str = "127.0.0.1") -> TlsFiles:
    """The TLS files in ``folder``, made there first when missing (a new CA and a server
    certificate it signed); existing files are used as they are."""
    folder = Path(folder)
    files = TlsFiles(folder / CA_CERT, folder / SERVER_CERT, folder / SERVER_KEY)
    if files.ca_cert.exists() and files.server_cert.exists() and files.server_key.exists():
        return files
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        raise TlsSetupError(
            "a TLS port needs the cryptography package to make its certificates: "
            "pip install 'eventhubs-emulator[tls]' (or put ca.pem, server.pem and server-key.pem in "
            f"{folder})"
        ) from None
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TlsSetupError(f"TLS folder {folder}: {exc.strerror}; pass a writable --tls-dir") from None

    now = datetime.now(UTC) - timedelta(minutes=5)  # a client clock slightly behind still trusts it
    ca_key = ec.generate_private_key(ec.SECP256R1())
    # A name of its own: a trust store holding several emulators' CAs (two runs side by side, or an
    # old one left in) finds each certificate's issuer by this name, and a shared name fails them.
    ca_common_name = f"eventhubs-emulator local CA {secrets.token_hex(4)}"
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ca_common_name)])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + VALID_FOR)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName("localhost")]
    addresses = {"127.0.0.1", "::1"}
    try:
        addresses.add(str(ipaddress.ip_address(host)))
    except ValueError:
        names.append(x509.DNSName(host))
    names += [x509.IPAddress(ipaddress.ip_address(a)) for a in sorted(addresses)]
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + VALID_FOR)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    private = serialization.PrivateFormat.PKCS8
    _write(folder / CA_KEY, ca_key.private_bytes(pem, private, serialization.NoEncryption()), secret=True)
    _write(files.server_key, key.private_bytes(pem, private, serialization.NoEncryption()), secret=True)
    _write(files.server_cert, server.public_bytes(pem) + ca.public_bytes(pem))
    _write(files.ca_cert, ca.public_bytes(pem))  # last: its presence says the folder is complete
    return files


def _write(path: Path, data: bytes, secret: bool = False) -> None:
    """Write ``data`` to ``path`` through a temporary name (owner-only for a key)."""
    temporary = path.with_name(path.name + ".tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if secret else 0o644)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)
    os.replace(temporary, path)
