"""One real broker process driven by a test-side controller (real zk_lite, real kazoo)."""
from __future__ import annotations

import time

import pytest

from node import errors as E
from node import protocol as P
from tests.node.harness import Cluster, wait_for

pytestmark = pytest.mark.slow
TOPIC = "t1"


@pytest.fixture
def cluster(tmp_path, cluster_id):
    c = Cluster(tmp_path, cluster_id)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def single(cluster):
    cluster.add_broker(0)
    cluster.create_topic(TOPIC, {0: [0], 1: [0]})
    return cluster


def test_produce_acks_1_then_fetch_reads_it_back(single):
    entry = single.produce(0, TOPIC, 0, [b"a", b"b", b"c"], acks=1)
    assert entry[2] == 0 and entry[3] == 0
    entry = single.produce(0, TOPIC, 0, [b"d"], acks=1)
    assert entry[3] == 3
    head, records = single.fetch(0, TOPIC, 0, 0)
    assert head[2] == 0 and head[3] == 4  # HW = LEO with a single replica
    assert records == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]
