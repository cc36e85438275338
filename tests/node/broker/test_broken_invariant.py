"""A broken invariant stops a real broker: one CRITICAL line naming it, a non-zero exit,
its coordinator session ended, and the controller moves its leadership to an in-sync
replica. The invariant is broken on purpose at a storage fault point (shm.faults) in the
leader only, through MINIKAFKA_BROKER_FAULT_POINT."""
from __future__ import annotations

import pytest

from node.broker.failures import EXIT_BROKEN_INVARIANT
from node.broker.server import FAULT_POINT_ENV
from node.wire import protocol
from node.wire import zkdata
from node.wire.errors import ErrorCode
from shm.names import cluster_objects
from tests.node.broker.harness import Cluster, wait_for

pytestmark = [pytest.mark.process]
TOPIC = "inv"
VICTIM = 2


@pytest.fixture
def cluster(tmp_path, cluster_id, monkeypatch):
    c = Cluster(tmp_path, cluster_id, test_controller=False)
    try:
        for i in range(3):
            if i == VICTIM:  # only the future leader rolls into the broken invariant
                monkeypatch.setenv(FAULT_POINT_ENV, "roll:sealed")
            else:
                monkeypatch.delenv(FAULT_POINT_ENV, raising=False)
            c.add_broker(i, min_insync_replicas=2, replica_lag_time_max_ms=10_000)
        monkeypatch.delenv(FAULT_POINT_ENV, raising=False)
        wait_for(lambda: c.zk.exists(zkdata.CONTROLLER), "a controller")
        yield c
    finally:
        c.close()


def leader(cluster: Cluster, via: int) -> int | None:
    body = cluster.request(via, protocol.ApiKey.METADATA, {"topics": [TOPIC]}).body
    [[_, error, partitions]] = body["topics"]
    if error or not partitions or partitions[0][2] < 0:
        return None
    return partitions[0][2]


def test_a_failed_assertion_stops_the_broker_and_its_leadership_moves(cluster):
    body = {"topics": [[TOPIC, -1, -1, {0: [VICTIM, 0, 1]}, {"segment.bytes": "4096"}]],
            "timeout_ms": 5000, "validate_only": False}
    assert cluster.request(0, protocol.ApiKey.CREATE_TOPICS, body).body["topics"][0][1] == 0
    assert wait_for(lambda: leader(cluster, 0) == VICTIM or None, "the victim leads")
    wait_for(lambda: len(cluster.partition_state(TOPIC, 0).isr) == 3, "a full ISR")
    acked = []
    # The first segment fills, the leader rolls, and the roll's fault point fails an
    # assertion: the produce that triggered it is never acknowledged.
    victim = cluster.brokers[VICTIM]
    for i in range(200):
        if not victim.alive:
            break
        try:
            entry = cluster.produce(VICTIM, TOPIC, 0, [b"v%03d" % i + b"x" * 200], acks=-1,
                                    timeout_ms=2000, request_timeout_ms=3000)
        except Exception:  # the leader died under the request
            break
        if entry[2] == ErrorCode.NONE:
            acked.append(entry[3])
    assert wait_for(lambda: victim.process.poll() is not None, "the broker exits", 15)
    assert victim.process.returncode == EXIT_BROKEN_INVARIANT
    lines = [line for line in victim.log().splitlines() if "CRITICAL" in line]
    assert len(lines) == 1, victim.log()[-3000:]
    assert "broken invariant: fault point roll:sealed" in lines[0]
    assert acked, "some records were acknowledged before the roll"
    # The broker ended its coordinator session before exiting: its registration is gone
    # now, not after the 4 s session timeout.
    assert cluster.zk.exists(zkdata.broker_path(VICTIM)) is None

    new = wait_for(lambda: (lambda m: [m] if m not in (None, VICTIM) else None)(
        leader(cluster, 0)), "a new leader", 20)[0]
    assert new in (0, 1)
    _, records = cluster.fetch(new, TOPIC, 0, 0)
    offsets = [o for o, _ in records]
    assert offsets[:len(acked)] == acked  # every acknowledged record survived
    assert cluster.produce(new, TOPIC, 0, [b"after"], acks=-1)[2] == ErrorCode.NONE
    head = f"/mk-{cluster.cluster_id}-b{VICTIM}-"
    assert not [n for n in cluster_objects(cluster.cluster_id) if n.startswith(head)]
