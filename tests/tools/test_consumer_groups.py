"""``minikafka consumer-groups`` and ``console-consumer --group`` on a real cluster:
Kafka's output lines, offset resets, deletion, and one-line errors; every test for both
kinds of group: the brokers' (KIP-848, the consumers' default) and the Kafka paper's
ZooKeeper groups (``--group-protocol zookeeper`` / ``--zookeeper-groups``); the
brokers' classic groups too (``--group-protocol classic``)."""
from __future__ import annotations

import datetime
import subprocess
import sys

import pytest

from node.client import Admin, Consumer, Producer
from node.cluster import Cluster
from tests.conftest import new_cluster_id

pytestmark = [pytest.mark.process, pytest.mark.slow]

BASE_MS = 1_760_000_000_000


KINDS = {"consumer": ([], []),    # group protocol -> (console-consumer flags, tool flags)
         "classic": (["--group-protocol", "classic"], []),
         "zookeeper": (["--group-protocol", "zookeeper"], ["--zookeeper-groups"])}
TYPES = {"consumer": "Consumer", "classic": "Classic", "zookeeper": "ZooKeeper"}


@pytest.fixture(params=sorted(KINDS))
def kind(request):
    return request.param


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = Cluster.up(tmp_path_factory.mktemp("cgroups"), brokers=1,
                         # no 3 s wait before a new classic group's first rebalance
                         config={"default.replication.factor": "1",
                                 "group.initial.rebalance.delay.ms": "0"},
                         cluster_id=new_cluster_id())
    try:
        with Admin(cluster.bootstrap_servers) as admin:
            admin.create_topic("orders", 2, 1)
        with Producer(cluster.bootstrap_servers) as producer:
            for i in range(100):      # record i of each partition written at BASE + i s
                for p in (0, 1):
                    producer.send("orders", b"o%d" % i, partition=p,
                                  timestamp_ms=BASE_MS + 1000 * i)
            producer.flush()
        yield cluster
    finally:
        cluster.down(grace_s=5)


def _cli(cluster, *args, tool="consumer-groups", timeout=60, kind="zookeeper"):
    flags = KINDS[kind][0 if tool == "console-consumer" else 1]
    return subprocess.run([sys.executable, "-m", "node.cli", tool, "--bootstrap-server",
                           cluster.bootstrap_servers, *args, *flags], capture_output=True,
                          text=True, timeout=timeout)


def _table(stdout: str) -> list[list[str]]:
    return [line.split() for line in stdout.splitlines() if line.strip()]


