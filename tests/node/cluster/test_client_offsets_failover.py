"""node.client's ListOffsets calls across a leader change, on real processes: like
Kafka's consumer, ``end_offsets``/``beginning_offsets`` ask again with fresh metadata
on a retriable error instead of raising it (found by the shm chaos sweep: the final
read-back's ``end_offsets`` raised NOT_LEADER_OR_FOLLOWER when an automatic leader
rebalance moved the partition at that moment)."""
from __future__ import annotations

import pytest

from node.client import Consumer, Producer
from node.client.types import TopicPartition
from node.wire import errors
from tests.node.cluster.scenario import admin, cluster, state, wait_state

pytestmark = [pytest.mark.process, pytest.mark.slow]


def test_end_offsets_follow_a_leader_that_died(tmp_path, cluster_id):
    with cluster(tmp_path, cluster_id, zookeeper_session_timeout_ms=6000) as c:
        a = admin(c)
        a.create_topic("t", 1, 3, config={"min.insync.replicas": "2"})
        a.close()
        wait_state(c, "t", lambda s: len(s.isr) == 3, "a full ISR")
        producer = Producer(bootstrap_servers=c.bootstrap_servers, acks="all")
        for i in range(5):
            producer.send("t", b"v%d" % i, partition=0).get(timeout=30)
        producer.close()
        tp = TopicPartition("t", 0)
        consumer = Consumer(bootstrap_servers=c.bootstrap_servers, retry_backoff_ms=100)
        try:
            assert consumer.end_offsets([tp]) == {tp: 5}     # metadata: the old leader
            old = state(c, "t").leader
            c.kill(old, "KILL")
            # A short timeout still raises (what is retriable stays an error at the end).
            with pytest.raises(errors.KafkaError) as short:
                consumer.end_offsets([tp], timeout_ms=50)
            assert short.value.retriable
            assert consumer.end_offsets([tp], timeout_ms=30_000) == {tp: 5}
            assert consumer.beginning_offsets([tp], timeout_ms=30_000) == {tp: 0}
            assert state(c, "t").leader not in (old, -1)
        finally:
            consumer.close()
