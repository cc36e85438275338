"""confluent-kafka (librdkafka) against the Kafka listeners of a real 3-broker cluster:
metadata, produce and consume with keys, values, headers and timestamps, the idempotent
producer. Failover scenarios are in test_client_failover.py."""
from __future__ import annotations

import pytest

from tests.node.kafka.clients import create_topic, kafka_bootstrap, needs
from tests.node.kafka.drivers import (assert_records, consume_confluent, produce_confluent,
                                      sample_records)

pytestmark = [pytest.mark.process, pytest.mark.slow, needs("confluent-kafka")]


def test_admin_client_lists_the_brokers_kafka_addresses_and_the_topics(kafka_cluster):
    from confluent_kafka.admin import AdminClient
    create_topic(kafka_cluster, "listed", partitions=3, replication_factor=2)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap(kafka_cluster)})
    md = admin.list_topics(timeout=30)
    kafka_addresses = set(kafka_bootstrap(kafka_cluster).split(","))
    assert {f"{b.host}:{b.port}" for b in md.brokers.values()} == kafka_addresses
    assert set(md.brokers) == set(kafka_cluster.broker_ids)
    topic = md.topics["listed"]
    assert topic.error is None and sorted(topic.partitions) == [0, 1, 2]
    for p in topic.partitions.values():
        assert len(p.replicas) == 2 and p.leader in p.replicas and set(p.isrs) == set(p.replicas)
    assert md.controller_id in kafka_cluster.broker_ids


def test_produce_and_consume_keys_values_headers_timestamps(kafka_cluster):
    create_topic(kafka_cluster, "rdkafka", partitions=2)
    records = sample_records(40)
    b = kafka_bootstrap(kafka_cluster)
    offsets = produce_confluent(b, "rdkafka", records, partition=1)
    assert offsets == list(range(40))
    assert_records(consume_confluent(b, "rdkafka", 1, 40), records, "confluent-kafka")
    # From the middle, and a second batch appended after the first.
    more = sample_records(10, prefix="more")
    assert produce_confluent(b, "rdkafka", more, partition=1) == list(range(40, 50))
    assert_records(consume_confluent(b, "rdkafka", 1, 15, start=35), records[35:] + more,
                   "confluent-kafka", offsets=range(35, 50))


def test_keyed_records_spread_over_partitions_each_read_once(kafka_cluster):
    from confluent_kafka import Producer
    create_topic(kafka_cluster, "keyed", partitions=3)
    b = kafka_bootstrap(kafka_cluster)
    producer = Producer({"bootstrap.servers": b, "acks": "all", "linger.ms": 5})
    placed = {}

    def done(err, msg):
        assert err is None, err
        placed[msg.key()] = (msg.partition(), msg.offset())

    for i in range(60):
        producer.produce("keyed", key=f"k{i}".encode(), value=f"v{i}".encode(), on_delivery=done)
    assert producer.flush(60) == 0
    assert len(placed) == 60 and {p for p, _ in placed.values()} == {0, 1, 2}
    for partition in range(3):
        expected = {k: o for k, (p, o) in placed.items() if p == partition}
        got = consume_confluent(b, "keyed", partition, len(expected))
        assert {g.key: g.offset for g in got} == expected
        assert all(g.value == b"v" + g.key[1:] for g in got)


def test_idempotent_producer_gets_consecutive_offsets(kafka_cluster):
    create_topic(kafka_cluster, "idem-plain", config={"min.insync.replicas": "2"})
    b = kafka_bootstrap(kafka_cluster)
    records = sample_records(200, binary=False)
    offsets = produce_confluent(b, "idem-plain", records, conf={"enable.idempotence": True})
    assert offsets == list(range(200))
    assert_records(consume_confluent(b, "idem-plain", 0, 200), records, "confluent-kafka")
