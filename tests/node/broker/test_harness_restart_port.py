"""The test harness restarts a broker whose port another process took meanwhile on a
new port (CI once: a SIGKILLed follower restarted on its old port, which another test
had taken), and its channel follows the broker there."""
from __future__ import annotations

import socket

import pytest

from node.wire import protocol
from tests.node.broker.harness import Cluster, wait_for

pytestmark = [pytest.mark.process]


def listed_ports(c: Cluster) -> list[int]:
    """The ports of the brokers broker 0's Metadata answer lists (once it knows them)."""
    return [b[2] for b in c.request(0, protocol.ApiKey.METADATA, {"topics": []}).body["brokers"]]


def test_a_restarted_broker_whose_port_was_taken_gets_a_new_one(tmp_path, cluster_id):
    c = Cluster(tmp_path, cluster_id, test_controller=False)
    try:
        broker = c.add_broker(0)
        wait_for(lambda: listed_ports(c) == [broker.port], "broker 0 lists itself")
        broker.kill()
        old = broker.port
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
            taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            taken.bind(("127.0.0.1", old))
            taken.listen(1)
            broker.start(c.zk)
            assert broker.port != old
            assert "Address already in use" in broker.log()
            wait_for(lambda: listed_ports(c) == [broker.port],
                     "broker 0 answers on its new port and lists it")
    finally:
        c.close()
