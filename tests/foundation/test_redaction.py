"""The one grammar of secrets in free text: every way a secret is written in what hubflow shows is
masked, its key kept; other values are left alone.

The grammar lives in the Event Hubs connector (``pyspark_eventhubs.redaction``, which ships alone and
masks its own messages with it); the control plane's :mod:`hubflow.redaction` is the same rules, used
by the status page, the driver log, the alerts, the audit trail and the ``hubflow`` command. Each case
below is checked through both, and both give the same text.
"""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from hubflow.redaction import MASK, redact, secret_values
from pyspark_eventhubs.options import parse_options
from pyspark_eventhubs.redaction import redact as connector_redact

SECRET = "s3cr3tVALUE+/="
#: The secret as it stands in a URL (percent-encoded: ``/``, ``+`` and ``=`` are not raw in a userinfo).
URL_SECRET = quote(SECRET, safe="")

#: Each line holds SECRET once, written the way one source of text writes it.
SECRET_LINES = [
    f"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey={SECRET};EntityPath=h",
    f"SharedAccessSignature=SharedAccessSignature sr=x&sig={SECRET}&se=1&skn=Root",
    f"https://acct.blob.core.windows.net/c/b?sv=2024-11-04&sig={SECRET}&se=2026",
    f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={SECRET};EndpointSuffix=core.windows.net",
    json.dumps({"host": "login", "password": SECRET}),
    str({"client_secret": SECRET, "tenant": "t"}),
    f"azure-identity: client_secret={SECRET} tenant_id=t",
    f"--conf spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net={SECRET} --conf x=y",
    json.dumps({"spark_conf": {"fs.azure.account.key.acct.dfs.core.windows.net": SECRET}}),
    f"eventhubs.clientSecret: {SECRET}",
    f"AIRFLOW__API_AUTH__JWT_SECRET={SECRET}",
    f"password: {SECRET}",
    f"fs.azure.sas.container.acct.blob.core.windows.net={SECRET}",
    f"Authorization token={SECRET}",
    f'OAuthBearerLoginModule required clientId="app" clientSecret="{SECRET}" scope="https://ns/.default";',
    f'PlainLoginModule required username="$ConnectionString" password="Endpoint=sb://n/;SharedAccessKey={SECRET}";',
    # Issue #50 item 4: the wasb/adls connection's extras, as JSON, a Python repr and a config line.
    json.dumps({"account_name": "acct", "account_key": SECRET}),
    str({"shared_access_key": SECRET, "account_name": "acct"}),
    f"extra: account_key={SECRET} account_name=acct",
    f"shared_access_key: {SECRET}",
    f"sas_token={SECRET}",
    json.dumps({"connection_string": f"DefaultEndpointsProtocol=https;AccountName=a;AccountKey={SECRET}"}),
    # Authorization headers, in an HTTP error, a header dict and a bare bearer token.
    f"401 Unauthorized; request headers: Authorization: Bearer {SECRET}",
    json.dumps({"headers": {"Authorization": f"Bearer {SECRET}", "Accept": "*/*"}}),
    f"Authorization: Basic {SECRET}",
    f"Authorization: SharedAccessSignature sr=sb%3A%2F%2Fns%2Fhub&sig={SECRET}&se=1&skn=Root",
    f"token refused: 'bearer eyJhbGciOiJSUzI1NiJ9.{SECRET}'",
    # Passwords inside URLs (scheme://user:password@host).
    f"sqlalchemy: postgresql+psycopg2://airflow:{URL_SECRET}@postgres:5432/airflow",
    f"proxy https://alice:{URL_SECRET}@proxy.example.com:8080/ refused the tunnel",
    f"--conf spark.hubflow.cache=redis://:{URL_SECRET}@redis:6379/0",
    json.dumps({"url": f"amqps://user:{URL_SECRET}@ns.servicebus.windows.net:5671"}),
]


def _both(text: str, **kwargs: object) -> str:
    """``text`` masked by the control plane and by the connector, which must agree."""
    masked = redact(text, **kwargs)
    assert connector_redact(text, **kwargs) == masked, "the connector and the control plane differ"
    return masked


