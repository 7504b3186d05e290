"""The one grammar of secrets in free text (hubflow.redaction): every way a secret is written
in what hubflow shows is masked, its key kept; other values are left alone."""

from __future__ import annotations

import json

import pytest

from hubflow.redaction import MASK, redact

SECRET = "s3cr3tVALUE+/="

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
]


@pytest.mark.parametrize("line", SECRET_LINES)
def test_every_written_form_of_a_secret_is_masked_and_its_key_kept(line: str) -> None:
    masked = redact(line)
    assert SECRET not in masked and "s3cr3t" not in masked, masked
    assert MASK in masked
    assert redact(masked) == masked, "masking twice changes nothing"


def test_names_and_ordinary_values_stay_readable() -> None:
    text = (
        "Endpoint=sb://ns/;SharedAccessKeyName=RootManageSharedAccessKey;EntityPath=telemetry "
        "tokens=5 config: local design: ok consumer_group=lake AccountName=acct"
    )
    assert redact(text) == text
    assert redact(None) is None and redact(3) == 3


def test_the_connectors_own_masking_is_covered() -> None:
    """The connector ships alone with its own masking; whatever it masks, this grammar masks too."""
    from pyspark_eventhubs.redaction import redact as connector_redact

    for line in SECRET_LINES:
        if SECRET not in connector_redact(line):
            assert SECRET not in redact(line), line
