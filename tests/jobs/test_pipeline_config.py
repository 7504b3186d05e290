"""The config of a pipeline job: named sources and sinks, each mistake one message keyed as written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hubflow.config import ConfigError, load_config
from hubflow_jobs.pipeline import PipelineConfig
from hubflow_jobs.pipeline.declarations import DeltaSource, EventHubsSource, FilesSource, ParquetSource

from .helpers import write_config

ENV_VAR = "HUBFLOW_TEST_PIPELINE_CONFIG_CONNECTION"


def _raw(base: Path, **overrides: Any) -> dict[str, Any]:
    """A valid pipeline config under ``base`` (a files source, a Delta sink); ``overrides`` replace keys."""
    (base / "landing").mkdir(exist_ok=True)
    config: dict[str, Any] = {
        "name": "orders_pipeline",
        "trigger": {"availableNow": True},
        "checkpoint_root": str(base / "checkpoints"),
        "status_root": str(base / "status"),
        "sources": {
            "orders": {
                "kind": "files",
                "path": str(base / "landing"),
                "format": "json",
                "schema": "id BIGINT",
            }
        },
        "sinks": {"lake": {"kind": "delta", "output_path": str(base / "lake" / "orders")}},
    }
    config.update(overrides)
    return config


def _load(base: Path, **overrides: Any) -> PipelineConfig:
    return load_config(write_config(base / "job.yaml", _raw(base, **overrides)), PipelineConfig)


def _error(base: Path, **overrides: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        _load(base, **overrides)
    return str(caught.value)


def _files(base: Path, **keys: Any) -> dict[str, Any]:
    return {"kind": "files", "path": str(base / "landing"), "format": "json", "schema": "id BIGINT", **keys}


def test_each_kind_of_source_and_sink_loads_in_the_written_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_VAR, "Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=s;EntityPath=hub")
    (tmp_path / "table" / "_delta_log").mkdir(parents=True)
    config = _load(
        tmp_path,
        sources={
            "telemetry": {
                "kind": "eventhubs",
                "connection_string_env": ENV_VAR,
                "max_events_per_trigger": 50,
            },
            "orders": _files(tmp_path),
            "devices": {"kind": "delta", "path": str(tmp_path / "table"), "starting_version": 3},
        },
        sinks={
            "hot": {"kind": "delta", "output_path": "/lake/hot", "partition_by": ["day"]},
            "all": {"kind": "parquet", "output_path": "/lake/all", "quarantine_path": "/lake/all_bad"},
        },
        params={"threshold": 80, "sites": ["a", "b"]},
    )

    assert list(config.sources) == ["telemetry", "orders", "devices"]
    assert [type(s) for s in config.sources.values()] == [EventHubsSource, FilesSource, DeltaSource]
    assert config.sources["telemetry"].spark_options()["maxEventsPerTrigger"] == "50"
    assert config.sources["devices"].delta_options()["startingVersion"] == "3"
    assert list(config.sinks) == ["hot", "all"]
    assert config.params == {"threshold": 80, "sites": ["a", "b"]}
    assert config.file_landing() == (str(tmp_path / "landing"), None)
    assert "spark.redaction.regex" in config.extra_spark_conf()


def test_sink_checkpoints_the_first_sink_is_the_jobs_the_others_under_sinks(tmp_path: Path) -> None:
    config = _load(
        tmp_path,
        sinks={
            "hot": {"kind": "delta", "output_path": "/lake/hot", "quarantine_path": "/lake/hot_bad"},
            "all": {"kind": "delta", "output_path": "/lake/all"},
            "archive": {"kind": "parquet", "output_path": "/lake/archive"},
        },
    )

    checkpoint = f"{tmp_path}/checkpoints/orders_pipeline"
    assert config.checkpoint_location == checkpoint
    assert config.sink_checkpoint("hot") == checkpoint
    assert config.sink_checkpoint("all") == f"{checkpoint}/sinks/all"
    assert config.sink_checkpoint("archive") == f"{checkpoint}/sinks/archive"
    # Only Delta tables, the quarantine included, each with the checkpoint of the query writing it.
    assert config.delta_tables() == ["/lake/hot", "/lake/hot_bad", "/lake/all"]
    assert config.delta_table_writers() == [
        ("/lake/hot", checkpoint),
        ("/lake/hot_bad", checkpoint),
        ("/lake/all", f"{checkpoint}/sinks/all"),
    ]
    # No Event Hubs, nothing to mask; every pipeline keeps its state in RocksDB unless spark_conf says.
    from hubflow_jobs.pipeline.progress import ROCKSDB_PROVIDER, STATE_STORE_PROVIDER_CONF

    assert config.extra_spark_conf() == {STATE_STORE_PROVIDER_CONF: ROCKSDB_PROVIDER}


@pytest.mark.parametrize(
    ("section", "entry", "expected"),
    [
        (
            "sources",
            {"kind": "kafka", "path": "/x"},
            "jobs config error: sources.orders.kind: 'kafka' is not one of 'eventhubs', 'eventhubs_kafka', "
            "'files', 'delta', 'parquet'",
        ),
        ("sources", {"path": "/x"}, "jobs config error: sources.orders.kind: is required"),
        (
            "sinks",
            {"kind": "csv", "output_path": "/x"},
            "jobs config error: sinks.lake.kind: 'csv' is not one of 'delta', 'parquet', 'eventhubs', "
            "'eventhubs_kafka'",
        ),
        ("sinks", {"output_path": "/x"}, "jobs config error: sinks.lake.kind: is required"),
    ],
)
def test_a_wrong_or_missing_kind_names_the_key_and_the_valid_kinds(
    tmp_path: Path, section: str, entry: dict[str, Any], expected: str
) -> None:
    name = "orders" if section == "sources" else "lake"
    assert _error(tmp_path, **{section: {name: entry}}) == expected


def test_a_problem_inside_a_source_or_sink_is_keyed_as_written(tmp_path: Path) -> None:
    assert _error(tmp_path, sources={"orders": _files(tmp_path, archive="/a")}) == (
        "jobs config error: sources.orders.archive: unknown key"
    )
    assert _error(tmp_path, sources={"orders": _files(tmp_path, max_files_per_trigger=0)}) == (
        "jobs config error: sources.orders.max_files_per_trigger: must be > 0"
    )
    assert _error(tmp_path, sources={"orders": _files(tmp_path, options={"mode": "FAILFAST"})}) == (
        "jobs config error: sources.orders.options.mode: is set by the job itself; use the source keys "
        "(see docs/jobs.md)"
    )
    missing = tmp_path / "nowhere"
    assert _error(tmp_path, sources={"orders": {**_files(tmp_path), "path": str(missing)}}) == (
        f"jobs config error: sources.orders.path: landing folder {missing} does not exist; create it or fix "
        "the path"
    )
    assert _error(tmp_path, sources={"devices": {"kind": "delta", "path": str(missing)}}) == (
        f"jobs config error: sources.devices.path: {missing} is not a Delta table (no _delta_log/): run "
        "the job that writes it first, or fix the path"
    )
    assert _error(tmp_path, sinks={"lake": {"kind": "delta", "output_path": "/x", "partition": ["d"]}}) == (
        "jobs config error: sinks.lake.partition: unknown key"
    )
    assert _error(tmp_path, sinks={"Lake-1": {"kind": "delta", "output_path": "/x"}}) == (
        "jobs config error: sinks.Lake-1.[key]: 'Lake-1' must match ^[a-z][a-z0-9_]*$"
    )
    assert _error(tmp_path, source={"path": "/x"}) == "jobs config error: source: unknown key"
    assert _error(tmp_path, sinks={}) == (
        "jobs config error: sinks: dictionary should have at least 1 item after validation, not 0"
    )


def test_an_eventhubs_source_needs_its_variable_and_refuses_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    source = {"kind": "eventhubs", "connection_string_env": ENV_VAR}
    assert _error(tmp_path, sources={"telemetry": source}) == (
        f"jobs config error: sources.telemetry.connection_string_env: environment variable {ENV_VAR} is "
        "not set; export the Event Hubs connection string in it"
    )
    monkeypatch.setenv(ENV_VAR, "Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=s;EntityPath=hub")
    secret = {**source, "options": {"eventhubs.connectionString": "TOPSECRET"}}
    message = _error(tmp_path, sources={"telemetry": secret})
    assert message.startswith("jobs config error: sources.telemetry.options.eventhubs.connectionString: ")
    assert "TOPSECRET" not in message


def test_an_eventhubs_sink_needs_its_variable_and_is_no_lake_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    sink = {"kind": "eventhubs", "connection_string_env": ENV_VAR, "eventhub_name": "alerts"}
    assert _error(tmp_path, sinks={"alerts": sink}) == (
        f"jobs config error: sinks.alerts.connection_string_env: environment variable {ENV_VAR} is "
        "not set; export the Event Hubs connection string in it"
    )
    monkeypatch.setenv(ENV_VAR, "Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=s;EntityPath=hub")
    assert _error(tmp_path, sinks={"alerts": {**sink, "output_path": "/x"}}) == (
        "jobs config error: sinks.alerts.output_path: unknown key"
    )
    config = _load(tmp_path, sinks={"alerts": sink, "lake": {"kind": "delta", "output_path": "/lake/o"}})
    assert config.sinks["alerts"].spark_options()["eventhubs.name"] == "alerts"
    assert config.delta_tables() == ["/lake/o"]
    assert "spark.redaction.regex" in config.extra_spark_conf(), "its connection string is masked too"


def test_archive_dir_is_refused_with_two_sinks(tmp_path: Path) -> None:
    two_sinks = {
        "hot": {"kind": "delta", "output_path": "/lake/hot"},
        "all": {"kind": "delta", "output_path": "/lake/all"},
    }
    archived = {"orders": _files(tmp_path, archive_dir=str(tmp_path / "archive"))}

    assert _error(tmp_path, sources=archived, sinks=two_sinks) == (
        "jobs config error: sources.orders.archive_dir: a files source is archived by the query that reads "
        "it, and each of the 2 sinks (hot, all) has its own query; archive only a pipeline with one sink, or "
        "remove archive_dir"
    )
    assert _load(tmp_path, sources=archived).file_landing() == (
        str(tmp_path / "landing"),
        str(tmp_path / "archive"),
    )


def test_the_quarantine_must_differ_from_the_output(tmp_path: Path) -> None:
    sink = {"kind": "delta", "output_path": "/lake/orders", "quarantine_path": "/lake/orders/"}
    assert _error(tmp_path, sinks={"lake": sink}) == (
        "jobs config error: sinks.lake.quarantine_path: must differ from output_path"
    )


def test_a_parquet_table_source_needs_its_folder_and_schema(tmp_path: Path) -> None:
    (tmp_path / "table").mkdir()
    table = {"kind": "parquet", "path": str(tmp_path / "table"), "schema": "id BIGINT"}
    config = _load(tmp_path, sources={"orders": table})
    assert type(config.sources["orders"]) is ParquetSource
    assert config.sources["orders"].max_files_per_trigger == 100
    missing = {"kind": "parquet", "path": str(tmp_path / "nowhere"), "schema": "id BIGINT"}
    assert _error(tmp_path, sources={"orders": missing}).startswith(
        "jobs config error: sources.orders.path: table folder"
    )
    assert _error(tmp_path, sources={"orders": {"kind": "parquet", "path": str(tmp_path / "table")}}) == (
        "jobs config error: sources.orders.schema: is required"
    )


def test_quarantine_columns_need_a_quarantine(tmp_path: Path) -> None:
    sink = {"kind": "delta", "output_path": "/lake/orders", "quarantine_columns": ["raw"]}
    assert _error(tmp_path, sinks={"lake": sink}) == (
        "jobs config error: sinks.lake.quarantine_columns: needs quarantine_path (the table that keeps them)"
    )


def test_environment_checks_can_be_skipped_for_readers_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Airflow reads a pipeline's paths where the driver's variable and local folders are absent."""
    monkeypatch.delenv(ENV_VAR, raising=False)
    raw = _raw(
        tmp_path,
        sources={
            "telemetry": {"kind": "eventhubs", "connection_string_env": ENV_VAR},
            "devices": {"kind": "delta", "path": "/not/here"},
            "orders": {**_files(tmp_path), "path": "/not/here/either"},
        },
    )
    config = load_config(write_config(tmp_path / "job.yaml", raw), PipelineConfig, check_environment=False)
    assert list(config.sources) == ["telemetry", "devices", "orders"]


