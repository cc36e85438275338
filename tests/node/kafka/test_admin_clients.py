"""Admin through Kafka's wire with the real clients: confluent-kafka's ``AdminClient``
(librdkafka) and kafka-python's ``KafkaAdminClient``, against a real 3-broker cluster.
Every refusal must be the error Kafka's broker gives, so the clients raise what they
raise against Kafka."""
from __future__ import annotations

import pytest

from node.wire.errors import ErrorCode
from tests.node.kafka.clients import running_cluster
from tests.waiting import poll_until

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaException, TopicPartition  # noqa: E402
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,  # noqa: E402
                                   ConfigResource, ConfigSource, NewPartitions, NewTopic)

pytestmark = [pytest.mark.process, pytest.mark.slow]

# Over the Kafka tests' cluster config (tests.node.kafka.clients.CLUSTER_CONFIG).
CONFIG = {"default.replication.factor": "3", "num.partitions": "2",
          "log.retention.ms": "86400000"}
TIMEOUT_S = 30


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("cluster"), config=CONFIG) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def admin(cluster):
    return AdminClient({"bootstrap.servers": cluster.kafka_bootstrap_servers})


def result(futures: dict):
    """{key: result} of a dict of futures; the first failure raised."""
    return {k: f.result(timeout=TIMEOUT_S) for k, f in futures.items()}


def error_name(future) -> str:
    with pytest.raises(KafkaException) as caught:
        future.result(timeout=TIMEOUT_S)
    return caught.value.args[0].name()


def partitions_of(admin, topic: str) -> dict[int, list[int]]:
    md = admin.list_topics(topic, timeout=TIMEOUT_S).topics[topic]
    return {p: list(m.replicas) for p, m in md.partitions.items()} if md.error is None else {}


def wait_partitions(admin, topic: str, count: int) -> dict[int, list[int]]:
    return poll_until(lambda: (lambda got: got if len(got) == count else None)(
        partitions_of(admin, topic)), TIMEOUT_S, f"{topic} with {count} partitions")


def topic_configs(admin, topic: str) -> dict:
    (entries,) = result(admin.describe_configs([ConfigResource("topic", topic)])).values()
    return entries


# ------------------------------------------------------------------ confluent-kafka

