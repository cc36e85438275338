"""The replica manager's ISR change notifications against a real coordinator (zk_lite,
and Apache ZooKeeper when installed) through a real kazoo session: a notification the
coordinator did not take is created again, so the controller learns every ISR change."""
from __future__ import annotations

import pytest

from node.broker import limits
from node.broker.coordinator import GuardedZk
from node.broker.loop import EventLoop, now_ms
from node.broker.replica_manager import ReplicaManager
from node.wire import zkdata

from tests.node.broker.zk_helpers import (CONNECT_TIMEOUT_S, ensure_layout,  # noqa: F401
                                          make_client, wait_for, zk_hosts, zk_server)

pytestmark = pytest.mark.process


class _Part:
    """What the notification needs of a partition: its key."""

    def __init__(self, topic: str, partition: int) -> None:
        self.key = (topic, partition)


@pytest.fixture
def manager(make_client):
    client = make_client()
    ensure_layout(client)
    loop = EventLoop()
    replicas = ReplicaManager(broker_id=0, config=None, loop=loop, zk=GuardedZk(client),
                              metadata=None, on_produce_complete=lambda *a: None,
                              on_high_watermark=lambda part: None)
    yield replicas, client
    loop.close()


def _notified(client) -> list[tuple[str, int]]:
    partitions = []
    for child in sorted(client.get_children(zkdata.ISR_CHANGE_NOTIFICATION)):
        data, _ = client.get(f"{zkdata.ISR_CHANGE_NOTIFICATION}/{child}")
        partitions += zkdata.decode_partition_list(data, child)
    return partitions


def _run(replicas, until, what):
    def step():
        replicas.loop.run_once()
        replicas.tick(now_ms())
        return until()
    wait_for(step, what=what)


def test_an_isr_change_notification_the_coordinator_did_not_take_is_created_again(manager):
    replicas, client = manager
    replicas._notify_isr_change(_Part("t", 0))
    _run(replicas, lambda: _notified(client) == [("t", 0)], "the first notification")

    # The session is gone when the next ISR change is announced: kazoo fails the create
    # (asynchronously, on its own thread).
    client.stop()
    replicas._notify_isr_change(_Part("t", 1))
    replicas._notify_isr_change(_Part("u", 0))
    _run(replicas, lambda: replicas._unannounced_isr_changes == {("t", 1), ("u", 0)},
         "the failed create handled")
    assert not replicas.zk.available
    client.start(timeout=CONNECT_TIMEOUT_S)
    # Both are announced in one notification once the coordinator answers again,
    # ISR_NOTIFY_RETRY_MS after the last attempt at most.
    _run(replicas, lambda: len(client.get_children(zkdata.ISR_CHANGE_NOTIFICATION)) == 2,
         "the changes announced again")
    assert sorted(_notified(client)) == [("t", 0), ("t", 1), ("u", 0)]
    assert replicas._unannounced_isr_changes == set()
    assert limits.ISR_NOTIFY_RETRY_MS <= 1000
