"""IncrementalAlterConfigs, DescribeConfigs' sources and synonyms, CreateTopics' shape
and configs, and CreatePartitions' validate_only: the admin handlers against a real
zk_lite through kazoo (no controller running)."""
from __future__ import annotations

import pytest

from node.broker.apis.admin import handle_admin_request
from node.broker.apis.admin.alter_configs import (OP_APPEND, OP_DELETE, OP_SET, OP_SUBTRACT,
                                                  RESOURCE_BROKER, RESOURCE_TOPIC)
from node.broker.apis.admin.configs import (SOURCE_DEFAULT, SOURCE_DYNAMIC_BROKER,
                                            SOURCE_DYNAMIC_DEFAULT_BROKER,
                                            SOURCE_STATIC_BROKER, SOURCE_TOPIC)
from node.config import BrokerConfig
from node.wire import zkdata
from node.wire.errors import ErrorCode
from node.wire.protocol import ApiKey, ProtocolError

from tests.node.broker.zk_helpers import (StandInConfig, make_client, register_broker,  # noqa: F401
                                          zk_hosts, zk_server)

pytestmark = pytest.mark.process

OK = ErrorCode.NONE
CONFIG = BrokerConfig.from_props({"broker.id": "0", "zookeeper.connect": "127.0.0.1:1",
                                  "log.retention.ms": "5000", "min.insync.replicas": "1"})


@pytest.fixture
def zk(make_client):
    sessions = [make_client() for _ in range(3)]
    for i, session in enumerate(sessions):
        register_broker(session, i)
    return make_client()


def call(zk, api_key, body, config=CONFIG):
    return handle_admin_request(api_key, body, zk=zk, config=config)


def create(zk, name, partitions=2, rf=2, configs=None, **extra):
    return call(zk, ApiKey.CREATE_TOPICS, {"topics": [[name, partitions, rf, None,
                                                       configs or {}]],
                                           "timeout_ms": 1000, **extra})


def alter(zk, resources, validate_only=False):
    return call(zk, ApiKey.INCREMENTAL_ALTER_CONFIGS,
                {"resources": resources, "validate_only": validate_only})["resources"]


def overrides(zk, name):
    return zkdata.decode_topic_config(name, zk.get(zkdata.topic_config_path(name))[0])


def test_incremental_alter_sets_deletes_and_validates_topic_overrides(zk):
    create(zk, "t", configs={"retention.ms": "1000", "min.insync.replicas": "2"})
    assert alter(zk, [[RESOURCE_TOPIC, "t", [["retention.ms", OP_SET, "777"],
                                             ["min.insync.replicas", OP_DELETE, None],
                                             ["segment.bytes", OP_SET, "1048576"]]]]) == \
        [[RESOURCE_TOPIC, "t", OK, None]]
    assert overrides(zk, "t") == {"retention.ms": "777", "segment.bytes": "1048576"}
    # validate_only: checked, not written
    assert alter(zk, [[RESOURCE_TOPIC, "t", [["retention.ms", OP_SET, "1"]]]],
                 validate_only=True)[0][2] == OK
    assert overrides(zk, "t")["retention.ms"] == "777"
    # Kafka's codes for what is refused; nothing written
    cases = [
        ([["no.such", OP_SET, "1"]], ErrorCode.INVALID_CONFIG),
        ([["retention.ms", OP_SET, "soon"]], ErrorCode.INVALID_CONFIG),
        ([["retention.ms", OP_APPEND, "1"]], ErrorCode.INVALID_CONFIG),
        ([["cleanup.policy", OP_APPEND, "shred"]], ErrorCode.INVALID_CONFIG),
        ([["min.cleanable.dirty.ratio", OP_SET, "2"]], ErrorCode.INVALID_CONFIG),
        ([["retention.ms", OP_SET, "1"], ["retention.ms", OP_DELETE, None]],
         ErrorCode.INVALID_REQUEST),
        ([["retention.ms", 9, "1"]], ErrorCode.INVALID_REQUEST),
    ]
    for ops, code in cases:
        got = alter(zk, [[RESOURCE_TOPIC, "t", ops]])[0]
        assert got[2] == code, (ops, got)
        assert got[3]
    assert overrides(zk, "t") == {"retention.ms": "777", "segment.bytes": "1048576"}
    # a list key: APPEND of what is there already and SUBTRACT of something absent
    assert alter(zk, [[RESOURCE_TOPIC, "t", [["cleanup.policy", OP_APPEND, "delete"]]]]
                 )[0][2] == OK
    assert overrides(zk, "t")["cleanup.policy"] == "delete"
    assert alter(zk, [[RESOURCE_TOPIC, "t", [["cleanup.policy", OP_SUBTRACT, "compact"]]]]
                 )[0][2] == OK
    # compaction (issue 26): APPEND compact gives both policies, SUBTRACT takes it away
    assert alter(zk, [[RESOURCE_TOPIC, "t", [["cleanup.policy", OP_APPEND, "compact"]]]]
                 )[0][2] == OK
    assert overrides(zk, "t")["cleanup.policy"] == "delete,compact"
    assert alter(zk, [[RESOURCE_TOPIC, "t", [["cleanup.policy", OP_SUBTRACT, "delete"]]]]
                 )[0][2] == OK
    assert overrides(zk, "t")["cleanup.policy"] == "compact"
    assert alter(zk, [[RESOURCE_TOPIC, "t", [["cleanup.policy", OP_SET, "delete"]]]]
                 )[0][2] == OK
    assert alter(zk, [[RESOURCE_TOPIC, "nope", [["retention.ms", OP_SET, "1"]]]])[0][2] == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert alter(zk, [[RESOURCE_TOPIC, "", []]])[0][2] == ErrorCode.INVALID_REQUEST
    assert alter(zk, [[3, "x", []]])[0][2] == ErrorCode.INVALID_REQUEST


