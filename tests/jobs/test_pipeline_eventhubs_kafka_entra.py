"""A ``kind: eventhubs_kafka`` source on an Entra ID connection (a connection string without a key):
Spark's Kafka source signs in with OAUTHBEARER through kafka-clients' own
``OAuthBearerLoginCallbackHandler`` as the service principal of ``AZURE_CLIENT_ID``/
``AZURE_TENANT_ID``/``AZURE_CLIENT_SECRET``, asking the local Entra ID (the token issuer over
HTTPS with the emulator's CA, ``REQUESTS_CA_BUNDLE``) for a token the emulator's Kafka endpoint
checks. Every event sent over AMQP lands once; a wrong secret fails the job with Entra ID's reason
(AADSTS7000215) and no secret in it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hubflow.status.exit_codes import EXIT_OK
from tests.support.emulator import AZURE_IDENTITY_VARIABLES

from .helpers import EmulatedHub, receive_all, write_json_landing_file
from .pipelines_support import (
    NUMBER_EVENTS,
    check_events_once,
    numbered_events,
    pipeline_config,
    run_on_session,
    write_module,
)

pytestmark = pytest.mark.integration

ENV_VAR = "HUBFLOW_TEST_KAFKA_ENTRA_CONNECTION"
CLIENT_ID = "kafka-copy-sp"
SECRET = "kafka-sp-secret-do-not-log-4Rv"


@dataclass
class EntraStack:
    hub: EmulatedHub
    bootstrap: str
    issuer: Any


@pytest.fixture
def entra_stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EntraStack]:
    """The issuer as an HTTPS authority knowing the service principal and the resource
    ``https://127.0.0.1`` (the namespace host Kafka clients ask a token for), the emulator trusting it
    with a Kafka port, and the service principal's environment; ``ENV_VAR`` holds the Entra ID
    connection string (no key)."""
    from eventhubs_emulator import Emulator, EmulatorConfig
    from eventhubs_emulator.token_issuer import RegisteredClient, TokenIssuer
    from eventhubs_emulator.token_issuer.authority import DEFAULT_AUDIENCES

    for name in AZURE_IDENTITY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    issuer = TokenIssuer(
        tmp_path / "token-issuer",
        tls_dir=tmp_path / "tls",
        clients=[RegisteredClient(CLIENT_ID, client_secret=SECRET)],
        audiences=[*DEFAULT_AUDIENCES, "https://127.0.0.1"],
    ).start()
    config = EmulatorConfig.many_hubs(
        {"hub1": 2}, kafka_port=0, entra_id_issuer_dir=str(tmp_path / "token-issuer")
    )
    try:
        with Emulator(config) as emulator:
            with_key = emulator.connection_string("hub1")
            endpoint = with_key.split(";")[0]
            monkeypatch.setenv(ENV_VAR, f"{endpoint};EntityPath=hub1;UseDevelopmentEmulator=true")
            monkeypatch.setenv("AZURE_AUTHORITY_HOST", issuer.base_url)
            monkeypatch.setenv("AZURE_TENANT_ID", issuer.tenant_id)
            monkeypatch.setenv("AZURE_CLIENT_ID", CLIENT_ID)
            monkeypatch.setenv("AZURE_CLIENT_SECRET", SECRET)
            monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tmp_path / "tls" / "ca.pem"))
            yield EntraStack(EmulatedHub("hub1", with_key, partitions=2), emulator.kafka_bootstrap, issuer)
    finally:
        issuer.stop()


def _config(tmp_path: Path, name: str, bootstrap: str) -> Path:
    source = {
        "kind": "eventhubs_kafka",
        "connection_string_env": ENV_VAR,
        "kafka_bootstrap_servers": bootstrap,
    }
    return pipeline_config(
        tmp_path,
        name,
        sources={"telemetry": source},
        sinks={"numbered": {"kind": "delta", "output_path": str(tmp_path / "lake" / name)}},
    )


def test_a_service_principal_reads_the_hub_through_kafka_each_event_once(
    spark: Any, entra_stack: EntraStack, tmp_path: Path, pipelines: Path
) -> None:
    write_module(pipelines, "entra_numbered", NUMBER_EVENTS)
    sent = entra_stack.hub.send_numbered(0, 120)
    config = _config(tmp_path, "entra_numbered", entra_stack.bootstrap)

    code, reason = run_on_session(spark, "entra_numbered:numbered", config)

    assert code == EXIT_OK, reason
    check_events_once(numbered_events(spark, tmp_path / "lake" / "entra_numbered"), sent, 2)
    # the tokens came from the v2 endpoint, asked by the JVM (kafka-clients), for the service principal
    requests = entra_stack.issuer.token_requests
    assert requests and {(client, route) for client, route, _ in requests} == {(CLIENT_ID, "v2")}, requests
    assert all(agent.startswith("Java") for _, _, agent in requests), requests
    for path in (tmp_path / "checkpoints").rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), f"the secret leaked into {path}"


def test_a_wrong_client_secret_fails_with_entra_ids_reason_and_no_secret(
    spark: Any, entra_stack: EntraStack, tmp_path: Path, pipelines: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = "not-the-sp-secret-9Kz"
    monkeypatch.setenv("AZURE_CLIENT_SECRET", wrong)
    write_module(pipelines, "entra_wrong", NUMBER_EVENTS)
    entra_stack.hub.send_numbered(0, 4)

    code, reason = run_on_session(
        spark, "entra_wrong:numbered", _config(tmp_path, "entra_wrong", entra_stack.bootstrap)
    )

    assert code != EXIT_OK
    assert "AADSTS7000215" in reason and "\n" not in reason, reason
    assert wrong not in reason and SECRET not in reason


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_submitted_job_keeps_the_client_secret_off_every_command_line_page_and_log(
    entra_stack: EntraStack, tmp_path: Path, pipelines: Path
) -> None:
    """``spark-submit jobs/pipeline.py`` streaming through Spark's Kafka source as the service principal:
    once its batches carried every event, the secret is on no command line of its processes, and
    Spark's environment page (the UI's REST API), the event log, status.json and the driver log hold
    none of it."""
    from hubflow.repository import PIPELINES_DIR_ENV
    from hubflow.status import StatusFolder
    from tests.azure.submitted_jobs import get_json, session_cmdlines
    from tests.support.processes import free_port, stop_process

    from . import helpers

    write_module(pipelines, "entra_submitted", NUMBER_EVENTS)
    sent = entra_stack.hub.send_numbered(0, 200)
    events_dir = tmp_path / "spark-events"
    events_dir.mkdir()
    ui_port = free_port()
    source = {
        "kind": "eventhubs_kafka",
        "connection_string_env": ENV_VAR,
        "kafka_bootstrap_servers": entra_stack.bootstrap,
        "max_events_per_trigger": 50,
    }
    output = tmp_path / "lake" / "entra_submitted"
    config = pipeline_config(
        tmp_path,
        "entra_submitted",
        trigger={"processingTime": "1 second"},
        sources={"telemetry": source},
        sinks={"numbered": {"kind": "delta", "output_path": str(output)}},
        spark_conf={
            "spark.sql.shuffle.partitions": 2,
            "spark.ui.enabled": True,
            "spark.ui.port": ui_port,
            "spark.eventLog.enabled": True,
            "spark.eventLog.dir": str(events_dir),
            "spark.eventLog.compress": False,
        },
    )
    log_path = tmp_path / "driver.log"
    process = helpers.spark_submit(
        config,
        log_path,
        script=helpers.JOBS_DIR / "pipeline.py",
        extra_env={PIPELINES_DIR_ENV: str(pipelines)},
        script_args=["--pipeline", "entra_submitted:numbered"],
    )
    status = StatusFolder(str(tmp_path / "status" / "entra_submitted"))
    try:
        deadline = time.monotonic() + 300
        while not _delta_rows(output) >= len(sent):
            assert process.poll() is None, "the job died:\n" + log_path.read_text(errors="replace")[-4000:]
            assert time.monotonic() < deadline, log_path.read_text(errors="replace")[-4000:]
            time.sleep(1)
        commands = session_cmdlines(process.pid)
        assert any("SparkSubmit" in c or "spark-submit" in c for c in commands.values()), commands
        for pid, command in commands.items():
            assert SECRET not in command, f"process {pid}'s command line holds the client secret"
        base = f"http://127.0.0.1:{ui_port}/api/v1/applications"
        environment = get_json(f"{base}/{get_json(base)[0]['id']}/environment")
        assert SECRET not in json.dumps(environment), "Spark's environment page holds the secret"
        raw_status = json.dumps(status.status())
        assert "entra_submitted" in raw_status and SECRET not in raw_status
    finally:
        stop_process(process)
    driver_log = log_path.read_text(errors="replace")
    assert "sasl.jaas.config = [hidden]" in driver_log, "kafka-clients logged its settings, the JAAS masked"
    assert SECRET not in driver_log, "the driver log holds the secret"
    event_log = "".join(p.read_text(errors="replace") for p in events_dir.rglob("*") if p.is_file())
    assert "KafkaScan" in event_log, "the batches' plans were logged"
    assert SECRET not in event_log, "the event log holds the secret"
    status_files = list((tmp_path / "status").rglob("*.json"))
    assert status_files and all(SECRET not in p.read_text(errors="replace") for p in status_files)


def _delta_rows(table: Path) -> int:
    """Rows the Delta table's commits added so far (from its log, without a Spark session)."""
    rows = 0
    for commit in sorted((table / "_delta_log").glob("*.json")) if table.exists() else []:
        for line in commit.read_text(encoding="utf-8").splitlines():
            add = json.loads(line).get("add")
            if add and add.get("stats"):
                rows += json.loads(add["stats"]).get("numRecords", 0)
    return rows


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_streaming_job_outlives_its_tokens_renewing_and_reauthenticating(
    spark: Any, entra_stack: EntraStack, tmp_path: Path, pipelines: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Tokens of 20 s and a stream of 60 s: kafka-clients renews its token and re-authenticates its
    connections before the emulator's session (the token's lifetime, told in session_lifetime_ms)
    ends, so no connection is closed for an expired session and every event lands once."""
    import functools
    import logging
    import threading

    from hubflow_jobs.pipeline.job import load_pipeline
    from hubflow_jobs.pipeline.streams import start_pipeline
    from hubflow_jobs.runtime.runner import run_job
    from hubflow_jobs.runtime.stop import StopRequest

    caplog.set_level(logging.WARNING, logger="eventhubs_emulator.kafka")
    entra_stack.issuer.lifetime = 20
    write_module(pipelines, "entra_renewing", NUMBER_EVENTS)
    source = {
        "kind": "eventhubs_kafka",
        "connection_string_env": ENV_VAR,
        "kafka_bootstrap_servers": entra_stack.bootstrap,
    }
    output = tmp_path / "lake" / "entra_renewing"
    config_path = pipeline_config(
        tmp_path,
        "entra_renewing",
        trigger={"processingTime": "1 second"},
        sources={"telemetry": source},
        sinks={"numbered": {"kind": "delta", "output_path": str(output)}},
    )
    config, binding = load_pipeline("entra_renewing:numbered", str(config_path))
    stop = StopRequest()
    outcome: list[tuple[int, str]] = []
    runner = threading.Thread(
        target=lambda: outcome.append(
            run_job(spark, config, functools.partial(start_pipeline, binding=binding), stop)
        )
    )
    runner.start()
    sent: set[bytes] = set()
    try:
        started = time.monotonic()
        while time.monotonic() - started < 60:
            sent |= entra_stack.hub.send_numbered(len(sent), 10)
            time.sleep(5)
        deadline = time.monotonic() + 120
        while _delta_rows(output) < len(sent) and time.monotonic() < deadline and runner.is_alive():
            time.sleep(1)
    finally:
        stop.request("the test has what it needs")
        runner.join(timeout=120)
    assert outcome and outcome[0][0] == EXIT_OK, outcome
    check_events_once(numbered_events(spark, output), sent, 2)
    assert entra_stack.issuer.tokens_by_client[CLIENT_ID] >= 4, dict(entra_stack.issuer.tokens_by_client)
    assert "SASL session expired" not in caplog.text, caplog.text[-2000:]


def test_a_service_principal_writes_the_hub_through_the_kafka_sink_each_row_once(
    spark: Any, entra_stack: EntraStack, tmp_path: Path, pipelines: Path
) -> None:
    """The ``kind: eventhubs_kafka`` sink signs in the same way (OAUTHBEARER, the JVM asking the v2
    endpoint for the service principal's token); the rows arrive over AMQP once each."""
    from .test_pipeline_eventhubs_kafka_sink import ORDERS_TO_EVENTS

    write_module(pipelines, "entra_orders", ORDERS_TO_EVENTS)
    landing = tmp_path / "landing"
    landing.mkdir()
    ids = write_json_landing_file(landing, "a.json", 1, good=25, bad=1)
    sink = {"kind": "eventhubs_kafka", "connection_string_env": ENV_VAR}  # topic: EntityPath hub1
    sink["kafka_bootstrap_servers"] = entra_stack.bootstrap
    source = {"kind": "files", "path": str(landing), "format": "json", "schema": "id BIGINT, name STRING"}
    config = pipeline_config(tmp_path, "entra_orders", sources={"orders": source}, sinks={"alerts": sink})

    code, reason = run_on_session(spark, "entra_orders:events", config)

    assert code == EXIT_OK, reason
    events = receive_all(entra_stack.hub.connection_string)
    assert sorted(json.loads(event.body_as_str())["id"] for _, event in events) == sorted(ids)
    requests = entra_stack.issuer.token_requests
    assert requests and {(client, route) for client, route, _ in requests} == {(CLIENT_ID, "v2")}, requests
    assert all(agent.startswith("Java") for _, _, agent in requests), requests
