"""The emulator's Kafka endpoint: the Kafka wire protocol over the same hubs and events as AMQP.

Hub = topic, partition = partition, Kafka offset = Event Hubs sequence number, Kafka headers =
AMQP application properties (``docs/emulator.md``, "Kafka endpoint"). Modules, one job each:
``protocol`` (API keys, versions, error codes, limits), ``wire`` (primitive and schema-driven
encoding), ``schemas`` (the request and response layouts served), ``records`` (record batch v2),
``events`` (Kafka record <-> stored AMQP event), ``handlers`` (one function per API) and
``listener`` (a client connection: framing, SASL PLAIN, dispatch).
"""

from .listener import KafkaServer

__all__ = ["KafkaServer"]
