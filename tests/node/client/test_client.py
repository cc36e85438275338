"""Producer, consumer and admin client against a real 3-broker cluster (real processes)."""
from __future__ import annotations

import time

import numpy as np
import pytest

from node.wire import errors
from node.client import Admin, Consumer, KafkaTimeoutError, Producer, TopicPartition
from node.cluster import Cluster
from node.client.partitioner import partition_for_key
from tests.conftest import new_cluster_id

pytestmark = [pytest.mark.process, pytest.mark.slow]

CONFIG = {"zookeeper.session.timeout.ms": "3000", "replica.lag.time.max.ms": "3000",
          "replica.fetch.wait.max.ms": "50", "auto.leader.rebalance.enable": "false",
          "default.replication.factor": "3", "num.partitions": "3"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster_id = new_cluster_id()
    cluster = Cluster.up(tmp_path_factory.mktemp("cluster"), brokers=3, config=CONFIG,
                         cluster_id=cluster_id)
    try:
        yield cluster
    finally:
        cluster.down(grace_s=5)


@pytest.fixture
def admin(cluster):
    with Admin(cluster.bootstrap_servers) as admin:
        yield admin


_topics = iter(range(10_000))


@pytest.fixture
def topic(admin):
    name = f"t{next(_topics)}"
    admin.create_topic(name, 3, 3, config={"min.insync.replicas": "2"})
    return name


def read_all(bootstrap, tps, expected, timeout_s=30.0, **kwargs):
    """Poll from the beginning of ``tps`` until ``expected`` records arrived."""
    with Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100,
                  **kwargs) as consumer:
        consumer.assign(tps)
        records = []
        deadline = time.monotonic() + timeout_s
        while len(records) < expected and time.monotonic() < deadline:
            records += consumer.poll(200)
        return records


def test_acks_all_rf3_records_are_read_back_in_order_once(cluster, topic):
    with Producer(cluster.bootstrap_servers, acks="all") as producer:
        futures = [producer.send(topic, b"v%d" % i, partition=i % 3) for i in range(900)]
        metas = [f.get(timeout=30) for f in futures]
    for p in range(3):
        offsets = [m.offset for i, m in enumerate(metas) if i % 3 == p]
        assert offsets == list(range(300)), p  # one offset per record, in send order
    records = read_all(cluster.bootstrap_servers, [(topic, p) for p in range(3)], 900)
    assert len(records) == 900
    for p in range(3):
        mine = [r for r in records if r.partition == p]
        assert [r.offset for r in mine] == list(range(300))
        assert [r.value for r in mine] == [b"v%d" % i for i in range(p, 900, 3)]


def test_keyed_records_go_to_the_murmur2_partition(cluster, topic):
    with Producer(cluster.bootstrap_servers, acks=1) as producer:
        metas = {k: producer.send(topic, b"x", key=k).get(timeout=30)
                 for k in (b"21", b"foobar", b"abc", b"key-7")}
    for key, meta in metas.items():
        assert meta.partition == partition_for_key(key, 3)
    records = read_all(cluster.bootstrap_servers, [(topic, p) for p in range(3)], 4)
    assert {r.key for r in records} == set(metas)
    for r in records:
        assert r.partition == metas[r.key].partition and r.offset == metas[r.key].offset


def test_unkeyed_records_stick_to_a_partition_per_batch(cluster, topic):
    with Producer(cluster.bootstrap_servers, acks=1, linger_ms=50) as producer:
        futures = [producer.send(topic, b"%d" % i) for i in range(50)]
        producer.flush(30)
        partitions = {f.get().partition for f in futures}
    assert len(partitions) == 1  # one linger window, one sticky partition


def test_send_many_and_poll_batches(cluster, topic):
    values = np.frombuffer(b"".join(b"%099d\n" % i for i in range(20_000)),
                           np.uint8).reshape(20_000, 100)
    with Producer(cluster.bootstrap_servers, acks=1, batch_size=256 * 1024) as producer:
        futures = producer.send_many(topic, values, partition=1)
        metas = [f.get(timeout=30) for f in futures]
    assert sum(m.record_count for m in metas) == 20_000
    assert [m.base_offset for m in metas] == \
        [sum(m.record_count for m in metas[:i]) for i in range(len(metas))]
    with Consumer(cluster.bootstrap_servers, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 1)])
        got = 0
        first = None
        deadline = time.monotonic() + 30
        while got < 20_000 and time.monotonic() < deadline:
            for fetched in consumer.poll_batches(200):
                first = first or fetched
                got += fetched.record_count
        assert got == 20_000
        assert first.batch.values[0].as_py() == b"%099d\n" % 0
        assert consumer.position((topic, 1)) == 20_000