def test_dynamic_broker_configs_per_broker_and_cluster_wide(zk):
    got = alter(zk, [[RESOURCE_BROKER, "0", [["log.retention.ms", OP_SET, "1234"],
                                             ["min.insync.replicas", OP_SET, "2"]]],
                     [RESOURCE_BROKER, "", [["compression.type", OP_SET, "LZ4"]]]])
    assert [g[2] for g in got] == [OK, OK]
    config_of = lambda b: zkdata.decode_topic_config("b", zk.get(zkdata.broker_config_path(b))[0])
    assert config_of(0) == {"log.retention.ms": "1234", "min.insync.replicas": "2"}
    assert config_of("") == {"compression.type": "lz4"}
    assert alter(zk, [[RESOURCE_BROKER, "0", [["min.insync.replicas", OP_DELETE, None]]]]
                 )[0][2] == OK
    assert config_of(0) == {"log.retention.ms": "1234"}
    refused = alter(zk, [[RESOURCE_BROKER, "0", [["num.partitions", OP_SET, "3"]]],
                         [RESOURCE_BROKER, "", [["no.such.key", OP_SET, "1"]]],
                         [RESOURCE_BROKER, "0", [["log.retention.ms", OP_SET, "soon"]]],
                         [RESOURCE_BROKER, "0", [["log.retention.ms", OP_APPEND, "1"]]],
                         [RESOURCE_BROKER, "x", [["log.retention.ms", OP_SET, "1"]]]])
    assert [g[2] for g in refused] == [ErrorCode.INVALID_CONFIG] * 4 + \
        [ErrorCode.INVALID_REQUEST]
    assert "Cannot update these configs dynamically" in refused[0][3]
    assert config_of(0) == {"log.retention.ms": "1234"}
    # the compaction keys' broker synonyms are dynamic too (the defaults of the topic
    # keys); the cleaner's own keys are read at start-up
    assert alter(zk, [[RESOURCE_BROKER, "", [["log.cleanup.policy", OP_APPEND, "compact"],
                                             ["log.cleaner.min.cleanable.ratio", OP_SET,
                                              "0.2"]]]])[0][2] == OK
    assert config_of("") == {"compression.type": "lz4", "log.cleanup.policy": "delete,compact",
                             "log.cleaner.min.cleanable.ratio": "0.2"}
    refused = alter(zk, [[RESOURCE_BROKER, "", [["log.cleaner.min.cleanable.ratio", OP_SET,
                                                 "7"]]],
                         [RESOURCE_BROKER, "0", [["log.cleaner.threads", OP_SET, "2"]]]])
    assert [g[2] for g in refused] == [ErrorCode.INVALID_CONFIG] * 2


def test_malformed_alter_bodies_raise_protocol_error(zk):
    for body in ({}, {"resources": "x"}, {"resources": [[2, "t"]]},
                 {"resources": [[2, "t", [["k", "set", "v"]]]]},
                 {"resources": [[2, "t", [["k", 0, 5]]]]}):
        with pytest.raises(ProtocolError):
            call(zk, ApiKey.INCREMENTAL_ALTER_CONFIGS, body)


