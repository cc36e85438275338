"""kafka-python against the Kafka listeners of a real 3-broker cluster: produce and
consume with keys, values, headers and timestamps, across clients, and its idempotent
producer."""
from __future__ import annotations

import pytest

from tests.node.kafka.clients import create_topic, kafka_bootstrap, needs
from tests.node.kafka.drivers import (assert_records, consume_confluent, consume_kafka_python,
                                      produce_confluent, produce_kafka_python, sample_records)

pytestmark = [pytest.mark.process, pytest.mark.slow, needs("kafka-python", "confluent-kafka")]


def test_produce_and_consume_keys_values_headers_timestamps(kafka_cluster):
    create_topic(kafka_cluster, "kp", partitions=2)
    b = kafka_bootstrap(kafka_cluster)
    records = sample_records(40)
    assert produce_kafka_python(b, "kp", records, partition=1) == list(range(40))
    assert_records(consume_kafka_python(b, "kp", 1, 40), records, "kafka-python")
    assert_records(consume_confluent(b, "kp", 1, 40), records, "confluent-kafka")
    assert_records(consume_kafka_python(b, "kp", 1, 10, start=30), records[30:], "kafka-python",
                   offsets=range(30, 40))


def test_reads_what_librdkafka_wrote(kafka_cluster):
    create_topic(kafka_cluster, "kp-from-rd")
    b = kafka_bootstrap(kafka_cluster)
    records = sample_records(30, prefix="rd")
    produce_confluent(b, "kp-from-rd", records)
    assert_records(consume_kafka_python(b, "kp-from-rd", 0, 30), records, "kafka-python")


def test_idempotent_producer(kafka_cluster):
    create_topic(kafka_cluster, "kp-idem", config={"min.insync.replicas": "2"})
    b = kafka_bootstrap(kafka_cluster)
    records = sample_records(100, binary=False)
    offsets = produce_kafka_python(b, "kp-idem", records, enable_idempotence=True)
    assert offsets == list(range(100))
    assert_records(consume_confluent(b, "kp-idem", 0, 100), records, "confluent-kafka")
