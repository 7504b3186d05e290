"""An Event Hub read through Spark's Kafka source (``format("kafka")``) and Event Hubs' Kafka endpoint.

A pipeline's ``kind: eventhubs_kafka`` source: the same ``connection_string_env`` as ``kind:
eventhubs`` (the Airflow connection's secret in an environment variable), turned into the Kafka
client settings Microsoft documents for Event Hubs (bootstrap ``<namespace host>:9093``,
``SASL_SSL``, ``PLAIN`` with user ``$ConnectionString`` and the connection string as password);
the topic is the hub. An Entra ID connection (a connection string without a key) signs in with
``OAUTHBEARER`` as the service principal of ``AZURE_CLIENT_ID``/``AZURE_TENANT_ID``/
``AZURE_CLIENT_SECRET`` through kafka-clients' own ``OAuthBearerLoginCallbackHandler`` (KIP-768:
client_credentials at ``<AZURE_AUTHORITY_HOST>/<tenant>/oauth2/v2.0/token`` for
``https://<namespace host>/.default``), no custom JVM code; the secret is only in the JAAS config.
Against the emulator (``UseDevelopmentEmulator=true``) the connection string does not say the Kafka
port, so ``kafka_bootstrap_servers`` names it, and the protocol is ``SASL_PLAINTEXT``.

The rows (:func:`as_eventhubs_rows`) have the ``eventhubs`` kind's columns, so the same function
works on either kind; what differs is in docs/pipelines.md. Spark's Kafka source keeps its offsets
(``{"<hub>": {"<partition>": <next offset>}}``, the shape of the connector's) in the checkpoint;
an Event Hubs Kafka offset is the event's sequence number. Runs on the driver; imports no Spark
until a frame is built.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from hubflow.config import KeyedValueError
from hubflow.supervision.upgrades import STARTING_POSITION_ENV, parse_upgrade_from
from hubflow_jobs.eventhubs_config import EventHubConnectionConfig
from pyspark_eventhubs import EventHubsConnectionString

#: Event Hubs' Kafka port on the service (TLS).
SERVICE_KAFKA_PORT = 9093

#: The Kafka client settings Microsoft recommends for Event Hubs where they differ from Kafka's
#: defaults ("Apache Kafka client configurations for Azure Event Hubs"): the service closes idle
#: connections after 240 s, and a request needs 20 s or more. ``options`` may override them.
RECOMMENDED_CLIENT_SETTINGS = {
    "kafka.request.timeout.ms": "60000",
    "kafka.metadata.max.age.ms": "180000",
    "kafka.connections.max.idle.ms": "180000",
}

#: A producer's too: the service closes the connection of a request over 1,046,528 bytes, which
#: Kafka's default ``max.request.size`` (1,048,576) allows.
RECOMMENDED_PRODUCER_SETTINGS = {**RECOMMENDED_CLIENT_SETTINGS, "kafka.max.request.size": "1000000"}

#: kafka-clients' built-in OAuth client_credentials login (KIP-768) and the OAUTHBEARER login module.
OAUTH_LOGIN_CALLBACK_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
OAUTH_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
#: Entra ID's public cloud, when ``AZURE_AUTHORITY_HOST`` is not set (as azure-identity).
DEFAULT_AUTHORITY_HOST = "https://login.microsoftonline.com"
#: The service principal's variables (azure-identity's EnvironmentCredential reads the same ones).
SERVICE_PRINCIPAL_VARIABLES = ("AZURE_TENANT_ID", "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET")

#: Spark Kafka source options hubflow derives from the source's keys (lower case); ``options`` may
#: not set them.
RESERVED_KAFKA_OPTIONS = frozenset(
    {
        "kafka.bootstrap.servers",
        "kafka.security.protocol",
        "kafka.sasl.mechanism",
        "kafka.sasl.jaas.config",
        "kafka.sasl.login.callback.handler.class",
        "kafka.sasl.oauthbearer.token.endpoint.url",
        "subscribe",
        "subscribepattern",
        "assign",
        "startingoffsets",
        "maxoffsetspertrigger",
        "includeheaders",
    }
)

#: The type of Spark's Kafka source column ``headers`` (with ``includeHeaders``).
HEADERS_TYPE = "array<struct<key: string, value: binary>>"

#: The ``eventhubs`` kind's keys that Spark's Kafka source has no equivalent for, and what to use.
NO_KAFKA_EQUIVALENT = {
    "consumer_group": (
        "has no equivalent for kind eventhubs_kafka: Spark's Kafka source assigns the hub's partitions "
        "itself and keeps its offsets in the checkpoint, not in a consumer group; to name the Kafka "
        "group it uses (spark-kafka-source-<uuid> by default), set options.groupIdPrefix"
    ),
}

#: Spark's Kafka source option that limits a micro-batch (``max_events_per_trigger``); real-time mode
#: refuses it.
KAFKA_BATCH_LIMIT = "maxOffsetsPerTrigger"


class EventHubsKafkaConfig(EventHubConnectionConfig):
    """What a ``kind: eventhubs_kafka`` source and sink share: the hub's Kafka endpoint from the
    connection string (``kafka_bootstrap_servers`` for the emulator), the topic, and ``options`` that
    are Spark's Kafka options, never ``format("eventhubs")``'s nor secrets."""

    #: What ``options`` takes instead of ``eventhubs.*`` ones, for the refusal's message.
    kafka_options_hint: ClassVar[str] = ""

    kafka_bootstrap_servers: str | None = None

    @field_validator("kafka_bootstrap_servers")
    @classmethod
    def _host_and_port(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[^\s,:]+:\d+(,[^\s,:]+:\d+)*", value):
            raise ValueError(
                f"{value!r} is not host:port (several separated by commas), e.g. 127.0.0.1:9092, the "
                "address the emulator prints after 'Kafka: bootstrap servers'"
            )
        return value

    @model_validator(mode="before")
    @classmethod
    def _no_eventhubs_options(cls, value: Any) -> Any:
        if isinstance(value, dict):
            for key in value.get("options") or {}:
                if str(key).lower().startswith("eventhubs."):
                    raise KeyedValueError(
                        f"options.{key}", f"is an option of format('eventhubs'); {cls.kafka_options_hint}"
                    )
        return value

    @model_validator(mode="after")
    def _no_secret_options(self) -> EventHubsKafkaConfig:
        for key in self.options:
            if any(word in key.lower() for word in ("password", "jaas", "sasl")):
                raise KeyedValueError(
                    f"options.{key}", "secrets and SASL settings come from connection_string_env"
                )
        return self

    def topic(self) -> str:
        """The hub (Kafka topic): ``eventhub_name``, else the connection string's ``EntityPath``."""
        if self.eventhub_name:
            return self.eventhub_name
        entity = _parsed(os.environ[self.connection_string_env]).entity_path
        if not entity:
            raise ValueError(
                f"{self.section}: the connection string in {self.connection_string_env} has no EntityPath; "
                "set eventhub_name to the hub (the Kafka topic)"
            )
        return entity

    def kafka_client_options(self) -> dict[str, str]:
        """:func:`client_options` for this connection, its string read from the environment now."""
        return client_options(os.environ[self.connection_string_env], self.kafka_bootstrap_servers)


