"""BrokerConfig: Kafka's keys and defaults, clear errors, topic-level overrides."""
from __future__ import annotations

import pytest

from node.config import (BrokerConfig, ConfigError, check_topic_config, load_properties,
                         parse_properties, topic_log_config, topic_setting, write_properties)
from shm.config import LogConfig

REQUIRED = {"broker.id": "3", "zookeeper.connect": "127.0.0.1:2181"}


def config(**extra) -> BrokerConfig:
    return BrokerConfig.from_props({**REQUIRED, **extra})


def test_defaults_are_kafkas():
    c = config()
    assert c.broker_id == 3
    assert c.zookeeper_session_timeout_ms == 18000
    assert c.num_partitions == 1 and c.default_replication_factor == 1
    assert c.min_insync_replicas == 1
    assert c.unclean_leader_election_enable is False
    assert c.replica_lag_time_max_ms == 30000
    assert c.replica_fetch_wait_max_ms == 500
    assert c.replica_fetch_max_bytes == 1048576
    assert c.replica_fetch_min_bytes == 1
    assert c.request_timeout_ms == 30000
    assert c.auto_leader_rebalance_enable is True
    assert c.leader_imbalance_check_interval_seconds == 300
    assert c.leader_imbalance_per_broker_percentage == 10
    assert c.controlled_shutdown_enable is True
    assert c.controlled_shutdown_max_retries == 3
    assert c.controlled_shutdown_retry_backoff_ms == 5000
    assert c.replica_high_watermark_checkpoint_interval_ms == 5000
    assert c.broker_rack is None and c.cluster_id is None
    assert c.replication_truncation_mode == "leader-epoch"
    assert c.producer_id_expiration_ms == 86_400_000                  # KIP-854's day
    assert c.producer_id_expiration_check_interval_ms == 600_000
    assert c.log_config == LogConfig()
    assert c.message_max_bytes == LogConfig().message_max_bytes


def test_values_are_parsed_into_typed_fields():
    c = config(**{"listeners": "PLAINTEXT://127.0.0.1:9093", "log.dirs": "/a, /b",
                  "unclean.leader.election.enable": "TRUE", "broker.rack": "r1",
                  "replication.truncation.mode": "high-watermark", "cluster.id": "c_1",
                  "log.segment.bytes": "1048576", "message.max.bytes": "65536",
                  "min.insync.replicas": "2"})
    assert (c.host, c.port, c.bind_endpoint) == ("127.0.0.1", 9093, "tcp://127.0.0.1:9093")
    assert c.log_dirs == ("/a", "/b")
    assert c.unclean_leader_election_enable is True
    assert c.broker_rack == "r1" and c.cluster_id == "c_1"
    assert c.replication_truncation_mode == "high-watermark"
    assert c.log_config.segment_bytes == 1048576
    assert c.message_max_bytes == c.log_config.message_max_bytes == 65536
    assert c.min_insync_replicas == 2


def test_port_0_binds_any_free_port():
    assert config(listeners="PLAINTEXT://127.0.0.1:0").bind_endpoint == "tcp://127.0.0.1:*"


def test_kafka_coarse_retention_keys_and_precedence():
    assert config(**{"log.retention.hours": "2"}).log_config.retention_ms == 2 * 3600_000
    assert config(**{"log.retention.minutes": "3", "log.retention.hours": "2"}
                  ).log_config.retention_ms == 3 * 60_000
    assert config(**{"log.retention.ms": "5", "log.retention.minutes": "3"}
                  ).log_config.retention_ms == 5
    assert config(**{"log.retention.hours": "-1"}).log_config.retention_ms == -1
    assert config(**{"log.dir": "/x"}).log_dirs == ("/x",)
    assert config(**{"log.dir": "/x", "log.dirs": "/y"}).log_dirs == ("/y",)


