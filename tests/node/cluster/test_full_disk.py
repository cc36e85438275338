"""A full disk (issue 10, item 2), made real: a small tmpfs mounted over a broker's log
directory (needs root; skipped otherwise). As in Kafka (KIP-112): the failing write is
answered with the retriable KAFKA_STORAGE_ERROR, the log directory goes offline and is
logged once, the controller moves the leaderships to in-sync replicas elsewhere, and a
broker whose every log directory failed stops. Nothing acknowledged is lost."""
from __future__ import annotations

import contextlib
import os
import subprocess
import time
from pathlib import Path

import pytest

from node.client import Admin, Producer
from node.cluster import Cluster
from node.net import Channel
from node.wire import protocol
from node.wire import zkdata
from node.wire.errors import ErrorCode, KafkaError
from tests.node.cluster.scenario import read_partition

pytestmark = [pytest.mark.process, pytest.mark.slow]

CONFIG = {"log.segment.bytes": "65536", "auto.leader.rebalance.enable": "false",
          "replica.lag.time.max.ms": "5000"}
VALUE = b"v" * 1000


@contextlib.contextmanager
def tmpfs(path: Path, size: str):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def produce_until(c: Cluster, topic: str, partition: int, acked: list, errors: list,
                  until, timeout_s: float = 60.0) -> None:
    """acks=all sends without retries, one at a time, until ``until()``: what was
    acknowledged goes to ``acked`` (offset, value), the error names to ``errors``."""
    producer = Producer(bootstrap_servers=c.bootstrap_servers, acks="all", retries=0,
                        linger_ms=0)
    try:
        deadline = time.monotonic() + timeout_s
        n = 0
        while not until():
            assert time.monotonic() < deadline, f"not done within {timeout_s} s: {errors[-5:]}"
            n += 1
            value = VALUE + b"%06d" % n
            try:
                meta = producer.send(topic, value, partition=partition).get(timeout=15)
                acked.append((meta.offset, value))
            except KafkaError as e:
                errors.append(type(e).__name__)
                time.sleep(0.05)
    finally:
        producer.close()


def test_a_full_single_log_dir_stops_the_broker_and_its_leaderships_move(tmp_path,
                                                                         cluster_id):
    c = Cluster.up(tmp_path / "c", 3, config=CONFIG, cluster_id=cluster_id)
    try:
        c.stop(0, 15)
        with tmpfs(c.broker_dir(0) / "logs", "256k"):
            c.start(0)
            with Admin(bootstrap_servers=c.bootstrap_servers) as admin:
                admin.create_topic("t", replica_assignment={0: [0, 1, 2]},
                                   config={"min.insync.replicas": "2"})
            broker0 = c.process(0)
            acked, errors = [], []
            moved = lambda: broker0.pid() is None and len(acked) >= 400  # noqa: E731
            produce_until(c, "t", 0, acked, errors, moved)
            assert broker0.popen is not None and broker0.popen.wait(10) == 1
            state = c.partition_state("t", 0)
            assert state.leader in (1, 2) and 0 not in state.isr, state
            assert "UnknownServerError" not in errors, errors
            got = read_partition(c.bootstrap_servers, "t", 0)
            assert all(got.get(o) == v for o, v in acked), "an acknowledged write is gone"
            log = broker0.log_path.read_text(errors="replace")
            assert log.count("Stopping serving replicas in dir") == 1, log[-3000:]
            assert "Shutdown broker because all log dirs in" in log
            assert sum(" ERROR " in line for line in log.splitlines()) < 10, log[-3000:]
            c.process(0).forget()
    finally:
        c.down(grace_s=10)


def test_a_full_second_log_dir_moves_only_its_partitions(tmp_path, cluster_id):
    d = tmp_path / "c"
    spare = d / "broker-0" / "logs2"
    c = Cluster.up(d, 3, config=CONFIG, cluster_id=cluster_id, broker_config={
        0: {"log.dirs": f"{d / 'broker-0' / 'logs'},{spare}"}})
    try:
        c.stop(0, 15)
        with tmpfs(spare, "256k"):
            c.start(0)
            with Admin(bootstrap_servers=c.bootstrap_servers) as admin:
                admin.create_topic("t", replica_assignment={p: [0, 1, 2] for p in range(4)},
                                   config={"min.insync.replicas": "2"})
            on_spare = sorted(int(p.name.rsplit("-", 1)[1]) for p in spare.glob("t-*"))
            healthy = sorted(set(range(4)) - set(on_spare))
            assert on_spare and healthy, (on_spare, healthy)
            victim = on_spare[0]
            acked, errors = [], []

            def moved():
                state = c.partition_state("t", victim)
                return len(acked) >= 400 and state.leader != 0 and 0 not in state.isr
            produce_until(c, "t", victim, acked, errors, moved)
            assert "UnknownServerError" not in errors, errors
            assert c.process(0).pid() is not None, "the broker stopped with a dir left"
            for p in on_spare:          # every partition of the failed dir moved
                c.wait_for(lambda p=p: c.partition_state("t", p).leader != 0 and
                           0 not in c.partition_state("t", p).isr, 30, f"t-{p} moved")
            for p in healthy:           # the healthy dir's partitions stay with broker 0
                assert c.partition_state("t", p).leader == 0
            with Producer(bootstrap_servers=c.bootstrap_servers, acks="all") as producer:
                assert producer.send("t", b"x", partition=healthy[0]).get(timeout=30)
            channel = Channel(f"tcp://{c.broker_address(0)}")
            try:
                answer = channel.request(protocol.ApiKey.FETCH, {
                    "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                    "partitions": [["t", victim, 0, -1, 1 << 20]]}, timeout_ms=10_000).body
            finally:
                channel.close()
            assert answer["partitions"][0][2] == ErrorCode.KAFKA_STORAGE_ERROR
            c.wait_for(lambda: c.zk().get_children(zkdata.LOG_DIR_EVENT_NOTIFICATION) == [], 30,
                       "the controller consumed the log dir event")
            got = read_partition(c.bootstrap_servers, "t", victim)
            assert all(got.get(o) == v for o, v in acked), "an acknowledged write is gone"
            log = c.process(0).log_path.read_text(errors="replace")
            assert log.count(f"Stopping serving replicas in dir {spare}") == 1, log[-3000:]
            c.stop(0, 15)       # before the tmpfs goes
    finally:
        c.down(grace_s=10)
