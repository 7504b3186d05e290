"""Entra ID (Azure AD) against the emulator, through the unmodified SDK and azure-identity.

A local token issuer (``eventhubs_emulator.token_issuer``) serves App Service's managed-identity
endpoint; azure-identity's ``DefaultAzureCredential`` finds it through ``IDENTITY_ENDPOINT`` /
``IDENTITY_HEADER`` and the SDK puts its RS256 JWT on ``$cbs`` (type ``jwt``) over the TLS port. The
emulator checks signature, issuer, audience and expiry as the service does, refuses bad tokens with
the service's error names, and detaches a link whose token lapses without a new put-token.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.core.credentials import AccessToken
from azure.eventhub import EventData, EventHubConsumerClient, EventHubProducerClient

from eventhubs_emulator import Emulator
from eventhubs_emulator.token_issuer import TokenIssuer
from tests.support.emulator import start_entra_emulator

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def entra(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Emulator, TokenIssuer]]:
    emu, issuer = start_entra_emulator(tmp_path_factory.mktemp("entra"), hub1=2)
    yield emu, issuer
    emu.stop()
    issuer.stop()


@pytest.fixture
def identity(entra: tuple[Emulator, TokenIssuer], monkeypatch: pytest.MonkeyPatch) -> TokenIssuer:
    """The issuer, with its managed-identity variables in the environment (and no fault)."""
    _, issuer = entra
    for name, value in issuer.environment().items():
        monkeypatch.setenv(name, value)
    issuer.fault = None
    yield issuer
    issuer.fault = None


def _tls(emu: Emulator) -> dict[str, Any]:
    return {
        "custom_endpoint_address": emu.tls_endpoint(),
        "connection_verify": str(emu.ca_certificate),
        "retry_total": 0,
    }


def _producer(emu: Emulator, credential: Any) -> EventHubProducerClient:
    return EventHubProducerClient("localhost", "hub1", credential, **_tls(emu))


def test_a_managed_identity_token_sends_reads_and_asks_for_properties(
    entra: tuple[Emulator, TokenIssuer], identity: TokenIssuer
) -> None:
    from azure.identity import DefaultAzureCredential

    emu, _ = entra
    before = identity.tokens_issued
    producer = _producer(emu, DefaultAzureCredential())
    with producer:
        batch = producer.create_batch(partition_id="1")
        batch.add(EventData("through-entra-id"))
        producer.send_batch(batch)
        assert producer.get_eventhub_properties()["partition_ids"] == ["0", "1"]
    assert identity.tokens_issued > before, "the token came from the local issuer's endpoint"
    seen: list[str] = []
    done = threading.Event()

    def on_event(_ctx: Any, event: Any) -> None:
        if event is not None:
            seen.append(event.body_as_str())
            done.set()

    consumer = EventHubConsumerClient("localhost", "hub1", "$Default", DefaultAzureCredential(), **_tls(emu))
    worker = threading.Thread(
        target=consumer.receive,
        kwargs={"on_event": on_event, "partition_id": "1", "starting_position": "-1"},
        daemon=True,
    )
    worker.start()
    try:
        assert done.wait(60), "no event read with the managed identity's token"
    finally:
        consumer.close()
        worker.join(30)
    assert seen == ["through-entra-id"]


@pytest.mark.parametrize(
    ("fault", "cause"),
    [
        ("wrong-audience", "InvalidAudience"),
        ("expired", "ExpiredToken"),
        ("bad-signature", "InvalidSignature"),
    ],
)
def test_a_bad_token_is_refused_with_the_services_error_and_the_connector_names_it(
    entra: tuple[Emulator, TokenIssuer], identity: TokenIssuer, fault: str, cause: str
) -> None:
    from azure.identity import DefaultAzureCredential

    from pyspark_eventhubs.client import EventHubsClientError
    from pyspark_eventhubs.hub_metadata import HubMetadata
    from pyspark_eventhubs.options import parse_options

    emu, _ = entra
    identity.fault = fault
    with pytest.raises(Exception, match=cause) as refused:
        with _producer(emu, DefaultAzureCredential()) as producer:
            producer.get_eventhub_properties()
    assert "401" in str(refused.value) or "unauthorized" in str(refused.value).lower()

    options = parse_options(
        {
            "eventhubs.useAadAuth": "true",
            "eventhubs.fullyQualifiedNamespace": "localhost",
            "eventhubs.name": "hub1",
            "eventhubs.customEndpointAddress": emu.tls_endpoint(),
            "eventhubs.connectionVerify": str(emu.ca_certificate),
            "eventhubs.receiverTimeout": "PT30S",
            "eventhubs.operationTimeout": "PT30S",
        }
    )
    metadata = HubMetadata(options)
    try:
        with pytest.raises(EventHubsClientError, match=f"not authorized.*401 {cause}"):
            metadata.partition_ids()
    finally:
        metadata.close()


class _FixedToken:
    """A credential holding one token (a TokenCredential as the SDK takes any): it claims an hour
    so the SDK never refreshes, while the token itself expires in ``seconds``."""

    def __init__(self, issuer: TokenIssuer, seconds: int) -> None:
        self.token, self.expires = issuer.keys.mint(lifetime=seconds)

    def get_token(self, *_scopes: str, **_kwargs: Any) -> AccessToken:
        return AccessToken(self.token, int(time.time()) + 3600)


def test_a_link_whose_token_lapses_without_a_new_put_token_is_detached(
    entra: tuple[Emulator, TokenIssuer],
) -> None:
    emu, issuer = entra
    credential = _FixedToken(issuer, seconds=4)
    errors: list[BaseException] = []
    events: list[str] = []
    failed = threading.Event()

    def on_event(_ctx: Any, event: Any) -> None:
        if event is not None:
            events.append(event.body_as_str())

    def on_error(_ctx: Any, error: BaseException) -> None:
        errors.append(error)
        failed.set()

    consumer = EventHubConsumerClient("localhost", "hub1", "$Default", credential, **_tls(emu))
    worker = threading.Thread(
        target=consumer.receive,
        kwargs={
            "on_event": on_event,
            "on_error": on_error,
            "partition_id": "0",
            "starting_position": "@latest",
            "max_wait_time": 0.5,
        },
        daemon=True,
    )
    worker.start()
    try:
        assert failed.wait(60), "the link outlived its token"
    finally:
        consumer.close()
        worker.join(30)
    assert time.time() >= credential.expires, "detached only once the token expired"
    assert "ExpiredToken" in " ".join(str(e) for e in errors)


def test_the_issuer_and_emulator_command_lines_work_as_documented(tmp_path: Path) -> None:
    """docs/emulator.md: the issuer prints the environment, the emulator trusts its folder."""
    import os
    import subprocess
    import sys

    from azure.identity import ManagedIdentityCredential

    from eventhubs_emulator.config import EmulatorConfig

    issuer_dir = tmp_path / "issuer"
    issuer = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "eventhubs_emulator.token_issuer",
            "--dir",
            str(issuer_dir),
            "--lifetime",
            "300",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    config = tmp_path / "Config.json"
    EmulatorConfig.single_hub("cli", partition_count=1).write(config)
    emulator = subprocess.Popen(
        [
            *(sys.executable, "-m", "eventhubs_emulator", "--config", str(config), "--port", "0"),
            *("--tls-port", "0", "--tls-dir", str(tmp_path / "tls")),
            *("--entra-id-issuer-dir", str(issuer_dir)),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert issuer.stdout is not None and emulator.stdout is not None
        lines = [issuer.stdout.readline() for _ in range(3)]
        endpoint = lines[1].strip().removeprefix("export IDENTITY_ENDPOINT=")
        assert endpoint.startswith("http://127.0.0.1:") and "IDENTITY_HEADER" in lines[2]
        header = (issuer_dir / "identity-header").read_text()
        assert header not in "".join(lines), "the secret is not printed"
        trusted = json.loads((issuer_dir / "issuer.json").read_text())["issuer"]
        assert any(f"accepting tokens of {trusted}" in emulator.stdout.readline() for _ in range(2))
        os.environ.update({"IDENTITY_ENDPOINT": endpoint, "IDENTITY_HEADER": header})
        try:
            token = ManagedIdentityCredential().get_token("https://eventhubs.azure.net//.default")
        finally:
            del os.environ["IDENTITY_ENDPOINT"], os.environ["IDENTITY_HEADER"]
        assert 290 <= token.expires_on - time.time() <= 301
    finally:
        for process in (issuer, emulator):
            process.terminate()
            process.wait(30)


def test_the_trusted_issuer_folder_is_read_from_config_json_as_written(tmp_path: Path) -> None:
    from eventhubs_emulator.config import EmulatorConfig, parse_config

    config = EmulatorConfig.single_hub("h", entra_id_issuer_dir=str(tmp_path / "issuer"))
    extras = config.to_document()["UserConfig"]["EmulatorExtras"]
    assert extras == {"EntraIdIssuerDir": str(tmp_path / "issuer")}
    assert parse_config(config.to_document()).entra_id_issuer_dir == str(tmp_path / "issuer")
    assert "EmulatorExtras" not in EmulatorConfig.single_hub("h").to_document()["UserConfig"]
