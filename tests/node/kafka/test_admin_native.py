"""The admin APIs the Kafka wire needed, through the native wire against a real 3-broker
cluster: DeleteRecords (the leader's log start moves, followers follow), DescribeLogDirs,
DescribeCluster and IncrementalAlterConfigs."""
from __future__ import annotations

import pytest

from node.client import Admin, Consumer, Producer
from node.wire import errors, protocol
from shm.board import BoardReader
from tests.node.kafka.clients import running_cluster
from tests.waiting import poll_until

pytestmark = [pytest.mark.process, pytest.mark.slow]

# Over the Kafka tests' cluster config (tests.node.kafka.clients.CLUSTER_CONFIG).
CONFIG = {"default.replication.factor": "3", "num.partitions": "1",
          "log.segment.bytes": "4096"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("cluster"), config=CONFIG) as cluster:
        yield cluster


@pytest.fixture
def admin(cluster):
    with Admin(cluster.bootstrap_servers) as admin:
        yield admin


def log_starts(cluster, topic) -> dict[int, int]:
    out = {}
    for broker_id in range(3):
        with BoardReader.open(cluster.cluster_id, broker_id) as reader:
            state = reader.get(topic, 0)
        if state is not None:
            out[broker_id] = state.log_start_offset
    return out


def test_delete_records_moves_the_log_start_on_the_leader_and_the_followers(cluster, admin):
    admin.create_topic("dr", 1, 3, config={"min.insync.replicas": "2"})
    with Producer(cluster.bootstrap_servers, acks="all", linger_ms=0) as producer:
        for i in range(100):
            producer.send("dr", b"value-%03d" % i, partition=0).get(timeout=30)
    assert admin.delete_records({("dr", 0): 42}) == {("dr", 0): 42}
    poll_until(lambda: log_starts(cluster, "dr") == {0: 42, 1: 42, 2: 42}, 20,
               "every replica's log start at 42")
    with Consumer(cluster.bootstrap_servers, auto_offset_reset="earliest") as consumer:
        consumer.assign([("dr", 0)])
        records = []
        poll_until(lambda: records.extend(consumer.poll(200)) or len(records) >= 58, 20,
                   "the records left")
    assert [r.offset for r in records][:3] == [42, 43, 44]
    assert records[0].value == b"value-042"
    with pytest.raises(errors.OffsetOutOfRangeError):
        admin.delete_records({("dr", 0): 101})
    assert admin.delete_records({("dr", 0): 10}) == {("dr", 0): 42}, "never moves down"
    assert admin.delete_records({("dr", 0): -1}) == {("dr", 0): 100}, "-1: the HW"
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        admin.delete_records({("dr", 5): 1})


def test_describe_log_dirs_lists_each_replica_with_its_size(cluster, admin):
    admin.create_topic("ld", 2, 3)
    with Producer(cluster.bootstrap_servers, acks="all") as producer:
        producer.send("ld", b"x" * 100, partition=1).get(timeout=30)
    for broker_id in range(3):
        dirs = admin.describe_log_dirs(broker_id)
        assert len(dirs) == 1
        (sizes,) = dirs.values()
        assert sizes[("ld", 0)] == 0
        assert sizes[("ld", 1)] > 100


def test_describe_cluster_names_the_brokers_the_controller_and_the_cluster_id(cluster, admin):
    md = admin._metadata([])
    answer = admin.net.request(md.endpoint(0), protocol.ApiKey.DESCRIBE_CLUSTER, {},
                               timeout_ms=10_000).body
    assert answer["error"] == 0 and answer["cluster_id"] == cluster.cluster_id
    assert [b[0] for b in answer["brokers"]] == [0, 1, 2]
    assert answer["controller_id"] in (0, 1, 2)
    assert answer["controller_id"] == md.controller_id


def test_alter_configs_changes_what_describe_configs_shows(cluster, admin):
    admin.create_topic("ac", 1, 1, config={"retention.ms": "60000"})
    admin.alter_configs("ac", set={"retention.bytes": "1000000"}, delete=["retention.ms"])
    configs = admin.describe_configs(["ac"])["ac"]
    assert configs["retention.bytes"] == "1000000"
    assert configs["retention.ms"] == str(7 * 24 * 3600 * 1000)
    with pytest.raises(errors.InvalidConfigError):
        admin.alter_configs("ac", set={"retention.bytes": "lots"})


def test_altered_topic_configs_apply_on_the_brokers_at_once(cluster, admin):
    """min.insync.replicas set above the replication factor refuses acks=all writes at
    once (NOT_ENOUGH_REPLICAS) on the running leader; deleting it lets them in again."""
    admin.create_topic("live", 1, 3)
    with Producer(cluster.bootstrap_servers, acks="all", retries=0) as producer:
        producer.send("live", b"before", partition=0).get(timeout=30)
        admin.alter_configs("live", set={"min.insync.replicas": "4"})

        def refused():
            try:
                producer.send("live", b"x", partition=0).get(timeout=30)
                return False
            except (errors.NotEnoughReplicasError, errors.NotEnoughReplicasAfterAppendError):
                return True     # after: appended before the new config reached the leader
        poll_until(refused, 20, "acks=all refused under min.insync.replicas=4")
        admin.alter_configs("live", delete=["min.insync.replicas"])
        poll_until(lambda: not refused(), 20, "acks=all accepted again")