def test_console_consumer_in_a_group_commits_and_describe_shows_kafkas_columns(cluster,
                                                                                kind):
    show = ["--property", "print.partition=true", "print.offset=true"]
    read = _cli(cluster, "--topic", "orders", "--group", f"readers-{kind}",
                "--from-beginning",
                "--max-messages", "150", *show, tool="console-consumer", kind=kind)
    assert read.returncode == 0, read.stderr
    assert len(read.stdout.splitlines()) == 150
    listed = _table(_cli(cluster, "--list", "--type", kind=kind).stdout)
    assert listed[0] == ["GROUP", "TYPE"]
    assert [f"readers-{kind}", TYPES[kind]] in listed[1:]
    described = _cli(cluster, "--describe", "--group", f"readers-{kind}", kind=kind)
    assert described.returncode == 0, described.stderr
    assert f"Consumer group 'readers-{kind}' has no active members." in described.stderr
    rows = _table(described.stdout)
    assert rows[0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                       "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
    verbose = _table(_cli(cluster, "--describe", "--group", f"readers-{kind}", "--verbose",
                          kind=kind).stdout)
    assert verbose[0][3] == "LEADER-EPOCH" and verbose[1][3] == "-"  # none committed
    body = {int(r[2]): r for r in rows[1:]}
    assert sorted(body) == [0, 1]
    assert sum(int(r[3]) for r in body.values()) == 150          # what was read
    assert all(r[4] == "100" and int(r[5]) == 100 - int(r[3]) for r in body.values())
    assert all(r[6:] == ["-", "-", "-"] for r in body.values())
    # A second run in the same group goes on from the committed offsets.
    rest = _cli(cluster, "--topic", "orders", "--group", f"readers-{kind}",
                "--max-messages", "50",
                *show, tool="console-consumer", kind=kind)
    assert rest.returncode == 0, rest.stderr

    def positions(stdout):
        return {tuple(line.split("\t")[:2]) for line in stdout.splitlines()}
    first, second = positions(read.stdout), positions(rest.stdout)
    assert len(first) == 150 and len(second) == 50 and not first & second
    assert first | second == {(f"Partition:{p}", f"Offset:{o}") for p in (0, 1)
                              for o in range(100)}
    # An empty group of any kind is deleted with its offsets.
    deleted = _cli(cluster, "--delete", "--group", f"readers-{kind}", kind=kind)
    assert deleted.returncode == 0, deleted.stderr
    assert f"readers-{kind}" not in _cli(cluster, "--list", kind=kind).stdout.split()


def test_describe_members_and_state_of_a_live_group(cluster, kind):
    member = Consumer(cluster.bootstrap_servers, group_id=f"live-{kind}",
                      auto_offset_reset="earliest",
                      group_protocol=kind, zookeeper_connect=cluster.zookeeper)
    try:
        member.subscribe(["orders"])
        while len(member.assignment()) < 2:
            member.poll(100)
        members = _cli(cluster, "--describe", "--group", f"live-{kind}", "--members",
                       "--verbose", kind=kind)
        rows = _table(members.stdout)
        assert rows[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                           "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH",
                           "TARGET-ASSIGNMENT"]
        epoch = str(member._group._epoch()) if kind == "consumer" else "-"
        target = "orders(0,1)" if kind == "consumer" else "-"
        assert rows[1][:2] == [f"live-{kind}", member.member_id()] and rows[1][4:] == \
            ["2", epoch, "orders(0,1)", epoch, target]
        state = _table(_cli(cluster, "--describe", "--group", f"live-{kind}", "--state",
                            kind=kind).stdout)
        assert state[0][0] == "GROUP" and state[1][0] == f"live-{kind}"
        # The paper's and classic members split by range; KIP-848's default is uniform.
        strategy = "uniform" if kind == "consumer" else "range"
        assert state[1][-3:] == [strategy, "Stable", "1"]
        refused = _cli(cluster, "--reset-offsets", "--group", f"live-{kind}", "--topic",
                       "orders", "--to-earliest", "--execute", kind=kind)
        assert refused.returncode != 0
        assert refused.stderr.strip() == (f"Error: Assignments can only be reset if the "
                                          f"group 'live-{kind}' is inactive, but the current "
                                          f"state is Stable.")
        refused = _cli(cluster, "--delete", "--group", f"live-{kind}", kind=kind)
        assert refused.returncode != 0 and "The group is not empty" in refused.stderr
    finally:
        member.close()


def test_reset_offsets_every_scenario(cluster, kind):
    def plan(*args) -> dict:
        result = _cli(cluster, "--reset-offsets", "--group", f"resets-{kind}", *args,
                      kind=kind)
        assert result.returncode == 0, result.stderr
        rows = _table(result.stdout)
        assert rows[0] == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
        return {int(r[2]): int(r[3]) for r in rows[1:]}

    assert plan("--topic", "orders", "--to-latest", "--execute") == {0: 100, 1: 100}
    assert plan("--topic", "orders:1", "--to-offset", "40", "--execute") == {1: 40}
    assert plan("--topic", "orders", "--shift-by", "-10", "--dry-run") == {0: 90, 1: 30}
    when = datetime.datetime.fromtimestamp((BASE_MS + 25_500) / 1000,
                                           datetime.timezone.utc).isoformat()
    assert plan("--all-topics", "--to-datetime", when, "--dry-run") == {0: 26, 1: 26}
    # Past the end: moved to the end, with Kafka's warning.
    result = _cli(cluster, "--reset-offsets", "--group", f"resets-{kind}", "--topic",
                  "orders:0",
                  "--to-offset", "500", "--execute", kind=kind)
    assert "New offset (500) is higher than latest offset" in result.stderr
    assert plan("--topic", "orders", "--to-earliest", "--dry-run") == {0: 0, 1: 0}
    # Only --execute wrote: 0 -> 100 (the capped 500), 1 -> 40.
    described = _table(_cli(cluster, "--describe", "--group", f"resets-{kind}",
                            kind=kind).stdout)
    assert {int(r[2]): int(r[3]) for r in described[1:]} == {0: 100, 1: 40}
    deleted = _cli(cluster, "--delete", "--group", f"resets-{kind}", kind=kind)
    assert deleted.stdout.strip() == \
        f"Deletion of requested consumer groups ('resets-{kind}') was successful."
    assert f"resets-{kind}" not in _cli(cluster, "--list", kind=kind).stdout.split()


@pytest.mark.parametrize("args, words", [
    (["--describe", "--group", "nobody"], "Consumer group 'nobody' does not exist."),
    (["--reset-offsets", "--group", "g", "--topic", "orders", "--to-datetime", "soon",
      "--execute"], "Error parsing timestamp"),
    (["--reset-offsets", "--group", "g", "--topic", "orders", "--execute"],
     "takes one of these options"),
    (["--reset-offsets", "--group", "g", "--topic", "nope", "--to-latest", "--execute"],
     "Topic 'nope' does not exist"),
    (["--describe"], "takes one of these options: [all-groups], [group]"),
    (["--delete", "--group", "a/b"], "invalid group id"),
])
def test_mistakes_are_one_line(cluster, kind, args, words):
    result = _cli(cluster, *args, kind=kind)
    assert result.returncode != 0
    assert words in result.stderr, result.stderr
    assert len([line for line in result.stderr.splitlines() if line.strip()]) == 1


def test_delete_offsets_of_an_inactive_group(cluster, kind):
    written = _cli(cluster, "--reset-offsets", "--group", f"forget-{kind}", "--topic",
                   "orders",
                   "--to-offset", "7", "--execute", kind=kind)
    assert written.returncode == 0, written.stderr
    deleted = _cli(cluster, "--delete-offsets", "--group", f"forget-{kind}", "--topic",
                   "orders:1",
                   kind=kind)
    if kind == "zookeeper":      # the paper's groups keep offsets until deleted
        assert deleted.returncode != 0 and "brokers' groups only" in deleted.stderr
        return
    assert deleted.returncode == 0, deleted.stderr
    rows = _table(deleted.stdout)
    assert rows[0] == ["Request", "succeed", "for", "deleting", "offsets", "with", "topic",
                       "orders", "group", f"forget-{kind}"]
    assert rows[1] == ["TOPIC", "PARTITION", "STATUS"] and rows[2] == ["orders", "1",
                                                                    "Successful"]
    described = _table(_cli(cluster, "--describe", "--group", f"forget-{kind}",
                            kind=kind).stdout)
    assert {int(r[2]): r[3] for r in described[1:]} == {0: "7"}
