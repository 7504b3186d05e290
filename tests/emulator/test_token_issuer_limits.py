"""The local token issuer is bounded in size, connections and time, and its App Service endpoint
refuses a resource it does not serve as App Service does - over real sockets against the real server.

* a body larger than ``MAX_BODY_BYTES`` (by its ``Content-Length``) is refused with 413 before it is
  read, a ``Content-Length`` that is not a number with 400, a chunked body with 411;
* a request has ``REQUEST_SECONDS`` in all to arrive and be answered (a client that sends nothing,
  or one header line at a time, is cut off);
* at most ``MAX_CONNECTIONS`` connections are served at once; one beyond is closed at once;
* ``/msi/token`` answers a resource outside the issuer's audiences with App Service's HTTP 500
  (``statusCode``, ``message``, ``correlationId``) naming Entra ID's AADSTS500011 reason, and
  azure-identity's ManagedIdentityCredential reports it.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from eventhubs_emulator.token_issuer import TokenIssuer
from eventhubs_emulator.token_issuer import server as issuer_server
from tests.support.emulator import AZURE_IDENTITY_VARIABLES

pytestmark = pytest.mark.integration


@pytest.fixture
def issuer(tmp_path: Path) -> Iterator[TokenIssuer]:
    running = TokenIssuer(tmp_path / "issuer").start()
    yield running
    running.stop()


def _connect(issuer: TokenIssuer) -> socket.socket:
    host, port = issuer._server.server_address[:2]
    return socket.create_connection((host, port), timeout=5)


def _answer(sock: socket.socket, within: float = 5.0) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of the next answer on ``sock``."""
    sock.settimeout(within)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before an answer: {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers.get("content-length", "0")):
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(lines[0].split()[1]), headers, body


def _closed(sock: socket.socket, within: float) -> bool:
    sock.settimeout(within)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


def _token_post(issuer: TokenIssuer, extra_headers: str) -> bytes:
    return (
        f"POST /{issuer.tenant_id}/oauth2/v2.0/token HTTP/1.1\r\nHost: x\r\n"
        f"Content-Type: application/x-www-form-urlencoded\r\n{extra_headers}\r\n"
    ).encode()


# ------------------------------------------------------------------------------------------- size


def test_an_oversize_content_length_is_refused_before_the_body_is_read(issuer):
    """Before, the issuer read (and allocated) whatever Content-Length said, waiting for ever."""
    sock = _connect(issuer)
    try:
        sock.sendall(_token_post(issuer, "Content-Length: 100000000\r\n"))  # 100 MB announced, none sent
        status, headers, body = _answer(sock)
        assert status == 413
        assert json.loads(body)["error_description"].endswith(f"larger than {64 * 1024} bytes")
        assert headers.get("connection") == "close"
        assert _closed(sock, 5)
    finally:
        sock.close()


@pytest.mark.parametrize(
    ("header", "status"),
    [
        ("Content-Length: -5\r\n", 400),
        ("Content-Length: lots\r\n", 400),
        ("Transfer-Encoding: chunked\r\n", 411),
    ],
)
def test_a_body_length_the_issuer_cannot_trust_is_refused(issuer, header, status):
    sock = _connect(issuer)
    try:
        sock.sendall(_token_post(issuer, header))
        assert _answer(sock)[0] == status
        assert _closed(sock, 5)
    finally:
        sock.close()


def test_a_body_within_the_limit_is_still_read(issuer):
    form = (
        b"grant_type=client_credentials&client_id=nobody&client_secret=x"
        b"&scope=https%3A%2F%2Feventhubs.azure.net%2F.default"
    )
    sock = _connect(issuer)
    try:
        sock.sendall(_token_post(issuer, f"Content-Length: {len(form)}\r\n") + form)
        status, _, body = _answer(sock)
        assert status == 400 and "AADSTS700016" in json.loads(body)["error_description"]  # read and judged
    finally:
        sock.close()


# ------------------------------------------------------------------------------------------- time


@pytest.fixture
def quick_issuer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TokenIssuer]:
    monkeypatch.setattr(issuer_server, "REQUEST_SECONDS", 0.5)
    running = TokenIssuer(tmp_path / "issuer").start()
    yield running
    running.stop()