def test_describe_configs_gives_kafkas_sources_and_synonyms(zk):
    create(zk, "d", configs={"retention.ms": "1000"})
    resp = call(zk, ApiKey.DESCRIBE_CONFIGS, {"topics": ["d", "zz"], "brokers": [0, 1],
                                              "include_sources": True})
    (name, code, values, entries), missing = resp["topics"]
    assert (name, code) == ("d", OK) and missing[1] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    by_key = {e[0]: e for e in entries}
    assert set(values) == set(by_key)
    key, value, source, read_only, sensitive, synonyms, _ = by_key["retention.ms"]
    assert (value, source, read_only, sensitive) == ("1000", SOURCE_TOPIC, False, False)
    assert synonyms == [["retention.ms", "1000", SOURCE_TOPIC],
                        ["log.retention.ms", "5000", SOURCE_STATIC_BROKER],
                        ["log.retention.ms", str(7 * 24 * 3600 * 1000), SOURCE_DEFAULT]]
    assert by_key["segment.bytes"][1:3] == [str(1024 ** 3), SOURCE_DEFAULT]
    (broker, bcode, bvalues, bentries), other = resp["brokers"]
    assert (broker, bcode) == (0, OK) and other[1] == ErrorCode.INVALID_REQUEST
    bkeys = {e[0]: e for e in bentries}
    assert bkeys["log.retention.ms"][1:4] == ["5000", SOURCE_STATIC_BROKER, False]  # dynamic
    assert bkeys["num.partitions"][1:4] == ["1", SOURCE_DEFAULT, True]
    assert bvalues["broker.id"] == "0"
    # only the keys asked for
    resp = call(zk, ApiKey.DESCRIBE_CONFIGS, {"topics": ["d"], "include_sources": True,
                                              "keys": {"d": ["retention.ms", "x"]}})
    assert [e[0] for e in resp["topics"][0][3]] == ["retention.ms"]


def test_create_topics_answers_the_shape_and_configs_it_made(zk):
    resp = create(zk, "s", 3, 2, {"min.insync.replicas": "2"}, include_configs=True)
    assert resp["topics"] == [["s", OK, None]]
    partitions, rf, entries = resp["details"]["s"]
    assert (partitions, rf) == (3, 2)
    assert {e[0]: e[1:3] for e in entries}["min.insync.replicas"] == ["2", SOURCE_TOPIC]
    # validate_only answers the same and writes nothing
    resp = create(zk, "v", -1, -1, include_configs=True, validate_only=True)
    assert resp["details"]["v"][:2] == [1, 1]
    assert zk.exists(zkdata.topic_path("v")) is None
    assert "s" not in create(zk, "s", include_configs=True)["details"]


def test_create_partitions_validate_only_writes_nothing(zk):
    create(zk, "p", 2, 1)
    body = {"topics": [["p", 4, None]], "timeout_ms": 1000, "validate_only": True}
    assert call(zk, ApiKey.CREATE_PARTITIONS, body)["topics"] == [["p", OK, None]]
    assert len(zkdata.decode_assignment("p", zk.get(zkdata.topic_path("p"))[0])) == 2
    body["topics"] = [["p", 1, None]]
    assert call(zk, ApiKey.CREATE_PARTITIONS, body)["topics"][0][1] == \
        ErrorCode.INVALID_PARTITIONS


def test_replace_makes_the_sets_the_whole_override_set(zk):
    create(zk, "r", configs={"retention.ms": "1000", "min.insync.replicas": "2"})
    body = {"resources": [[RESOURCE_TOPIC, "r", [["retention.bytes", OP_SET, "99"]]]],
            "validate_only": False, "replace": True}
    assert call(zk, ApiKey.INCREMENTAL_ALTER_CONFIGS, body)["resources"][0][2] == OK
    assert overrides(zk, "r") == {"retention.bytes": "99"}
    body["resources"] = [[RESOURCE_TOPIC, "r", [["retention.bytes", OP_DELETE, None]]]]
    assert call(zk, ApiKey.INCREMENTAL_ALTER_CONFIGS, body)["resources"][0][2] == \
        ErrorCode.INVALID_REQUEST


def test_describe_configs_shows_dynamic_broker_configs_as_kafka(zk):
    create(zk, "dyn")
    alter(zk, [[RESOURCE_BROKER, "", [["log.retention.ms", OP_SET, "3000"],
                                      ["min.insync.replicas", OP_SET, "2"]]],
               [RESOURCE_BROKER, "0", [["log.retention.ms", OP_SET, "2000"]]]])
    resp = call(zk, ApiKey.DESCRIBE_CONFIGS, {"topics": ["dyn"], "brokers": [0],
                                              "include_sources": True})
    topic = {e[0]: e for e in resp["topics"][0][3]}
    assert topic["retention.ms"][1:3] == ["2000", SOURCE_DYNAMIC_BROKER]
    assert topic["retention.ms"][5] == [
        ["log.retention.ms", "2000", SOURCE_DYNAMIC_BROKER],
        ["log.retention.ms", "3000", SOURCE_DYNAMIC_DEFAULT_BROKER],
        ["log.retention.ms", "5000", SOURCE_STATIC_BROKER],
        ["log.retention.ms", str(7 * 24 * 3600 * 1000), SOURCE_DEFAULT]]
    assert topic["min.insync.replicas"][1:3] == ["2", SOURCE_DYNAMIC_DEFAULT_BROKER]
    broker = {e[0]: e for e in resp["brokers"][0][3]}
    assert broker["log.retention.ms"][1:4] == ["2000", SOURCE_DYNAMIC_BROKER, False]
    assert broker["num.partitions"][3] is True, "a static key is read-only"

