"""The transaction coordinator without KIP-890 (``transaction.version=0``, no partition
verification: the kafka-txn chaos profile's settings), on a real 3-broker cluster with
confluent-kafka: transactions commit and abort (the coordinator's records in Kafka's
original TransactionLogValue v0, no epoch bump per transaction), a read_committed
consumer sees the committed records only, and a new instance still fences the old one."""
from __future__ import annotations

import uuid

import pytest

from tests.node.kafka.clients import create_topic, running_cluster
from tests.waiting import poll_until

pytestmark = [pytest.mark.process]
CONFIG = {"transaction.state.log.num.partitions": "3", "min.insync.replicas": "2",
          "transaction.version": "0", "transaction.partition.verification.enable": "false"}
WAIT_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("txn-v0") / "c", config=CONFIG) as c:
        yield c


def test_transactions_without_kip_890(cluster):
    confluent = pytest.importorskip("confluent_kafka")
    tid, topic = f"v0-{uuid.uuid4().hex[:8]}", f"v0t-{uuid.uuid4().hex[:8]}"
    create_topic(cluster, topic, 2, 3, config={"min.insync.replicas": "2"})
    conf = {"bootstrap.servers": cluster.kafka_bootstrap_servers, "transactional.id": tid}
    first = confluent.Producer(conf)
    first.init_transactions(WAIT_S)
    for value, commit in ((b"one", True), (b"aborted", False), (b"two", True)):
        first.begin_transaction()
        for p in (0, 1):
            first.produce(topic, value=value + b"-%d" % p, partition=p)
        if commit:
            first.commit_transaction(WAIT_S)
        else:
            first.abort_transaction(WAIT_S)
    first.begin_transaction()
    first.produce(topic, value=b"zombie", partition=0)
    first.flush(WAIT_S)
    second = confluent.Producer(conf)
    second.init_transactions(WAIT_S)
    with pytest.raises(confluent.KafkaException):
        first.commit_transaction(WAIT_S)
    consumer = confluent.Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers,
                                   "group.id": f"g-{tid}", "auto.offset.reset": "earliest",
                                   "isolation.level": "read_committed",
                                   "enable.auto.commit": False})
    want = sorted([b"one-0", b"one-1", b"two-0", b"two-1"])
    try:
        consumer.assign([confluent.TopicPartition(topic, p, 0) for p in (0, 1)])
        seen: list[bytes] = []

        def read_all():
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                seen.append(msg.value())
            return sorted(seen) == want or len(seen) > len(want)
        poll_until(read_all, WAIT_S, f"the committed records (seen {seen})")
        assert sorted(seen) == want
    finally:
        consumer.close()
