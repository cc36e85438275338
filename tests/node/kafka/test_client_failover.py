"""Real clients through broker failures, each test on its own 3-broker cluster:

- a partition leader SIGKILLed under an idempotent producer, librdkafka's and
  kafka-python's (acks=all, RF 3, min.insync.replicas=2): every record is acknowledged
  once, nothing is lost or written twice, and each sits at the offset its delivery
  report gave;
- an unclean election seen by consumers (KIP-320): the new leader's log is shorter than
  what they read; OffsetForLeaderEpoch tells them where the logs diverge. With
  auto.offset.reset=error librdkafka reports the truncation; with earliest it resumes at
  the divergence point (not at the log start, as an out-of-range reset would).
"""
from __future__ import annotations

import pytest

from node.client import Admin
from tests.node.kafka.clients import create_topic, kafka_bootstrap, needs, running_cluster
from tests.node.kafka.drivers import Rec, confluent_consumer, produce_confluent
from tests.waiting import poll_until

pytestmark = [pytest.mark.process, pytest.mark.slow, needs("confluent-kafka")]
WAIT_S = 60.0


def _values(prefix: str, start: int, n: int) -> list[Rec]:
    return [Rec(None, f"{prefix}-{i}".encode()) for i in range(start, start + n)]


def _state(cluster, topic: str):
    """Partition 0's state znode (a stand-in with no leader while ZooKeeper has none)."""
    from node.wire.zkdata import PartitionState
    return cluster.partition_state(topic, 0) or PartitionState(-2, -1, (), -1)


def _not_the_controller(cluster, n: int) -> list[int]:
    controller = cluster.controller_id()
    brokers = [b for b in cluster.broker_ids if b != controller]
    assert len(brokers) >= n, (controller, cluster.broker_ids)
    return brokers[:n]


N, WARM_UP, KILL_AFTER = 4000, 100, 1500   # records; acknowledged first; killed at


def _idempotence_topic(cluster) -> int:
    """Topic "idem": 1 partition, RF 3, min.insync.replicas=2, led by a broker that is not
    the controller (the controller moves leadership at once). Returns that leader."""
    leader = _not_the_controller(cluster, 1)[0]
    create_topic(cluster, "idem", assignment={0: [leader] + [
        b for b in cluster.broker_ids if b != leader]}, config={"min.insync.replicas": "2"})
    return leader


