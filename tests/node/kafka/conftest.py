"""Fixtures of the Kafka-protocol tests: one 3-broker cluster per module (``kafka_cluster``,
each broker with a Kafka listener) and a fresh topic per test (``kafka_topic``)."""
from __future__ import annotations

import uuid

import pytest

from node.client import Admin
from node.cluster import Cluster
from shm.names import cleanup_cluster, cluster_objects
from tests.conftest import new_cluster_id


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory):
    cid = new_cluster_id()
    cluster = Cluster.up(tmp_path_factory.mktemp("kafka") / "c", brokers=3, cluster_id=cid,
                         config={"min.insync.replicas": "2"})
    try:
        yield cluster
    finally:
        cluster.down(grace_s=5)
        leaked = cluster_objects(cid)
        cleanup_cluster(cid)
        assert not leaked, f"the cluster leaked shared-memory objects: {leaked}"


@pytest.fixture
def kafka_topic(kafka_cluster) -> str:
    """A new topic of 3 partitions, replication factor 3, online everywhere."""
    name = "k" + uuid.uuid4().hex[:10]
    admin = Admin(kafka_cluster.bootstrap_servers)
    try:
        admin.create_topic(name, 3, 3)
    finally:
        admin.close()
    return name