class EventHubsKafkaSourceConfig(EventHubsKafkaConfig):
    """The keys of a ``kind: eventhubs_kafka`` source (docs/pipelines.md).

    ``options`` are Spark Kafka source options (``failOnDataLoss``, ``startingTimestamp``,
    ``groupIdPrefix``, ``kafka.request.timeout.ms``, ...), never the ``format("eventhubs")`` ones.
    """

    reserved_options: ClassVar[frozenset[str]] = RESERVED_KAFKA_OPTIONS
    kafka_options_hint: ClassVar[str] = (
        "kind eventhubs_kafka takes Spark's Kafka source options (e.g. startingTimestamp, failOnDataLoss; "
        "see docs/pipelines.md), or read the hub with kind: eventhubs"
    )

    starting_position: Literal["earliest", "latest"] = "earliest"
    max_events_per_trigger: int = Field(default=100_000, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _no_eventhubs_only_keys(cls, value: Any) -> Any:
        if isinstance(value, dict):
            for key, problem in NO_KAFKA_EQUIVALENT.items():
                if key in value:
                    raise KeyedValueError(key, problem)
        return value

    def spark_options(self) -> dict[str, str]:
        """The options for ``readStream.format("kafka")``, connection string read from the environment;
        a ``fresh`` upgrade's position (:data:`~hubflow.supervision.upgrades.STARTING_POSITION_ENV`)
        replaces the starting offsets. Runs on the driver."""
        options = {
            **self.kafka_client_options(),
            **RECOMMENDED_CLIENT_SETTINGS,
            **self.options,
            "subscribe": self.topic(),
            "startingOffsets": self.starting_position,
            KAFKA_BATCH_LIMIT: str(self.max_events_per_trigger),
            "includeHeaders": "true",
        }
        override = os.environ.get(STARTING_POSITION_ENV)
        if override:
            position = parse_upgrade_from(override)
            for key in (
                "startingTimestamp",
                "startingOffsetsByTimestamp",
                "startingOffsetsByTimestampStrategy",
            ):
                options.pop(key, None)
            if isinstance(position, str):
                options["startingOffsets"] = position
            else:
                options.pop("startingOffsets")
                options["startingTimestamp"] = str(_epoch_ms(position))
                options["startingOffsetsByTimestampStrategy"] = "latest"
        return options

    def interval_options(self, start: datetime, end: datetime) -> dict[str, str]:
        """The options of a batch read of the events enqueued in ``[start, end)`` (a backfill's):
        Kafka's offsets by timestamp, the first at or after ``start`` to the first at or after ``end``."""
        options = self.spark_options()
        for key in ("startingOffsets", KAFKA_BATCH_LIMIT):
            options.pop(key)
        options["startingTimestamp"] = str(_epoch_ms(start))
        options["endingTimestamp"] = str(_epoch_ms(end))
        # an interval after the newest event starts at the end of the log, not with an error
        options["startingOffsetsByTimestampStrategy"] = "latest"
        return options


def client_options(
    connection_string: str,
    bootstrap_servers: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Spark's ``kafka.*`` client settings for the namespace of ``connection_string`` (the JAAS
    config holds the connection string, or an Entra ID connection's client secret: Spark's redaction
    masks it, see docs/pipelines.md). ``environ`` (default ``os.environ``) holds the ``AZURE_*``
    variables of an Entra ID connection."""
    parsed = _parsed(connection_string)
    emulator = parsed.uses_development_emulator
    host = parsed.host
    if bootstrap_servers is None:
        if emulator:
            raise ValueError(
                "the connection string is the emulator's (UseDevelopmentEmulator=true), which does not say "
                "its Kafka port; set kafka_bootstrap_servers to the address it prints "
                "('Kafka: bootstrap servers 127.0.0.1:<port>', started with --kafka-port)"
            )
        if not host:
            raise ValueError("the connection string has no Endpoint=sb://<namespace host>/")
        bootstrap_servers = f"{host}:{SERVICE_KAFKA_PORT}"
    common = {
        "kafka.bootstrap.servers": bootstrap_servers,
        "kafka.security.protocol": "SASL_PLAINTEXT" if emulator else "SASL_SSL",
    }
    if parsed.signature is not None and parsed.key is None:
        raise ValueError(
            "the connection string holds a SharedAccessSignature token, which Event Hubs' Kafka endpoint "
            "does not take (Microsoft's Event Hubs for Kafka FAQ); give a connection string with "
            "SharedAccessKeyName and SharedAccessKey, or an Entra ID connection (no key), or read the hub "
            "with kind: eventhubs, which takes SAS tokens"
        )
    if not parsed.has_key:
        if not host:
            raise ValueError("the connection string has no Endpoint=sb://<namespace host>/")
        return {**common, **entra_id_options(host, os.environ if environ is None else environ)}
    return {
        **common,
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="$ConnectionString" password="{_jaas_quoted(connection_string.strip())}";'
        ),
    }


def entra_id_options(namespace_host: str, environ: Mapping[str, str]) -> dict[str, str]:
    """``OAUTHBEARER`` with kafka-clients' own login handler, as the service principal of ``environ``:
    a token for ``https://<namespace_host>/.default`` (the resource Microsoft documents for Kafka
    clients) from ``<AZURE_AUTHORITY_HOST>/<tenant>/oauth2/v2.0/token``. The token endpoint's TLS
    trust is the JVM's, or the PEM file of ``REQUESTS_CA_BUNDLE`` (the CA azure-identity trusts too)."""
    missing = [name for name in SERVICE_PRINCIPAL_VARIABLES if not environ.get(name, "").strip()]
    if missing:
        raise ValueError(
            "kind eventhubs_kafka on an Entra ID connection (a connection string without a key) signs in "
            f"as a service principal with a client secret, and {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not set: set {', '.join(SERVICE_PRINCIPAL_VARIABLES)}, "
            "or read the hub with kind: eventhubs, which also takes a workload identity "
            "(AZURE_FEDERATED_TOKEN_FILE) or a managed identity (Kafka's built-in OAUTHBEARER login in "
            "kafka-clients 3.9 only asks for tokens with a client secret)"
        )
    tenant, client_id, secret = (environ[name].strip() for name in SERVICE_PRINCIPAL_VARIABLES)
    authority = environ.get("AZURE_AUTHORITY_HOST", "").strip() or DEFAULT_AUTHORITY_HOST
    if "://" not in authority:
        authority = f"https://{authority}"
    token_url = f"{authority.rstrip('/')}/{tenant}/oauth2/v2.0/token"
    jaas = [
        f"{OAUTH_LOGIN_MODULE} required",
        f'clientId="{_jaas_quoted(client_id)}"',
        f'clientSecret="{_jaas_quoted(secret)}"',
        f'scope="https://{namespace_host}/.default"',
    ]
    ca_bundle = environ.get("REQUESTS_CA_BUNDLE", "").strip()
    if ca_bundle and token_url.startswith("https://"):
        # kafka-clients reads the token endpoint's ssl.* settings from the JAAS options
        jaas += [f'ssl.truststore.location="{_jaas_quoted(ca_bundle)}"', 'ssl.truststore.type="PEM"']
    return {
        "kafka.sasl.mechanism": "OAUTHBEARER",
        "kafka.sasl.login.callback.handler.class": OAUTH_LOGIN_CALLBACK_HANDLER,
        "kafka.sasl.oauthbearer.token.endpoint.url": token_url,
        "kafka.sasl.jaas.config": " ".join(jaas) + ";",
    }


