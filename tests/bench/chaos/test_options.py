"""The chaos profiles' broker settings (pure: no process)."""
import pytest

from bench.chaos.options import PROFILES, TXN_DEFENCES, cluster_config
from node.broker.groups.offsets_topic import topic_configs
from node.config import _BY_NAME, BrokerConfig, topic_setting


def _keys_known(profile: str) -> bool:
    return all(k in _BY_NAME for k in PROFILES[profile]["broker"])


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_the_offsets_topic_gets_the_profiles_min_insync_replicas(profile):
    if not _keys_known(profile):      # kafka-txn's keys come with issue 28's brokers
        missing = set(PROFILES[profile]["broker"]) - set(_BY_NAME)
        pytest.skip(f"{profile}: node.config lacks {missing}")
    # __consumer_offsets is created with no min.insync.replicas override: the brokers'
    # default is what guards the group's commits. Under safe it must be 2, or a power
    # failure of a lone ISR member loses acknowledged commits (sweep confluent-kafka
    # seed 3: the committed offsets went down).
    config = BrokerConfig.from_props({"broker.id": "0", "log.dirs": "/nonexistent",
                                      "zookeeper.connect": "127.0.0.1:2181",
                                      **cluster_config(profile)})
    overrides = topic_configs(config)
    assert "min.insync.replicas" not in overrides
    assert topic_setting(config, overrides, "min.insync.replicas") == \
        int(PROFILES[profile]["min.insync.replicas"])
    assert topic_setting(config, overrides, "unclean.leader.election.enable") == \
        (PROFILES[profile]["broker"]["unclean.leader.election.enable"] == "true")


def test_segment_bytes_reach_the_internal_topics_too():
    props = {"broker.id": "0", "log.dirs": "/nonexistent", "zookeeper.connect": "127.0.0.1:2181"}
    small = BrokerConfig.from_props({**props, **cluster_config("safe", "shm", 65536)})
    assert small.offsets_topic_segment_bytes == 65536
    assert small.transaction_state_log_segment_bytes == 65536
    default = BrokerConfig.from_props({**props, **cluster_config("safe")})
    assert default.offsets_topic_segment_bytes == 8 * 1024 * 1024
    assert default.transaction_state_log_segment_bytes == 8 * 1024 * 1024


def test_kafka_txn_turns_the_transaction_defences_off_and_only_it():
    broker = PROFILES["kafka-txn"]["broker"]
    assert broker["transaction.partition.verification.enable"] == "false"
    assert broker["transaction.version"] == "0"
    assert cluster_config("kafka-txn")["transaction.version"] == "0"
    for name, profile in PROFILES.items():
        if name != "kafka-txn":            # the brokers' defaults: both on
            assert not set(TXN_DEFENCES) & set(profile["broker"]), name


@pytest.mark.parametrize("profile,on", [("safe", True), ("kafka-txn", False)])
def test_the_txn_defences_reach_the_brokers_and_the_coordinator(profile, on):
    from node.broker.apis import HANDLERS   # the broker's modules in their import order
    from node.broker.txn.runtime import txn_config
    assert HANDLERS
    config = BrokerConfig.from_props({"broker.id": "0", "log.dirs": "/nonexistent",
                                      "zookeeper.connect": "127.0.0.1:2181",
                                      **cluster_config(profile)})
    assert config.transaction_partition_verification_enable is on
    assert txn_config(config).kip890 is on