def test_create_topics_with_configs_defaults_assignment_and_validate_only(admin):
    result(admin.create_topics([NewTopic("c-conf", 3, 2, config={"retention.ms": "60000",
                                                               "min.insync.replicas": "2"})]))
    assert {p: len(r) for p, r in wait_partitions(admin, "c-conf", 3).items()} == \
        {0: 2, 1: 2, 2: 2}
    entries = topic_configs(admin, "c-conf")
    assert (entries["retention.ms"].value, entries["retention.ms"].source) == \
        ("60000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert entries["min.insync.replicas"].value == "2"
    # -1 / -1: the broker's num.partitions and default.replication.factor
    result(admin.create_topics([NewTopic("c-defaults")]))
    assert {p: len(r) for p, r in wait_partitions(admin, "c-defaults", 2).items()} == \
        {0: 3, 1: 3}
    # a manual assignment
    result(admin.create_topics([NewTopic("c-manual", 2, replica_assignment=[[2, 0], [1, 2]])]))
    assert wait_partitions(admin, "c-manual", 2) == {0: [2, 0], 1: [1, 2]}
    # validate_only creates nothing
    result(admin.create_topics([NewTopic("c-dry", 1, 1)], validate_only=True))
    assert "c-dry" not in admin.list_topics(timeout=TIMEOUT_S).topics


def test_create_topics_refusals_are_kafkas_errors(admin):
    result(admin.create_topics([NewTopic("c-dup", 1, 1)]))
    cases = {
        "c-dup": NewTopic("c-dup", 1, 1),
        "c-rf": NewTopic("c-rf", 1, 4),
        "c-cfg": NewTopic("c-cfg", 1, 1, config={"no.such.config": "1"}),
        "c-val": NewTopic("c-val", 1, 1, config={"retention.ms": "soon"}),
        "c-asg": NewTopic("c-asg", 1, replica_assignment=[[0, 7]]),
        "bad/name": NewTopic("bad/name", 1, 1),
    }
    futures = admin.create_topics(list(cases.values()))
    assert {name: error_name(futures[name]) for name in cases} == {
        "c-dup": "TOPIC_ALREADY_EXISTS", "c-rf": "INVALID_REPLICATION_FACTOR",
        "c-cfg": "INVALID_CONFIG", "c-val": "INVALID_CONFIG",
        "c-asg": "INVALID_REPLICA_ASSIGNMENT", "bad/name": "TOPIC_EXCEPTION"}


def test_create_partitions_then_delete_topics(admin):
    result(admin.create_topics([NewTopic("c-grow", 1, 2)]))
    wait_partitions(admin, "c-grow", 1)
    result(admin.create_partitions([NewPartitions("c-grow", 3)], validate_only=True))
    assert len(partitions_of(admin, "c-grow")) == 1, "validate_only adds nothing"
    result(admin.create_partitions([NewPartitions("c-grow", 3)]))
    wait_partitions(admin, "c-grow", 3)
    assert error_name(admin.create_partitions([NewPartitions("c-grow", 2)])["c-grow"]) == \
        "INVALID_PARTITIONS"
    assert error_name(admin.create_partitions([NewPartitions("c-nope", 2)])["c-nope"]) == \
        "UNKNOWN_TOPIC_OR_PART"
    result(admin.delete_topics(["c-grow"]))
    poll_until(lambda: "c-grow" not in admin.list_topics(timeout=TIMEOUT_S).topics,
               TIMEOUT_S, "c-grow deleted")
    assert error_name(admin.delete_topics(["c-never"])["c-never"]) == "UNKNOWN_TOPIC_OR_PART"


def test_incremental_alter_configs_set_delete_append_subtract(admin):
    result(admin.create_topics([NewTopic("c-alter", 1, 1, config={"retention.ms": "1000"})]))

    def alter(*entries, validate_only=False):
        resource = ConfigResource("topic", "c-alter", incremental_configs=list(entries))
        return admin.incremental_alter_configs([resource],
                                               validate_only=validate_only)[resource]

    alter(ConfigEntry("retention.bytes", "123456", incremental_operation=AlterConfigOpType.SET),
          ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)
          ).result(timeout=TIMEOUT_S)
    entries = topic_configs(admin, "c-alter")
    assert (entries["retention.bytes"].value, entries["retention.bytes"].source) == \
        ("123456", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    # back to the broker's log.retention.ms, a static broker config
    assert (entries["retention.ms"].value, entries["retention.ms"].source) == \
        ("86400000", ConfigSource.STATIC_BROKER_CONFIG.value)
    alter(ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.APPEND)
          ).result(timeout=TIMEOUT_S)
    alter(ConfigEntry("cleanup.policy", "compact",
                      incremental_operation=AlterConfigOpType.SUBTRACT)).result(timeout=TIMEOUT_S)
    assert topic_configs(admin, "c-alter")["cleanup.policy"].value == "delete"
    alter(ConfigEntry("retention.bytes", "1", incremental_operation=AlterConfigOpType.SET),
          validate_only=True).result(timeout=TIMEOUT_S)
    assert topic_configs(admin, "c-alter")["retention.bytes"].value == "123456"
    assert error_name(alter(ConfigEntry("retention.ms", "1",
                                        incremental_operation=AlterConfigOpType.APPEND))) == \
        "INVALID_CONFIG"
    assert error_name(alter(ConfigEntry("segment.bytes", "tiny",
                                        incremental_operation=AlterConfigOpType.SET))) == \
        "INVALID_CONFIG"
    # a broker key that is not dynamic: refused as Kafka refuses it
    broker = ConfigResource("broker", "1", incremental_configs=[
        ConfigEntry("num.partitions", "1", incremental_operation=AlterConfigOpType.SET)])
    assert error_name(admin.incremental_alter_configs([broker])[broker]) == "INVALID_CONFIG"


def test_describe_broker_configs(cluster, admin):
    (entries,) = result(admin.describe_configs([ConfigResource("broker", "2")])).values()
    assert entries["broker.id"].value == "2"
    retention = entries["log.retention.ms"]
    assert (retention.value, retention.source, retention.is_read_only) == \
        ("86400000", ConfigSource.STATIC_BROKER_CONFIG.value, False)    # dynamic
    assert entries["num.partitions"].is_read_only, "a key that is not dynamic"
    assert entries["unclean.leader.election.enable"].source == \
        ConfigSource.DEFAULT_CONFIG.value


