"""Admin requests on Kafka's wire sent raw with the codec, one connection to one broker:
CreateTopics, CreatePartitions and DeleteTopics are answered once that broker's metadata
shows them (Kafka's DelayedCreatePartitions / DelayedDeleteTopics); odd but well-formed
requests get Kafka's answer (an error code where Kafka gives one) and the broker keeps
serving; and a hypothesis run of random admin requests: each is answered and the broker
stays up."""
from __future__ import annotations

import uuid

import pytest

from node.cluster import Cluster
from node.kafka.protocol import messages as m
from node.wire.errors import ErrorCode
from tests.conftest import new_cluster_id
from tests.node.kafka.kafka_wire import KafkaWire

pytestmark = [pytest.mark.process, pytest.mark.slow]

TIMEOUT_S = 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = Cluster.up(tmp_path_factory.mktemp("cluster"), brokers=1,
                         config={"num.partitions": "1", "default.replication.factor": "1"},
                         cluster_id=new_cluster_id())
    try:
        yield cluster
    finally:
        cluster.down(grace_s=5)


@pytest.fixture
def client(cluster):
    c = KafkaWire(cluster.kafka_address(0), TIMEOUT_S)
    try:
        yield c
    finally:
        c.close()


def alive(client) -> bool:
    answer = client.request(m.MetadataRequest(topics=None), 12)
    return [b.node_id for b in answer.brokers] == [0]


def test_create_and_delete_are_answered_once_the_brokers_metadata_shows_them(client):
    answer = client.request(m.CreateTopicsRequest(topics=[
        m.CreateTopicsRequest.CreatableTopic(name="waited", num_partitions=4,
                                             replication_factor=1)],
        timeout_ms=15_000), 7)
    assert answer.topics[0].error_code == 0
    created_id = answer.topics[0].topic_id
    md = client.request(m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(
        name="waited")]), 12)
    assert md.topics[0].topic_id == created_id != uuid.UUID(int=0)
    assert [(p.partition_index, p.leader_id) for p in md.topics[0].partitions] == \
        [(0, 0), (1, 0), (2, 0), (3, 0)]
    answer = client.request(m.CreatePartitionsRequest(topics=[
        m.CreatePartitionsRequest.CreatePartitionsTopic(name="waited", count=6,
                                                        assignments=None)],
        timeout_ms=15_000), 3)
    assert answer.results[0].error_code == 0
    md = client.request(m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(
        name="waited")]), 12)
    assert len(md.topics[0].partitions) == 6
    topic_id = md.topics[0].topic_id
    answer = client.request(m.DeleteTopicsRequest(topics=[m.DeleteTopicsRequest.DeleteTopicState(
        name=None, topic_id=topic_id)], timeout_ms=15_000), 6)
    assert [(r.name, r.topic_id, r.error_code) for r in answer.responses] == \
        [("waited", topic_id, 0)]
    md = client.request(m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(
        name="waited")]), 12)
    assert md.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_odd_create_topics_get_kafkas_codes_per_topic(client):
    T = m.CreateTopicsRequest.CreatableTopic
    A = m.CreateTopicsRequest.CreatableReplicaAssignment
    answer = client.request(m.CreateTopicsRequest(topics=[
        T(name="zero-partitions", num_partitions=0, replication_factor=1),
        T(name="zero-rf", num_partitions=1, replication_factor=0),
        T(name="", num_partitions=1, replication_factor=1),
        T(name="x" * 300, num_partitions=1, replication_factor=1),
        T(name="both", num_partitions=2, replication_factor=1,
          assignments=[A(partition_index=0, broker_ids=[0])]),
        T(name="gap", num_partitions=-1, replication_factor=-1, assignments=[A(partition_index=0, broker_ids=[0]),
                                   A(partition_index=2, broker_ids=[0])]),
        T(name="no-replicas", num_partitions=-1, replication_factor=-1, assignments=[A(partition_index=0, broker_ids=[])]),
        T(name="twice-broker", num_partitions=-1, replication_factor=-1, assignments=[A(partition_index=0, broker_ids=[0, 0])]),
        T(name="null-config", num_partitions=1, replication_factor=1,
          configs=[m.CreateTopicsRequest.CreatableTopicConfig(name="retention.ms",
                                                              value=None)]),
    ], timeout_ms=1000, validate_only=True), 7)
    codes = {t.name: t.error_code for t in answer.topics}
    assert codes == {
        "zero-partitions": ErrorCode.INVALID_PARTITIONS,
        "zero-rf": ErrorCode.INVALID_REPLICATION_FACTOR,
        "": ErrorCode.INVALID_TOPIC_EXCEPTION,
        "x" * 300: ErrorCode.INVALID_TOPIC_EXCEPTION,
        "both": ErrorCode.INVALID_REQUEST,
        "gap": ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "no-replicas": ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "twice-broker": ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "null-config": ErrorCode.NONE,
    }, codes
    assert all(t.error_message for t in answer.topics if t.error_code)
    assert alive(client)


