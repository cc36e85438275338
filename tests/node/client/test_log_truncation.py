"""KIP-320 on real processes: a consumer that never saw the newer leader epoch is not
misled by what a deposed leader served it.

Replicas [L, F]; F holds m0, m1, then is paused until L drops it from the ISR; L alone
takes a0..a7 (offsets 2..9, committed by the ISR [L]) and two consumers read all ten.
L dies; the out-of-sync F is elected (unclean.leader.election.enable) and takes b0..b9
at offsets 2..11. The consumers, positioned at 10, learn of the new leader only when
they poll again. Without validation they would fetch from offset 10 on F and silently
skip b0..b7; with it F tells them that their epoch ends at 2 on its log.
"""
from __future__ import annotations

import logging
import time

import pytest

from node.client import Consumer, LogTruncationException, Producer, TopicPartition
from tests.node.cluster.scenario import admin, board, cluster, wait_state

pytestmark = [pytest.mark.process, pytest.mark.slow]

TP = TopicPartition("t", 0)


def read(consumer: Consumer, n: int, timeout_s: float = 30.0) -> list[tuple[int, bytes]]:
    got: list = []
    deadline = time.monotonic() + timeout_s
    while len(got) < n:
        assert time.monotonic() < deadline, f"read {got} of {n} in time"
        got += [(r.offset, r.value) for r in consumer.poll(200)]
    return got


def test_a_consumer_that_never_saw_the_newer_epoch_is_not_misled(tmp_path, cluster_id,
                                                                   caplog):
    with cluster(tmp_path, cluster_id, zookeeper_session_timeout_ms=6000,
                 replica_lag_time_max_ms=1000) as c:
        controller = c.controller_id()
        L, F = [b for b in c.broker_ids if b != controller][:2]
        a = admin(c)
        a.create_topic("t", 1, 2, replica_assignment={0: [L, F]},
                       config={"unclean.leader.election.enable": "true",
                               "min.insync.replicas": "1"})
        wait_state(c, "t", lambda s: s.leader == L and len(s.isr) == 2, "L leads, ISR [L, F]")
        producer = Producer(bootstrap_servers=c.bootstrap_servers, acks="all")
        for value in (b"m0", b"m1"):
            producer.send("t", value, partition=0).get(timeout=30)
        c.wait_for(lambda: (b := board(c, F, "t")) and b.log_end_offset == 2, 10,
                   "F to hold m0, m1")
        resetting = Consumer(c.bootstrap_servers, auto_offset_reset="earliest",
                             fetch_max_wait_ms=100, retry_backoff_ms=50)
        strict = Consumer(c.bootstrap_servers, auto_offset_reset="none",
                          fetch_max_wait_ms=100, retry_backoff_ms=50)
        try:
            c.kill(F, "STOP")
            try:
                wait_state(c, "t", lambda s: s.isr == (L,), "the ISR shrunk to L")
                for i in range(8):
                    assert producer.send("t", b"a%d" % i, partition=0).get(timeout=30).offset \
                        == 2 + i
                for consumer in (resetting, strict):
                    consumer.assign([TP])
                    consumer.seek(TP, 0)
                    assert [o for o, _ in read(consumer, 10)] == list(range(10))
                    assert consumer.position(TP) == 10
                c.kill(L, "KILL")
            finally:
                c.kill(F, "CONT")
            wait_state(c, "t", lambda s: s.leader == F, "the unclean election of F")
            for i in range(10):
                assert producer.send("t", b"b%d" % i, partition=0).get(timeout=30).offset \
                    == 2 + i
            with caplog.at_level(logging.INFO, logger="minikafka.consumer"):
                got = read(resetting, 10)
            assert got == [(2 + i, b"b%d" % i) for i in range(10)], \
                "truncated to the divergence (2), not skipping F's records from 2 to 9"
            assert "Truncation detected for partition t-0 at offset 10, resetting offset " \
                   "to the first offset known to diverge 2" in caplog.text
            with pytest.raises(LogTruncationException) as raised:
                read(strict, 1)
            assert raised.value.divergent_offsets == {TP: 2}
            assert raised.value.offset_out_of_range_partitions == {TP: 10}
            strict.seek(TP, 2)
            assert read(strict, 10) == got
        finally:
            resetting.close()
            strict.close()
            producer.close()
            a.close()
