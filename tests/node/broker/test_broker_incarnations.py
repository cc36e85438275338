"""A broker's incarnations and the data it lost, on real processes (issue 23): requests
meant for a previous incarnation are refused (KIP-380's broker epoch), a replica that
lost committed data refuses to lead and remembers the loss across restarts until it is
back in an ISR, and an unclean recovery may still make it leader."""
from __future__ import annotations

import os
import shutil
import signal

import pytest
from kazoo.client import KazooClient

from node.broker.lost_replicas import LOST_REPLICA_CHECKPOINT
from node.wire.errors import ErrorCode
from node.wire import protocol
from node.wire import zkdata
from tests.node.broker.harness import Cluster, wait_for

pytestmark = [pytest.mark.process, pytest.mark.slow]
TOPIC = "inc"


def registration(cluster: Cluster, broker_id: int) -> tuple[zkdata.BrokerInfo, int]:
    data, stat = cluster.zk.get(zkdata.broker_path(broker_id))
    return zkdata.decode_broker(broker_id, data), stat.czxid


def leader_and_isr(cluster: Cluster, broker_id: int, leader: int, isr: list[int],
                   broker_epoch: int, recovering: bool = False,
                   timeout_ms: int = 5_000) -> dict:
    """Elect as a controller would (state znode first), but send the request to one
    broker only, for the broker epoch given."""
    old = cluster.partition_state(TOPIC, 0)
    state = zkdata.PartitionState(leader, old.leader_epoch + 1, tuple(isr),
                                  cluster.controller_epoch)
    cluster.zk.set(zkdata.partition_state_path(TOPIC, 0), zkdata.encode_partition_state(state),
                   version=old.zk_version)
    new = cluster.partition_state(TOPIC, 0)
    entry = [TOPIC, 0, leader, new.leader_epoch, list(isr), new.zk_version, [0, 1], False]
    if recovering:
        entry += [[], 1]
    body = {"controller_id": cluster.controller_id, "controller_epoch": cluster.controller_epoch,
            "broker_epoch": broker_epoch, "partitions": [entry],
            "live_leaders": [[b.broker_id, "127.0.0.1", b.port]
                             for b in cluster.brokers.values() if b.alive]}
    return cluster.request(broker_id, protocol.ApiKey.LEADER_AND_ISR, body,
                           timeout_ms=timeout_ms).body


def test_a_request_for_the_previous_incarnation_is_refused(cluster):
    """The race of issue 23's composed run: broker 0 restarts before its old session
    expired, so a controller still holds the old registration and sends for it. The new
    process answers (once registered) STALE_BROKER_EPOCH instead of leading."""
    for b in (0, 1):
        cluster.add_broker(b)
    cluster.create_topic(TOPIC, {0: [1, 0]})
    _, old_epoch = registration(cluster, 0)
    cluster.brokers[0].kill()
    cluster.brokers[0].start()                  # its old session still holds /brokers/ids/0
    answer = leader_and_isr(cluster, 0, 0, [0, 1], old_epoch, timeout_ms=30_000)
    assert answer["error"] == ErrorCode.STALE_BROKER_EPOCH, answer
    assert "STALE_BROKER_EPOCH" in cluster.brokers[0].log()
    info, new_epoch = registration(cluster, 0)
    assert new_epoch != old_epoch
    assert not info.clean_shutdown               # SIGKILL: it says so (KIP-966)
    answer = leader_and_isr(cluster, 0, 0, [0, 1], new_epoch)
    assert answer["partitions"] == [[TOPIC, 0, ErrorCode.NONE]], answer


