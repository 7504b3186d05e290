"""The connector's ``eventhubs.useAadAuth`` with production identities other than a managed one,
each found by ``DefaultAzureCredential`` in the environment as on a cluster: a service principal
(``AZURE_CLIENT_ID``/``AZURE_CLIENT_SECRET``/``AZURE_TENANT_ID``, EnvironmentCredential) and a
Kubernetes workload identity (``AZURE_FEDERATED_TOKEN_FILE``, WorkloadIdentityCredential), both
asking the local Entra ID at ``AZURE_AUTHORITY_HOST`` over HTTPS. The issuer and the emulator share
one CA, which azure-identity trusts through ``REQUESTS_CA_BUNDLE`` (requests' variable) and the
connector through ``eventhubs.connectionVerify``.

The fast receiver, the management session and a sink producer run past the first token's expiry on
the same links (the emulator detaches a link whose token lapses), every event received once, in
order; the issuer counts each identity's token requests. A wrong client secret fails with Entra ID's
reason (AADSTS7000215) in the connector's error, and the secret nowhere in it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pyspark_eventhubs.hub_metadata import HubMetadata
from pyspark_eventhubs.options import parse_options
from tests.connector.test_entra_id_stream import aad_options
from tests.connector.token_renewal import LIFETIME, read_and_write_past_the_first_token
from tests.support.emulator import AZURE_IDENTITY_VARIABLES

pytestmark = pytest.mark.integration

SECRET = "sp-secret-do-not-log-7Qx"
SUBJECT = "system:serviceaccount:streams:copy-job"


@dataclass
class Stack:
    emu: Any
    issuer: Any
    folder: Path


@pytest.fixture
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    """The emulator (TLS port, trusting the issuer) and the issuer as an HTTPS authority, one CA."""
    from eventhubs_emulator import EmulatorConfig
    from eventhubs_emulator.token_issuer import RegisteredClient, TokenIssuer
    from tests.support.emulator import Emulator

    for name in AZURE_IDENTITY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    issuer = TokenIssuer(
        tmp_path / "token-issuer",
        lifetime=LIFETIME,
        tls_dir=tmp_path / "tls",
        clients=[
            RegisteredClient("copy-job-sp", client_secret=SECRET),
            RegisteredClient("copy-job-wi", federated_subject=SUBJECT),
        ],
    ).start()
    config = EmulatorConfig.many_hubs(
        {"hub1": 1},
        tls_port=0,
        tls_dir=str(tmp_path / "tls"),
        entra_id_issuer_dir=str(tmp_path / "token-issuer"),
    )
    try:
        emu = Emulator(config, port=0).start()
    except BaseException:
        issuer.stop()
        raise
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tmp_path / "tls" / "ca.pem"))
    monkeypatch.setenv("AZURE_AUTHORITY_HOST", issuer.base_url)
    monkeypatch.setenv("AZURE_TENANT_ID", issuer.tenant_id)
    yield Stack(emu, issuer, tmp_path)
    emu.stop()
    issuer.stop()


def test_a_service_principal_from_the_environment_reads_and_writes_with_renewing_tokens(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AZURE_CLIENT_ID", "copy-job-sp")
    monkeypatch.setenv("AZURE_CLIENT_SECRET", SECRET)
    read_and_write_past_the_first_token(stack.emu)
    # one token per connection at first, each renewed at least once past LIFETIME
    assert stack.issuer.tokens_by_client["copy-job-sp"] >= 4, dict(stack.issuer.tokens_by_client)
    assert set(stack.issuer.tokens_by_client) == {"copy-job-sp"}, "no other identity was used"

    # a wrong secret: the connector's error carries Entra ID's reason, not the secret
    monkeypatch.setenv("AZURE_CLIENT_SECRET", "a-wrong-secret-value")
    metadata = HubMetadata(parse_options(aad_options(stack.emu, "hub1")))
    try:
        with pytest.raises(Exception) as refused:
            metadata.bounds()
    finally:
        metadata.close()
    message = f"{refused.value} {refused.value.__cause__ or ''}"
    assert "AADSTS7000215" in message and "Invalid client secret" in message, message
    assert "a-wrong-secret-value" not in message and SECRET not in message


@pytest.mark.slow
def test_a_workload_identity_reads_and_writes_with_renewing_tokens(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eventhubs_emulator.token_issuer import federated_token

    token_file = stack.folder / "azure-identity-token"
    # the webhook's projected token; it outlives the access tokens it is traded for
    token_file.write_text(federated_token(stack.issuer.folder, SUBJECT, lifetime=3600))
    monkeypatch.setenv("AZURE_CLIENT_ID", "copy-job-wi")
    monkeypatch.setenv("AZURE_FEDERATED_TOKEN_FILE", str(token_file))
    read_and_write_past_the_first_token(stack.emu)
    assert stack.issuer.tokens_by_client["copy-job-wi"] >= 4, dict(stack.issuer.tokens_by_client)
    assert set(stack.issuer.tokens_by_client) == {"copy-job-wi"}
