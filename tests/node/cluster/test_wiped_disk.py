"""A wiped disk must not wipe the partition (issue 10, item 7), on real processes.

Every broker is SIGKILLed; the leader's partition directory and checkpoints are deleted;
it restarts first and becomes the controller. In Kafka's ZooKeeper mode it elects
itself from the stale ISR with an empty log and the other replicas truncate to nothing.
Here its registration names the replica whose data vanished, the controller does not
elect it (the partition waits, offline, with its ISR kept), and when a replica with the
data returns it leads; the wiped one catches up from it. Nothing acknowledged is lost."""
from __future__ import annotations

import shutil

import pytest

from node.client import Admin, Producer
from node.cluster import Cluster
from tests.node.cluster.scenario import read_partition

pytestmark = [pytest.mark.process, pytest.mark.slow]

CONFIG = {"zookeeper.session.timeout.ms": "3000", "auto.leader.rebalance.enable": "false",
          "replica.lag.time.max.ms": "5000"}
RECORDS = 500


def test_a_replica_whose_data_vanished_is_not_elected_from_a_stale_isr(tmp_path,
                                                                         cluster_id):
    c = Cluster.up(tmp_path / "c", 3, config=CONFIG, cluster_id=cluster_id)
    try:
        with Admin(bootstrap_servers=c.bootstrap_servers) as admin:
            admin.create_topic("t", replica_assignment={0: [0, 1, 2]},
                               config={"min.insync.replicas": "2"})
        with Producer(bootstrap_servers=c.bootstrap_servers, acks="all", linger_ms=0) as p:
            futures = [p.send("t", b"value-%04d" % i, partition=0) for i in range(RECORDS)]
            assert [f.get(timeout=30).offset for f in futures] == list(range(RECORDS))
        before = c.partition_state("t", 0)
        assert before.leader == 0 and set(before.isr) == {0, 1, 2}
        for b in (0, 1, 2):
            c.kill(b, "KILL")
        logs = c.broker_dir(0) / "logs"
        shutil.rmtree(logs / "t-0")
        for checkpoint in logs.glob("*checkpoint*"):
            checkpoint.unlink()

        c.start(0)
        # Broker 0 is the only one up (and the controller): t-0 stays offline rather
        # than led by an empty log, and its ISR still names the replicas with the data.
        c.wait_for(lambda: c.partition_state("t", 0).leader == -1, 30, "t-0 offline")
        assert set(c.partition_state("t", 0).isr) >= {1, 2}
        c.start(1)
        c.start(2)
        c.wait_for(lambda: c.partition_state("t", 0).leader in (1, 2), 30, "a new leader")
        c.wait_for(lambda: 0 in c.partition_state("t", 0).isr, 60,
                   "the wiped replica caught up and back in the ISR")
        got = read_partition(c.bootstrap_servers, "t", 0)
        assert got == {i: b"value-%04d" % i for i in range(RECORDS)}
        log = c.process(0).log_path.read_text(errors="replace")
        assert "was in the ISR of 1 partitions it lost committed data of" in log, log[-3000:]
    finally:
        c.down(grace_s=10)
