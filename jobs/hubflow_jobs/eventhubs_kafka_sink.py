"""An Event Hub written through Spark's Kafka sink (``format("kafka")``) and Event Hubs' Kafka endpoint.

A pipeline's ``kind: eventhubs_kafka`` sink: the keys of the source kind of that name
(:mod:`hubflow_jobs.eventhubs_kafka`) that say where the hub is - ``connection_string_env``,
``eventhub_name``, ``kafka_bootstrap_servers`` (the emulator only) - and the same client settings
(:func:`~hubflow_jobs.eventhubs_kafka.client_options`); the topic is the hub. The function's frame
has the ``kind: eventhubs`` sink's columns (``body``, optionally ``partitionKey``, ``partitionId``
or ``partition``, ``properties``; checked by the connector's own rule), which :func:`kafka_rows`
maps to Kafka's record the way Event Hubs maps a Kafka record to an event: ``body`` is the value,
each property a header (an application property on the AMQP side), ``partitionKey`` the record's
key. Delivery is at least once (Spark's Kafka sink). Runs on the driver; imports no Spark until a
frame is mapped.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import model_validator

from hubflow.config import KeyedValueError
from hubflow_jobs.eventhubs_kafka import RECOMMENDED_PRODUCER_SETTINGS, EventHubsKafkaConfig

#: Spark Kafka sink options hubflow derives from the sink's keys (lower case); ``options`` may not
#: set them.
RESERVED_KAFKA_SINK_OPTIONS = frozenset(
    {
        "kafka.bootstrap.servers",
        "kafka.security.protocol",
        "kafka.sasl.mechanism",
        "kafka.sasl.jaas.config",
        "topic",
    }
)

#: Keys a reader of a hub has that mean nothing to a writer, and what to do instead.
SOURCE_ONLY_KEYS = {
    "consumer_group": "a sink writes to the hub and joins no consumer group; remove it",
    "starting_position": "a sink writes after the hub's last event; remove it",
    "max_events_per_trigger": (
        "a sink writes what the function returns for each batch; bound the batch at the source "
        "(its max_events_per_trigger or max_files_per_trigger) and remove it here"
    ),
}

#: Spark Kafka sink options that do not work against Event Hubs, and why.
REFUSED_KAFKA_OPTIONS = {
    "kafka.transactional.id": (
        "Spark's Kafka sink does not write in Kafka transactions (it is at least once) and Event Hubs' "
        "Kafka endpoint refuses them; remove it"
    ),
    "kafka.key.serializer": "Spark's Kafka sink writes bytes (body, partitionKey) itself; remove it",
    "kafka.value.serializer": "Spark's Kafka sink writes bytes (body, partitionKey) itself; remove it",
}


class EventHubsKafkaSinkConfig(EventHubsKafkaConfig):
    """The keys of a ``kind: eventhubs_kafka`` sink (docs/pipelines.md).

    ``options`` are Spark Kafka sink options (``kafka.linger.ms``, ``kafka.batch.size``,
    ``kafka.request.timeout.ms``, ...), never the ``format("eventhubs")`` ones.
    """

    section: ClassVar[str] = "sink"
    reserved_options: ClassVar[frozenset[str]] = RESERVED_KAFKA_SINK_OPTIONS
    kafka_options_hint: ClassVar[str] = (
        "kind eventhubs_kafka takes Spark's Kafka sink options (e.g. kafka.linger.ms; see "
        "docs/pipelines.md), or write the hub with kind: eventhubs"
    )

    @model_validator(mode="before")
    @classmethod
    def _no_keys_without_kafka_sense(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        for key, problem in SOURCE_ONLY_KEYS.items():
            if key in value:
                raise KeyedValueError(key, problem)
        for key in value.get("options") or {}:
            if str(key).lower() in REFUSED_KAFKA_OPTIONS:
                raise KeyedValueError(f"options.{key}", REFUSED_KAFKA_OPTIONS[str(key).lower()])
        return value

    def spark_options(self) -> dict[str, str]:
        """The options for ``writeStream.format("kafka")``, connection string read from the environment."""
        return {
            **self.kafka_client_options(),
            **RECOMMENDED_PRODUCER_SETTINGS,
            **self.options,
            "topic": self.topic(),
        }


def kafka_rows(frame: Any) -> Any:
    """The ``eventhubs`` sink's columns as Spark Kafka sink rows: ``value`` = ``body``, ``key`` =
    ``partitionKey``, ``partition`` = ``partitionId``/``partition`` as an int (a set partition picks
    it; the key travels either way), ``headers`` = ``properties`` (values as UTF-8, none for a null
    map). Other columns are left out. A missing or wrongly typed column raises ValueError naming it
    (the connector's sink rule, :func:`pyspark_eventhubs.writer.sink_columns`)."""
    from pyspark.sql import functions as F

    from pyspark_eventhubs.errors import EventHubsOptionError
    from pyspark_eventhubs.writer import sink_columns

    try:
        columns = sink_columns(frame.schema)
    except EventHubsOptionError as exc:
        raise ValueError(str(exc)) from None
    selected = [F.col(columns.body).alias("value")]
    if columns.partition_key:
        selected.append(F.col(columns.partition_key).alias("key"))
    if columns.partition_id:
        selected.append(F.col(columns.partition_id).cast("int").alias("partition"))
    if columns.properties:
        no_properties = F.create_map().cast("map<string,string>")
        entries = F.map_entries(F.coalesce(F.col(columns.properties), no_properties))
        headers = F.transform(
            entries, lambda e: F.struct(e["key"].alias("key"), e["value"].cast("binary").alias("value"))
        )
        selected.append(headers.alias("headers"))
    return frame.select(*selected)
