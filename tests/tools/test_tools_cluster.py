"""The tools as a user runs them (``python -m node.cli ...``) against one real 3-broker
cluster shared by the module: Kafka's lines on stdout, one-line errors on stderr."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from node.wire import errors
from node.client import Admin
from node.cluster import Cluster
from shm.names import cluster_objects
from tests.conftest import new_cluster_id

pytestmark = [pytest.mark.process, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
CONFIG = {"zookeeper.session.timeout.ms": "3000", "replica.lag.time.max.ms": "3000",
          "replica.fetch.wait.max.ms": "50", "auto.leader.rebalance.enable": "false"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster_id = new_cluster_id()
    cluster = Cluster.up(tmp_path_factory.mktemp("tools"), brokers=3, config=CONFIG,
                         cluster_id=cluster_id)
    try:
        yield cluster
    finally:
        cluster.down(grace_s=5)
        assert cluster_objects(cluster_id) == []


def tool(*args, stdin: str | None = None, timeout_s: float = 120):
    return subprocess.run([sys.executable, "-m", "node.cli", *map(str, args)], cwd=REPO,
                          input=stdin, capture_output=True, text=True, timeout=timeout_s)


def ok(*args, **kwargs) -> str:
    done = tool(*args, **kwargs)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def one_line_error(done, *fragments: str) -> str:
    """The run failed with exactly one line on stderr (no traceback) naming the problem."""
    assert done.returncode != 0, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def describe(admin, topic):
    return admin.describe_topics([topic])[topic]


def partition_0(admin, topic):
    """For waits across broker kills: None while no broker answers this client."""
    try:
        return describe(admin, topic)[0]
    except errors.NetworkException:
        return None


def test_topics_create_describe_list_alter_delete(cluster):
    b = cluster.bootstrap_servers
    assert ok("topics", "--bootstrap-server", b, "--create", "--topic", "orders",
              "--partitions", 3, "--replication-factor", 3,
              "--config", "min.insync.replicas=2") == "Created topic orders.\n"
    lines = ok("topics", "--bootstrap-server", b, "--describe", "--topic", "orders").splitlines()
    assert lines == [
        "Topic: orders\tPartitionCount: 3\tReplicationFactor: 3\tConfigs: min.insync.replicas=2",
        "\tTopic: orders\tPartition: 0\tLeader: 0\tReplicas: 0,1,2\tIsr: 0,1,2",
        "\tTopic: orders\tPartition: 1\tLeader: 1\tReplicas: 1,2,0\tIsr: 1,2,0",
        "\tTopic: orders\tPartition: 2\tLeader: 2\tReplicas: 2,0,1\tIsr: 2,0,1"]
    ok("topics", "--bootstrap-server", b, "--create", "--topic", "audit", "--partitions", 1,
       "--replication-factor", 1)
    assert ok("topics", "--bootstrap-server", b, "--list") == "audit\norders\n"
    assert ok("topics", "--bootstrap-server", b, "--alter", "--topic", "orders",
              "--partitions", 4) == ""
    lines = ok("topics", "--bootstrap-server", b, "--describe", "--topic", "orders").splitlines()
    assert lines[0].startswith("Topic: orders\tPartitionCount: 4\t") and len(lines) == 5
    assert lines[4].startswith("\tTopic: orders\tPartition: 3\tLeader: ")
    assert ok("topics", "--bootstrap-server", b, "--describe",
              "--under-replicated-partitions") == ""
    assert ok("topics", "--bootstrap-server", b, "--delete", "--topic", "audit") == ""
    assert ok("topics", "--bootstrap-server", b, "--list") == "orders\n"
    again = tool("topics", "--bootstrap-server", b, "--create", "--topic", "orders",
                 "--partitions", 1, "--replication-factor", 1)
    assert one_line_error(again) == \
        "Error while executing topic command : Topic 'orders' already exists."


def test_console_producer_to_consumer_round_trip_with_keys(cluster):
    b = cluster.bootstrap_servers
    ok("topics", "--bootstrap-server", b, "--create", "--topic", "lines", "--partitions", 2,
       "--replication-factor", 3)
    sent = [f"k{i}:value {i}" for i in range(20)]
    produced = tool("console-producer", "--bootstrap-server", b, "--topic", "lines",
                    "--property", "parse.key=true", "--property", "key.separator=:",
                    "--producer-property", "acks=all", stdin="\n".join(sent) + "\n")
    assert produced.returncode == 0 and produced.stderr == "", produced.stderr
    # --property takes one pair per flag (Kafka) or several after one flag.
    consumed = tool("console-consumer", "--bootstrap-server", b, "--topic", "lines",
                    "--from-beginning", "--max-messages", 20, "--property", "print.key=true",
                    "--property", "print.offset=true", "print.partition=true")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stderr.strip().splitlines()[-1] == "Processed a total of 20 messages"
    rows = [line.split("\t") for line in consumed.stdout.splitlines()]
    assert sorted(f"{key}:{value}" for _, _, key, value in rows) == sorted(sent)
    by_partition: dict = {}
    for partition, offset, key, value in rows:
        assert partition.startswith("Partition:") and offset.startswith("Offset:")
        by_partition.setdefault(partition, []).append(int(offset.split(":")[1]))
    assert all(offsets == list(range(len(offsets))) for offsets in by_partition.values())
    # One partition from an offset; --timeout-ms ends the wait for more.
    partition = rows[0][0].split(":")[1]
    first = int(rows[0][1].split(":")[1])
    tail = tool("console-consumer", "--bootstrap-server", b, "--topic", "lines",
                "--partition", partition, "--offset", first + 1, "--timeout-ms", 1000)
    expected = [value for p, _, _, value in rows if p == rows[0][0]][1:]
    assert tail.returncode == 0 and tail.stdout.splitlines() == expected
    assert tail.stderr.strip().endswith(f"Processed a total of {len(expected)} messages")


def test_leader_election_after_a_restart(cluster):
    b = cluster.bootstrap_servers
    ok("topics", "--bootstrap-server", b, "--create", "--topic", "elect", "--partitions", 1,
       "--replication-factor", 3)
    with Admin(b) as admin:
        preferred = describe(admin, "elect")[0].replicas[0]
        cluster.kill(preferred, "KILL")
        cluster.wait_for(lambda: describe(admin, "elect")[0].leader not in (-1, preferred), 30,
                         "leadership to move")
        cluster.start(preferred)
        cluster.wait_for(lambda: preferred in describe(admin, "elect")[0].isr, 30,
                         "the restarted broker back in the ISR")
        assert describe(admin, "elect")[0].leader != preferred
        out = ok("leader-election", "--bootstrap-server", b, "--election-type", "preferred",
                 "--topic", "elect", "--partition", 0)
        assert out == "Successfully completed leader election (PREFERRED) for partitions elect-0\n"
        assert describe(admin, "elect")[0].leader == preferred
        # The restart moved other topics' leaders too: --all-topic-partitions moves
        # them back, and then finds nothing left to do.
        ok("leader-election", "--bootstrap-server", b, "--election-type", "preferred",
           "--all-topic-partitions")
        assert all(p.leader == p.replicas[0]
                   for parts in admin.describe_topics(None).values() for p in parts)
    out = ok("leader-election", "--bootstrap-server", b, "--election-type", "preferred",
             "--all-topic-partitions")
    assert out.startswith("Valid replica already elected for partitions ")
    assert "elect-0" in out and "Successfully" not in out


def test_reassignment_generate_execute_verify(cluster, tmp_path):
    b = cluster.bootstrap_servers
    ok("topics", "--bootstrap-server", b, "--create", "--topic", "moving",
       "--replica-assignment", "0:1,1:0")
    move = tmp_path / "move.json"
    move.write_text(json.dumps({"version": 1, "topics": [{"topic": "moving"}]}))
    out = ok("reassign-partitions", "--bootstrap-server", b, "--topics-to-move-json-file",
             move, "--broker-list", "1,2", "--generate").splitlines()
    assert out[0] == "Current partition replica assignment"
    assert json.loads(out[1])["partitions"] == [
        {"topic": "moving", "partition": 0, "replicas": [0, 1], "log_dirs": ["any", "any"]},
        {"topic": "moving", "partition": 1, "replicas": [1, 0], "log_dirs": ["any", "any"]}]
    assert out[2] == "" and out[3] == "Proposed partition reassignment configuration"
    proposed = json.loads(out[4])
    assert [p["replicas"] for p in proposed["partitions"]] == [[1, 2], [2, 1]]
    plan = tmp_path / "plan.json"
    plan.write_text(out[4])
    executed = ok("reassign-partitions", "--bootstrap-server", b, "--reassignment-json-file",
                  plan, "--execute").splitlines()
    assert executed[0] == "Current partition replica assignment" and executed[1] == ""
    assert executed[3:] == ["", "Save this to use as the --reassignment-json-file option "
                                "during rollback",
                            "Successfully started partition reassignments for moving-0,moving-1"]

    def verified():
        lines = ok("reassign-partitions", "--bootstrap-server", b, "--reassignment-json-file",
                   plan, "--verify").splitlines()
        return lines if all(line.endswith("is completed.") for line in lines[1:]) else None

    lines = cluster.wait_for(verified, 60, "the reassignment to be verified")
    assert lines == ["Status of partition reassignment:",
                     "Reassignment of partition moving-0 is completed.",
                     "Reassignment of partition moving-1 is completed."]
    with Admin(b) as admin:
        assert [list(p.replicas) for p in describe(admin, "moving")] == [[1, 2], [2, 1]]
    assert ok("reassign-partitions", "--bootstrap-server", b, "--list") == \
        "No partition reassignments found.\n"


def test_errors_are_one_line_and_exit_non_zero(cluster, tmp_path):
    b = cluster.bootstrap_servers
    one_line_error(tool("topics", "--bootstrap-server", b, "--describe", "--topic", "nope"),
                   "Topic 'nope' does not exist as expected")
    one_line_error(tool("topics", "--bootstrap-server", "127.0.0.1:1", "--list"),
                   "cannot reach the cluster at 127.0.0.1:1")
    usage = tool("topics", "--bootstrap-server", b, "--lsit")
    one_line_error(usage, "unrecognized arguments")
    assert usage.returncode == 2  # bad usage, as argparse
    one_line_error(tool("topics", "--bootstrap-server", b, "--list", "--describe"),
                   "exactly one action")
    one_line_error(tool("console-consumer", "--bootstrap-server", b, "--topic", "nope"),
                   "Topic 'nope' does not exist")
    one_line_error(tool("console-producer", "--bootstrap-server", b, "--topic", "nope",
                        stdin="x\n"), "Topic 'nope' does not exist")
    usage = tool("console-consumer", "--bootstrap-server", b, "--topic", "x",
                 "--partitions", "1")
    one_line_error(usage, "unrecognized arguments")
    assert usage.returncode == 2
    bad_config = tool("topics", "--bootstrap-server", b, "--create", "--topic", "kv",
                      "--config", "retention.ms")
    one_line_error(bad_config, "Invalid --config 'retention.ms'")
    assert bad_config.returncode == 1
    one_line_error(tool("leader-election", "--bootstrap-server", b, "--election-type",
                        "preferred", "--all-topic-partitions", "--topic", "x"),
                   "One and only one")
    one_line_error(tool("reassign-partitions", "--bootstrap-server", b,
                        "--reassignment-json-file", tmp_path / "missing.json", "--execute"),
                   "cannot read reassignment file")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    one_line_error(tool("reassign-partitions", "--bootstrap-server", b,
                        "--reassignment-json-file", bad, "--verify"), "is not valid JSON")
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"partitions": [{"topic": "nope", "partition": 0,
                                                   "replicas": [0]}]}))
    one_line_error(tool("reassign-partitions", "--bootstrap-server", b,
                        "--reassignment-json-file", unknown, "--execute"),
                   "Unable to find partition: nope-0")


def test_unclean_election_brings_an_offline_partition_back(tmp_path, cluster_id):
    """The ISR's last replica is dead and the other replica is back: only an unclean
    election (asked for with the tool) gives the partition a leader again."""
    cluster = Cluster.up(tmp_path / "c", brokers=2, config=CONFIG, cluster_id=cluster_id)
    try:
        b = cluster.bootstrap_servers
        ok("topics", "--bootstrap-server", b, "--create", "--topic", "u",
           "--replica-assignment", "0:1")
        with Admin(b) as admin:
            cluster.kill(1, "KILL")
            cluster.wait_for(lambda: getattr(partition_0(admin, "u"), "isr", None) == (0,), 30,
                             "ISR shrink")
            cluster.kill(0, "KILL")
            cluster.start(1)
            cluster.wait_for(lambda: getattr(partition_0(admin, "u"), "leader", 0) == -1, 30,
                             "the partition to be offline")
            unavailable = ok("topics", "--bootstrap-server", b, "--describe",
                             "--unavailable-partitions")
            assert unavailable == "\tTopic: u\tPartition: 0\tLeader: none\tReplicas: 0,1\tIsr: 0\n"
            out = ok("leader-election", "--bootstrap-server", b, "--election-type", "unclean",
                     "--topic", "u", "--partition", 0)
            assert out == "Successfully completed leader election (UNCLEAN) for partitions u-0\n"
            assert describe(admin, "u")[0].leader == 1
    finally:
        cluster.down(grace_s=5)