def test_send_many_of_a_list_sizes_batches_by_the_values_bytes_and_keeps_nulls(cluster, topic):
    """A list is converted to one Arrow array per call and each batch is a slice of it:
    the batches hold what the list held, in order (None a null value), as many records
    each as ``batch_size`` over the values' own bytes (not the array's offsets too)."""
    values = [b"value-%d" % i * (1 + i % 3) for i in range(600)]
    values[7] = None
    per_batch = 2048 // (sum(len(v) for v in values if v is not None) // 600 + 12)
    with Producer(cluster.bootstrap_servers, acks=1, batch_size=2048) as producer:
        futures = producer.send_many(topic, values, partition=2)
        metas = [f.get(timeout=30) for f in futures]
    assert [m.record_count for m in metas] == \
        [min(per_batch, 600 - i) for i in range(0, 600, per_batch)]
    with Consumer(cluster.bootstrap_servers, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 2)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 600 and time.monotonic() < deadline:
            got += consumer.poll(200)
    assert [r.value for r in got] == values


def test_consumer_seek_position_and_out_of_range_reset(cluster, topic):
    with Producer(cluster.bootstrap_servers, acks="all") as producer:
        for i in range(10):
            producer.send(topic, b"%d" % i, partition=0)
        producer.flush(30)
    tp = TopicPartition(topic, 0)
    with Consumer(cluster.bootstrap_servers, auto_offset_reset="earliest",
                  fetch_max_wait_ms=100) as consumer:
        consumer.assign([tp])
        assert consumer.position(tp) == 0
        consumer.seek_to_end(tp)
        assert consumer.position(tp) == 10
        assert consumer.poll(300) == []
        consumer.seek(tp, 7)
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 3 and time.monotonic() < deadline:
            got += consumer.poll(200)
        assert [r.value for r in got] == [b"7", b"8", b"9"] and consumer.position(tp) == 10
        consumer.seek(tp, 1_000_000)  # OFFSET_OUT_OF_RANGE -> auto_offset_reset=earliest
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 10 and time.monotonic() < deadline:
            got += consumer.poll(200)
        assert [r.offset for r in got] == list(range(10))
        assert consumer.end_offsets([tp]) == {tp: 10}
        assert consumer.beginning_offsets([tp]) == {tp: 0}


def test_consumer_latest_skips_old_records(cluster, topic):
    with Producer(cluster.bootstrap_servers, acks="all") as producer:
        producer.send(topic, b"old", partition=2).get(30)
        with Consumer(cluster.bootstrap_servers, auto_offset_reset="latest",
                      fetch_max_wait_ms=100) as consumer:
            consumer.assign([(topic, 2)])
            assert consumer.position((topic, 2)) == 1
            producer.send(topic, b"new", partition=2).get(30)
            got = []
            deadline = time.monotonic() + 20
            while not got and time.monotonic() < deadline:
                got = consumer.poll(200)
    assert [r.value for r in got] == [b"new"]


def test_admin_describes_topics_and_cluster(cluster, admin, topic):
    described = admin.describe_topics([topic])[topic]
    assert [p.partition for p in described] == [0, 1, 2]
    for p in described:
        assert sorted(p.replicas) == [0, 1, 2] and p.leader == p.replicas[0]
        assert sorted(p.isr) == [0, 1, 2] and p.leader_epoch >= 0 and not p.offline
    # DESIGN.md placement: the preferred replicas of consecutive partitions differ.
    assert len({p.replicas[0] for p in described}) == 3
    info = admin.describe_cluster()
    assert [b.broker_id for b in info.brokers] == [0, 1, 2]
    assert info.controller_id == cluster.controller_id()
    assert topic in admin.list_topics()
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        admin.describe_topics(["no-such-topic"])
    with pytest.raises(errors.TopicAlreadyExistsError):
        admin.create_topic(topic, 3, 3)
    with pytest.raises(errors.InvalidReplicationFactorError):
        admin.create_topic("too-many-replicas", 1, 4)


def test_admin_creates_with_an_explicit_assignment_and_deletes(cluster, admin):
    admin.create_topic("assigned", replica_assignment={0: [2, 0], 1: [1, 2]})
    described = admin.describe_topics(["assigned"])["assigned"]
    assert [list(p.replicas) for p in described] == [[2, 0], [1, 2]]
    assert [p.leader for p in described] == [2, 1]
    admin.delete_topic("assigned")
    assert "assigned" not in admin.list_topics()