@pytest.mark.parametrize("line", SECRET_LINES)
def test_every_written_form_of_a_secret_is_masked_and_its_key_kept(line: str) -> None:
    masked = _both(line)
    assert SECRET not in masked and "s3cr3t" not in masked, masked
    assert MASK in masked
    assert redact(masked) == masked, "masking twice changes nothing"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("Authorization: Bearer abc.def", "Authorization: Bearer ***"),
        ("401 (Authorization: Basic dTpw) for GET /x", "401 (Authorization: Basic ***) for GET /x"),
        ('{"account_key": "k1", "account_name": "acct"}', '{"account_key": "***", "account_name": "acct"}'),
        ("shared_access_key=k2;x=1", "shared_access_key=***;x=1"),
        ("postgresql://airflow:pw@postgres/airflow", "postgresql://airflow:***@postgres/airflow"),
        ("https://u:p%40ss@host/x", "https://u:***@host/x"),
    ],
)
def test_what_is_kept_around_a_masked_value(line: str, expected: str) -> None:
    """The key, the scheme, the user and the host stay: a reader sees what was there."""
    assert _both(line) == expected


def test_names_and_ordinary_values_stay_readable() -> None:
    text = (
        "Endpoint=sb://ns/;SharedAccessKeyName=RootManageSharedAccessKey;EntityPath=telemetry "
        "tokens=5 config: local design: ok consumer_group=lake AccountName=acct account_name=acct "
        "connection_string_env: ORDERS_CONN abfss://lake@acct.dfs.core.windows.net/landing "
        "spark://master:7077 https://host:8080/path?x=1 mail alice@example.com "
        "Authorization failed; bearer token expired; sb://ns.servicebus.windows.net:5671/hub"
    )
    assert _both(text) == text
    assert redact(None) is None and redact(3) == 3


def test_known_secret_values_are_masked_wherever_they_stand() -> None:
    """A secret the caller knows (an environment variable's value, a connector option) is masked even
    written bare, with no key before it; values too short to be a secret are not (they would mask words)."""
    api_token = "q8Zr2vX9mW1"
    text = f"GET /orders failed: {api_token} was refused; retry 3"
    assert _both(text, secrets=[api_token, "3", None]) == "GET /orders failed: *** was refused; retry 3"


def test_the_connectors_own_options_are_masked_by_the_connector() -> None:
    connection = f"Endpoint=sb://ns/;SharedAccessKeyName=Root;SharedAccessKey={SECRET};EntityPath=hub1"
    options = parse_options({"eventhubs.connectionString": connection})
    masked = connector_redact(f"cannot open {connection}: timed out", options)
    assert masked == "cannot open ***: timed out"


def test_secret_values_of_the_environment() -> None:
    """The values the ``hubflow`` command masks literally: variables named by a job config's ``*_env``
    keys, and variables whose name says secret (``*_PASSWORD``, ``*_TOKEN``, ``*_CONNECTION_STRING``...)."""
    environ = {
        "ORDERS_EVENTHUBS_CONNECTION": "Endpoint=sb://ns/;SharedAccessKey=k",
        "HUBFLOW_EVENTHUBS_CONNECTION_STRING": "Endpoint=sb://other/;SharedAccessKey=k",
        "AZURE_CLIENT_SECRET": "client-secret-value",
        "ORDERS_API_TOKEN": "token-value-1",
        "PGPASSWORD": "pgpass-value",
        "HOME": "/home/alice",
        "SPARK_HOME": "/opt/spark",
        "PATH": "/usr/bin",
    }
    assert set(secret_values(environ, {"ORDERS_EVENTHUBS_CONNECTION", "UNSET_VARIABLE"})) == {
        "Endpoint=sb://ns/;SharedAccessKey=k",
        "Endpoint=sb://other/;SharedAccessKey=k",
        "client-secret-value",
        "token-value-1",
        "pgpass-value",
    }
