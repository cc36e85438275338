"""aiokafka against the Kafka listeners of a real 3-broker cluster: produce and consume
with keys, values, headers and timestamps, across clients."""
from __future__ import annotations

import pytest

from tests.node.kafka.clients import create_topic, kafka_bootstrap, needs
from tests.node.kafka.drivers import (assert_records, consume_aiokafka, consume_confluent,
                                      produce_aiokafka, produce_confluent, sample_records)

pytestmark = [pytest.mark.process, pytest.mark.slow, needs("aiokafka", "confluent-kafka")]


def test_produce_and_consume_keys_values_headers_timestamps(kafka_cluster):
    create_topic(kafka_cluster, "aio", partitions=2)
    b = kafka_bootstrap(kafka_cluster)
    records = sample_records(40)
    assert produce_aiokafka(b, "aio", records, partition=1) == list(range(40))
    assert_records(consume_aiokafka(b, "aio", 1, 40), records, "aiokafka")
    assert_records(consume_confluent(b, "aio", 1, 40), records, "confluent-kafka")
    assert_records(consume_aiokafka(b, "aio", 1, 5, start=35), records[35:], "aiokafka",
                   offsets=range(35, 40))


def test_reads_what_librdkafka_wrote(kafka_cluster):
    create_topic(kafka_cluster, "aio-from-rd")
    b = kafka_bootstrap(kafka_cluster)
    records = sample_records(30, prefix="rd")
    produce_confluent(b, "aio-from-rd", records)
    assert_records(consume_aiokafka(b, "aio-from-rd", 0, 30), records, "aiokafka")


def test_idempotent_producer(kafka_cluster):
    create_topic(kafka_cluster, "aio-idem", config={"min.insync.replicas": "2"})
    b = kafka_bootstrap(kafka_cluster)
    records = sample_records(100, binary=False)
    assert produce_aiokafka(b, "aio-idem", records, enable_idempotence=True) == list(range(100))
    assert_records(consume_confluent(b, "aio-idem", 0, 100), records, "confluent-kafka")
