"""The chaos profiles' broker settings (pure: no process)."""
import pytest

from bench.chaos.options import PROFILES, cluster_config
from node.broker.groups.offsets_topic import topic_configs
from node.config import BrokerConfig, topic_setting


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_the_offsets_topic_gets_the_profiles_min_insync_replicas(profile):
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