def test_describe_cluster_gives_the_kafka_endpoints(cluster, admin):
    described = admin.describe_cluster().result(timeout=TIMEOUT_S)
    assert described.cluster_id == cluster.cluster_id
    assert {f"{n.host}:{n.port}" for n in described.nodes} == \
        set(cluster.kafka_bootstrap_servers.split(","))
    assert described.controller.id in cluster.broker_ids


def test_delete_records_moves_the_low_watermark(cluster, admin):
    result(admin.create_topics([NewTopic("c-records", 1, 3,
                                         config={"min.insync.replicas": "2"})]))
    wait_partitions(admin, "c-records", 1)
    producer = ck.Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers,
                            "acks": "all", "linger.ms": 0})
    for i in range(50):
        producer.produce("c-records", b"v%d" % i, partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    tp = TopicPartition("c-records", 0, 20)
    deleted = admin.delete_records([tp])[tp].result(timeout=TIMEOUT_S)
    assert deleted.low_watermark == 20
    consumer = ck.Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers,
                            "group.id": "unused", "enable.auto.commit": False})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition("c-records", 0),
                                                   timeout=TIMEOUT_S)
    finally:
        consumer.close()
    assert (low, high) == (20, 50)
    beyond = TopicPartition("c-records", 0, 51)
    assert error_name(admin.delete_records([beyond])[beyond]) == "OFFSET_OUT_OF_RANGE"


def test_elect_leaders_preferred_and_unclean(cluster, admin):
    result(admin.create_topics([NewTopic("c-elect", 1, replica_assignment=[[1, 2, 0]])]))
    wait_partitions(admin, "c-elect", 1)
    tp = TopicPartition("c-elect", 0)

    def leader():
        return admin.list_topics("c-elect", timeout=TIMEOUT_S).topics["c-elect"] \
            .partitions[0].leader

    poll_until(lambda: leader() == 1, TIMEOUT_S, "broker 1 leading c-elect-0")
    answer = admin.elect_leaders(ck.ElectionType.PREFERRED, [tp]).result(timeout=TIMEOUT_S)
    assert answer[tp].name() == "ELECTION_NOT_NEEDED"
    answer = admin.elect_leaders(ck.ElectionType.UNCLEAN, [tp]).result(timeout=TIMEOUT_S)
    assert answer[tp].name() == "ELECTION_NOT_NEEDED"
    cluster.stop(1)
    try:
        poll_until(lambda: leader() in (0, 2), TIMEOUT_S, "a new leader of c-elect-0")
        answer = admin.elect_leaders(ck.ElectionType.PREFERRED, [tp]).result(timeout=TIMEOUT_S)
        assert answer[tp].name() == "PREFERRED_LEADER_NOT_AVAILABLE"
    finally:
        cluster.start(1)

    def back_in_isr():
        md = admin.list_topics("c-elect", timeout=TIMEOUT_S).topics["c-elect"].partitions[0]
        return 1 in md.isrs
    poll_until(back_in_isr, TIMEOUT_S, "broker 1 back in the ISR")
    answer = admin.elect_leaders(ck.ElectionType.PREFERRED, [tp]).result(timeout=TIMEOUT_S)
    assert answer[tp] is None
    poll_until(lambda: leader() == 1, TIMEOUT_S, "the preferred leader back")
    # null partitions: every partition, each answered (Kafka's reply from its cache)
    everything = admin.elect_leaders(ck.ElectionType.PREFERRED, None).result(
        timeout=TIMEOUT_S)
    assert everything[tp].name() == "ELECTION_NOT_NEEDED"
    assert len(everything) == sum(len(t.partitions) for t in
                                  admin.list_topics(timeout=TIMEOUT_S).topics.values())


# ------------------------------------------------------------------ kafka-python

@pytest.fixture(scope="module")
def kp_admin(cluster):
    kafka_admin = pytest.importorskip("kafka.admin")
    client = kafka_admin.KafkaAdminClient(
        bootstrap_servers=cluster.kafka_bootstrap_servers.split(","),
        request_timeout_ms=TIMEOUT_S * 1000)
    try:
        yield client
    finally:
        client.close()