def test_odd_config_requests_are_answered_per_resource(client):
    R = m.DescribeConfigsRequest.DescribeConfigsResource
    answer = client.request(m.DescribeConfigsRequest(resources=[
        R(resource_type=2, resource_name="no-such-topic"),
        R(resource_type=2, resource_name=""),
        R(resource_type=4, resource_name="99999999999999999999999"),
        R(resource_type=4, resource_name="minus"),
        R(resource_type=8, resource_name="0"),
        R(resource_type=4, resource_name="0", configuration_keys=["broker.id", "nope"]),
        R(resource_type=4, resource_name="0", configuration_keys=[]),
    ], include_synonyms=True), 4)
    assert [r.error_code for r in answer.results] == [
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST,
        ErrorCode.NONE, ErrorCode.NONE]
    assert [(c.name, c.value) for c in answer.results[-2].configs] == [("broker.id", "0")]
    everything = {c.name for c in answer.results[-1].configs}   # empty: every key
    assert {"broker.id", "log.retention.ms", "num.partitions"} <= everything
    C = m.IncrementalAlterConfigsRequest.AlterableConfig
    AR = m.IncrementalAlterConfigsRequest.AlterConfigsResource
    answer = client.request(m.IncrementalAlterConfigsRequest(resources=[
        AR(resource_type=2, resource_name="no-such-topic",
           configs=[C(name="retention.ms", config_operation=0, value="1")]),
        AR(resource_type=2, resource_name="", configs=[]),
        AR(resource_type=4, resource_name="0",
           configs=[C(name="retention.ms", config_operation=77, value="1")]),
        AR(resource_type=9, resource_name="g", configs=[]),
    ]), 1)
    assert [r.error_code for r in answer.responses] == [
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_CONFIG, ErrorCode.INVALID_REQUEST]
    assert alive(client)


def test_odd_partition_requests_get_kafkas_codes(client):
    answer = client.request(m.DeleteRecordsRequest(topics=[
        m.DeleteRecordsRequest.DeleteRecordsTopic(name="nope", partitions=[
            m.DeleteRecordsRequest.DeleteRecordsPartition(partition_index=-1, offset=-5)])],
        timeout_ms=1000), 2)
    assert answer.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    answer = client.request(m.ElectLeadersRequest(election_type=1, topic_partitions=[
        m.ElectLeadersRequest.TopicPartitions(topic="nope", partitions=[0, -3])],
        timeout_ms=1000), 2)
    assert [p.error_code for p in answer.replica_election_results[0].partition_result] == \
        [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION] * 2
    answer = client.request(m.ElectLeadersRequest(election_type=7, topic_partitions=None,
                                               timeout_ms=1000), 2)
    assert answer.error_code == ErrorCode.INVALID_REQUEST
    answer = client.request(m.AlterPartitionReassignmentsRequest(topics=[
        m.AlterPartitionReassignmentsRequest.ReassignableTopic(name="nope", partitions=[
            m.AlterPartitionReassignmentsRequest.ReassignablePartition(
                partition_index=0, replicas=[0, 0])])]), 0)
    assert answer.responses[0].partitions[0].error_code == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    answer = client.request(m.ListPartitionReassignmentsRequest(topics=[
        m.ListPartitionReassignmentsRequest.ListPartitionReassignmentsTopics(
            name="nope", partition_indexes=[1])]), 0)
    assert (answer.error_code, answer.topics) == (0, [])
    answer = client.request(m.DescribeLogDirsRequest(topics=[
        m.DescribeLogDirsRequest.DescribableLogDirTopic(topic="nope", partitions=[1])]), 4)
    assert [r.error_code for r in answer.results] == [0] and answer.results[0].topics == []
    answer = client.request(m.DeleteTopicsRequest(topics=[
        m.DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=uuid.uuid4())],
        timeout_ms=1000), 6)
    assert answer.responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID
    answer = client.request(m.CreatePartitionsRequest(topics=[
        m.CreatePartitionsRequest.CreatePartitionsTopic(name="nope", count=-4,
                                                        assignments=[])],
        timeout_ms=1000, validate_only=False), 3)
    assert answer.results[0].error_code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                            ErrorCode.INVALID_REQUEST)
    assert alive(client)