def test_a_further_sink_may_name_its_checkpoint_apart_from_the_tables(tmp_path: Path) -> None:
    """A further sink's ``checkpoint`` is where its query resumes (e.g. an older job's), and the
    cleanup DAG pairs its tables with it; it may not be the job's, another sink's, or a table's files."""
    quarantine = {"kind": "delta", "output_path": "/lake/bad", "checkpoint": "/lake/bad/_checkpoint"}
    config = _load(tmp_path, sinks={"out": {"kind": "delta", "output_path": "/lake/out"}, "bad": quarantine})
    job = f"{tmp_path}/checkpoints/orders_pipeline"
    assert config.sink_checkpoint("bad") == "/lake/bad/_checkpoint"
    assert config.delta_table_writers() == [("/lake/out", job), ("/lake/bad", "/lake/bad/_checkpoint")]

    out = {"kind": "delta", "output_path": "/lake/out"}
    refused = {
        "/lake/bad/state": "sinks.bad.checkpoint: lies inside the table /lake/bad",
        "/lake/bad": "sinks.bad.checkpoint: must lie apart from the table /lake/bad",
        "/lake": "sinks.bad.checkpoint: must lie apart from the table /lake/bad",
        job: "sinks.bad.checkpoint: is the checkpoint of the job's query",
    }
    for checkpoint, problem in refused.items():
        bad = {**quarantine, "checkpoint": checkpoint}
        assert problem in _error(tmp_path, sinks={"out": out, "bad": bad})
    first = {**out, "checkpoint": "/c/elsewhere"}
    assert "sinks.out.checkpoint: the first sink's query is the job's query" in _error(
        tmp_path, sinks={"out": first, "bad": quarantine}
    )