def test_kafka_python_topics_configs_and_cluster(cluster, kp_admin, admin):
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType, NewPartitions as KNewPartitions
    from kafka.admin import NewTopic as KNewTopic
    from kafka.errors import InvalidReplicationFactorError, TopicAlreadyExistsError

    answer = kp_admin.create_topics([KNewTopic("k-topic", 2, 2,
                                               topic_configs={"retention.ms": "4321"})])
    (created,) = answer["topics"]
    assert (created["error_code"], created["num_partitions"], created["replication_factor"]) \
        == (0, 2, 2)
    assert created["configs"]["retention.ms"]["value"] == "4321"
    with pytest.raises(TopicAlreadyExistsError):
        kp_admin.create_topics([KNewTopic("k-topic", 1, 1)])
    with pytest.raises(InvalidReplicationFactorError):
        kp_admin.create_topics([KNewTopic("k-rf", 1, 5)])
    described = kp_admin.describe_configs([KConfigResource(ConfigResourceType.TOPIC,
                                                            "k-topic")], config_filter="all")
    configs = described["topic"]["k-topic"]
    assert configs["retention.ms"]["value"] == "4321"
    assert configs["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["segment.bytes"]["config_source"] == "DEFAULT_CONFIG"
    brokers = kp_admin.describe_configs([KConfigResource(ConfigResourceType.BROKER, "0")],
                                        config_filter="all")["broker"]["0"]
    assert brokers["log.retention.ms"]["value"] == "86400000"
    kp_admin.create_partitions({"k-topic": KNewPartitions(3)})
    wait_partitions(admin, "k-topic", 3)
    described = kp_admin.describe_cluster()
    assert described["cluster_id"] == cluster.cluster_id
    assert sorted(b["broker_id"] for b in described["brokers"]) == [0, 1, 2]
    kp_admin.delete_topics(["k-topic"])
    poll_until(lambda: "k-topic" not in admin.list_topics(timeout=TIMEOUT_S).topics,
               TIMEOUT_S, "k-topic deleted")


def test_kafka_python_reassignments_log_dirs_and_delete_records(cluster, kp_admin, admin):
    from kafka.structs import TopicPartition as KTopicPartition
    from kafka.errors import NoReassignmentInProgressError

    result(admin.create_topics([NewTopic("k-move", 1, replica_assignment=[[0, 1]])]))
    wait_partitions(admin, "k-move", 1)
    tp = KTopicPartition("k-move", 0)
    assert kp_admin.alter_partition_reassignments({tp: None}) == \
        {tp: NoReassignmentInProgressError}
    assert kp_admin.alter_partition_reassignments({tp: [1, 2]}) == {tp: None}
    listed = kp_admin.list_partition_reassignments()
    if tp in listed:        # the controller may finish it before we look
        assert listed[tp]["adding_replicas"] == [2]
    poll_until(lambda: partitions_of(admin, "k-move") == {0: [1, 2]}, TIMEOUT_S,
               "k-move-0 moved to brokers 1 and 2")
    assert kp_admin.list_partition_reassignments() == {}
    dirs = kp_admin.describe_log_dirs()
    hosting = {d["broker"] for d in dirs for log_dir in d["log_dirs"]
               for t in log_dir["topics"] if t["name"] == "k-move"}
    poll_until(lambda: {d["broker"] for d in kp_admin.describe_log_dirs()
                        for log_dir in d["log_dirs"] for t in log_dir["topics"]
                        if t["name"] == "k-move"} == {1, 2}, TIMEOUT_S,
               "k-move's replica gone from broker 0")
    assert hosting >= {1, 2}
    producer = ck.Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers,
                            "acks": "all", "linger.ms": 0})
    for i in range(10):
        producer.produce("k-move", b"x", partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    answer = kp_admin.delete_records({tp: 4})
    assert answer[tp]["low_watermark"] == 4


def test_create_topics_waits_for_the_metadata_and_times_out_as_kafka(cluster, admin):
    """A paused controller: the topic is written but no broker learns of it, so the
    answer waits for timeout_ms and says REQUEST_TIMED_OUT, as Kafka's broker does."""
    from node.kafka.protocol import messages as m
    from tests.node.kafka.kafka_wire import KafkaWire

    controller = admin.describe_cluster().result(timeout=TIMEOUT_S).controller.id
    other = next(b for b in cluster.broker_ids if b != controller)
    client = KafkaWire(cluster.kafka_address(other), TIMEOUT_S)
    create = m.CreateTopicsRequest(topics=[m.CreateTopicsRequest.CreatableTopic(
        name="c-late", num_partitions=1, replication_factor=3)], timeout_ms=1500)
    cluster.kill(controller, "STOP")
    try:
        answer = client.request(create, 7)
    finally:
        cluster.kill(controller, "CONT")
        client.close()
    assert answer.topics[0].error_code == ErrorCode.REQUEST_TIMED_OUT
    wait_partitions(admin, "c-late", 1)


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_alter_configs_replaces_the_topics_overrides(admin):
    """The older AlterConfigs (confluent-kafka's alter_configs): the configs given become
    the whole override set."""
    result(admin.create_topics([NewTopic("c-replace", 1, 1, config={"retention.ms": "1000"})]))
    resource = ConfigResource("topic", "c-replace", set_config={"retention.bytes": "5000"})
    admin.alter_configs([resource])[resource].result(timeout=TIMEOUT_S)
    entries = topic_configs(admin, "c-replace")
    assert (entries["retention.bytes"].value, entries["retention.bytes"].source) == \
        ("5000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert entries["retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    bad = ConfigResource("topic", "c-replace", set_config={"retention.bytes": "lots"})
    assert error_name(admin.alter_configs([bad])[bad]) == "INVALID_CONFIG"


def test_unclean_election_elects_a_replica_out_of_the_isr(cluster, admin):
    """The only in-sync replica dies and an out-of-sync one comes back: the partition
    stays offline (unclean election disabled) until ElectLeaders UNCLEAN elects it."""
    result(admin.create_topics([NewTopic("c-unclean", 1, replica_assignment=[[1, 2]])]))
    wait_partitions(admin, "c-unclean", 1)
    tp = TopicPartition("c-unclean", 0)

    def state():
        md = admin.list_topics("c-unclean", timeout=TIMEOUT_S).topics["c-unclean"]
        return md.partitions[0].leader, sorted(md.partitions[0].isrs)

    poll_until(lambda: state() == (1, [1, 2]), TIMEOUT_S, "c-unclean-0 led by 1, ISR 1, 2")
    cluster.stop(2)
    try:
        poll_until(lambda: state() == (1, [1]), TIMEOUT_S, "broker 2 out of the ISR")
        cluster.stop(1)
        try:
            cluster.start(2)
            poll_until(lambda: state()[0] == -1, TIMEOUT_S, "c-unclean-0 offline")
            answer = admin.elect_leaders(ck.ElectionType.UNCLEAN, [tp]).result(
                timeout=TIMEOUT_S)
            assert answer[tp] is None
            poll_until(lambda: state() == (2, [2]), TIMEOUT_S, "broker 2 elected uncleanly")
        finally:
            cluster.start(1)
    finally:
        if cluster.process(2).pid() is None:
            cluster.start(2)


def test_dynamic_broker_configs_apply_to_topics_without_overrides(cluster, admin):
    """A dynamic min.insync.replicas on every broker, above the replication factor,
    refuses acks=all writes to topics that do not override it, at once, described as
    DYNAMIC_BROKER_CONFIG; a topic override still wins."""
    result(admin.create_topics([NewTopic("c-dyn", 1, 3),
                                NewTopic("c-dyn-own", 1, 3,
                                         config={"min.insync.replicas": "1"})]))
    wait_partitions(admin, "c-dyn", 1)
    wait_partitions(admin, "c-dyn-own", 1)

    def on_every_broker(op, value=None):
        for b in cluster.broker_ids:        # librdkafka: one broker resource per call
            resource = ConfigResource("broker", str(b), incremental_configs=[
                ConfigEntry("min.insync.replicas", value, incremental_operation=op)])
            result(admin.incremental_alter_configs([resource]))

    def delivery(topic):
        outcome = []
        producer = ck.Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers,
                                "acks": "all", "retries": 0, "linger.ms": 0,
                                "message.timeout.ms": 5000})
        producer.produce(topic, b"x", partition=0,
                         on_delivery=lambda err, msg: outcome.append(err and err.name()))
        producer.flush(TIMEOUT_S)
        return outcome[0]

    on_every_broker(AlterConfigOpType.SET, "4")
    try:
        poll_until(lambda: delivery("c-dyn") == "NOT_ENOUGH_REPLICAS", TIMEOUT_S,
                   "acks=all refused under the dynamic min.insync.replicas=4")
        assert delivery("c-dyn-own") is None, "the topic's own override wins"
        (broker,) = result(admin.describe_configs([ConfigResource("broker", "0")])).values()
        entry = broker["min.insync.replicas"]
        assert (entry.value, entry.source, entry.is_read_only) == \
            ("4", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)
    finally:
        on_every_broker(AlterConfigOpType.DELETE)
    poll_until(lambda: delivery("c-dyn") is None, TIMEOUT_S, "acks=all accepted again")