@pytest.mark.parametrize("key,value,fragment", [
    ("no.such.key", "1", "no.such.key: unknown configuration key"),
    ("broker.id", "-1", "broker.id: -1 is outside"),
    ("num.partitions", "many", "num.partitions: expected an integer"),
    ("unclean.leader.election.enable", "yes", "unclean.leader.election.enable: expected true"),
    ("listeners", "x:1", "listeners: expected NAME://HOST:PORT"),
    ("listeners", "SSL://x:1", "listeners: unknown listener name 'SSL'"),
    ("listeners", "KAFKA://127.0.0.1:1", "listeners: a PLAINTEXT listener"),
    ("listeners", "PLAINTEXT://127.0.0.1:1,PLAINTEXT://127.0.0.1:2", "listener PLAINTEXT is given twice"),
    ("listeners", "PLAINTEXT://127.0.0.1:1,KAFKA://127.0.0.1:1", "share port 1"),
    ("advertised.listeners", "KAFKA//x:1", "advertised.listeners: expected NAME://HOST:PORT"),
    ("advertised.listeners", "KAFKA://x:1", "advertised.listeners: KAFKA is not one of the listeners"),
    ("socket.request.max.bytes", "0", "socket.request.max.bytes: 0 is outside"),
    ("listeners", "PLAINTEXT://127.0.0.1:70000", "listeners: port 70000"),
    ("replication.truncation.mode", "epoch", "replication.truncation.mode: expected one of"),
    ("producer.id.expiration.ms", "0", "producer.id.expiration.ms: 0 is outside"),
    ("cluster.id", "has-dash", "cluster.id:"),
    ("log.segment.bytes", "10", "log.segment.bytes=10 is outside"),
    ("log.retention.ms", "soon", "log.retention.ms: expected an integer"),
    ("zookeeper.connect", "nohostport", "zookeeper.connect: expected host:port"),
    ("replica.fetch.wait.max.ms", "40000", "replica.fetch.wait.max.ms (40000) must be at most"),
])
def test_unknown_or_invalid_keys_name_the_key(key, value, fragment):
    with pytest.raises(ConfigError) as info:
        config(**{key: value})
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_required_keys():
    with pytest.raises(ConfigError, match="broker.id: required"):
        BrokerConfig.from_props({"zookeeper.connect": "h:1"})
    with pytest.raises(ConfigError, match="zookeeper.connect: required"):
        BrokerConfig.from_props({"broker.id": "1"})