def test_a_replica_that_lost_data_refuses_to_lead_and_remembers_until_back_in_the_isr(cluster):
    for b in (0, 1):
        cluster.add_broker(b, replica_high_watermark_checkpoint_interval_ms=100)
    cluster.create_topic(TOPIC, {0: [0, 1]})
    for i in range(5):
        assert cluster.produce(0, TOPIC, 0, [b"v%d" % i], acks=-1)[2] == ErrorCode.NONE
    follower = cluster.brokers[1]
    checkpoint = follower.dir / "logs" / "replication-offset-checkpoint"
    wait_for(lambda: checkpoint.exists() and f"{TOPIC} 0 5" in checkpoint.read_text(),
             "the follower checkpointed HW 5")
    # Its disk is wiped while it is down (the log dir keeps only the checkpoints).
    follower.kill()
    shutil.rmtree(follower.dir / "logs" / f"{TOPIC}-0")
    follower.start(cluster.zk)
    info, epoch = registration(cluster, 1)
    assert info.lost_replicas == ((TOPIC, 0),)
    marker = follower.dir / "logs" / LOST_REPLICA_CHECKPOINT
    assert f"{TOPIC} 0 5" in marker.read_text()
    answer = leader_and_isr(cluster, 1, 1, [1], epoch)
    assert answer["partitions"] == [[TOPIC, 0, ErrorCode.INELIGIBLE_REPLICA]], answer
    # Restarted again, with its HW checkpoint rewritten from the short log (as a run
    # that took the leadership did in the chain): only the marker shows the loss.
    follower.kill()
    checkpoint.write_text(checkpoint.read_text().replace(f"{TOPIC} 0 5", f"{TOPIC} 0 0"))
    follower.start(cluster.zk)
    info, epoch = registration(cluster, 1)
    assert info.lost_replicas == ((TOPIC, 0),), "the finding did not survive a restart"
    # Back as a follower of 0; once the leader takes it into the ISR and the metadata
    # says so, the marker goes and the registration no longer names the partition.
    cluster.elect(TOPIC, 0, 0, [0])
    wait_for(lambda: 1 in cluster.partition_state(TOPIC, 0).isr, "the follower rejoins")
    cluster.send_update_metadata()
    wait_for(lambda: not registration(cluster, 1)[0].lost_replicas,
             "the registration no longer names the partition")
    assert f"{TOPIC} 0" not in marker.read_text()


def test_an_unclean_recovery_makes_a_replica_that_lost_data_lead(cluster):
    for b in (0, 1):
        cluster.add_broker(b)
    cluster.create_topic(TOPIC, {0: [0, 1]})
    assert cluster.produce(0, TOPIC, 0, [b"x"], acks=-1)[2] == ErrorCode.NONE
    follower = cluster.brokers[1]
    follower.kill()
    shutil.rmtree(follower.dir / "logs" / f"{TOPIC}-0")
    follower.start(cluster.zk)
    cluster.brokers[0].signal(signal.SIGSTOP)
    try:
        _, epoch = registration(cluster, 1)
        answer = leader_and_isr(cluster, 1, 1, [1], epoch, recovering=True)
        assert answer["partitions"] == [[TOPIC, 0, ErrorCode.NONE]], answer
        assert "elected by unclean recovery" in follower.log()
    finally:
        cluster.brokers[0].signal(signal.SIGCONT)


def test_a_broker_starting_while_the_coordinator_stops_answering_waits_for_it(cluster):
    """Seen in a composed chaos run: "start-up failed: coordinator did not answer create
    /brokers/ids/2 within 2 s", and the broker stayed down after the coordinator came
    back. A broker now waits for the coordinator during start-up, as Kafka's does, up
    to zookeeper.connection.timeout.ms."""
    broker = cluster.add_broker(0)
    broker.kill()
    broker.start()                      # waits for its old registration to expire
    wait_for(lambda: "waiting for it to expire" in broker.log(), "the wait for the old session")
    zk_pid = cluster.zk_server.pid
    os.killpg(zk_pid, signal.SIGSTOP)   # the coordinator stops answering mid start-up
    try:
        wait_for(lambda: "waiting for the coordinator to register" in broker.log(),
                 "the broker to wait for the coordinator", timeout_s=30)
        assert broker.alive
    finally:
        os.killpg(zk_pid, signal.SIGCONT)
    watcher = KazooClient(hosts=cluster.zk_server.hosts, timeout=10)
    watcher.start(timeout=15)
    try:
        wait_for(lambda: watcher.exists(zkdata.broker_path(0)) is not None and
                 watcher.exists(zkdata.broker_path(0)).ephemeralOwner != broker._old_owner,
                 "broker 0 registered after the coordinator came back", timeout_s=40)
    finally:
        watcher.stop()
        watcher.close()
    assert broker.alive, broker.log()
