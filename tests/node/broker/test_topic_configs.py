"""node.broker.topic_configs, its shell logic with a stand-in coordinator: a config
change that cannot be read keeps the configs in force (it used to apply the broker's
defaults, dropping min.insync.replicas=2 to 1 on a leader cut from the coordinator)."""
from __future__ import annotations

from types import SimpleNamespace

from kazoo.exceptions import ConnectionLoss, NoNodeError

import node.broker.server  # noqa: F401  (the broker package first: its imports are ordered)
from node.broker import topic_configs
from node.broker.topic_configs import TopicConfigs
from node.config import BrokerConfig, topic_log_config
from node.core.replication import ReplicaCore, ReplicationConfig
from node.wire import zkdata


class StandInZk:
    """Config znodes as a dict; ``down`` makes every read fail as an unreachable
    coordinator does."""

    def __init__(self, nodes: dict[str, dict[str, str]]) -> None:
        self.nodes = nodes
        self.down = False
        self.watches: dict[str, object] = {}

    def _check(self, path: str) -> None:
        if self.down:
            raise ConnectionLoss(f"coordinator session is suspended: {path} not attempted")

    def get(self, path, watch=None):
        self._check(path)
        if path not in self.nodes:
            raise NoNodeError(path)
        self.watches[path] = watch
        return zkdata.encode_topic_config(self.nodes[path]), None

    def exists(self, path, watch=None):
        self._check(path)
        self.watches[path] = watch
        return object() if path in self.nodes else None


class StandInLoop:
    def __init__(self) -> None:
        self.timers: list = []

    def post(self, fn) -> None:
        fn()

    def call_later(self, delay_ms, fn) -> int:
        self.timers.append((delay_ms, fn))
        return len(self.timers)

    def run_timers(self) -> None:
        timers, self.timers = self.timers, []
        for _, fn in timers:
            fn()


def make(min_isr: str):
    config = BrokerConfig(broker_id=0, zookeeper_connect="127.0.0.1:2181")
    path = zkdata.topic_config_path("t")
    zk = StandInZk({path: {"min.insync.replicas": min_isr}})
    part = SimpleNamespace(
        log=SimpleNamespace(config=topic_log_config(config, {})),
        # A real core, not leading: a config change sets its min ISR and asks nothing.
        core=ReplicaCore("t", 0, 0, ReplicationConfig(min_insync_replicas=int(min_isr))),
        view=None, compression_type="producer")
    applied: list = []
    replicas = SimpleNamespace(zk=zk, loop=StandInLoop(), config=config, broker_id=0,
                               partitions={("t", 0): part},
                               apply_effects=lambda _part, effects: applied.extend(effects))
    configs = TopicConfigs(replicas)
    assert configs.overrides("t") == {"min.insync.replicas": min_isr}
    return configs, zk, replicas.loop, part, path


def test_an_unreadable_change_keeps_the_configs_in_force_and_reads_again():
    configs, zk, loop, part, path = make("2")
    zk.down = True                  # the session goes: kazoo fires the watch
    configs.changed("t")
    configs.changed("t")            # fired again: still one read pending
    assert part.core.config.min_insync_replicas == 2
    assert [d for d, _ in loop.timers] == [topic_configs.REREAD_MS]
    loop.run_timers()               # still unreachable: kept, and read again later
    assert part.core.config.min_insync_replicas == 2 and len(loop.timers) == 1
    zk.down = False
    zk.nodes[path] = {"min.insync.replicas": "3"}   # changed meanwhile
    loop.run_timers()
    assert part.core.config.min_insync_replicas == 3 and loop.timers == []
    assert zk.watches[path] is not None             # armed again for the next change


def test_an_unreadable_broker_layer_keeps_the_configs_in_force():
    configs, zk, loop, part, _ = make("2")
    zk.down = True
    configs.brokers_changed()
    assert part.core.config.min_insync_replicas == 2 and len(loop.timers) == 1
    zk.down = False
    loop.run_timers()
    assert part.core.config.min_insync_replicas == 2 and loop.timers == []


def test_a_deleted_config_node_is_the_broker_defaults():
    configs, zk, loop, part, path = make("2")
    del zk.nodes[path]
    configs.changed("t")
    assert part.core.config.min_insync_replicas == 1 and loop.timers == []