def _jaas_quoted(value: str) -> str:
    """``value`` inside a JAAS option's double quotes."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def as_eventhubs_rows(frame: Any) -> Any:
    """Spark Kafka source rows as the ``eventhubs`` kind's columns (docs/pipelines.md says what differs):
    ``body`` = value, ``partition`` = partition as text, ``offset`` null (Kafka's offset is the
    sequence number, not the AMQP offset), ``sequenceNumber`` = offset, ``enqueuedTime`` = timestamp,
    ``publisher`` null, ``partitionKey`` = key as text, ``properties`` = headers (values as UTF-8 text;
    of a repeated header the last), ``systemProperties`` empty."""
    from pyspark.sql import functions as F

    return frame.select(
        F.col("value").alias("body"),
        F.col("partition").cast("string").alias("partition"),
        F.lit(None).cast("string").alias("offset"),
        F.col("offset").alias("sequenceNumber"),
        F.col("timestamp").alias("enqueuedTime"),
        F.lit(None).cast("string").alias("publisher"),
        F.col("key").cast("string").alias("partitionKey"),
        headers_as_properties(F.col("headers")).alias("properties"),
        F.create_map().cast("map<string,string>").alias("systemProperties"),
    )


def headers_as_properties(headers: Any) -> Any:
    """The column of Kafka ``headers`` (``array<struct<key: string, value: binary>>``) as a map of
    strings: each value cast to text (as ``cast(value as string)`` does), of a repeated key the last
    value (as the service keeps it for AMQP consumers), the keys in the order of their last
    occurrence; null or no headers give an empty map.

    A record whose keys do not repeat (every AMQP-sent event's) takes compiled expressions only: the
    keys and the values are taken out of the array whole (``headers.key``, ``cast(headers.value as
    array<string>)``) and zipped by ``map_from_arrays``. A record that repeats a key (a Kafka
    producer may) takes a ``transform`` over its distinct keys. Spark interprets higher-order
    functions row by row (and leaves a projection holding one out of whole-stage code generation);
    the mapping before ran ``transform``/``filter``/``exists`` over every record's headers, about
    14 µs of CPU per record, three times what Spark's Kafka source itself spent (docs/benchmarks.md).
    Not ``spark.sql.mapKeyDedupPolicy=LAST_WIN`` with ``map_from_entries``: that setting is the
    whole query's (Spark reads it where a map is built), so the user's own map functions in the same
    query would stop refusing repeated keys.
    """
    from pyspark.sql import functions as F

    present = F.coalesce(headers, F.array().cast(HEADERS_TYPE))
    keys = present["key"]
    values = present["value"].cast("array<string>")
    # each key once, in the order of its last occurrence, with the value of that occurrence
    from_last_keys, from_last_values = F.reverse(keys), F.reverse(values)
    last_keys = F.reverse(F.array_distinct(from_last_keys))
    last_values = F.transform(
        last_keys,
        lambda key: F.element_at(from_last_values, F.array_position(from_last_keys, key).cast("int")),
    )
    return F.when(F.size(F.array_distinct(keys)) == F.size(keys), F.map_from_arrays(keys, values)).otherwise(
        F.map_from_arrays(last_keys, last_values)
    )


def interval_rows(spark: Any, source: EventHubsKafkaSourceConfig, start: datetime, end: datetime) -> Any:
    """The events of ``source``'s hub enqueued in ``[start, end)`` as a batch of the ``eventhubs`` kind's
    rows, read through Spark's Kafka source by timestamp (a backfill's input)."""
    return as_eventhubs_rows(spark.read.format("kafka").options(**source.interval_options(start, end)).load())


def _parsed(connection_string: str) -> EventHubsConnectionString:
    """The connection string's fields; segments without ``=`` are skipped (the service judges them)."""
    return EventHubsConnectionString.parse(connection_string, skip_malformed=True)


def _epoch_ms(moment: datetime) -> int:
    return int(moment.astimezone(UTC).timestamp() * 1000)