def test_random_admin_requests_are_answered_and_the_broker_stays_up(cluster):
    """h11's rule at the listener: whatever well-formed admin request comes in, an
    answer comes back and the broker keeps serving."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    names = st.sampled_from(["", "t", "fuzz", "a.b", "x" * 250, "bad/name"])
    ints = st.integers(-3, 4)
    create = st.builds(m.CreateTopicsRequest, topics=st.lists(st.builds(
        m.CreateTopicsRequest.CreatableTopic, name=names, num_partitions=ints,
        replication_factor=ints, assignments=st.lists(st.builds(
            m.CreateTopicsRequest.CreatableReplicaAssignment, partition_index=ints,
            broker_ids=st.lists(ints, max_size=3)), max_size=3),
        configs=st.lists(st.builds(m.CreateTopicsRequest.CreatableTopicConfig,
                                   name=st.sampled_from(["retention.ms", "x", ""]),
                                   value=st.one_of(st.none(), st.sampled_from(
                                       ["1", "-1", "a", ""]))), max_size=2)),
        max_size=3), timeout_ms=st.just(1000), validate_only=st.just(True))
    alter = st.builds(m.IncrementalAlterConfigsRequest, resources=st.lists(st.builds(
        m.IncrementalAlterConfigsRequest.AlterConfigsResource,
        resource_type=st.integers(0, 9), resource_name=names,
        configs=st.lists(st.builds(
            m.IncrementalAlterConfigsRequest.AlterableConfig,
            name=st.sampled_from(["retention.ms", "cleanup.policy", "x"]),
            config_operation=st.integers(-1, 4),
            value=st.one_of(st.none(), st.sampled_from(["1", "compact", "z"]))),
            max_size=3)), max_size=3), validate_only=st.just(True))
    describe = st.builds(m.DescribeConfigsRequest, resources=st.lists(st.builds(
        m.DescribeConfigsRequest.DescribeConfigsResource, resource_type=st.integers(0, 9),
        resource_name=st.one_of(names, st.sampled_from(["0", "1", "-1"])),
        configuration_keys=st.one_of(st.none(), st.lists(names, max_size=2))),
        max_size=3), include_synonyms=st.booleans())
    partitions = st.lists(ints, max_size=3)
    elect = st.builds(m.ElectLeadersRequest, election_type=st.integers(0, 2),
                      topic_partitions=st.one_of(st.none(), st.lists(st.builds(
                          m.ElectLeadersRequest.TopicPartitions, topic=names,
                          partitions=partitions), max_size=2)), timeout_ms=st.just(1000))
    records = st.builds(m.DeleteRecordsRequest, topics=st.lists(st.builds(
        m.DeleteRecordsRequest.DeleteRecordsTopic, name=names, partitions=st.lists(
            st.builds(m.DeleteRecordsRequest.DeleteRecordsPartition, partition_index=ints,
                      offset=st.integers(-3, 10)), max_size=2)), max_size=2),
        timeout_ms=st.just(1000))
    versions = {m.CreateTopicsRequest: 7, m.IncrementalAlterConfigsRequest: 1,
                m.DescribeConfigsRequest: 4, m.ElectLeadersRequest: 2,
                m.DeleteRecordsRequest: 2}
    client = KafkaWire(cluster.kafka_address(0), TIMEOUT_S)
    calls: list[str] = []
    try:
        @settings(max_examples=150, deadline=None,
                  suppress_health_check=list(HealthCheck))
        @given(st.one_of(create, alter, describe, elect, records))
        def answered(request):
            assert client.request(request, versions[type(request)]) is not None
            calls.append(type(request).__name__)

        answered()
        assert len(set(calls)) == len(versions), "every kind was tried"
        assert alive(client)
    finally:
        client.close()
