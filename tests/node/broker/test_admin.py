"""Admin request handlers against a real zk_lite through kazoo (no controller running:
these tests check what the handlers write; test_controller_shell checks what the
controller makes of it)."""
from __future__ import annotations

import json

import pytest

from node.wire.errors import ErrorCode
from node.wire import zkdata
from node.broker.apis.admin import (ADMIN_API_KEYS, InvalidConfig, handle_admin_request,
                                    validate_topic_config)
from shm.names import topic_name_error
from node.wire.protocol import ApiKey, ProtocolError

from tests.node.broker.zk_helpers import (StandInConfig, make_client, register_broker,  # noqa: F401
                                   zk_hosts, zk_server)

pytestmark = pytest.mark.process

OK = ErrorCode.NONE


@pytest.fixture
def cluster(make_client):
    """Three registered brokers (sessions kept open) and an admin client."""
    sessions = [make_client() for _ in range(3)]
    for i, session in enumerate(sessions):
        register_broker(session, i)
    return make_client()


def call(zk, api_key, body, config=None):
    return handle_admin_request(api_key, body, zk=zk, config=config or StandInConfig())


def create(zk, name, partitions=-1, rf=-1, assignment=None, configs=None, config=None,
           validate_only=False):
    resp = call(zk, ApiKey.CREATE_TOPICS, {
        "topics": [[name, partitions, rf, assignment, configs or {}]], "timeout_ms": 1000,
        "validate_only": validate_only}, config)
    return resp["topics"][0]


def assignment_of(zk, name):
    return zkdata.decode_assignment(name, zk.get(zkdata.topic_path(name))[0])


def test_admin_api_keys():
    assert ADMIN_API_KEYS == {19, 20, 22, 32, 37, 43, 44, 45, 46}


def test_init_producer_id_hands_out_blocks_reserved_in_the_coordinator(cluster):
    """Each broker process reserves blocks of 1,000 ids with conditional writes of
    /latest_producer_id_block; a known id gets its next epoch."""
    from node.broker.apis.admin import producer_ids
    producer_ids._producer_ids.update(next=0, end=-1)          # a fresh broker process
    first = call(cluster, ApiKey.INIT_PRODUCER_ID, {"producer_id": -1, "producer_epoch": -1})
    second = call(cluster, ApiKey.INIT_PRODUCER_ID, {"producer_id": -1, "producer_epoch": -1})
    assert second["producer_id"] == first["producer_id"] + 1
    assert first["producer_epoch"] == second["producer_epoch"] == 0
    block = json.loads(cluster.get(producer_ids.PRODUCER_ID_BLOCK_PATH)[0])
    assert int(block["block_start"]) <= first["producer_id"] <= int(block["block_end"])
    # another broker process: a new block
    producer_ids._producer_ids.update(next=0, end=-1)
    other = call(cluster, ApiKey.INIT_PRODUCER_ID, {"producer_id": -1, "producer_epoch": -1})
    assert other["producer_id"] == int(block["block_end"]) + 1
    bumped = call(cluster, ApiKey.INIT_PRODUCER_ID, {"producer_id": other["producer_id"],
                                                     "producer_epoch": 4})
    assert (bumped["producer_id"], bumped["producer_epoch"]) == (other["producer_id"], 5)
    with pytest.raises(ProtocolError):
        call(cluster, ApiKey.INIT_PRODUCER_ID, {"producer_id": "x"})


# ------------------------------------------------------------------ CreateTopics

def test_create_topic_places_replicas_by_the_design_rule_and_writes_config_first(cluster):
    assert create(cluster, "orders", 6, 3, configs={"min.insync.replicas": 2}) == \
        ["orders", OK, None]
    assert assignment_of(cluster, "orders") == {
        0: [0, 1, 2], 1: [1, 2, 0], 2: [2, 0, 1], 3: [0, 2, 1], 4: [1, 0, 2], 5: [2, 1, 0]}
    config_data = cluster.get(zkdata.topic_config_path("orders"))[0]
    assert zkdata.decode_topic_config("orders", config_data) == {"min.insync.replicas": "2"}
    config_stat = cluster.exists(zkdata.topic_config_path("orders"))
    topic_stat = cluster.exists(zkdata.topic_path("orders"))
    assert config_stat.czxid <= topic_stat.czxid