def test_properties_file_round_trip(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("# comment\n! also a comment\n\nbroker.id = 7\n"
                    "zookeeper.connect: 127.0.0.1:2181\nlog.dirs=/a,\\\n  /b\n")
    c = BrokerConfig.from_file(str(path))
    assert c.broker_id == 7 and c.log_dirs == ("/a", "/b")
    write_properties(str(tmp_path / "out.properties"), c.to_props())
    assert BrokerConfig.from_file(str(tmp_path / "out.properties")) == c


def test_properties_errors(tmp_path):
    with pytest.raises(ConfigError, match="broker.id: given twice"):
        parse_properties("broker.id=1\nbroker.id=2\n")
    with pytest.raises(ConfigError, match="cannot read"):
        load_properties(str(tmp_path / "missing.properties"))


def test_topic_overrides():
    c = config(**{"min.insync.replicas": "1", "log.retention.ms": "1000"})
    assert topic_setting(c, {}, "min.insync.replicas") == 1
    assert topic_setting(c, {"min.insync.replicas": "2"}, "min.insync.replicas") == 2
    assert topic_setting(c, {"unclean.leader.election.enable": "true"},
                         "unclean.leader.election.enable") is True
    assert topic_setting(c, {}, "unclean.leader.election.enable") is False
    assert topic_setting(c, {"retention.ms": "5"}, "retention.ms") == 5
    log_config = topic_log_config(c, {"retention.ms": "5", "segment.bytes": "4096",
                                      "max.message.bytes": "2048"})
    assert (log_config.retention_ms, log_config.segment_bytes,
            log_config.message_max_bytes) == (5, 4096, 2048)
    assert topic_log_config(c, {}) is c.log_config
    with pytest.raises(ConfigError, match="segment.bytes"):
        topic_log_config(c, {"segment.bytes": "1"})
    with pytest.raises(ConfigError, match="nope: unknown topic"):
        topic_setting(c, {}, "nope")


def test_check_topic_config():
    check_topic_config({"min.insync.replicas": "2", "retention.ms": "100",
                        "cleanup.policy": "delete"})
    with pytest.raises(ConfigError, match="bogus: unknown topic configuration key"):
        check_topic_config({"bogus": "1"})
    check_topic_config({"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1",
                        "delete.retention.ms": "0", "min.compaction.lag.ms": "5",
                        "max.compaction.lag.ms": "10"})
    check_topic_config({"cleanup.policy": "delete,compact"})
    for bad in ({"cleanup.policy": "shred"}, {"cleanup.policy": ""},
                {"min.cleanable.dirty.ratio": "1.5"}, {"min.cleanable.dirty.ratio": "x"},
                {"delete.retention.ms": "-1"}, {"max.compaction.lag.ms": "0"}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            check_topic_config(bad)
    with pytest.raises(ConfigError, match="min.insync.replicas"):
        check_topic_config({"min.insync.replicas": "0"})


def test_listeners_are_kafkas_named_list_with_advertised_defaults():
    c = config(listeners="PLAINTEXT://127.0.0.1:9093, KAFKA://:0")
    assert (c.host, c.port) == ("127.0.0.1", 9093)
    assert str(c.listener("KAFKA")) == "KAFKA://127.0.0.1:0"
    assert str(c.advertised("KAFKA", 4321)) == "KAFKA://127.0.0.1:4321"
    assert c.socket_request_max_bytes == 104857600
    c = config(listeners="PLAINTEXT://127.0.0.1:9093,KAFKA://127.0.0.1:9094",
               **{"advertised.listeners": "KAFKA://kafka.example:19094"})
    assert str(c.advertised("KAFKA", 9094)) == "KAFKA://kafka.example:19094"
    assert str(c.advertised("PLAINTEXT", 9093)) == "PLAINTEXT://127.0.0.1:9093"
    assert c.advertised("NOPE", 1) is None
    assert BrokerConfig.from_props(c.to_props()) == c


def test_log_cleaner_keys_have_kafkas_names_and_defaults_and_round_trip():
    base = {"broker.id": "0", "zookeeper.connect": "127.0.0.1:2181"}
    c = BrokerConfig.from_props(base)
    assert (c.log_cleaner_enable, c.log_cleaner_threads, c.log_cleaner_backoff_ms) == \
        (True, 1, 15000)
    assert c.log_cleaner_io_max_bytes_per_second == 1.7976931348623157e308  # Double.MAX
    assert c.log_config.cleanup_policy == frozenset({"delete"})
    assert (c.log_config.min_cleanable_dirty_ratio, c.log_config.delete_retention_ms) == \
        (0.5, 86400000)
    c = BrokerConfig.from_props({**base, "log.cleaner.threads": "2",
                                 "log.cleaner.io.max.bytes.per.second": "1048576",
                                 "log.cleaner.backoff.ms": "50",
                                 "log.cleanup.policy": "delete,compact",
                                 "log.cleaner.min.cleanable.ratio": "0.1",
                                 "log.cleaner.delete.retention.ms": "10",
                                 "log.cleaner.min.compaction.lag.ms": "3",
                                 "log.cleaner.max.compaction.lag.ms": "9"})
    assert (c.log_cleaner_threads, c.log_cleaner_io_max_bytes_per_second,
            c.log_cleaner_backoff_ms) == (2, 1048576.0, 50)
    lc = c.log_config
    assert (lc.cleanup_policy, lc.min_cleanable_dirty_ratio, lc.delete_retention_ms,
            lc.min_compaction_lag_ms, lc.max_compaction_lag_ms) == \
        (frozenset({"compact", "delete"}), 0.1, 10, 3, 9)
    props = c.to_props()
    assert props["log.cleanup.policy"] == "compact,delete"
    assert BrokerConfig.from_props(props) == c
    # a topic override over the broker's synonym
    assert topic_log_config(c, {"cleanup.policy": "compact"}).cleanup_policy == \
        frozenset({"compact"})
    assert topic_setting(c, {}, "min.cleanable.dirty.ratio") == 0.1
    for key, bad in (("log.cleaner.threads", "99"), ("log.cleaner.io.max.bytes.per.second", "0"),
                     ("log.cleanup.policy", "shred"), ("log.cleaner.min.cleanable.ratio", "2"),
                     ("log.cleaner.enable", "maybe")):
        with pytest.raises(ConfigError, match=key):
            BrokerConfig.from_props({**base, key: bad})