def test_an_eventhubs_kafka_source_on_an_entra_id_connection_signs_in_with_oauthbearer_as_a_service_principal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No key in the connection string: kafka-clients' own OAuth login as the AZURE_* service principal,
    the secret only in the JAAS config; other identities are refused, saying to use kind eventhubs."""
    for name in ("AZURE_AUTHORITY_HOST", "REQUESTS_CA_BUNDLE", "AZURE_FEDERATED_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(ENV_VAR, "Endpoint=sb://ns1.servicebus.windows.net/;EntityPath=hub")
    monkeypatch.setenv("AZURE_TENANT_ID", "tenant-1")
    monkeypatch.setenv("AZURE_CLIENT_ID", "app-1")
    monkeypatch.setenv("AZURE_CLIENT_SECRET", 'se"cr\\et-1')
    source = {"kind": "eventhubs_kafka", "connection_string_env": ENV_VAR}
    options = _load(tmp_path, sources={"telemetry": source}).sources["telemetry"].spark_options()
    assert {k: v for k, v in options.items() if k.startswith("kafka.")} == {
        "kafka.bootstrap.servers": "ns1.servicebus.windows.net:9093",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "OAUTHBEARER",
        "kafka.sasl.login.callback.handler.class": (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
        ),
        "kafka.sasl.oauthbearer.token.endpoint.url": "https://login.microsoftonline.com/tenant-1/oauth2/v2.0/token",
        "kafka.sasl.jaas.config": (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            'clientId="app-1" clientSecret="se\\"cr\\\\et-1" '
            'scope="https://ns1.servicebus.windows.net/.default";'
        ),
        "kafka.request.timeout.ms": "60000",
        "kafka.metadata.max.age.ms": "180000",
        "kafka.connections.max.idle.ms": "180000",
    }
    assert [k for k, v in options.items() if "et-1" in v] == ["kafka.sasl.jaas.config"], (
        "the secret only there"
    )
    # a private authority (no scheme, as azure-identity takes it) and its CA for the token endpoint
    monkeypatch.setenv("AZURE_AUTHORITY_HOST", "login.example.test:8443")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/ca.pem")
    options = _load(tmp_path, sources={"telemetry": source}).sources["telemetry"].spark_options()
    assert options["kafka.sasl.oauthbearer.token.endpoint.url"] == (
        "https://login.example.test:8443/tenant-1/oauth2/v2.0/token"
    )
    assert options["kafka.sasl.jaas.config"].endswith(
        'ssl.truststore.location="/etc/ca.pem" ssl.truststore.type="PEM";'
    )
    # a workload identity or a managed identity: no client secret
    monkeypatch.delenv("AZURE_CLIENT_SECRET")
    monkeypatch.setenv("AZURE_FEDERATED_TOKEN_FILE", "/var/run/secrets/azure/tokens/azure-identity-token")
    entra = _load(tmp_path, sources={"telemetry": source}).sources["telemetry"]
    with pytest.raises(ValueError) as refused:
        entra.spark_options()
    message = str(refused.value)
    assert "AZURE_CLIENT_SECRET is not set" in message and "kind: eventhubs" in message, message
    assert "workload identity" in message and "managed identity" in message


def test_an_eventhubs_kafka_source_is_the_connection_strings_kafka_endpoint_with_its_mistakes_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = "Endpoint=sb://ns1.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=s3cr3t;EntityPath=hub"
    monkeypatch.setenv(ENV_VAR, service)
    source = {"kind": "eventhubs_kafka", "connection_string_env": ENV_VAR, "starting_position": "latest"}
    options = _load(tmp_path, sources={"telemetry": source}).sources["telemetry"].spark_options()
    assert {k: v for k, v in options.items() if k != "kafka.sasl.jaas.config"} == {
        "kafka.bootstrap.servers": "ns1.servicebus.windows.net:9093",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.request.timeout.ms": "60000",
        "kafka.metadata.max.age.ms": "180000",
        "kafka.connections.max.idle.ms": "180000",
        "subscribe": "hub",
        "startingOffsets": "latest",
        "maxOffsetsPerTrigger": "100000",
        "includeHeaders": "true",
    }
    assert options["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="$ConnectionString" password="{service}";'
    )

    emulator = (
        "Endpoint=sb://localhost:5672/;SharedAccessKeyName=k;SharedAccessKey=s;UseDevelopmentEmulator=true"
    )
    monkeypatch.setenv(ENV_VAR, emulator)
    local = {**source, "eventhub_name": "hub2", "kafka_bootstrap_servers": "127.0.0.1:9092"}
    options = _load(tmp_path, sources={"telemetry": local}).sources["telemetry"].spark_options()
    assert (options["kafka.bootstrap.servers"], options["kafka.security.protocol"], options["subscribe"]) == (
        "127.0.0.1:9092",
        "SASL_PLAINTEXT",
        "hub2",
    )
    without_port = _load(tmp_path, sources={"telemetry": {**source, "eventhub_name": "hub2"}})
    with pytest.raises(ValueError, match="set kafka_bootstrap_servers to the address it prints"):
        without_port.sources["telemetry"].spark_options()
    # Event Hubs' Kafka endpoint takes no SAS token (Microsoft's Kafka FAQ): refused before Spark starts
    token = "SharedAccessSignature sr=sb%3a%2f%2fns1.servicebus.windows.net%2fhub&sig=abc&se=1&skn=k"
    monkeypatch.setenv(ENV_VAR, f"Endpoint=sb://ns1.servicebus.windows.net/;SharedAccessSignature={token}")
    with pytest.raises(ValueError, match="SharedAccessSignature token, which Event Hubs' Kafka endpoint"):
        _load(tmp_path, sources={"telemetry": source}).sources["telemetry"].spark_options()
    monkeypatch.setenv(ENV_VAR, emulator)

    mistakes = {
        "consumer_group": ({"consumer_group": "cg1"}, "set options.groupIdPrefix"),
        "options.eventhubs.startingPosition": (
            {"options": {"eventhubs.startingPosition": "{}"}},
            "is an option of format('eventhubs')",
        ),
        "options.startingOffsets": ({"options": {"startingOffsets": "earliest"}}, "is set by the job itself"),
        "options.kafka.sasl.jaas.config": ({"options": {"kafka.sasl.jaas.config": "x"}}, "is set by the job"),
        "kafka_bootstrap_servers": ({"kafka_bootstrap_servers": "no port"}, "is not host:port"),
    }
    for key, (keys, problem) in mistakes.items():
        message = _error(tmp_path, sources={"telemetry": {**source, **keys}})
        assert message.startswith(f"jobs config error: sources.telemetry.{key}: "), message
        assert problem in message, message


def test_the_eventhubs_kafka_example_of_docs_pipelines_md_loads_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import re

    import yaml

    doc = (Path(__file__).parents[2] / "docs" / "pipelines.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", doc, re.S) if "kind: eventhubs_kafka" in b)
    sources = yaml.safe_load(block)["sources"]
    service = (
        "Endpoint=sb://ns1.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=s;EntityPath=hub"
    )
    monkeypatch.setenv("TELEMETRY_EVENTHUBS_CONNECTION", service)
    options = _load(tmp_path, sources=sources).sources["events"].spark_options()
    assert (options["kafka.bootstrap.servers"], options["failOnDataLoss"]) == (
        "ns1.servicebus.windows.net:9093",
        "true",
    )
    # the commented line, for the emulator
    local = yaml.safe_load(block.replace("# kafka_bootstrap_servers", "kafka_bootstrap_servers"))["sources"]
    monkeypatch.setenv("TELEMETRY_EVENTHUBS_CONNECTION", service + ";UseDevelopmentEmulator=true")
    options = _load(tmp_path, sources=local).sources["events"].spark_options()
    assert (options["kafka.bootstrap.servers"], options["kafka.security.protocol"]) == (
        "127.0.0.1:9093",
        "SASL_PLAINTEXT",
    )
    # the same block on an Entra ID connection (no key) as a service principal: OAUTHBEARER
    monkeypatch.setenv(
        "TELEMETRY_EVENTHUBS_CONNECTION", "Endpoint=sb://ns1.servicebus.windows.net/;EntityPath=hub"
    )
    for name, value in (("AZURE_TENANT_ID", "t"), ("AZURE_CLIENT_ID", "a"), ("AZURE_CLIENT_SECRET", "s")):
        monkeypatch.setenv(name, value)
    options = _load(tmp_path, sources=sources).sources["events"].spark_options()
    assert (options["kafka.sasl.mechanism"], options["failOnDataLoss"]) == ("OAUTHBEARER", "true")


def test_a_real_time_trigger_takes_eventhubs_kafka_in_and_out_and_names_what_it_cannot_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/pipelines.md "Real-time pipelines": its table of what is refused, by the key."""
    monkeypatch.setenv(
        "HUB", "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=s"
    )
    hub = {"kind": "eventhubs_kafka", "connection_string_env": "HUB", "eventhub_name": "in"}
    out = {**hub, "eventhub_name": "out"}
    real_time = {"trigger": {"realTime": "30 seconds"}}
    config = _load(tmp_path, **real_time, sources={"events": hub}, sinks={"out": out})
    assert config.trigger.kind == "realTime" and config.trigger.spark_kwargs() == {
        "realTime": "30000 milliseconds"
    }
    assert config.trigger.real_time_interval.total_seconds() == 30

    files = _error(tmp_path, **real_time, sources={"events": _files(tmp_path)}, sinks={"out": out})
    assert (
        "sources.events.kind: files cannot be read with trigger realTime: Spark's real-time mode reads"
        in files
    )
    limited = {**hub, "max_events_per_trigger": 10}
    assert "sources.events.max_events_per_trigger: limits a micro-batch" in _error(
        tmp_path, **real_time, sources={"events": limited}, sinks={"out": out}
    )
    delta = {"kind": "delta", "output_path": str(tmp_path / "lake")}
    assert "sinks.out.kind: delta cannot be written with trigger realTime" in _error(
        tmp_path, **real_time, sources={"events": hub}, sinks={"out": delta}
    )
    both = {"trigger": {"realTime": "30 seconds", "processingTime": "1 second"}}
    assert "set exactly one of processingTime" in _error(
        tmp_path, **both, sources={"events": hub}, sinks={"out": out}
    )
    assert "trigger.realTime" in _error(
        tmp_path, trigger={"realTime": "soon"}, sources={"events": hub}, sinks={"out": out}
    )
