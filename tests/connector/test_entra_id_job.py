"""An Airflow Event Hubs connection that carries an Entra ID credential instead of a connection string.

The connection (extras ``fully_qualified_namespace``, ``eventhub_name``; no password) gives the job
the secret-free ``Endpoint=sb://<namespace>/;EntityPath=<hub>``, which the job config turns into
``eventhubs.useAadAuth=true``; the job's reader then authenticates with the managed identity of the
local token issuer, and the hook asks the hub for its positions with the same credential.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.connector.conftest import Hub
from tests.connector.test_entra_id_stream import aad_options
from tests.support.emulator import managed_identity, start_entra_emulator

pytestmark = pytest.mark.integration

CONNECTION_ENV = "HUBFLOW_TEST_EVENTHUBS_CONNECTION"


def test_a_job_configured_from_an_entra_id_connection_reads_through_aad(
    eh_spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hubflow_jobs.eventhubs_config import EventHubSourceConfig
    from hubflow_plugins.hooks.eventhubs import EventHubsHook

    emu, issuer = start_entra_emulator(tmp_path, hub1=2)
    try:
        sent = Hub(emu, "hub1", emu.connection_string("hub1")).send_per_partition({"0": 7, "1": 5})
        extra = {
            "fully_qualified_namespace": "localhost",
            "eventhub_name": "hub1",
            "custom_endpoint_address": emu.tls_endpoint(),
            "connection_verify": str(emu.ca_certificate),
        }
        monkeypatch.setenv("AIRFLOW_CONN_EH_ENTRA", json.dumps({"conn_type": "generic", "extra": extra}))
        hook = EventHubsHook("eh_entra")
        connection_string = hook.connection_string()
        assert connection_string == "Endpoint=sb://localhost/;EntityPath=hub1"
        monkeypatch.setenv(CONNECTION_ENV, connection_string)  # what driver_secrets hands the driver
        source = EventHubSourceConfig.model_validate(
            {
                "connection_string_env": CONNECTION_ENV,
                "options": {
                    key: value
                    for key, value in aad_options(emu, "hub1").items()
                    if key in ("eventhubs.customEndpointAddress", "eventhubs.connectionVerify")
                },
            }
        )
        options = source.spark_options()
        assert options["eventhubs.useAadAuth"] == "true"
        before = issuer.tokens_issued
        with managed_identity(eh_spark, issuer.environment(), monkeypatch):
            rows = eh_spark.read.format("eventhubs").options(**options).load().collect()
            assert sorted(bytes(r.body).decode() for r in rows) == sorted(sent)
            assert hook.latest_sequence_numbers() == ("hub1", {"0": 7, "1": 5})
        assert issuer.tokens_issued > before, "the tokens came from the managed identity's endpoint"
    finally:
        emu.stop()
        issuer.stop()
