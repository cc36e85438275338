"""A corrupt batch in a sealed segment below the recovery point (issue 10, item 3), on
real processes: the broker restarts over it (recovery walks only from the last index
entry), and the consumer delivers every record before it, then raises a clear error
naming the partition and the offset, again on every poll, until the caller seeks past
it; reading then goes on."""
from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest

from node.client import Admin, Consumer, Producer, TopicPartition
from node.cluster import Cluster
from node.wire.errors import CorruptMessageError
from node.net import Channel
from node.wire import protocol
from node.wire.errors import ErrorCode
from shm import batch
from tests.node.cluster.scenario import read_partition

pytestmark = [pytest.mark.process, pytest.mark.slow]

RECORDS = 1000
BAD = 5           # the offset (and batch: one record per batch) that is damaged
CONFIG = {"log.segment.bytes": "65536", "log.index.interval.bytes": "512",
          "auto.leader.rebalance.enable": "false"}
TP = TopicPartition("t", 0)


def damage(segment: Path, how: str) -> None:
    """Damage the batch at offset BAD in place (a running broker's map sees it: the
    same page cache, as bit rot under a live broker would be)."""
    data = segment.read_bytes()
    position = 0
    for _ in range(BAD):
        position += batch.read_header(data, position).size_bytes
    header = batch.read_header(data, position)
    assert header.base_offset == BAD
    with open(segment, "r+b") as f:
        if how == "length":      # batch_length overwritten with a larger, plausible value
            f.seek(position + 8)
            f.write(struct.pack("<i", header.batch_length + 2000))
        else:                    # one flipped value byte
            at = position + header.size_bytes - 2
            f.seek(at)
            f.write(bytes([data[at] ^ 0xFF]))


def poll_until_error(consumer: Consumer, timeout_s: float = 20.0):
    offsets = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            offsets += [r.offset for r in consumer.poll(200)]
        except CorruptMessageError as e:
            return offsets, e
    raise AssertionError(f"no error within {timeout_s} s; got offsets {offsets[:10]}...")


@pytest.mark.parametrize("how", ["length", "value"])
def test_consumer_delivers_what_precedes_a_corrupt_batch_then_names_it(
        tmp_path, cluster_id, how):
    # The scrubber would find the damage too; with one replica it only logs (nothing
    # can take over), so what this test sees is the consumer's side.
    c = Cluster.up(tmp_path / "c", 1, config=CONFIG, cluster_id=cluster_id)
    try:
        with Admin(bootstrap_servers=c.bootstrap_servers) as admin:
            admin.create_topic("t", 1, 1)
        producer = Producer(bootstrap_servers=c.bootstrap_servers, acks=1, linger_ms=0)
        try:
            for i in range(RECORDS):          # one batch per record
                producer.send("t", b"value-%04d" % i, partition=0).get(timeout=30)
        finally:
            producer.close()
        c.stop(0, 15)
        segments = sorted(c.broker_dir(0).rglob("t-0/*.log"))
        assert len(segments) >= 2, segments     # the damaged one is sealed
        damage(segments[0], how)
        c.start(0)

        consumer = Consumer(bootstrap_servers=c.bootstrap_servers,
                            auto_offset_reset="earliest")
        try:
            consumer.assign([TP])
            offsets, e = poll_until_error(consumer)
            assert offsets == list(range(BAD)), offsets
            assert f"t-0 at offset {BAD}" in str(e) and "seek past it" in str(e)
            with pytest.raises(CorruptMessageError, match=f"t-0 at offset {BAD}"):
                consumer.poll(200)                 # again, until the caller seeks
            consumer.seek(TP, BAD + 1)
            rest = []
            deadline = time.monotonic() + 30
            while len(rest) < RECORDS - BAD - 1 and time.monotonic() < deadline:
                rest += [(r.offset, r.value) for r in consumer.poll(200)]
            assert rest[0] == (BAD + 1, b"value-%04d" % (BAD + 1))
            assert [o for o, _ in rest] == list(range(BAD + 1, RECORDS))
        finally:
            consumer.close()
    finally:
        c.down(grace_s=10)


def test_a_damaged_segment_found_by_the_scrubber_moves_the_leadership(tmp_path, cluster_id):
    """Three replicas; bit rot in the leader's sealed segment while it runs. Its
    scrubber finds the batch whose CRC no longer matches, logs it once and takes the
    replica offline; the controller elects an in-sync replica (its copy came over the
    network) and a consumer reads every record, none lost, none corrupt."""
    config = dict(CONFIG, **{"log.scrub.bytes.per.second": "10000000"})
    c = Cluster.up(tmp_path / "c", 3, config=config, cluster_id=cluster_id)
    try:
        with Admin(bootstrap_servers=c.bootstrap_servers) as admin:
            admin.create_topic("t", replica_assignment={0: [0, 1, 2]},
                               config={"min.insync.replicas": "2"})
        producer = Producer(bootstrap_servers=c.bootstrap_servers, acks="all", linger_ms=0)
        try:
            for i in range(RECORDS):
                producer.send("t", b"value-%04d" % i, partition=0).get(timeout=30)
        finally:
            producer.close()
        assert c.partition_state("t", 0).leader == 0
        damage(sorted(c.broker_dir(0).rglob("t-0/*.log"))[0], "value")
        c.wait_for(lambda: c.partition_state("t", 0).leader in (1, 2) and
                   0 not in c.partition_state("t", 0).isr, 30, "the leadership moved")
        # Broker 0's replica is offline: asked directly, it says so (not "not leader").
        channel = Channel(f"tcp://{c.broker_address(0)}")
        try:
            answer = channel.request(protocol.ApiKey.FETCH, {
                "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                "partitions": [["t", 0, 0, -1, 1 << 20]]}, timeout_ms=10_000).body
        finally:
            channel.close()
        assert answer["partitions"][0][2] == ErrorCode.KAFKA_STORAGE_ERROR
        got = read_partition(c.bootstrap_servers, "t", 0, timeout_s=60)
        assert got == {i: b"value-%04d" % i for i in range(RECORDS)}
        log = c.process(0).log_path.read_text(errors="replace")
        assert log.count("t-0: corrupt data in the log") == 1, log[-3000:]
        assert "found by the scrubber" in log
        assert c.process(0).pid() is not None        # the broker serves on
    finally:
        c.down(grace_s=10)