def test_a_client_that_sends_nothing_is_cut_off(quick_issuer):
    """Before, a connection that sent nothing held its thread for ever (no socket time-out)."""
    sock = _connect(quick_issuer)
    try:
        assert _closed(sock, 5), "the issuer kept a silent connection"
    finally:
        sock.close()


def test_a_client_that_sends_its_request_slowly_is_cut_off_in_all(quick_issuer):
    """One header line every 0.2 s passes each read's time-out; the request's is 0.5 s in all."""
    sock = _connect(quick_issuer)
    try:
        sock.sendall(b"GET /msi/token HTTP/1.1\r\n")
        started = time.monotonic()
        for n in range(50):
            time.sleep(0.2)
            try:
                sock.sendall(f"X-Slow-{n}: {n}\r\n".encode())
            except OSError:
                break
        assert _closed(sock, 2), "the issuer kept a request that never finished"
        assert time.monotonic() - started < 5
    finally:
        sock.close()


# ------------------------------------------------------------------------------------ connections


def test_connections_beyond_the_limit_are_closed_at_once(tmp_path, monkeypatch):
    """Before, every connection got its own thread, however many."""
    monkeypatch.setattr(issuer_server, "MAX_CONNECTIONS", 4)
    with TokenIssuer(tmp_path / "issuer") as issuer:
        held = [_connect(issuer) for _ in range(4)]
        try:
            time.sleep(0.2)  # the four are accepted and served (each waits for its request)
            extra = _connect(issuer)
            try:
                assert _closed(extra, 3), "a fifth connection was served"
            finally:
                extra.close()
            held.pop().close()
            time.sleep(0.2)  # its thread ends and frees its place
            again = _connect(issuer)
            try:
                again.sendall(b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n")
                assert _answer(again)[0] == 404, "a connection within the limit was not served"
            finally:
                again.close()
        finally:
            for sock in held:
                sock.close()


# --------------------------------------------------------------------------------- /msi/token resource


def _msi(issuer: TokenIssuer, resource: str) -> tuple[int, dict]:
    sock = _connect(issuer)
    try:
        sock.sendall(
            f"GET /msi/token?api-version=2019-08-01&resource={quote(resource, safe='')} HTTP/1.1\r\n"
            f"Host: x\r\nX-IDENTITY-HEADER: {issuer.identity_header}\r\n\r\n".encode()
        )
        status, _, body = _answer(sock)
        return status, json.loads(body)
    finally:
        sock.close()


@pytest.mark.parametrize(
    "resource", ["https://vault.azure.net", "https://management.azure.com/", "api://other"]
)
def test_msi_token_refuses_a_resource_it_does_not_serve_as_app_service_does(issuer, resource):
    """Before, /msi/token minted a token for any resource."""
    status, document = _msi(issuer, resource)
    assert status == 500
    assert set(document) == {"statusCode", "message", "correlationId"}
    assert document["statusCode"] == 500
    assert document["message"].startswith("An unexpected error occured while fetching the AAD Token.")
    assert "AADSTS500011" in document["message"] and resource in document["message"]
    assert "access_token" not in document


@pytest.mark.parametrize(
    "resource", ["https://eventhubs.azure.net", "https://eventhubs.azure.net/", "https://storage.azure.com"]
)
def test_msi_token_still_serves_event_hubs_and_storage(issuer, resource):
    status, document = _msi(issuer, resource)
    assert status == 200 and document["access_token"] and document["resource"] == resource


def test_azure_identity_reports_the_refused_resource(issuer, monkeypatch):
    """The unmodified ManagedIdentityCredential (App Service through IDENTITY_ENDPOINT) gets no token
    for a resource the issuer does not serve, and says App Service answered 500; Event Hubs works."""
    from azure.core.exceptions import ClientAuthenticationError
    from azure.identity import ManagedIdentityCredential

    for name in AZURE_IDENTITY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in issuer.environment().items():
        monkeypatch.setenv(name, value)
    credential = ManagedIdentityCredential(retry_total=0)
    assert credential.get_token("https://eventhubs.azure.net//.default").token
    with pytest.raises(ClientAuthenticationError) as refused:
        credential.get_token("https://vault.azure.net/.default")
    assert "500" in str(refused.value) and "AADSTS500011" in str(refused.value)