def _configs_tool(cluster, *args, capsys=None):
    """``minikafka configs ARGS``: a process of its own, or (``capsys`` given) node.cli's
    main in this one, its output and exit status as a process's."""
    import subprocess
    import sys
    argv = ["configs", "--bootstrap-server", cluster.bootstrap_servers, *args]
    if capsys is None:
        return subprocess.run([sys.executable, "-m", "node.cli", *argv],
                              capture_output=True, text=True, timeout=60)
    from node.cli import main
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return subprocess.CompletedProcess(argv, code, out.out, out.err)


def test_configs_tool_describes_and_alters_like_kafka_configs(cluster, admin, capsys):
    """The first run is a process of its own (the command line); the others call the
    same main in this process (a Python start each was most of this test's time)."""
    admin.create_topic("cfg", 1, 1, config={"retention.ms": "1000"})
    topic = ["--entity-type", "topics", "--entity-name", "cfg"]

    def tool(*args):
        return _configs_tool(cluster, *args, capsys=capsys)
    shown = _configs_tool(cluster, *topic, "--describe")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [
        "Dynamic configs for topic cfg are:",
        "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000, "
        "DEFAULT_CONFIG:log.retention.ms=604800000}"]
    altered = tool(*topic, "--alter", "--add-config",
                   "retention.bytes=777,max.message.bytes=5000", "--delete-config", "retention.ms")
    assert (altered.returncode, altered.stdout) == \
        (0, "Completed updating config for topic cfg.\n"), altered.stderr
    assert admin.describe_configs(["cfg"])["cfg"]["retention.bytes"] == "777"
    shown = tool(*topic, "--describe")
    assert [line.split()[0] for line in shown.stdout.splitlines()[1:]] == \
        ["max.message.bytes=5000", "retention.bytes=777"]
    everything = tool("--entity-type", "brokers", "--entity-name", "1", "--describe", "--all")
    assert everything.stdout.startswith("All configs for broker 1 are:\n")
    assert "  broker.id=1 sensitive=false synonyms={STATIC_BROKER_CONFIG:broker.id=1}" in \
        everything.stdout.splitlines()
    refused = tool("--entity-type", "brokers", "--entity-name", "1",
                   "--alter", "--add-config", "num.partitions=3")
    assert refused.returncode == 1
    assert "Cannot update these configs dynamically" in refused.stderr
    broker = ["--entity-type", "brokers", "--entity-name", "1"]
    altered = tool(*broker, "--alter", "--add-config", "log.retention.ms=1")
    assert altered.stdout == "Completed updating config for broker 1.\n", altered.stderr
    try:
        assert tool(*broker, "--describe").stdout.splitlines() == [
            "Dynamic configs for broker 1 are:",
            "  log.retention.ms=1 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:"
            "log.retention.ms=1, DEFAULT_CONFIG:log.retention.ms=604800000}"]
        default = ["--entity-type", "brokers", "--entity-default"]
        assert tool(*default, "--describe").stdout == \
            "Default configs for brokers in the cluster are:\n"
        assert tool(*default, "--alter", "--add-config", "compression.type=zstd").stdout == \
            "Completed updating default config for brokers in the cluster.\n"
        assert tool(*default, "--describe").stdout.splitlines()[1:] == [
            "  compression.type=zstd sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:"
            "compression.type=zstd}"]
        tool(*default, "--alter", "--delete-config", "compression.type")
    finally:
        tool(*broker, "--alter", "--delete-config", "log.retention.ms")
    bad = tool(*topic, "--alter", "--add-config", "retention.ms=soon")
    assert bad.returncode == 1 and "retention.ms" in bad.stderr


def test_cluster_wide_dynamic_config_applies_to_every_broker(cluster, admin):
    """log.retention.bytes set for the whole cluster (the broker resource "") shows in
    every topic without an override and in each broker's description."""
    admin.create_topic("wide", 1, 3)
    admin.alter_broker_configs("", set={"log.retention.bytes": "4096"})
    try:
        assert admin.describe_configs(["wide"])["wide"]["retention.bytes"] == "4096"
        for broker_id in range(3):
            (entry,) = [e for e in admin.describe_config_entries(broker=broker_id)
                        if e.name == "log.retention.bytes"]
            assert (entry.value, entry.source, entry.read_only) == \
                ("4096", "DYNAMIC_DEFAULT_BROKER_CONFIG", False)
        with pytest.raises(errors.InvalidConfigError):
            admin.alter_broker_configs("", set={"num.partitions": "3"})
    finally:
        admin.alter_broker_configs("", delete=["log.retention.bytes"])
    assert admin.describe_configs(["wide"])["wide"]["retention.bytes"] == "-1"

