"""Topics and partitions: a new topic or new partitions (Kafka's NewPartition ->
OnlinePartition), a topic that vanished, a topic's config, and the ISR changes leaders
report (/isr_change_notification). A mixin of ``core.Controller``.

Rules:
- New partitions: leader = first live replica, ISR = the live replicas, leader_epoch 0.
- Enabling unclean leader election on a topic elects its offline partitions (Kafka 2.7+).
- A lost replica its leader takes back into the ISR has caught up: it may lead again.
"""
from __future__ import annotations

from dataclasses import replace

from node.core.controller.events import (
    NO_LEADER, IsrChanged, TopicChanged, TopicConfigChanged, TopicPartition, TopicRemoved,
    ZkCreate, ZkResult)
from node.wire import zkdata
from node.wire.zkdata import PartitionState


class Topics:
    """Topic and partition changes (rules above; state: ``core.Controller``)."""

    # ---------------------------------------------------------------- topics

    def _on_topic_changed(self, ev: TopicChanged) -> None:
        topic = ev.topic
        if topic.name in self.deleting:
            return
        known = self.assignments.get(topic.name)
        if known is not None and topic.zk_version <= self.topic_versions.get(topic.name, -1):
            return
        self.topic_versions[topic.name] = topic.zk_version
        self.topic_configs.setdefault(topic.name, {}).update(topic.config)
        if topic.topic_id:
            self.topic_ids[topic.name] = topic.topic_id
        current = self.assignments.setdefault(topic.name, {})
        added = sorted(p for p in topic.assignment if p not in current)
        for p in added:
            current[p] = tuple(topic.assignment[p])
        if known is None:
            self._log("INFO", f"new topic {topic.name} with {len(added)} partitions")
        elif added:
            self._log("INFO", f"topic {topic.name}: new partitions {added}")
        self._initialize_partitions([(topic.name, p) for p in added])

    def _initialize_partitions(self, tps: list[TopicPartition]) -> None:
        """NewPartition -> OnlinePartition: create the state znodes (leader = first live
        replica, ISR = live replicas, leader_epoch 0), then LeaderAndIsr (is_new)."""
        eligible = self._eligible()
        creates: list[tuple[TopicPartition, PartitionState]] = []
        for tp in tps:
            if tp in self.states:
                self.uninitialized.discard(tp)
                continue
            live = tuple(r for r in self._replicas(tp) if r in eligible)
            if not live:
                self.uninitialized.add(tp)
                self._log("ERROR", f"new partition {tp[0]}-{tp[1]}: no live replica among "
                                   f"{list(self._replicas(tp))}; it waits for one")
                continue
            state = PartitionState(live[0], 0, live, self.epoch, -1)
            self._check_transition(tp, None, state)
            creates.append((tp, state))
        if not creates:
            return

        def on_done(results: tuple[ZkResult, ...]) -> None:
            ready = []
            for (tp, state), result in zip(creates, results):
                self.uninitialized.discard(tp)
                if result.error is None:
                    self.states[tp] = replace(state, zk_version=result.version)
                    ready.append(tp)
                elif result.error == "NodeExists" and result.current_data is not None:
                    if not self._adopt_state(tp, result.current_data, result.current_version):
                        return
                    ready.append(tp)
                else:
                    self.uninitialized.add(tp)
                    self._log("WARN", f"state of new partition {tp[0]}-{tp[1]} not created "
                                      f"({result.error})")
            ready = [tp for tp in ready if tp[0] in self.assignments]
            self._leader_and_isr_to_replicas(ready, new=lambda tp, b: True)
            self._send_update_metadata(ready)

        self._zk([ZkCreate(zkdata.partition_state_path(*tp), zkdata.encode_partition_state(state))
                  for tp, state in creates], on_done)

    def _on_topic_removed(self, ev: TopicRemoved) -> None:
        if ev.topic in self.assignments and ev.topic not in self.deleting:
            self._log("WARN", f"topic {ev.topic} vanished from the coordinator")
            self._forget_topic(ev.topic)

    def _forget_topic(self, topic: str) -> None:
        for p in self.assignments.pop(topic, {}):
            self.states.pop((topic, p), None)
            self.uninitialized.discard((topic, p))
            self.reassigning.pop((topic, p), None)
        self.topic_versions.pop(topic, None)
        self.topic_configs.pop(topic, None)
        self.topic_ids.pop(topic, None)

    def _on_topic_config_changed(self, ev: TopicConfigChanged) -> None:
        if ev.topic not in self.assignments:
            return
        was = self._unclean_enabled(ev.topic)
        self.topic_configs[ev.topic] = dict(ev.config)
        if self._unclean_enabled(ev.topic) and not was and ev.topic not in self.deleting:
            # Kafka 2.7+: enabling unclean election on a topic elects its offline partitions.
            offline = [tp for tp in self._active_partitions()
                       if tp[0] == ev.topic and tp in self.states
                       and self.states[tp].leader == NO_LEADER]
            self._write_states(self._decide_reconcile, offline, "unclean election enabled")

    def _on_isr_changed(self, ev: IsrChanged) -> None:
        changed = []
        for tp in sorted(ev.states):
            state = ev.states[tp]
            if state is None or tp not in self.states or tp[0] not in self.assignments:
                continue
            old = self.states[tp]
            if state.zk_version <= old.zk_version:
                continue
            if state.controller_epoch > self.epoch:
                self._resign(f"{tp[0]}-{tp[1]} written by controller epoch "
                             f"{state.controller_epoch}")
                return
            assert state.leader_epoch >= old.leader_epoch, (tp, old, state)
            self.states[tp] = state
            changed.append(tp)
            for b in state.isr:        # a lost replica the leader took back: caught up
                info = self.brokers.get(b)
                if info is not None and tp in info.lost:
                    self.recovered.add((b, tp))
                self.refused.discard((b, tp))
                self.elr_barred.discard((b, tp))
                if b not in old.isr:
                    # Taken (back) in by the leader: caught up. Not merely kept: a
                    # leader's write made before the controller's removal landed still
                    # names it, and must not make it trusted (the removal is retried).
                    self._unsuspect(tp, b)
        if changed:
            self._send_update_metadata(changed)
        for tp in changed:
            if tp in self.reassigning:
                self._maybe_complete_reassignment(tp)