def test_create_topic_defaults_come_from_the_broker_config(cluster):
    cfg = StandInConfig(num_partitions=4, default_replication_factor=2)
    assert create(cluster, "d", config=cfg)[1] == OK
    got = assignment_of(cluster, "d")
    assert sorted(got) == [0, 1, 2, 3] and all(len(r) == 2 for r in got.values())


def test_create_topic_rack_aware_when_brokers_have_racks(make_client):
    sessions = [make_client() for _ in range(4)]
    for i, s in enumerate(sessions):
        register_broker(s, i, rack=f"r{i % 2}")
    admin = make_client()
    assert create(admin, "r", 4, 2)[1] == OK
    for replicas in assignment_of(admin, "r").values():
        assert {r % 2 for r in replicas} == {0, 1}


def test_create_topic_errors_have_kafkas_codes(cluster):
    assert create(cluster, "x", 1, 1)[1] == OK
    assert create(cluster, "x", 1, 1)[1] == ErrorCode.TOPIC_ALREADY_EXISTS
    assert create(cluster, "y", 1, 4)[1] == ErrorCode.INVALID_REPLICATION_FACTOR
    assert "larger than available brokers: 3" in create(cluster, "y", 1, 4)[2]
    assert create(cluster, "y", 0, 1)[1] == ErrorCode.INVALID_PARTITIONS
    assert create(cluster, "y", 1, 0)[1] == ErrorCode.INVALID_REPLICATION_FACTOR
    assert create(cluster, "y", 1, 1, configs={"no.such.key": "1"})[1] == \
        ErrorCode.INVALID_CONFIG
    assert create(cluster, "y", 1, 1, configs={"retention.ms": "soon"})[1] == \
        ErrorCode.INVALID_CONFIG
    assert create(cluster, "y", assignment={0: [0, 9]})[1] == \
        ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert create(cluster, "y", 2, -1, assignment={0: [0, 1]})[1] == ErrorCode.INVALID_REQUEST
    for bad in ("", ".", "..", "a" * 250, "bad name", "ünï"):
        assert create(cluster, bad, 1, 1)[1] == ErrorCode.INVALID_TOPIC_EXCEPTION, bad
    assert create(cluster, "a" * 249, 1, 1)[1] == OK
    assert create(cluster, "my.topic", 1, 1)[1] == OK
    assert create(cluster, "my_topic", 1, 1)[1] == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert cluster.exists(zkdata.topic_path("y")) is None


def test_create_topic_with_manual_assignment_and_validate_only(cluster):
    assert create(cluster, "m", assignment={0: [2, 0], 1: [1, 2]})[1] == OK
    assert assignment_of(cluster, "m") == {0: [2, 0], 1: [1, 2]}
    assert create(cluster, "v", 3, 3, validate_only=True) == ["v", OK, None]
    assert cluster.exists(zkdata.topic_path("v")) is None


def test_create_topic_while_marked_for_deletion_is_refused(cluster):
    cluster.create(zkdata.delete_topic_path("gone"), b"", makepath=True)
    assert create(cluster, "gone", 1, 1)[1] == ErrorCode.TOPIC_ALREADY_EXISTS


def test_malformed_bodies_raise_protocol_error(cluster):
    bad_bodies = [
        (ApiKey.CREATE_TOPICS, {}),
        (ApiKey.CREATE_TOPICS, {"topics": [["t", 1]]}),
        (ApiKey.CREATE_TOPICS, {"topics": [["t", "1", 1, None, {}]]}),
        (ApiKey.CREATE_TOPICS, {"topics": [[5, 1, 1, None, {}]]}),
        (ApiKey.DELETE_TOPICS, {"topics": [1]}),
        (ApiKey.CREATE_PARTITIONS, {"topics": [["t"]]}),
        (ApiKey.ELECT_LEADERS, {"election_type": 7, "partitions": None}),
        (ApiKey.ELECT_LEADERS, {"election_type": 0, "partitions": [["t"]]}),
        (ApiKey.ALTER_PARTITION_REASSIGNMENTS, {"partitions": [["t", 0, "x"]]}),
        (ApiKey.LIST_PARTITION_REASSIGNMENTS, {"partitions": 5}),
        (ApiKey.DESCRIBE_CONFIGS, {"topics": "t"}),
        (ApiKey.PRODUCE, {}),
    ]
    for api_key, body in bad_bodies:
        with pytest.raises(ProtocolError):
            call(cluster, api_key, body)
    with pytest.raises(ProtocolError):
        call(cluster, ApiKey.CREATE_TOPICS, ["not", "a", "map"])


