"""Kafka's transaction ordering gap on a real 3-broker cluster, shown and closed
(``bench.chaos.late_write``; KIP-890's motivation, Jepsen's Bufstream report).

A native transactional producer writes ``t1-a`` to a partition and aborts. A produce of
that transaction delayed in the network (hand-built: the producer's id, epoch and next
sequence) reaches the leader afterwards. Then a plain producer writes ``after``, and the
transactional producer's next transaction writes ``t2-b`` to the partition and commits.

- Kafka's profile (``kafka-txn``: no partition verification, no epoch bump): the late
  write is appended and opens a transaction nobody will end: the last stable offset
  hangs at it while the high watermark moves on (a read_committed consumer stops there).
  ``t2-b`` has the late write's sequence, so the leader takes it for a retry of the late
  write and acknowledges it with the late write's offset without appending it; the
  commit's marker then ends the hanging transaction: the aborted transaction's late write
  is read as committed (aborted read) and the acknowledged ``t2-b`` is nowhere (lost).
- The defaults (KIP-890 parts 1 and 2): the late write is refused (INVALID_PRODUCER_EPOCH:
  the abort gave the producer a new epoch); part 1 alone refuses it too
  (INVALID_TXN_STATE: the partition is in no ongoing transaction of the producer). The
  LSO never hangs; a read_committed consumer reads ``after`` and ``t2-b`` only.
"""
from __future__ import annotations

import random
import threading
import time
import uuid
from contextlib import closing

import pytest

from bench.chaos import late_write as lw
from bench.chaos.options import PROFILES, TXN_DEFENCES
from node.client import Admin, Consumer, Producer, TopicPartition
from node.wire.errors import ErrorCode
from tests.node.kafka.clients import create_topic, running_cluster
from tests.waiting import poll_until

pytestmark = [pytest.mark.process, pytest.mark.slow]
WAIT_S = 60.0
BASE = {"transaction.state.log.num.partitions": "3", "min.insync.replicas": "2"}
KAFKA = {k: PROFILES["kafka-txn"]["broker"][k] for k in TXN_DEFENCES}


def _read_committed(bootstrap: str, topic: str, end: int) -> tuple[list[bytes], int]:
    """(values, position) of a native read_committed consumer polled until its position
    reaches ``end`` (or WAIT_S)."""
    tp = TopicPartition(topic, 0)
    consumer = Consumer(bootstrap, isolation_level="read_committed",
                        auto_offset_reset="earliest")
    values: list[bytes] = []
    try:
        consumer.assign([tp])

        def done() -> bool:
            values.extend(r.value for r in consumer.poll(200))
            return consumer.position(tp) >= end
        poll_until(done, WAIT_S, f"read_committed up to {end}")
        return values, consumer.position(tp)
    finally:
        consumer.close()


def _read_when(channel, topic: str, condition, what: str) -> lw.Read:
    """The first read_committed read of the partition that meets ``condition``."""
    def attempt():
        r = lw.read_batches(channel, topic, 0, lw.READ_COMMITTED)
        return r if condition(r) else None
    return poll_until(attempt, WAIT_S, what)


def _story(cluster) -> dict:
    topic, tid = f"gap-{uuid.uuid4().hex[:6]}", f"tx-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic, 1, 3)
    seen: dict = {}
    with Admin(cluster.bootstrap_servers) as admin, \
            Producer(cluster.bootstrap_servers, transactional_id=tid) as p, \
            Producer(cluster.bootstrap_servers, acks="all") as plain:
        p.init_transactions(timeout_s=WAIT_S)
        p.begin_transaction()
        p.send(topic, b"t1-a", partition=0).get(timeout=WAIT_S)
        p.abort_transaction(timeout_s=WAIT_S)
        channel = lw.open_channel(admin, topic, 0)
        try:
            producer = lw.last_transactional_batch(channel, topic, 0)
            assert producer is not None and producer.last_sequence == 0, producer
            poll_until(lambda: lw.transaction_ended(channel, topic, 0, producer.producer_id),
                       WAIT_S, "the abort marker on the partition")
            # The marker is on the partition before the coordinator has written
            # CompleteAbort; a verified late write meanwhile is refused as retriable
            # (CONCURRENT_TRANSACTIONS, as NOT_ENOUGH_REPLICAS: CI, once), and a refused
            # write adds nothing, so it is sent again until the answer is final.
            def late_write():
                outcome = lw.send_late_write(channel, topic, 0, producer, [b"t1-late"],
                                             transactional_id=tid)
                return None if "CONCURRENT_TRANSACTIONS" in outcome.message else outcome
            seen["late"] = poll_until(late_write, WAIT_S, "a final answer to the late write")
            after = plain.send(topic, b"after", partition=0).get(timeout=WAIT_S).offset
            seen["between"] = _read_when(channel, topic, lambda r: r.high_watermark > after,
                                         "the HW past 'after'")
            p.begin_transaction()
            seen["t2-b"] = p.send(topic, b"t2-b", partition=0).get(timeout=WAIT_S).offset
            p.commit_transaction(timeout_s=WAIT_S)
            seen["end"] = _read_when(
                channel, topic, lambda r: r.last_stable_offset == r.high_watermark > after + 1,
                "the LSO at the HW after the commit")
            seen["log"] = lw.read_batches(channel, topic, 0).values()
        finally:
            channel.close()
    seen["consumer"] = _read_committed(cluster.bootstrap_servers, topic,
                                       seen["end"].high_watermark)
    seen["after"] = after
    return seen


