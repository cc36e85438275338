"""``minikafka consumer-groups`` without a cluster: its flags, Kafka's columns for what
it prints, and a classic member's assignment bytes (Kafka's ConsumerProtocol)."""
from __future__ import annotations

import argparse
import struct

import pytest

from node.tools import consumer_groups as tool
from node.tools.groups_broker import decode_assignment
from node.tools.groups_model import CLASSIC, CONSUMER, GroupInfo, Listed, MemberInfo


def parse(*argv):
    parser = argparse.ArgumentParser()
    tool.add_arguments(parser)
    return parser.parse_args(["--bootstrap-server", "127.0.0.1:1", *argv])


def consumer_group() -> GroupInfo:
    return GroupInfo(
        "orders-app", CONSUMER, "Stable", "127.0.0.1:9092  (1)", "uniform",
        [MemberInfo("m-2", "/127.0.0.1", "c2", (("orders", 1),)),
         MemberInfo("m-1", "/127.0.0.1", "c1", (("orders", 0), ("audit", 3), ("orders", 2)))],
        {("orders", 0): 5}, group_epoch=7, assignment_epoch=6)


def test_flags_parse_as_kafkas():
    args = parse("--describe", "--group", "g", "--state")
    assert args.describe and args.state == "" and not args.zookeeper_groups
    args = parse("--list", "--state", "Stable,Empty", "--type", "consumer")
    assert args.state == "Stable,Empty" and args.type == "consumer"
    args = parse("--reset-offsets", "--group", "g", "--topic", "t:0,1", "--to-offset", "4",
                 "--execute", "--zookeeper-groups")
    assert args.to_offset == 4 and args.topic == ["t:0,1"] and args.zookeeper_groups
    assert tool._topic_specs(args) == [("t", [0, 1])]
    with pytest.raises(SystemExit):
        parse("--list", "--describe")


def test_state_prints_kafkas_columns_and_the_epochs_with_verbose(capsys):
    tool._print_state(consumer_group(), verbose=False)
    lines = [line for line in capsys.readouterr().out.splitlines() if line]
    assert lines[0].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY",
                                "STATE", "#MEMBERS"]
    assert lines[1].split() == ["orders-app", "127.0.0.1:9092", "(1)", "uniform", "Stable",
                                "2"]
    # Kafka's widths: the coordinator column at least 25, then 25, 20, 15.
    assert lines[0].index("ASSIGNMENT-STRATEGY") == 25 + 1 + 25 + 1
    tool._print_state(consumer_group(), verbose=True)
    lines = [line for line in capsys.readouterr().out.splitlines() if line]
    assert lines[0].split()[-3:] == ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
    assert lines[1].split()[-3:] == ["7", "6", "2"]


def columns(lines: list[str]) -> list[dict]:
    """Rows cut at the header's column starts (values may hold spaces)."""
    header = lines[0]
    names = header.split()
    starts = [header.index(n) for n in names]
    return [{n: line[a:b].strip() for n, a, b in zip(names, starts, starts[1:] + [None])}
            for line in lines[1:]]


def test_members_verbose_shows_kafka_4s_epochs_and_assignments(capsys):
    info = consumer_group()
    info.members[1] = MemberInfo("m-1", "/127.0.0.1", "c1",
                                 (("orders", 0), ("audit", 3), ("orders", 2)),
                                 member_epoch=6, target=(("orders", 0), ("audit", 3)))
    tool._print_members(info, verbose=True)
    lines = [line for line in capsys.readouterr().out.splitlines() if line]
    assert lines[0].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                                "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH",
                                "TARGET-ASSIGNMENT"]
    rows = columns(lines)
    assert rows[0] == {"GROUP": "orders-app", "CONSUMER-ID": "m-1", "HOST": "/127.0.0.1",
                       "CLIENT-ID": "c1", "#PARTITIONS": "3", "CURRENT-EPOCH": "6",
                       "CURRENT-ASSIGNMENT": "audit(3), orders(0,2)", "TARGET-EPOCH": "6",
                       "TARGET-ASSIGNMENT": "audit(3), orders(0)"}
    assert rows[1]["CURRENT-EPOCH"] == "-" and rows[1]["TARGET-ASSIGNMENT"] == "-"
    tool._print_members(info, verbose=False)
    lines = [line for line in capsys.readouterr().out.splitlines() if line]
    assert lines[0].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
    assert lines[1].split() == ["orders-app", "m-1", "/127.0.0.1", "c1", "3"]


def test_static_members_get_the_group_instance_id_column(capsys):
    info = consumer_group()
    info.members = [MemberInfo("m-1", "/h", "c", (), "instance-a")]
    tool._print_members(info, verbose=False)
    header = capsys.readouterr().out.splitlines()[1].split()
    assert header == ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID",
                      "#PARTITIONS"]


def test_list_shows_and_filters_type_and_state(capsys):
    listed = [Listed("a", CLASSIC, "Empty"), Listed("b", CONSUMER, "Stable"),
              Listed("c", CONSUMER, "Empty")]
    tool._list(parse("--list"), listed)
    assert capsys.readouterr().out.split() == ["a", "b", "c"]
    tool._list(parse("--list", "--type"), listed)
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert rows == [["GROUP", "TYPE"], ["a", "Classic"], ["b", "Consumer"],
                    ["c", "Consumer"]]
    tool._list(parse("--list", "--type", "consumer", "--state", "empty"), listed)
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert rows == [["GROUP", "TYPE", "STATE"], ["c", "Consumer", "Empty"]]


def test_a_classic_assignment_is_decoded_from_kafkas_consumer_protocol():
    def string(s: str) -> bytes:
        return struct.pack(">h", len(s)) + s.encode()
    data = struct.pack(">hi", 1, 2) + string("orders") + struct.pack(">iii", 2, 0, 3) + \
        string("audit") + struct.pack(">ii", 1, 7) + struct.pack(">i", -1)
    assert decode_assignment(data) == [("orders", 0), ("orders", 3), ("audit", 7)]
    assert decode_assignment(b"") == [] and decode_assignment(None) == []
    assert decode_assignment(data[:12]) == []        # cut short: nothing made up
