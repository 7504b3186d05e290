"""The connector's connection-string type, and the vocabulary's import without pyspark."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pyspark_eventhubs.connection_string import ConnectionStringError, EventHubsConnectionString

SAS = (
    "Endpoint=sb://myns.servicebus.windows.net/;SharedAccessKeyName=Root;"
    "SharedAccessKey=S3cr3tKeyValue=;EntityPath=hub1"
)


def test_parse_reads_every_field_case_insensitively() -> None:
    conn = EventHubsConnectionString.parse(SAS.replace("EntityPath", "entitypath"))
    assert conn.endpoint == "sb://myns.servicebus.windows.net/"
    assert conn.namespace == conn.host == "myns.servicebus.windows.net"
    assert conn.entity_path == "hub1"
    assert conn.key_name == "Root"
    assert conn.key == "S3cr3tKeyValue="  # a value keeps the '=' inside it
    assert conn.signature is None
    assert conn.has_key and not conn.uses_development_emulator


def test_a_sas_token_is_a_key_too() -> None:
    token = "SharedAccessSignature sr=x&sig=y"
    conn = EventHubsConnectionString.parse(f"Endpoint=sb://ns/;SharedAccessSignature={token}")
    assert conn.has_key and conn.key is None and conn.signature


def test_an_entra_id_string_has_no_key() -> None:
    conn = EventHubsConnectionString.parse("Endpoint=sb://myns.servicebus.windows.net/;EntityPath=hub1")
    assert not conn.has_key
    assert conn.namespace == "myns.servicebus.windows.net" and conn.entity_path == "hub1"


def test_the_emulator_string_keeps_its_port_in_the_namespace_not_the_host() -> None:
    conn = EventHubsConnectionString.parse(
        "Endpoint=sb://LocalHost:5672;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true;"
    )
    assert conn.namespace == "LocalHost:5672" and conn.host == "localhost"
    assert conn.uses_development_emulator


def test_absent_fields_are_none_and_empty_ones_empty() -> None:
    conn = EventHubsConnectionString.parse(";;SharedAccessKey=;")
    assert conn.endpoint is None and conn.namespace is None and conn.host is None
    assert conn.entity_path is None
    assert conn.key == "" and conn.has_key


def test_a_malformed_string_names_the_segment_and_never_the_value() -> None:
    with pytest.raises(ConnectionStringError, match=r"segment 2 has no '='") as info:
        EventHubsConnectionString.parse("Endpoint=sb://ns/;TopSecretValue;EntityPath=h")
    assert "TopSecretValue" not in str(info.value)


def test_look_only_callers_skip_malformed_segments() -> None:
    conn = EventHubsConnectionString.parse("Endpoint=sb://ns/;junk;EntityPath=h", skip_malformed=True)
    assert conn.entity_path == "h" and not conn.has_key


def test_repr_shows_no_secret() -> None:
    assert "S3cr3t" not in repr(EventHubsConnectionString.parse(SAS))


def test_the_vocabulary_imports_without_pyspark() -> None:
    code = (
        "import sys\n"
        "sys.modules['pyspark'] = None\n"  # any import of pyspark now fails
        "from pyspark_eventhubs import DEFAULT_CONSUMER_GROUP, EventHubsConnectionString, EventPosition\n"
        "from pyspark_eventhubs.options import parse_options\n"
        "assert DEFAULT_CONSUMER_GROUP == '$Default'\n"
        "assert EventHubsConnectionString.parse('Endpoint=sb://ns/;EntityPath=h').entity_path == 'h'\n"
        "print(EventPosition.start_of_stream().to_json())\n"
        "assert not any(name.startswith('pyspark.') for name in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert '"offset": "-1"' in done.stdout


def test_the_data_source_still_loads_by_its_package_name() -> None:
    from pyspark.sql.datasource import DataSource

    import pyspark_eventhubs

    assert issubclass(pyspark_eventhubs.DefaultSource, DataSource)
    assert pyspark_eventhubs.DefaultSource.name() == "eventhubs"
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        pyspark_eventhubs.Nope  # noqa: B018
