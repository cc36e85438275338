"""kafkajs (node) against the Kafka listeners of a real 3-broker cluster: produce and
read back with keys, values, headers and timestamps, across clients. kafkajs' consumer
needs the group APIs (not offered yet): its reads go through kafkajs' own broker
connection and Fetch decoding (js/kafkajs_client.js)."""
from __future__ import annotations

import pytest

from tests.node.kafka.clients import create_topic, kafka_bootstrap, needs
from tests.node.kafka.drivers import (assert_records, consume_confluent, consume_kafkajs,
                                      headers_grouped, produce_confluent, produce_kafkajs,
                                      sample_records)

pytestmark = [pytest.mark.process, pytest.mark.slow, needs("kafkajs", "confluent-kafka")]


def test_produce_and_read_keys_values_headers_timestamps(kafka_cluster):
    create_topic(kafka_cluster, "kjs", partitions=2)
    b = kafka_bootstrap(kafka_cluster)
    records = headers_grouped(sample_records(30))
    assert produce_kafkajs(b, "kjs", records, partition=1) == list(range(30))
    assert_records(consume_kafkajs(b, "kjs", 1, 30), records, "kafkajs")
    assert_records(consume_confluent(b, "kjs", 1, 30), records, "confluent-kafka")
    assert_records(consume_kafkajs(b, "kjs", 1, 10, start=20), records[20:], "kafkajs",
                   offsets=range(20, 30))


def test_reads_what_librdkafka_wrote(kafka_cluster):
    create_topic(kafka_cluster, "kjs-from-rd")
    b = kafka_bootstrap(kafka_cluster)
    records = sample_records(30, prefix="rd")
    produce_confluent(b, "kjs-from-rd", records)
    assert_records(consume_kafkajs(b, "kjs-from-rd", 0, 30), records, "kafkajs")


def test_idempotent_producer(kafka_cluster):
    create_topic(kafka_cluster, "kjs-idem", config={"min.insync.replicas": "2"})
    b = kafka_bootstrap(kafka_cluster)
    records = headers_grouped(sample_records(20, binary=False))
    assert produce_kafkajs(b, "kjs-idem", records, idempotent=True) == list(range(20))
    assert_records(consume_confluent(b, "kjs-idem", 0, 20), records, "confluent-kafka")