def test_topic_name_rules_and_config_validation():
    assert topic_name_error("ok-name_1.x") is None
    assert "illegal" in topic_name_error("a/b")
    assert validate_topic_config({"unclean.leader.election.enable": "TRUE",
                                  "segment.bytes": 1024}) == {
        "unclean.leader.election.enable": "true", "segment.bytes": "1024"}
    for bad in ({"segment.bytes": "1"}, {"min.insync.replicas": "0"},
                {"unclean.leader.election.enable": "maybe"}, {"cleanup.policy": "shred"},
                {"min.cleanable.dirty.ratio": "-0.1"}):
        with pytest.raises(InvalidConfig):
            validate_topic_config(bad)


# ------------------------------------------------------------------ DeleteTopics

def test_delete_topics_queues_existing_topics(cluster):
    create(cluster, "a", 1, 1)
    resp = call(cluster, ApiKey.DELETE_TOPICS, {"topics": ["a", "nope", "b c"], "timeout_ms": 1})
    assert [r[:2] for r in resp["topics"]] == [
        ["a", OK], ["nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION],
        ["b c", ErrorCode.INVALID_TOPIC_EXCEPTION]]
    assert cluster.exists(zkdata.delete_topic_path("a")) is not None
    again = call(cluster, ApiKey.DELETE_TOPICS, {"topics": ["a"], "timeout_ms": 1})
    assert again["topics"][0][1] == OK


# ------------------------------------------------------------------ CreatePartitions

def test_create_partitions_appends_with_kafkas_start_index(cluster):
    create(cluster, "p", 3, 2)
    resp = call(cluster, ApiKey.CREATE_PARTITIONS, {"topics": [["p", 5, None]], "timeout_ms": 1})
    assert resp == {"topics": [["p", OK, None]]}
    got = assignment_of(cluster, "p")
    assert sorted(got) == [0, 1, 2, 3, 4]
    assert got[0] == [0, 1] and got[3][0] == 0 and got[4][0] == 1
    assert all(len(r) == 2 and len(set(r)) == 2 for r in got.values())


def test_create_partitions_errors_and_manual_assignment(cluster):
    create(cluster, "p", 2, 2)
    def one(entry):
        return call(cluster, ApiKey.CREATE_PARTITIONS, {"topics": [entry], "timeout_ms": 1}
                    )["topics"][0][1]
    assert one(["p", 2, None]) == ErrorCode.INVALID_PARTITIONS
    assert one(["p", 1, None]) == ErrorCode.INVALID_PARTITIONS
    assert one(["zz", 3, None]) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert one(["p", 3, [[0]]]) == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert one(["p", 4, [[0, 1]]]) == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert one(["p", 3, [[2, 1]]]) == OK
    assert assignment_of(cluster, "p")[2] == [2, 1]


def test_create_partitions_keeps_a_reassignments_fields(cluster):
    create(cluster, "p", 1, 1)
    data, stat = cluster.get(zkdata.topic_path("p"))
    cluster.set(zkdata.topic_path("p"), zkdata.encode_assignment({0: [1, 0]}, {0: [1]}, {0: [0]}),
                version=stat.version)
    call(cluster, ApiKey.CREATE_PARTITIONS, {"topics": [["p", 2, None]], "timeout_ms": 1})
    raw = json.loads(cluster.get(zkdata.topic_path("p"))[0])
    assert raw["adding_replicas"] == {"0": [1]} and raw["partitions"]["0"] == [1, 0]
    assert "1" in raw["partitions"]


# ------------------------------------------------------------------ ElectLeaders

def _set_state(zk, topic, partition, leader, isr, epoch=0):
    zk.create(zkdata.partition_state_path(topic, partition), zkdata.encode_partition_state(
        zkdata.PartitionState(leader, epoch, tuple(isr), 1)), makepath=True)


def test_elect_leaders_writes_the_election_znode_and_prechecks(cluster):
    create(cluster, "e", assignment={0: [0, 1], 1: [1, 0], 2: [2, 0]})
    _set_state(cluster, "e", 0, 1, [1, 0])     # needs an election
    _set_state(cluster, "e", 1, 1, [1, 0])     # preferred already leads
    _set_state(cluster, "e", 2, 0, [0])        # preferred not in ISR
    resp = call(cluster, ApiKey.ELECT_LEADERS, {
        "election_type": 0, "partitions": [["e", 0], ["e", 1], ["e", 2], ["e", 9]],
        "timeout_ms": 1})
    assert [r[:3] for r in resp["partitions"]] == [
        ["e", 0, OK], ["e", 1, ErrorCode.ELECTION_NOT_NEEDED],
        ["e", 2, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE],
        ["e", 9, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]]
    value = json.loads(cluster.get(zkdata.PREFERRED_REPLICA_ELECTION)[0])
    assert value["partitions"] == [{"topic": "e", "partition": 0}]
    assert "election_type" not in value


def test_elect_leaders_merges_into_a_pending_election_and_refuses_another_type(cluster):
    create(cluster, "e", assignment={0: [0, 1], 1: [1, 0]})
    for p in (0, 1):
        _set_state(cluster, "e", p, [1, 0][p], [0, 1])
    call(cluster, ApiKey.ELECT_LEADERS, {"election_type": 0, "partitions": [["e", 0]],
                                         "timeout_ms": 1})
    call(cluster, ApiKey.ELECT_LEADERS, {"election_type": 0, "partitions": [["e", 1]],
                                         "timeout_ms": 1})
    value = json.loads(cluster.get(zkdata.PREFERRED_REPLICA_ELECTION)[0])
    assert value["partitions"] == [{"topic": "e", "partition": 0},
                                   {"topic": "e", "partition": 1}]
    call(cluster, ApiKey.ELECT_LEADERS, {"election_type": 0, "partitions": None,
                                         "timeout_ms": 1})
    assert json.loads(cluster.get(zkdata.PREFERRED_REPLICA_ELECTION)[0])["partitions"] is None
    resp = call(cluster, ApiKey.ELECT_LEADERS, {"election_type": 1, "partitions": None,
                                                "timeout_ms": 1})
    assert resp["error"] == ErrorCode.REQUEST_TIMED_OUT


def test_unclean_election_request_is_marked_in_the_znode(cluster):
    create(cluster, "u", assignment={0: [0, 1]})
    _set_state(cluster, "u", 0, -1, [1])          # offline, though replicas are alive
    resp = call(cluster, ApiKey.ELECT_LEADERS, {"election_type": 1, "partitions": [["u", 0]],
                                                "timeout_ms": 1})
    assert resp["partitions"][0][2] == OK
    election = json.loads(cluster.get(zkdata.PREFERRED_REPLICA_ELECTION)[0])
    assert election["election_type"] == "unclean"


# ------------------------------------------------------------------ reassignments

def test_alter_and_list_partition_reassignments(cluster):
    create(cluster, "r", assignment={0: [0, 1], 1: [1, 2]})
    resp = call(cluster, ApiKey.ALTER_PARTITION_REASSIGNMENTS, {
        "partitions": [["r", 0, [1, 2]], ["r", 1, [1, 7]], ["r", 5, [0]], ["r", 1, [1, 1]]],
        "timeout_ms": 1})
    assert [x[2] for x in resp["partitions"]] == [
        OK, ErrorCode.INVALID_REPLICA_ASSIGNMENT, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.INVALID_REPLICA_ASSIGNMENT]
    assert zkdata.decode_reassignment(cluster.get(zkdata.REASSIGN_PARTITIONS)[0]) == \
        {("r", 0): [1, 2]}
    listed = call(cluster, ApiKey.LIST_PARTITION_REASSIGNMENTS, {"partitions": None})
    assert listed == {"error": OK, "partitions": [["r", 0, [1, 2, 0], [2], [0]]]}
    # A second request merges into the znode.
    call(cluster, ApiKey.ALTER_PARTITION_REASSIGNMENTS, {
        "partitions": [["r", 1, [2, 0]]], "timeout_ms": 1})
    assert len(zkdata.decode_reassignment(cluster.get(zkdata.REASSIGN_PARTITIONS)[0])) == 2
    listed = call(cluster, ApiKey.LIST_PARTITION_REASSIGNMENTS, {"partitions": [["r", 1]]})
    assert [p[:2] for p in listed["partitions"]] == [["r", 1]]
    # Cancel both: the znode goes; cancelling again says there is nothing to cancel.
    resp = call(cluster, ApiKey.ALTER_PARTITION_REASSIGNMENTS, {
        "partitions": [["r", 0, None], ["r", 1, None]], "timeout_ms": 1})
    assert [x[2] for x in resp["partitions"]] == [OK, OK]
    assert cluster.exists(zkdata.REASSIGN_PARTITIONS) is None
    resp = call(cluster, ApiKey.ALTER_PARTITION_REASSIGNMENTS, {
        "partitions": [["r", 0, None]], "timeout_ms": 1})
    assert resp["partitions"][0][2] == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS


def test_list_reassignments_reads_the_controllers_adding_and_removing(cluster):
    create(cluster, "r", assignment={0: [0, 1]})
    call(cluster, ApiKey.ALTER_PARTITION_REASSIGNMENTS, {"partitions": [["r", 0, [2, 1]]],
                                                         "timeout_ms": 1})
    _, stat = cluster.get(zkdata.topic_path("r"))
    cluster.set(zkdata.topic_path("r"),
                zkdata.encode_assignment({0: [2, 1, 0]}, {0: [2]}, {0: [0]}),
                version=stat.version)
    listed = call(cluster, ApiKey.LIST_PARTITION_REASSIGNMENTS, {"partitions": None})
    assert listed["partitions"] == [["r", 0, [2, 1, 0], [2], [0]]]


# ------------------------------------------------------------------ DescribeConfigs

def test_describe_configs_overrides_over_broker_defaults(cluster):
    create(cluster, "c", 1, 1, configs={"retention.ms": "1000"})
    cfg = StandInConfig(min_insync_replicas=2, unclean_leader_election_enable=True)
    resp = call(cluster, ApiKey.DESCRIBE_CONFIGS, {"topics": ["c", "zz"]}, cfg)
    (name, error, values), missing = resp["topics"]
    assert (name, error) == ("c", OK)
    assert values["retention.ms"] == "1000"
    assert values["min.insync.replicas"] == "2"
    assert values["unclean.leader.election.enable"] == "true"
    assert values["segment.bytes"] == str(1024 ** 3)
    assert missing == ["zz", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, {}]


# kazoo's connection thread draws from the global `random` (ping jitter) while
# hypothesis generates, which hypothesis reports as if a strategy had used it.
@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")
def test_garbage_bodies_either_answer_or_raise_protocol_error(cluster):
    """h11's rule: any input gives an answer or the protocol error, nothing else."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 5), st.text(max_size=3),
                        st.sampled_from(["t", "x", "r"]))
    values = st.recursive(scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=3), inner, max_size=3)),
        max_leaves=12)
    keys = st.sampled_from(["topics", "partitions", "election_type", "timeout_ms",
                            "validate_only", "x"])
    bodies = st.dictionaries(keys, values, max_size=4)
    create(cluster, "t", assignment={0: [0, 1]})

    @settings(max_examples=60, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(api_key=st.sampled_from(sorted(ADMIN_API_KEYS)), body=bodies)
    def check(api_key, body):
        try:
            resp = call(cluster, api_key, body)
        except ProtocolError:
            return
        assert isinstance(resp, dict)

    check()
