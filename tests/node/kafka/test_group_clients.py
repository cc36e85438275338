"""Real clients with a ``group.id`` through the brokers' group coordinator: kafka-python's
KafkaConsumer and confluent-kafka (classic protocol) subscribe, consume every record of a
3-partition topic, commit, and a later consumer of the same group gets the committed
offsets (and nothing twice); confluent-kafka with ``group.protocol=consumer`` (KIP-848:
the coordinator assigns) likewise."""
from __future__ import annotations

import time
import uuid

import pytest

from tests.node.kafka.clients import create_topic, kafka_bootstrap, needs, running_cluster
from tests.node.kafka.drivers import produce_kafka_python, sample_records

pytestmark = [pytest.mark.process, pytest.mark.slow]

CONFIG = {"offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "0",
          # KIP-848: the coordinator's heartbeat interval (short, so a test settles fast)
          "group.consumer.min.heartbeat.interval.ms": "500",
          "group.consumer.heartbeat.interval.ms": "500"}
PARTITIONS = 3
PER_PARTITION = 10
TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("group-clients"), config=CONFIG) as c:
        yield c


def _topic_with_records(cluster) -> str:
    topic = "t" + uuid.uuid4().hex[:8]
    create_topic(cluster, topic, partitions=PARTITIONS)
    for p in range(PARTITIONS):
        produce_kafka_python(kafka_bootstrap(cluster), topic,
                             sample_records(PER_PARTITION, prefix=f"p{p}-"), partition=p)
    return topic


@needs("kafka-python")
def test_kafka_python_consumer_group_consumes_and_commits(cluster):
    from kafka import KafkaConsumer, TopicPartition
    topic, group = _topic_with_records(cluster), "kp-" + uuid.uuid4().hex[:8]
    bootstrap = kafka_bootstrap(cluster).split(",")
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             session_timeout_ms=10_000, heartbeat_interval_ms=1_000)
    seen = set()
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while len(seen) < PARTITIONS * PER_PARTITION:
            assert time.monotonic() < deadline, f"kafka-python got {len(seen)} records"
            for records in consumer.poll(timeout_ms=500).values():
                for m in records:
                    assert (m.partition, m.offset) not in seen
                    seen.add((m.partition, m.offset))
        assert consumer.assignment() == {TopicPartition(topic, p) for p in range(PARTITIONS)}
        consumer.commit()
    finally:
        consumer.close()
    again = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                          enable_auto_commit=False)
    try:
        assert [again.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)] == \
            [PER_PARTITION] * PARTITIONS
    finally:
        again.close()


@needs("confluent-kafka")
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_confluent_consumer_group_consumes_and_commits(cluster, protocol):
    from confluent_kafka import Consumer, TopicPartition
    topic, group = _topic_with_records(cluster), "ck-" + uuid.uuid4().hex[:8]
    conf = {"bootstrap.servers": kafka_bootstrap(cluster), "group.id": group,
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "group.protocol": protocol}
    if protocol == "classic":
        conf["session.timeout.ms"] = 10_000
    consumer = Consumer(conf)
    seen = set()
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT_S
        while len(seen) < PARTITIONS * PER_PARTITION:
            assert time.monotonic() < deadline, f"confluent-kafka got {len(seen)} records"
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                assert msg is None or not msg.error().fatal(), msg.error()
                continue
            assert (msg.partition(), msg.offset()) not in seen
            seen.add((msg.partition(), msg.offset()))
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    again = Consumer(conf)
    try:
        committed = again.committed([TopicPartition(topic, p) for p in range(PARTITIONS)],
                                    timeout=TIMEOUT_S)
        assert [tp.offset for tp in committed] == [PER_PARTITION] * PARTITIONS
    finally:
        again.close()
