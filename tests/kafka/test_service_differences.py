"""Where Event Hubs' Kafka endpoint differs from Apache Kafka by the service's documentation, and the
emulator reproduces the service (docs/emulator.md, "Kafka endpoint", lists each with its source): each
test runs on both servers and asserts Kafka's behaviour on the broker beside the service's on the
emulator. A difference the emulator does not reproduce is listed there as such, untested here."""

from __future__ import annotations

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka import errors as kafka_errors

from .conftest import KafkaServer

pytestmark = pytest.mark.integration

DEADLINE = 30.0


def test_a_producer_does_not_create_a_topic(server: KafkaServer) -> None:
    """Kafka creates a topic a producer names (auto.create.topics.enable, default true); Event Hubs never
    creates an event hub through the Kafka protocol: the producer only ever sees it unknown."""
    topic = f"auto-{server.kind}"
    producer = KafkaProducer(**server.config(max_block_ms=3_000, acks="all"))
    try:
        if server.kind == "kafka":
            assert producer.send(topic, b"x").get(timeout=DEADLINE).offset == 0
        else:
            with pytest.raises(kafka_errors.KafkaTimeoutError):
                producer.send(topic, b"x").get(timeout=DEADLINE)
    finally:
        producer.close()
    consumer = KafkaConsumer(**server.config())
    try:
        assert (topic in consumer.topics()) == (server.kind == "kafka")
    finally:
        consumer.close()


def test_compressed_batches(server: KafkaServer) -> None:
    """Kafka stores a gzip batch; the emulator refuses every compressed batch with
    UNSUPPORTED_COMPRESSION_TYPE (the service's compression support is by tier: docs/emulator.md)."""
    topic = server.topic(1)
    producer = KafkaProducer(**server.config(acks="all", compression_type="gzip", retries=0))
    try:
        future = producer.send(topic, b"z" * 1000, partition=0)
        if server.kind == "kafka":
            assert future.get(timeout=DEADLINE).offset == 0
        else:
            with pytest.raises(kafka_errors.UnsupportedCompressionTypeError):
                future.get(timeout=DEADLINE)
    finally:
        producer.close()
    consumer = KafkaConsumer(**server.config())
    try:
        tp = TopicPartition(topic, 0)
        assert consumer.end_offsets([tp])[tp] == (1 if server.kind == "kafka" else 0)
    finally:
        consumer.close()


def test_transactional_producers(server: KafkaServer) -> None:
    """Kafka runs transactions; the emulator (as the Standard tier) refuses a transactional id."""
    topic = server.topic(1)
    producer = KafkaProducer(**server.config(transactional_id=f"tx-{server.kind}", max_block_ms=20_000))
    try:
        if server.kind == "kafka":
            producer.init_transactions()
            producer.begin_transaction()
            producer.send(topic, b"in-tx", partition=0)
            producer.commit_transaction()
        else:
            with pytest.raises(kafka_errors.TransactionalIdAuthorizationFailedError):
                producer.init_transactions()
    finally:
        producer.close(timeout=5)
    consumer = KafkaConsumer(**server.config(isolation_level="read_committed"))
    try:
        tp = TopicPartition(topic, 0)
        # a committed transaction ends with its control record: 2 offsets for 1 record
        assert consumer.end_offsets([tp])[tp] == (2 if server.kind == "kafka" else 0)
    finally:
        consumer.close()
