"""The local token issuer as Entra ID, called by the unmodified azure-identity/MSAL over HTTPS (the
emulator's CA, trusted through ``REQUESTS_CA_BUNDLE``, which requests and so azure-core honour):
a service principal's client secret (v2 endpoint, after MSAL's OIDC discovery), a workload
identity's federated token (client assertion), IMDS's managed-identity form, and the v1 endpoint
hadoop-azure's ``ClientCredsTokenProvider`` posts to. Refusals come in Entra ID's words and reach
the user through azure-identity's error; no secret is in any of them.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import jwt
import pytest
import requests

from eventhubs_emulator.token_issuer import (
    RegisteredClient,
    TokenIssuer,
    federated_token,
    load_trust,
)

SECRET = "sp-secret-value-Zq9"
SUBJECT = "system:serviceaccount:jobs:spark"
STORAGE = "https://storage.azure.com/.default"


@pytest.fixture
def issuer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TokenIssuer]:
    for name in ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET", "AZURE_FEDERATED_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    server = TokenIssuer(
        tmp_path / "issuer",
        lifetime=120,
        tls_dir=tmp_path / "tls",
        clients=[
            RegisteredClient("sp-app", client_secret=SECRET),
            RegisteredClient("wi-app", federated_subject=SUBJECT),
            RegisteredClient("mi-user", managed=True),
        ],
    ).start()
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tmp_path / "tls" / "ca.pem"))
    yield server
    server.stop()


def _other_clusters_token(subject: str) -> str:
    """A service-account token with the right claims, signed by a key the issuer does not trust."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    from eventhubs_emulator.token_issuer import FEDERATION_AUDIENCE, FEDERATION_ISSUER

    now = int(time.time())
    claims = {
        "iss": FEDERATION_ISSUER,
        "sub": subject,
        "aud": [FEDERATION_AUDIENCE],
        "iat": now,
        "exp": now + 600,
    }
    return jwt.encode(
        claims, rsa.generate_private_key(public_exponent=65537, key_size=2048), algorithm="RS256"
    )


def _claims(issuer: TokenIssuer, token: str, audience: str) -> dict:
    trust = load_trust(issuer.folder)
    return jwt.decode(
        token, trust.public_key_pem, algorithms=["RS256"], audience=audience, issuer=trust.issuer
    )


def test_a_service_principal_gets_a_token_and_a_wrong_secret_or_client_is_refused_in_entras_words(
    issuer: TokenIssuer,
) -> None:
    from azure.core.exceptions import ClientAuthenticationError
    from azure.identity import ClientSecretCredential

    def credential(client_id: str, secret: str) -> ClientSecretCredential:
        return ClientSecretCredential(
            issuer.tenant_id, client_id, secret, authority=issuer.base_url, disable_instance_discovery=True
        )

    token = credential("sp-app", SECRET).get_token("https://eventhubs.azure.net//.default")
    claims = _claims(issuer, token.token, "https://eventhubs.azure.net/")
    assert claims["appid"] == "sp-app" and claims["tid"] == issuer.tenant_id
    assert 110 <= token.expires_on - time.time() <= 121
    assert issuer.tokens_by_client["sp-app"] == 1

    with pytest.raises(ClientAuthenticationError) as wrong:
        credential("sp-app", "not-the-secret").get_token(STORAGE)
    assert "AADSTS7000215: Invalid client secret provided" in str(wrong.value)
    assert "not-the-secret" not in str(wrong.value)
    with pytest.raises(ClientAuthenticationError) as unknown:
        credential("nobody", SECRET).get_token(STORAGE)
    assert "AADSTS700016: Application with identifier 'nobody' was not found" in str(unknown.value)
    with pytest.raises(ClientAuthenticationError) as resource:
        credential("sp-app", SECRET).get_token("https://vault.azure.net/.default")
    assert "AADSTS500011" in str(resource.value)
    # another tenant: MSAL's OIDC discovery is refused, and the user is told so
    other = ClientSecretCredential(
        "00000000-0000-0000-0000-000000000000",
        "sp-app",
        SECRET,
        authority=issuer.base_url,
        disable_instance_discovery=True,
    )
    with pytest.raises(ClientAuthenticationError) as tenant:
        other.get_token(STORAGE)
    assert "double check your tenant name or GUID" in str(tenant.value)  # MSAL's words for a 400
    assert issuer.tokens_by_client["sp-app"] == 1, "no refused request got a token"


def test_a_workload_identity_trades_its_federated_token_and_a_foreign_one_is_refused(
    issuer: TokenIssuer, tmp_path: Path
) -> None:
    from azure.core.exceptions import ClientAuthenticationError
    from azure.identity import WorkloadIdentityCredential

    token_file = tmp_path / "azure-identity-token"

    def get(subject: str, **kwargs: float) -> str:
        token_file.write_text(federated_token(issuer.folder, subject, **kwargs))
        return (
            WorkloadIdentityCredential(
                tenant_id=issuer.tenant_id,
                client_id="wi-app",
                token_file_path=str(token_file),
                authority=issuer.base_url,
            )
            .get_token(STORAGE)
            .token
        )

    assert _claims(issuer, get(SUBJECT), "https://storage.azure.com")["appid"] == "wi-app"
    with pytest.raises(ClientAuthenticationError) as other:
        get("system:serviceaccount:jobs:intruder")
    assert "AADSTS70021: No matching federated identity record" in str(other.value)
    assert "jobs:intruder" in str(other.value)
    with pytest.raises(ClientAuthenticationError) as expired:
        get(SUBJECT, lifetime=60, now=time.time() - 3600)
    assert "AADSTS700024" in str(expired.value)
    # a token of another cluster (another key) for the right subject
    token_file.write_text(_other_clusters_token(SUBJECT))
    with pytest.raises(ClientAuthenticationError) as forged:
        WorkloadIdentityCredential(
            tenant_id=issuer.tenant_id,
            client_id="wi-app",
            token_file_path=str(token_file),
            authority=issuer.base_url,
        ).get_token(STORAGE)
    assert "AADSTS700027" in str(forged.value)
    assert issuer.tokens_by_client["wi-app"] == 1


