"""The group coordinator's shell on real brokers, through Kafka's wire (raw requests):
``__consumer_offsets`` created on first use and internal, FindCoordinator pointing at the
leader of the group's partition, NOT_COORDINATOR from the other brokers, and offsets
committed to a coordinator served again by the next one after a SIGKILL."""
from __future__ import annotations

import uuid

import pytest

from node.core.groups.hashing import partition_for
from node.kafka.protocol.messages import (DeleteTopicsRequest, FindCoordinatorRequest,
                                          HeartbeatRequest, OffsetCommitRequest,
                                          OffsetFetchRequest)
from node.waiting import poll_until
from node.wire.errors import ErrorCode
from node.wire.protocol import OFFSETS_TOPIC
from tests.node.kafka import raw
from tests.node.kafka.clients import create_topic, describe_partition, running_cluster

pytestmark = [pytest.mark.process, pytest.mark.slow]

PARTITIONS = 3
CONFIG = {"offsets.topic.num.partitions": str(PARTITIONS),
          "group.initial.rebalance.delay.ms": "0"}
WAIT_S = 60.0


def _group() -> str:
    return "g" + uuid.uuid4().hex[:10]


def find_coordinator(address: str, group: str, version: int = 4):
    """(error code, node id, host, port) of FindCoordinator for ``group``."""
    if version >= 4:
        answer = raw.call(address, 10, version, FindCoordinatorRequest(
            key_type=0, coordinator_keys=[group]))
        c = answer.coordinators[0]
        assert c.key == group
        return c.error_code, c.node_id, c.host, c.port
    answer = raw.call(address, 10, version, FindCoordinatorRequest(key=group, key_type=0))
    return answer.error_code, answer.node_id, answer.host, answer.port


def wait_coordinator(cluster, group: str, version: int = 4):
    address = cluster.kafka_address(cluster.broker_ids[0])
    found = poll_until(lambda: (lambda a: a if a[0] == 0 else None)(
        find_coordinator(address, group, version)), timeout_s=WAIT_S,
        what=f"FindCoordinator for {group} to answer")
    return found[1], f"{found[2]}:{found[3]}"


def offsets_leader(cluster, group: str) -> int:
    part = describe_partition(cluster, OFFSETS_TOPIC, partition_for(group, PARTITIONS))
    return part.leader


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("groups"), config=CONFIG) as c:
        yield c


def test_find_coordinator_creates_the_topic_and_names_the_partition_leader(cluster):
    group = _group()
    address = cluster.kafka_address(cluster.broker_ids[-1])
    first = find_coordinator(address, group)
    assert first[0] in (ErrorCode.NONE, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    node_id, endpoint = wait_coordinator(cluster, group)
    assert node_id == offsets_leader(cluster, group)
    assert endpoint == cluster.kafka_address(node_id)
    # v0-3 answer the same at the top level
    assert wait_coordinator(cluster, group, version=3) == (node_id, endpoint)
    assert wait_coordinator(cluster, group, version=0)[0] == node_id
    # the topic is internal, compacted or never deleted by time, and has its partitions
    metadata = raw.metadata(address, 9, [OFFSETS_TOPIC])
    topic = metadata.topics[0]
    assert topic.is_internal and len(topic.partitions) == PARTITIONS


def test_a_group_api_on_another_broker_gets_not_coordinator(cluster):
    group = _group()
    node_id, _ = wait_coordinator(cluster, group)
    other = next(b for b in cluster.broker_ids if b != node_id)
    answer = raw.call(cluster.kafka_address(other), 12, 4, HeartbeatRequest(
        group_id=group, generation_id=1, member_id="m"))
    assert answer.error_code == ErrorCode.NOT_COORDINATOR
    fetched = raw.call(cluster.kafka_address(other), 9, 8, OffsetFetchRequest(groups=[
        OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group, topics=None)]))
    assert fetched.groups[0].error_code == ErrorCode.NOT_COORDINATOR


def test_users_may_not_write_or_delete_the_offsets_topic(cluster):
    group = _group()
    node_id, endpoint = wait_coordinator(cluster, group)
    answer = raw.call(endpoint, 0, 9, raw.produce_request(
        OFFSETS_TOPIC, raw.record_batch([b"x"], key=b"k"),
        partition=partition_for(group, PARTITIONS)))
    error = answer.responses[0].partition_responses[0].error_code
    assert error == ErrorCode.INVALID_TOPIC_EXCEPTION
    deleted = raw.call(endpoint, 20, 4, DeleteTopicsRequest(topic_names=[OFFSETS_TOPIC],
                                                            timeout_ms=5000))
    assert deleted.responses[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


def commit(endpoint: str, group: str, topic: str, offsets: dict[int, int]):
    return raw.call(endpoint, 8, 8, OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[
                OffsetCommitRequest.OffsetCommitRequestPartition(
                    partition_index=p, committed_offset=o, committed_metadata="m")
                for p, o in offsets.items()])]))


def fetch_offsets(endpoint: str, group: str, topic: str) -> dict[int, int] | int:
    """The committed offsets, or the group's error code."""
    answer = raw.call(endpoint, 9, 8, OffsetFetchRequest(groups=[
        OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group, topics=[
            OffsetFetchRequest.OffsetFetchRequestTopics(name=topic,
                                                        partition_indexes=[0, 1, 2])])]))
    g = answer.groups[0]
    if g.error_code:
        return g.error_code
    return {p.partition_index: p.committed_offset for t in g.topics for p in t.partitions}


def test_commits_survive_the_coordinator_sigkill(cluster):
    pytest.importorskip("node.core.groups.shard")
    group, topic = _group(), "t" + uuid.uuid4().hex[:8]
    create_topic(cluster, topic, partitions=3)
    node_id, endpoint = wait_coordinator(cluster, group)
    answer = poll_until(lambda: (lambda a: a if a.topics[0].partitions[0].error_code == 0
                                 else None)(commit(endpoint, group, topic, {0: 5, 1: 7, 2: 0})),
                        timeout_s=WAIT_S, what="a simple commit to be accepted")
    assert [p.error_code for p in answer.topics[0].partitions] == [0, 0, 0]
    assert fetch_offsets(endpoint, group, topic) == {0: 5, 1: 7, 2: 0}
    cluster.kill(node_id)
    try:
        def moved():
            for b in cluster.broker_ids:
                if b == node_id:
                    continue
                try:
                    found = find_coordinator(cluster.kafka_address(b), group)
                except (OSError, AssertionError):
                    continue
                if found[0] == 0 and found[1] != node_id:
                    return found[1], f"{found[2]}:{found[3]}"
            return None
        new_id, new_endpoint = poll_until(moved, timeout_s=WAIT_S,
                                          what="the coordinator to move")
        served = poll_until(lambda: (lambda r: r if isinstance(r, dict) else None)(
            fetch_offsets(new_endpoint, group, topic)), timeout_s=WAIT_S,
            what="the new coordinator to load the group's offsets")
        assert served == {0: 5, 1: 7, 2: 0}
    finally:
        cluster.start(node_id)
