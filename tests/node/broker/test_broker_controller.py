"""Brokers hosting the real controller (node.broker.controller_runner): admin CreateTopics,
controlled shutdown on SIGTERM, fail-over after SIGKILL."""
from __future__ import annotations

import time

import pytest

from node.broker import controller_runner  # noqa: F401
from node.broker.apis import admin  # noqa: F401 (what the brokers run)
from node.wire import errors
from node.wire import protocol
from node.wire import zkdata
from tests.node.broker.harness import Cluster, wait_for

pytestmark = [pytest.mark.process, pytest.mark.slow]
TOPIC = "ctl"


@pytest.fixture
def cluster(tmp_path, cluster_id):
    c = Cluster(tmp_path, cluster_id, test_controller=False)
    try:
        for i in range(3):
            c.add_broker(i, min_insync_replicas=2, replica_lag_time_max_ms=2000,
                         controlled_shutdown_enable="true",
                         controlled_shutdown_retry_backoff_ms=200,
                         controlled_shutdown_max_retries=2)
        wait_for(lambda: c.zk.exists(zkdata.CONTROLLER), "a controller")
        yield c
    finally:
        c.close()


def leaders(cluster: Cluster, via: int) -> dict[int, int] | None:
    body = cluster.request(via, protocol.ApiKey.METADATA, {"topics": [TOPIC]}).body
    [[_, error, partitions]] = body["topics"]
    if error or not partitions or any(p[2] < 0 for p in partitions):
        return None
    return {p[0]: p[2] for p in partitions}


def test_create_topic_produce_and_controlled_shutdown_of_a_leader(cluster):
    body = {"topics": [[TOPIC, 3, 3, None, {}]], "timeout_ms": 5000, "validate_only": False}
    assert cluster.request(1, protocol.ApiKey.CREATE_TOPICS, body).body["topics"] == \
        [[TOPIC, 0, None]]
    where = wait_for(lambda: leaders(cluster, 1), "leaders of the new topic")
    acked = {p: [] for p in where}
    for p, leader in where.items():
        for i in range(3):
            entry = cluster.produce(leader, TOPIC, p, [b"%d-%d" % (p, i)], acks=-1)
            assert entry[2] == 0
            acked[p].append(entry[3])
    victim = where[0]
    started = time.monotonic()
    assert cluster.brokers[victim].stop() == 0
    assert time.monotonic() - started < 10
    assert "controlled shutdown succeeded" in cluster.brokers[victim].log()
    survivor = next(b for b in cluster.brokers if b != victim)
    now = wait_for(lambda: (lambda m: m if m and victim not in m.values() else None)(
        leaders(cluster, survivor)), "leadership moved away")
    for p, leader in now.items():
        # A new leader's high watermark may trail its log for a moment (it learns the
        # followers' positions from their next fetches): every acknowledged record must
        # become readable, none other.
        def offsets(p=p, leader=leader):
            return [o for o, _ in cluster.fetch(leader, TOPIC, p, 0)[1]]
        wait_for(lambda p=p, offsets=offsets: offsets() == acked[p] or None,
                 f"the acknowledged records of partition {p} at its new leader")
    assert cluster.produce(now[0], TOPIC, 0, [b"after"], acks=-1)[2] == 0


def test_sigkill_of_a_leader_fails_over_within_the_session_timeout(cluster):
    body = {"topics": [[TOPIC, 1, 3, None, {}]], "timeout_ms": 5000, "validate_only": False}
    assert cluster.request(0, protocol.ApiKey.CREATE_TOPICS, body).body["topics"][0][1] == 0
    where = wait_for(lambda: leaders(cluster, 0), "a leader")
    victim = where[0]
    assert cluster.produce(victim, TOPIC, 0, [b"before"], acks=-1)[2:4] == [0, 0]
    cluster.brokers[victim].kill()
    started = time.monotonic()
    survivor = next(b for b in cluster.brokers if b != victim)
    now = wait_for(lambda: (lambda m: m if m and m[0] != victim else None)(
        leaders(cluster, survivor)), "a new leader", timeout_s=30)
    entry = cluster.produce(now[0], TOPIC, 0, [b"after"], acks=-1)
    assert entry[2:4] == [0, 1]
    # zookeeper.session.timeout.ms (4 s in the harness) + 1 s, with slack for a busy machine
    assert time.monotonic() - started < 4 + 1 + 5
    _, records = cluster.fetch(now[0], TOPIC, 0, 0)
    assert [v for _, v in records] == [b"before", b"after"]
    assert errors.name_of(0) == "NONE"
