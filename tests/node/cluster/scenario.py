"""Helpers for the real-process replication scenarios: a supervised cluster per test,
the coordinator's view of a partition, each broker's replica-state board, reading a
partition back, and a producer that records what was acknowledged."""
from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field

from node.wire import zkdata
from node.client import Admin, Consumer, Producer, TopicPartition
from node.cluster import Cluster
from shm.board import BoardNotFoundError, BoardReader

# Fast failure detection for tests (zk_lite's tick is 500 ms, the minimum session 1 s).
FAST = {"zookeeper.session.timeout.ms": "2000", "replica.lag.time.max.ms": "2000",
        "auto.leader.rebalance.enable": "false"}


@contextlib.contextmanager
def cluster(tmp_path, cluster_id: str, brokers: int = 3, **config):
    settings = dict(FAST)
    settings.update({k.replace("_", "."): str(v) for k, v in config.items()})
    c = Cluster.up(tmp_path / "cluster", brokers, config=settings, cluster_id=cluster_id)
    try:
        yield c
    finally:
        c.down()


def admin(c: Cluster) -> Admin:
    return Admin(bootstrap_servers=c.bootstrap_servers)


def state(c: Cluster, topic: str, partition: int = 0) -> zkdata.PartitionState | None:
    """The partition-state znode as the coordinator holds it now."""
    return c.partition_state(topic, partition)


def wait_state(c: Cluster, topic: str, predicate, what: str, partition: int = 0,
               timeout_s: float = 30.0) -> zkdata.PartitionState:
    return c.wait_for(lambda: (lambda s: s if s is not None and predicate(s) else None)(
        state(c, topic, partition)), timeout_s, what)


def board(c: Cluster, broker_id: int, topic: str, partition: int = 0):
    """What broker ``broker_id`` publishes for this replica (role, epoch, LEO, HW, ISR)."""
    try:
        reader = BoardReader.open(c.cluster_id, broker_id)
    except BoardNotFoundError:
        return None
    try:
        return reader.get(topic, partition)
    finally:
        reader.close()


def read_partition(bootstrap: str, topic: str, partition: int = 0, timeout_s: float = 30.0
                   ) -> dict[int, bytes]:
    """offset -> value of everything below the current high watermark."""
    tp = TopicPartition(topic, partition)
    consumer = Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                        fetch_max_wait_ms=100)
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        out: dict[int, bytes] = {}
        deadline = time.monotonic() + timeout_s
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, f"read {len(out)} of {end} records in time"
            for record in consumer.poll(timeout_ms=200):
                assert record.offset not in out, f"offset {record.offset} delivered twice"
                assert record.offset < end
                out[record.offset] = record.value
        return out
    finally:
        consumer.close()


@dataclass
class AckLog:
    """What a producer got acknowledged: value -> (partition, offset), and when."""
    acked: dict = field(default_factory=dict)
    ack_times: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self) -> int:
        with self.lock:
            return len(self.acked)


class BackgroundProducer:
    """Sends v0, v1, ... one at a time (each waits for its answer) from a thread."""

    def __init__(self, bootstrap: str, topic: str, *, acks="all", partition: int | None = 0,
                 request_timeout_ms: int = 5000, delivery_timeout_ms: int = 60_000):
        self.topic, self.partition = topic, partition
        self.producer = Producer(bootstrap_servers=bootstrap, acks=acks,
                                 request_timeout_ms=request_timeout_ms,
                                 delivery_timeout_ms=delivery_timeout_ms,
                                 retry_backoff_ms=50)
        self.log = AckLog()
        self.stop_event = threading.Event()
        self.sent = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "BackgroundProducer":
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.stop_event.is_set():
            value = f"v{self.sent}".encode()
            self.sent += 1
            try:
                md = self.producer.send(self.topic, value, partition=self.partition).get(
                    timeout=90)
            except Exception as e:  # an unacknowledged write: allowed to be lost
                self.log.errors.append((value, repr(e)))
                continue
            with self.log.lock:
                self.log.acked[value] = (md.partition, md.offset)
                self.log.ack_times.append(time.monotonic())

    def wait_acks(self, n: int, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self.log.count() < n:
            assert time.monotonic() < deadline, \
                f"only {self.log.count()} of {n} acks; errors {self.log.errors[-3:]}"
            time.sleep(0.02)

    def stop(self) -> AckLog:
        self.stop_event.set()
        self.thread.join(timeout=120)
        self.producer.close()
        return self.log


def check_no_acked_record_lost(bootstrap: str, topic: str, log: AckLog) -> dict[int, bytes]:
    """Every acknowledged value is at its offset; acknowledgement order is offset order."""
    by_partition: dict[int, dict[int, bytes]] = {}
    for value, (partition, offset) in log.acked.items():
        if partition not in by_partition:
            by_partition[partition] = read_partition(bootstrap, topic, partition)
        got = by_partition[partition].get(offset)
        assert got == value, f"acknowledged {value!r} at {topic}-{partition}@{offset}, read {got!r}"
    for partition in by_partition:
        offsets = [o for v, (p, o) in sorted(log.acked.items(), key=lambda kv: int(kv[0][1:]))
                   if p == partition]
        assert offsets == sorted(offsets), "acknowledged in offset order"
    return by_partition.get(0, {})


def log_text(c: Cluster, broker_id: int) -> str:
    return (c.dir / f"broker-{broker_id}.log").read_text(errors="replace")