def test_imds_answers_a_managed_identity_with_the_metadata_header_only(
    issuer: TokenIssuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from azure.core.exceptions import ClientAuthenticationError
    from azure.identity import ManagedIdentityCredential

    monkeypatch.delenv("IDENTITY_ENDPOINT", raising=False)
    monkeypatch.delenv("IDENTITY_HEADER", raising=False)
    monkeypatch.setenv("AZURE_POD_IDENTITY_AUTHORITY_HOST", issuer.base_url)
    token = ManagedIdentityCredential(client_id="mi-user").get_token(STORAGE)
    assert _claims(issuer, token.token, "https://storage.azure.com")["appid"] == "mi-user"
    system = ManagedIdentityCredential().get_token(STORAGE)
    assert _claims(issuer, system.token, "https://storage.azure.com")["appid"] == "emulator-managed-identity"
    with pytest.raises(ClientAuthenticationError):
        ManagedIdentityCredential(client_id="sp-app").get_token(STORAGE)  # not a managed identity

    # hadoop-azure's request (AzureADAuthenticator.getTokenFromMsi), with and without its header
    query = {"api-version": "2018-02-01", "resource": "https://storage.azure.com/", "client_id": "mi-user"}
    answer = requests.get(issuer.imds_endpoint, params=query, headers={"Metadata": "true"}, timeout=10)
    assert answer.status_code == 200 and answer.headers["Content-Type"].startswith("application/json")
    body = answer.json()
    assert int(body["expires_on"]) - time.time() > 100 and body["expires_in"] == "120"
    refused = requests.get(issuer.imds_endpoint, params=query, timeout=10)
    assert refused.status_code == 400
    assert refused.json()["error_description"] == "Required metadata header not specified"


def test_the_v1_endpoint_answers_hadoops_client_credentials_form(issuer: TokenIssuer) -> None:
    url = f"{issuer.base_url}/{issuer.tenant_id}/oauth2/token"
    form = {
        "resource": "https://storage.azure.com/",
        "grant_type": "client_credentials",
        "client_id": "sp-app",
        "client_secret": SECRET,
    }
    answer = requests.post(url, data=form, timeout=10)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["resource"] == "https://storage.azure.com/" and int(body["expires_on"]) > time.time() + 100
    _claims(issuer, body["access_token"], "https://storage.azure.com/")
    refused = requests.post(url, data={**form, "client_secret": "wrong"}, timeout=10)
    assert refused.status_code == 401 and refused.json()["error"] == "invalid_client"
    assert refused.json()["error_codes"] == [7000215] and "wrong" not in refused.text
    discovery = requests.get(f"{issuer.base_url}/{issuer.tenant_id}/v2.0/.well-known/openid-configuration")
    assert discovery.json()["token_endpoint"] == f"{issuer.base_url}/{issuer.tenant_id}/oauth2/v2.0/token"
    keys = requests.get(discovery.json()["jwks_uri"], timeout=10).json()["keys"]
    assert keys[0]["kid"] == issuer.keys.key_id


def test_the_command_line_reads_clients_from_a_file_and_names_a_bad_entry(tmp_path: Path) -> None:
    clients = tmp_path / "clients.json"
    clients.write_text(json.dumps({"clients": [{"client_id": "app", "client_secret": "s", "managed": True}]}))
    command = [sys.executable, "-m", "eventhubs_emulator.token_issuer", "--dir", str(tmp_path / "i")]
    done = subprocess.run([*command, "--clients", str(clients)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "clients[0] (app) needs exactly one of client_secret, federated_subject or managed" in done.stderr
    assert '"s"' not in done.stderr


def test_the_command_line_serves_an_https_authority_for_the_clients_in_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from azure.identity import ClientSecretCredential

    clients = tmp_path / "clients.json"
    clients.write_text(json.dumps({"clients": [{"client_id": "cli-app", "client_secret": SECRET}]}))
    command = [
        *(sys.executable, "-m", "eventhubs_emulator.token_issuer", "--dir", str(tmp_path / "i")),
        *("--https", "--clients", str(clients), "--lifetime", "60"),
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(9)]  # blocks until it listens
        printed = dict(re.findall(r"([A-Z_]+)=(\S+)", "".join(x for x in lines if "export " in x)))
        assert SECRET not in "".join(lines) and lines[-1].strip() == "Registered clients: cli-app"
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", printed["REQUESTS_CA_BUNDLE"])
        token = ClientSecretCredential(
            printed["AZURE_TENANT_ID"],
            "cli-app",
            SECRET,
            authority=printed["AZURE_AUTHORITY_HOST"],
            disable_instance_discovery=True,
        ).get_token(STORAGE)
        assert 50 <= token.expires_on - time.time() <= 61
    finally:
        process.terminate()
        assert process.wait(timeout=30) == 0