def test_unknown_topic_send_times_out_with_max_block(cluster):
    with Producer(cluster.bootstrap_servers, max_block_ms=500) as producer:
        with pytest.raises(KafkaTimeoutError, match="not present in metadata"):
            producer.send("never-created", b"x")


# ---------------------------------------------------------------- failures (own cluster)

@pytest.fixture
def fresh(tmp_path):
    cluster_id = new_cluster_id()
    cluster = Cluster.up(tmp_path / "c", brokers=3, config=CONFIG, cluster_id=cluster_id)
    try:
        yield cluster
    finally:
        cluster.down(grace_s=5)


def leader_of(admin, topic, partition=0):
    return admin.describe_topics([topic])[topic][partition]


def test_producer_and_consumer_follow_the_leader_after_sigkill(fresh):
    with Admin(fresh.bootstrap_servers) as admin:
        admin.create_topic("f", 1, 3, config={"min.insync.replicas": "2"})
        old = leader_of(admin, "f")
        with Producer(fresh.bootstrap_servers, acks="all", retry_backoff_ms=50,
                      request_timeout_ms=10_000) as producer, \
                Consumer(fresh.bootstrap_servers, auto_offset_reset="earliest",
                         fetch_max_wait_ms=100) as consumer:
            consumer.assign([("f", 0)])
            acked = [producer.send("f", b"before-%d" % i).get(30).offset for i in range(100)]
            got = []
            deadline = time.monotonic() + 20
            while len(got) < 100 and time.monotonic() < deadline:
                got += consumer.poll(200)
            fresh.kill(old.leader, "KILL")
            fresh.wait_for(lambda: leader_of(admin, "f").leader not in (-1, old.leader), 30,
                           "a new leader")
            new = leader_of(admin, "f")
            assert new.leader_epoch > old.leader_epoch and old.leader not in new.isr
            acked += [producer.send("f", b"after-%d" % i).get(30).offset for i in range(100)]
            deadline = time.monotonic() + 30
            while len(got) < 200 and time.monotonic() < deadline:
                got += consumer.poll(200)
    assert acked == list(range(200))
    assert [r.offset for r in got] == list(range(200))
    assert [r.value for r in got] == [b"before-%d" % i for i in range(100)] + \
        [b"after-%d" % i for i in range(100)]


def test_not_enough_replicas_reaches_the_acks_all_caller(fresh):
    with Admin(fresh.bootstrap_servers) as admin:
        admin.create_topic("n", 1, 3, config={"min.insync.replicas": "3"})
        leader = leader_of(admin, "n").leader
        follower = next(b for b in (0, 1, 2) if b != leader)
        fresh.kill(follower, "KILL")
        fresh.wait_for(lambda: follower not in leader_of(admin, "n").isr, 30, "ISR shrink")
    with Producer(fresh.bootstrap_servers, acks="all", retries=0) as producer:
        with pytest.raises(errors.NotEnoughReplicasError):
            producer.send("n", b"x").get(30)
    with Producer(fresh.bootstrap_servers, acks=1, retries=0) as producer:
        assert producer.send("n", b"y").get(30).offset >= 0


def test_preferred_election_and_reassignment(fresh):
    with Admin(fresh.bootstrap_servers) as admin:
        admin.create_topic("e", 1, 3)
        preferred = leader_of(admin, "e").replicas[0]
        fresh.kill(preferred, "KILL")
        fresh.wait_for(lambda: leader_of(admin, "e").leader not in (-1, preferred), 30,
                       "leadership to move")
        fresh.start(preferred)
        fresh.wait_for(lambda: preferred in leader_of(admin, "e").isr, 30, "ISR rejoin")
        result = admin.elect_leaders("preferred", [("e", 0)])
        assert set(result) == {("e", 0)}
        fresh.wait_for(lambda: leader_of(admin, "e").leader == preferred, 30,
                       "the preferred leader")
        admin.create_topic("r", 1, 2, replica_assignment={0: [0, 1]})
        assert admin.reassign_partitions({("r", 0): [1, 2]}) == {("r", 0): None}
        fresh.wait_for(lambda: list(leader_of(admin, "r").replicas) == [1, 2], 30,
                       "the reassignment to finish")
        fresh.wait_for(lambda: admin.list_reassignments() == {}, 30, "no reassignment listed")