def _check_once_each_at_its_offset(cluster, killed: int, offsets: dict[int, int]) -> None:
    """The partition read back to its high watermark holds record i once, at offsets[i]
    (the offset its producer was told), for every i < N, in order."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition
    state = cluster.partition_state("idem", 0)
    assert state.leader not in (-1, killed), state
    assert sorted(offsets) == list(range(N))
    consumer = confluent_consumer(kafka_bootstrap(cluster))
    log: list = []
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition("idem", 0), timeout=30)
        assert (low, high) == (0, N), "records lost or written twice"
        consumer.assign([TopicPartition("idem", 0, OFFSET_BEGINNING)])

        def read_all():
            log.extend((msg.offset(), msg.value())
                       for msg in consumer.consume(1000, 0.5) if not msg.error())
            return len(log) >= N

        poll_until(read_all, 120, f"the {N} records to be read back", interval_s=0.001)
    finally:
        consumer.close()
    assert [o for o, _ in log] == list(range(N))
    assert [v for _, v in log] == [f"v-{i}".encode() for i in range(N)], \
        "the log holds the records once each, in the order sent"
    assert all(offsets[i] == i for i in range(N)), \
        [(i, o) for i, o in sorted(offsets.items()) if o != i][:5]


def test_leader_sigkilled_under_an_idempotent_librdkafka_producer(tmp_path, cluster_id):
    from confluent_kafka import Producer
    with running_cluster(tmp_path / "c", cluster_id) as cluster:
        leader = _idempotence_topic(cluster)
        producer = Producer({"bootstrap.servers": kafka_bootstrap(cluster),
                             "enable.idempotence": True, "acks": "all", "linger.ms": 2,
                             "message.timeout.ms": 120_000, "retry.backoff.ms": 100})
        reports: dict[int, int] = {}
        failures = []

        def done(err, msg):
            i = int(msg.value().split(b"-")[1])
            if err is not None:
                failures.append((i, err))
            else:
                assert i not in reports, f"record {i} acknowledged twice"
                reports[i] = msg.offset()

        def send(i: int) -> None:
            producer.produce("idem", value=f"v-{i}".encode(), partition=0, on_delivery=done)

        # The producer is running (its id assigned, records acknowledged by the leader)...
        for i in range(WARM_UP):
            send(i)
        poll_until(lambda: producer.poll(0.01) >= 0 and len(reports) == WARM_UP, WAIT_S,
                   "the first records to be acknowledged")
        # ... then a steady stream: the kill comes with records in flight and more to come.
        in_flight_at_kill = None
        for i in range(WARM_UP, N):
            send(i)
            if i % 20 == 19:
                producer.poll(0.002)
            if i == KILL_AFTER:
                in_flight_at_kill = i + 1 - len(reports)
                cluster.kill(leader, "KILL")
        assert producer.flush(120) == 0 and not failures, failures[:5]
        assert len(reports) == N, f"{in_flight_at_kill} were unacknowledged at the kill"
        _check_once_each_at_its_offset(cluster, leader, reports)


@needs("kafka-python")
def test_leader_sigkilled_under_an_idempotent_kafka_python_producer(tmp_path, cluster_id):
    from kafka import KafkaProducer
    with running_cluster(tmp_path / "c", cluster_id) as cluster:
        leader = _idempotence_topic(cluster)
        producer = KafkaProducer(bootstrap_servers=kafka_bootstrap(cluster).split(","),
                                 enable_idempotence=True, acks="all", linger_ms=2,
                                 retry_backoff_ms=100, delivery_timeout_ms=120_000)
        try:
            futures = [producer.send("idem", value=f"v-{i}".encode(), partition=0)
                       for i in range(WARM_UP)]
            producer.flush(WAIT_S)
            assert all(f.succeeded() for f in futures)
            # kafka-python sends from its own thread: the kill meets a stream in flight.
            for i in range(WARM_UP, N):
                futures.append(producer.send("idem", value=f"v-{i}".encode(), partition=0))
                if i == KILL_AFTER:
                    cluster.kill(leader, "KILL")
            producer.flush(120)
            offsets = {i: f.get(timeout=WAIT_S).offset for i, f in enumerate(futures)}
        finally:
            producer.close(timeout=10)
        _check_once_each_at_its_offset(cluster, leader, offsets)


def test_unclean_election_is_detected_as_log_truncation_by_librdkafka(tmp_path, cluster_id):
    from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition
    with running_cluster(tmp_path / "c", cluster_id) as cluster:
        first, second = _not_the_controller(cluster, 2)
        create_topic(cluster, "trunc", assignment={0: [first, second]})
        b = kafka_bootstrap(cluster)
        assert produce_confluent(b, "trunc", _values("old", 0, 10)) == list(range(10))

        # Two consumers read along: one stops on truncation, one resets by its policy.
        strict = confluent_consumer(b, **{"auto.offset.reset": "error"})
        lenient = confluent_consumer(b, **{"auto.offset.reset": "earliest"})
        seen = {"strict": [], "lenient": []}
        problems = {"strict": [], "lenient": []}
        consumers = {"strict": strict, "lenient": lenient}
        for c in consumers.values():
            c.assign([TopicPartition("trunc", 0, OFFSET_BEGINNING)])

        def read(name: str, until) -> bool:
            for msg in consumers[name].consume(100, 0.2):
                if msg.error():
                    problems[name].append(msg.error())
                else:
                    seen[name].append((msg.offset(), msg.value().decode()))
            return until()

        try:
            for name in consumers:
                poll_until(lambda: read(name, lambda: len(seen[name]) >= 10), WAIT_S,
                           f"{name} to read the first 10 records")

            # The follower dies; the leader alone takes 10 more records.
            cluster.kill(second, "KILL")
            poll_until(lambda: _state(cluster, "trunc").isr == (first,), WAIT_S,
                       f"the ISR to shrink to [{first}]")
            assert produce_confluent(b, "trunc", _values("old", 10, 10)) == list(range(10, 20))
            for name in consumers:
                poll_until(lambda: read(name, lambda: len(seen[name]) >= 20), WAIT_S,
                           f"{name} to read 20 records")
            assert [o for o, _ in seen["strict"]] == list(range(20))

            # The leader dies and the stale follower comes back: only an unclean election
            # gives the partition a leader, with 10 records where the consumers read 20.
            cluster.kill(first, "KILL")
            cluster.start(second)
            poll_until(lambda: _state(cluster, "trunc").leader == -1, WAIT_S,
                       "the partition to be offline")
            with Admin(cluster.bootstrap_servers) as admin:
                assert admin.elect_leaders("unclean", [("trunc", 0)]) == {("trunc", 0): None}
            poll_until(lambda: _state(cluster, "trunc").leader == second, WAIT_S,
                       f"broker {second} to lead after the unclean election")
            assert produce_confluent(b, "trunc", _values("new", 10, 5)) == list(range(10, 15))

            # auto.offset.reset=earliest: librdkafka asks OffsetForLeaderEpoch, learns the
            # log diverged at 10 and resumes there (an out-of-range reset would go to 0).
            poll_until(lambda: read("lenient", lambda: len(seen["lenient"]) >= 25), WAIT_S,
                       "the lenient consumer to read the new leader's records")
            assert seen["lenient"][20:] == [(10 + i, f"new-{10 + i}") for i in range(5)], \
                seen["lenient"][20:]
            # auto.offset.reset=error: librdkafka reports the truncation and stops.
            truncation = poll_until(
                lambda: read("strict", lambda: next(
                    (e for e in problems["strict"]
                     if e.code() == KafkaError._AUTO_OFFSET_RESET), None)),
                WAIT_S, "the strict consumer to report the log truncation")
            assert "truncation" in truncation.str().lower(), truncation.str()
            assert len(seen["strict"]) == 20, seen["strict"][20:]
        finally:
            for c in consumers.values():
                c.close()