def _chaos_fault(cluster) -> tuple[str, list[bytes]]:
    """The chaos fault ``late-write`` (``late_write.inject``) after one aborted
    transaction: what it says it did, and the partition's values then."""
    topic, tid = f"fault-{uuid.uuid4().hex[:6]}", f"tx-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic, 1, 3)
    with Admin(cluster.bootstrap_servers) as admin, \
            Producer(cluster.bootstrap_servers, transactional_id=tid) as p:
        p.init_transactions(timeout_s=WAIT_S)
        p.begin_transaction()
        p.send(topic, b"i-1", partition=0).get(timeout=WAIT_S)
        p.abort_transaction(timeout_s=WAIT_S)
        _, detail = lw.inject(admin, topic, [0], random.Random(0), time.monotonic() + WAIT_S,
                              threading.Event(), time.monotonic)
        with closing(lw.open_channel(admin, topic, 0)) as channel:
            return detail, lw.read_batches(channel, topic, 0).values()


def test_without_kip890_a_late_write_hangs_the_lso_then_is_read_as_committed(tmp_path):
    with running_cluster(tmp_path / "kafka", config={**BASE, **KAFKA}) as cluster:
        seen = _story(cluster)
        fault, fault_log = _chaos_fault(cluster)
    assert fault.startswith("late write appended"), fault     # the chaos fault lands
    assert fault_log == [b"i-1", b"i-1"]
    late = seen["late"]
    assert late.accepted, late                  # nothing ties it to its transaction
    between = seen["between"]
    assert between.last_stable_offset == late.offset < seen["after"] < \
        between.high_watermark                  # hanging: read_committed stops at it
    assert between.committed() == []            # t1-a aborted; 'after' beyond the LSO
    assert seen["t2-b"] == late.offset          # answered as a retry of the late write
    assert seen["log"] == [b"t1-a", b"t1-late", b"after"]
    values, position = seen["consumer"]
    assert position == seen["end"].high_watermark
    assert values == [b"t1-late", b"after"]     # aborted read; t2-b acknowledged, lost
    assert seen["end"].committed() == values


@pytest.mark.parametrize("defences, refusal", [
    ({}, ErrorCode.INVALID_PRODUCER_EPOCH),       # the defaults: part 2's new epoch fences it
    ({"transaction.version": "0"}, ErrorCode.INVALID_TXN_STATE),   # part 1 alone: not added
], ids=["kip890", "verification-only"])
def test_with_kip890_the_late_write_is_refused_and_nothing_is_seen(tmp_path, defences,
                                                                  refusal):
    with running_cluster(tmp_path / "safe", config={**BASE, **defences}) as cluster:
        seen = _story(cluster)
        fault, fault_log = _chaos_fault(cluster)
    assert fault.startswith(f"late write refused {refusal.name}"), fault
    assert fault_log == [b"i-1"]
    late = seen["late"]
    assert late.error == refusal, late
    between = seen["between"]
    assert between.last_stable_offset == between.high_watermark   # nothing hangs
    assert between.committed() == [b"after"]
    assert b"t1-late" not in seen["log"]
    values, position = seen["consumer"]
    assert position == seen["end"].high_watermark
    assert values == [b"after", b"t2-b"]
    assert seen["end"].committed() == values
