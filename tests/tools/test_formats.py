"""The tools' pure parts: Kafka's output lines and file formats, without a cluster."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from node.client.admin import Reassignment
from node.client import ConsumerRecord, PartitionMetadata
from node.config import ConfigError
from node.tools.common import ToolError, parse_broker_list, parse_key_values, topic_filter
from node.tools.console import Formatter
from node.tools.reassign import (format_reassignment_json, list_text,
                                 parse_reassignment_json, parse_topics_json, status_lines)
from node.cluster.scale import plan_lines
from node.tools.topics import default_configs, describe_lines, parse_replica_assignment


def pm(topic, partition, leader, replicas, isr):
    return PartitionMetadata(topic, partition, leader, 0, tuple(replicas), tuple(isr), ())


DESCRIPTIONS = {"t": [pm("t", 0, 1, [1, 2, 0], [1, 2, 0]), pm("t", 1, -1, [2, 0, 1], []),
                      pm("t", 2, 0, [0, 1, 2], [0, 1])]}


def options(**flags):
    return SimpleNamespace(**flags)


def test_describe_prints_kafkas_summary_and_partition_lines():
    configs = {"t": {**default_configs(), "min.insync.replicas": "2"}}
    lines = describe_lines(DESCRIPTIONS, configs, {}, {0, 1, 2}, options(), default_configs())
    assert lines == [
        "Topic: t\tPartitionCount: 3\tReplicationFactor: 3\tConfigs: min.insync.replicas=2",
        "\tTopic: t\tPartition: 0\tLeader: 1\tReplicas: 1,2,0\tIsr: 1,2,0",
        "\tTopic: t\tPartition: 1\tLeader: none\tReplicas: 2,0,1\tIsr: ",
        "\tTopic: t\tPartition: 2\tLeader: 0\tReplicas: 0,1,2\tIsr: 0,1",
    ]


def test_describe_filters_and_reassignment_columns():
    defaults = default_configs()
    under = describe_lines(DESCRIPTIONS, {}, {}, {0, 1, 2},
                           options(under_replicated_partitions=True), defaults)
    assert [line.split("\t")[2] for line in under] == ["Partition: 1", "Partition: 2"]
    unavailable = describe_lines(DESCRIPTIONS, {}, {}, {0, 2},
                                 options(unavailable_partitions=True), defaults)
    assert [line.split("\t")[2] for line in unavailable] == ["Partition: 0", "Partition: 1"]
    moving = {("t", 0): Reassignment([1, 2, 0, 3], [3], [0])}
    lines = describe_lines(DESCRIPTIONS, {}, moving, {0, 1, 2}, options(), defaults)
    assert lines[1].endswith("\tAdding Replicas: 3\tRemoving Replicas: 0")
    assert "ReplicationFactor: 3" in lines[0]


def test_reassignment_json_round_trip_and_kafkas_checks():
    text = format_reassignment_json({("t", 1): [2, 0], ("t", 0): [1, 2]})
    assert text == ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2],'
                    '"log_dirs":["any","any"]},{"topic":"t","partition":1,"replicas":[2,0],'
                    '"log_dirs":["any","any"]}]}')
    assert parse_reassignment_json(json.loads(text)) == {("t", 0): [1, 2], ("t", 1): [2, 0]}
    bad = [({"partitions": []}, "cannot be empty"),
           ({"partitions": [{"topic": "t", "partition": 0, "replicas": []}]}, "cannot be empty"),
           ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 1]}]},
            "t-0 contains multiple entries for 1"),
           ({"partitions": [{"topic": "t", "partition": 0, "replicas": [1]}] * 2},
            "duplicate topic partitions: t-0"),
           ({"partitions": [{"topic": "t"}]}, "needs"),
           ({"version": 2, "partitions": []}, "Not supported version"),
           ([1, 2], "not a JSON object")]
    for data, message in bad:
        with pytest.raises(ToolError, match=message):
            parse_reassignment_json(data)
    assert parse_topics_json({"version": 1, "topics": [{"topic": "a"}, {"topic": "b"}]}) == \
        ["a", "b"]
    with pytest.raises(ToolError, match="duplicate entries: a"):
        parse_topics_json({"topics": [{"topic": "a"}, {"topic": "a"}]})


def test_verify_and_list_messages_are_kafkas():
    targets = {("t", 0): [1, 2], ("t", 1): [2, 0], ("t", 2): [0, 1]}
    found = {("t", 0): (True, [1, 2]), ("t", 1): (False, [2, 0, 1]), ("t", 2): (True, [0, 2])}
    assert status_lines(targets, found) == [
        "Status of partition reassignment:",
        "Reassignment of partition t-0 is completed.",
        "Reassignment of partition t-1 is still in progress.",
        "There is no active reassignment of partition t-2, but replica set is 0,2 rather "
        "than 0,1.",
    ]
    assert list_text({}) == "No partition reassignments found."
    assert list_text({("t", 1): Reassignment([2, 0, 1], [2], [1])}) == \
        "Current partition reassignments:\nt-1: replicas: 2,0,1. adding: 2. removing: 1."


def test_default_message_formatter_order_and_separators():
    record = ConsumerRecord("t", 2, 7, 1234, b"k", b"v")
    assert Formatter({}).format(record) == b"v\n"
    full = Formatter({"print.timestamp": "true", "print.partition": "true",
                      "print.offset": "true", "print.key": "true"})
    assert full.format(record) == b"CreateTime:1234\tPartition:2\tOffset:7\tk\tv\n"
    custom = Formatter({"print.key": "true", "key.separator": ":", "null.literal": "-"})
    assert custom.format(ConsumerRecord("t", 0, 0, 0, None, b"v")) == b"-:v\n"


def test_flag_parsers_reject_bad_input_with_one_line():
    assert parse_key_values(["a=1", " b = x=y "], "--config") == {"a": "1", "b": "x=y"}
    with pytest.raises(ConfigError, match="Invalid --config 'novalue'.*key=value"):
        parse_key_values(["novalue"], "--config")
    with pytest.raises(ConfigError, match="Invalid --override '=v'"):
        parse_key_values(["=v"], "--override")
    assert parse_key_values(["acks=1 linger.ms=5", "x=y"], "--producer-props",
                            split_whitespace=True) == {"acks": "1", "linger.ms": "5", "x": "y"}
    assert parse_broker_list("0,1,2") == [0, 1, 2]
    for text, message in (("0,x", "comma-separated"), ("1,1", "duplicate entries: 1")):
        with pytest.raises(ToolError, match=message):
            parse_broker_list(text)
    assert parse_replica_assignment("0:1,1:2") == {0: [0, 1], 1: [1, 2]}
    with pytest.raises(ToolError, match="different replication factor"):
        parse_replica_assignment("0:1,2")
    matches = topic_filter("orders.*,audit")
    assert [t for t in ("orders", "orders-eu", "audit", "audits") if matches(t)] == \
        ["orders", "orders-eu", "audit"]


def test_plan_lines_name_the_replicas_that_move():
    lines = plan_lines({("t", 0): [0, 1, 2], ("t", 1): [1, 2, 0]},
                       {("t", 0): [3, 1, 2]})
    assert lines == ["  t-0: replicas 0,1,2 -> 3,1,2 (moves 0->3)"]


def test_add_config_takes_a_list_value_in_brackets_as_kafka_configs():
    from node.tools.common import ToolError
    from node.tools.configs import split_add_config
    assert split_add_config("cleanup.policy=[compact,delete],retention.ms=5") == \
        ["cleanup.policy=compact,delete", "retention.ms=5"]
    assert split_add_config("a=1,b=2") == ["a=1", "b=2"]
    assert split_add_config("") == []
    for bad in ("cleanup.policy=[compact", "a=1]"):
        with pytest.raises(ToolError, match="unbalanced"):
            split_add_config(bad)
