"""Failover and brokers: becoming the controller, broker failure and start-up, broker
epochs, lost and refused replicas, leaving the ELR after an unclean shutdown, and the
reconciling election (Kafka's onControllerFailover, onBrokerFailure, onBrokerStartup,
onReplicasBecomeOffline). A mixin of ``core.Controller``.

Rules (Kafka ZK mode, DESIGN.md "Replication"; the elections are in ``elections``):
- A dead follower leaves the ISR of every partition it follows (leader_epoch + 1, as
  Kafka's ZK controller). Brokers in controlled shutdown are alive but never elected.
- Broker epochs (KIP-380): every LeaderAndIsr, UpdateMetadata and StopReplica carries
  the epoch (registration czxid) of the broker it is meant for, and a broker refuses
  one meant for another incarnation (STALE_BROKER_EPOCH). A broker restarted before its
  old session expired is still registered under the old one: the first such refusal
  tells this core that registration belongs to a dead process, and it is treated as
  failed (its leaderships move, it leaves the ISRs) until a new registration appears.
- Lost replicas: a broker's registration names the partitions whose committed data it
  lost (a wiped log dir, a power failure), and a broker refuses to lead one of them
  (INELIGIBLE_REPLICA in the LeaderAndIsr answer): neither is elected again until it
  is back in an ISR.
- Eligible leader replicas (KIP-966, ``eligible_leader_replicas``): a replica that left
  the ISR while the ISR was below min.insync.replicas stays in the partition's ELR
  (``node.core.replication.next_elr``); when no ISR member can lead, a live ELR member
  is elected (ISR = {it}). A replica that lost data, or whose broker comes back from
  an unclean shutdown, leaves the ELR.
- Unclean shutdown (KIP-966, KAFKA-18106; with ``eligible_leader_replicas``, as KRaft does
  it only with ELR): a broker whose registration says its last run did not end cleanly
  may have lost what its page cache held, acknowledged records included, and cannot
  tell (its HW checkpoint may predate them). Where it is in an ISR with another live
  member, it is not told that it leads, leaves the ISR and is not elected
  (``unclean_isr``) until a leader takes it back in. Where it is the only ISR member
  alive, nothing changes: no replica is known to hold more.
"""
from __future__ import annotations

from collections.abc import Iterable

from node.core.controller import elections
from node.core.controller.events import (
    FIRST_REBALANCE_CHECK_DELAY_MS, NO_LEADER, BecomeController, Broker, BrokersChanged,
    ReassignmentRequested, ReplicasOffline, TopicDeletionRequested, TopicPartition)
from node.wire.errors import ErrorCode


class Failover:
    """Failover and broker changes (rules above; state: ``core.Controller``)."""

    # ---------------------------------------------------------------- failover

    def _on_become_controller(self, ev: BecomeController) -> None:
        assert not self.active, "BecomeController twice: create a new core per term"
        self.active = True
        self.epoch = ev.epoch
        self.brokers = {b.broker_id: b for b in ev.brokers}
        for b in ev.brokers:
            self._log_lost(b)
        unclean = {b.broker_id for b in ev.brokers if not b.clean_shutdown}
        self.elr_barred = {(b, tp) for tp, st in ev.states.items() for b in st.elr
                           if b in unclean}
        # Before anyone is told anything: the reconcile below moves their leaderships.
        if self.config.eligible_leader_replicas:
            for tp, st in ev.states.items():
                self._suspect_unclean(tp, unclean & set(st.isr))
        for topic in ev.topics:
            self.assignments[topic.name] = {p: tuple(r) for p, r in topic.assignment.items()}
            self.topic_versions[topic.name] = topic.zk_version
            self.topic_configs[topic.name] = dict(topic.config)
            if topic.topic_id:
                self.topic_ids[topic.name] = topic.topic_id
        for tp, state in ev.states.items():
            if tp[0] in self.assignments and tp[1] in self.assignments[tp[0]]:
                self.states[tp] = state
        self.uninitialized = {tp for tp in self._all_partitions() if tp not in self.states}
        self.next_rebalance_check_ms = ev.now_ms + min(
            FIRST_REBALANCE_CHECK_DELAY_MS, self.config.leader_imbalance_check_interval_seconds * 1000)
        self._log("INFO", f"broker {self.broker_id} is the controller (controller_epoch "
                          f"{self.epoch}); live brokers {sorted(self.brokers)}, "
                          f"{len(self.assignments)} topics, {len(self.states)} partitions")
        # Kafka's onControllerFailover order: metadata to everyone, current state to the
        # replicas (carrying the new controller epoch), then the pending work.
        self._send_update_metadata(self.states)
        # A leader whose registration says it lost the partition's data (a wiped disk,
        # or a power failure that cut its log below its checkpointed HW) must not hear
        # that it leads: it would lead the current epoch with a short log, and the
        # followers of that epoch would truncate to it. The reconcile below elects
        # another leader and tells everyone.
        self._leader_and_isr_to_replicas(sorted(
            tp for tp in self.states if self.states[tp].leader not in self._offline_on(tp)))
        self._initialize_partitions(sorted(self.uninitialized))
        self._write_states(self._decide_reconcile, self._active_partitions(), "failover")
        self._leave_elrs_after_unclean_shutdown(sorted(self.brokers))
        self.reassign_znode_version = ev.reassignments_zk_version
        if ev.reassignments:
            self._on_reassignment_requested(
                ReassignmentRequested(ev.reassignments, ev.reassignments_zk_version))
        if ev.topics_to_delete:
            self._on_topic_deletion_requested(TopicDeletionRequested(ev.topics_to_delete))
        if ev.election is not None:
            self._on_election_requested(ev.election)

    # ---------------------------------------------------------------- brokers

    def _on_brokers_changed(self, ev: BrokersChanged) -> None:
        # A registration found to belong to a dead incarnation stays ignored until the
        # broker registers again (a new epoch).
        now = {b.broker_id: b for b in ev.brokers
               if self.replaced.get(b.broker_id) != b.epoch}
        self.replaced = {b: e for b, e in self.replaced.items()
                         if any(x.broker_id == b and x.epoch == e for x in ev.brokers)}
        dead = sorted(b for b in self.brokers
                      if b not in now or now[b].epoch != self.brokers[b].epoch)
        born = sorted(b for b in now
                      if b not in self.brokers or now[b].epoch != self.brokers[b].epoch)
        if dead:
            self._log("INFO", f"brokers failed: {dead}")
            for b in dead:
                del self.brokers[b]
                self.shutting_down.discard(b)
                self.offline_replicas.pop(b, None)   # a restart brings its dirs back
            self._on_brokers_failure(set(dead))
        if born:
            self._log("INFO", f"brokers started: {born}")
            for b in born:
                self.brokers[b] = now[b]
                self.recovered = {(x, tp) for x, tp in self.recovered if x != b}
                # Its new registration names what it lost (the marker is durable).
                self.refused = {(x, tp) for x, tp in self.refused if x != b}
                for recovery in self.recovering.values():
                    recovery.asked.discard(b)
                    recovery.answers.pop(b, None)
                self._log_lost(now[b])
                self.elr_barred = {(x, tp) for x, tp in self.elr_barred if x != b}
                self._clear_unclean(b)
                if not now[b].clean_shutdown:
                    self.elr_barred |= {(b, tp) for tp, st in self.states.items() if b in st.elr}
                    if self.config.eligible_leader_replicas:
                        for tp, st in self.states.items():
                            if b in st.isr:
                                self._suspect_unclean(tp, {b})
            self._on_brokers_startup(set(born))
            self._leave_elrs_after_unclean_shutdown(born)
        for b, info in now.items():   # a re-registration with new endpoints, same epoch
            self.brokers[b] = info

    def _suspect_unclean(self, tp: TopicPartition, brokers: set[int]) -> None:
        """``brokers``, back from an unclean shutdown, are in ``tp``'s ISR (rules above)."""
        if brokers:
            self.unclean_isr.setdefault(tp, set()).update(brokers)

    def _unsuspect(self, tp: TopicPartition, broker_id: int) -> None:
        """``broker_id`` is trusted in ``tp``'s ISR again (a leader took it back in)."""
        suspects = self.unclean_isr.get(tp)
        if suspects is not None:
            suspects.discard(broker_id)
            if not suspects:
                del self.unclean_isr[tp]

    def _clear_unclean(self, broker_id: int) -> None:
        for tp in [tp for tp, suspects in self.unclean_isr.items() if broker_id in suspects]:
            self._unsuspect(tp, broker_id)

    def _on_replicas_offline(self, ev: ReplicasOffline) -> None:
        """Kafka's onReplicasBecomeOffline: leaders elsewhere, the replicas out of the
        ISRs (a notification that names no partitions means every replica there)."""
        b = ev.broker_id
        if b not in self.brokers:
            return                      # gone already: the broker failure handled it
        hosted = [tp for tp in self._active_partitions()
                  if tp in self.states and b in self._replicas(tp)]
        named = set(ev.partitions) if ev.partitions else set(hosted)
        affected = [tp for tp in hosted if tp in named
                    and tp not in self.offline_replicas.get(b, set())]
        if not affected:
            return
        self.offline_replicas.setdefault(b, set()).update(affected)
        self._log("WARN", f"replicas of broker {b} went offline (log dir failure): "
                          f"{', '.join(f'{t}-{p}' for t, p in affected[:20])}"
                          f"{' ...' if len(affected) > 20 else ''}")
        self._send_update_metadata(affected)
        self._write_states(self._decide_reconcile, affected, "log dir failure")

    def _leave_elrs_after_unclean_shutdown(self, brokers: Iterable[int]) -> None:
        """KIP-966: a broker back from an unclean shutdown may have lost its unflushed
        tail, so it leaves every ELR (it stays in an ISR it is in: the leader shrinks
        it out if it lags)."""
        unclean = {b for b in brokers if b in self.brokers and not self.brokers[b].clean_shutdown}
        if not unclean:
            return
        tps = [tp for tp in self._active_partitions()
               if tp in self.states and set(self.states[tp].elr) & unclean]
        if not tps:
            return
        self._log("INFO", f"brokers {sorted(unclean)} restarted after an unclean shutdown: "
                          f"they leave the eligible leader replicas of {len(tps)} partitions")

        def decide(tp):
            state = self.states[tp]
            elr = tuple(r for r in state.elr if r not in unclean)
            return None if elr == state.elr else (state.leader, state.isr, elr)

        self._write_states(decide, tps, "unclean shutdown")

    def _on_leader_and_isr_answer(self, broker_id: int, epoch: int, body: dict | None) -> None:
        """A broker's answer to LeaderAndIsr: STALE_BROKER_EPOCH says the registration
        it was sent for belongs to a dead incarnation (KIP-380); INELIGIBLE_REPLICA says
        the broker lost committed data of a partition it was told to lead."""
        if body is None or not isinstance(body, dict):
            return
        info = self.brokers.get(broker_id)
        if info is None or info.epoch != epoch:
            return
        if body.get("error") == ErrorCode.STALE_BROKER_EPOCH:
            self._log("WARN", f"broker {broker_id} refused a request for its registration of "
                              f"broker epoch {epoch} (STALE_BROKER_EPOCH): that incarnation "
                              f"is gone; broker {broker_id} counts as failed until it "
                              f"registers again")
            self.replaced[broker_id] = epoch
            del self.brokers[broker_id]
            self.shutting_down.discard(broker_id)
            self.offline_replicas.pop(broker_id, None)
            self._on_brokers_failure({broker_id})
            return
        refused = []
        for entry in body.get("partitions", []):
            if not (isinstance(entry, list) and len(entry) == 3):
                continue
            t, p, error = entry
            tp = (t, p)
            if error == ErrorCode.INELIGIBLE_REPLICA and tp in self.states and \
                    self.states[tp].leader == broker_id:
                self.refused.add((broker_id, tp))
                refused.append(tp)
        if refused:
            self._log("WARN", f"broker {broker_id} refused to lead "
                              f"{', '.join(f'{t}-{p}' for t, p in sorted(refused))}: it lost "
                              f"committed data of them (INELIGIBLE_REPLICA); electing "
                              f"another replica")
            self._write_states(self._decide_reconcile, sorted(refused), "leader refused")

    def _log_lost(self, broker: Broker) -> None:
        if broker.lost:
            names = ", ".join(f"{t}-{p}" for t, p in sorted(broker.lost)[:20])
            self._log("WARN", f"broker {broker.broker_id} lost committed data of replicas it was "
                              f"in the ISR of ({names}{' ...' if len(broker.lost) > 20 else ''}"
                              f"): not eligible as leader until back in an ISR")

    def _on_brokers_failure(self, dead: set[int]) -> None:
        affected = [tp for tp in self._active_partitions() if set(self._replicas(tp)) & dead]
        # Brokers learn the new broker list and the offline replicas at once; leader and
        # ISR changes follow from the writes.
        self._send_update_metadata(affected)
        self._write_states(self._decide_reconcile, affected, "broker failure")

    def _on_brokers_startup(self, born: set[int]) -> None:
        self._send_update_metadata([tp for tp in self.states if tp[0] not in self.deleting],
                                   to=born)
        others = set(self.brokers) - born
        on_born = [tp for tp in self._all_partitions() if set(self._replicas(tp)) & born]
        self._send_update_metadata(on_born, to=others)
        live_parts = [tp for tp in on_born if tp[0] not in self.deleting and tp in self.states]
        # Not a leadership the broker may have lost data of (unclean shutdown): the
        # reconcile below moves it first.
        suspect = {tp for tp in live_parts if self.states[tp].leader in born
                   and self.states[tp].leader in self._offline_on(tp)}
        self._leader_and_isr_to_replicas([tp for tp in live_parts if tp not in suspect],
                                         only=born)
        for topic in sorted(self.deleting):
            for b in sorted(born & self._topic_replica_brokers(topic)):
                self.deleting[topic].add(b)
                self._stop_replica_for_deletion(topic, b, 1)
        self._initialize_partitions(sorted(tp for tp in self.uninitialized
                                           if set(self._replicas(tp)) & born))
        offline = [tp for tp in self._active_partitions()
                   if tp in self.states and (self.states[tp].leader == NO_LEADER
                                             or self.states[tp].leader not in self.brokers)]
        self._write_states(self._decide_reconcile, offline, "broker startup")
        unclean = sorted(tp for tp, suspects in self.unclean_isr.items() if suspects & born
                         and tp in self.states and tp[0] not in self.deleting
                         and suspects & self._offline_on(tp))
        self._write_states(self._decide_reconcile, unclean, "unclean shutdown")
        for tp in sorted(self.reassigning):
            self._maybe_complete_reassignment(tp)

    # ---------------------------------------------------------------- the reconciling election

    def _decide_reconcile(self, tp: TopicPartition) -> tuple[int, tuple] | None:
        """After brokers died or came back: elect a leader if it has none alive, drop
        dead replicas from the ISR."""
        state = self.states[tp]
        live = self._live_for(tp)
        if state.leader != NO_LEADER and state.leader in live:
            isr = tuple(r for r in state.isr if r in live)
            return None if isr == state.isr else (state.leader, isr)
        replicas = self._replicas(tp)
        elected = elections.elect_offline(replicas, state.isr, self._eligible_for(tp),
                                          self._unclean_enabled(tp[0]),
                                          self._electable_elr(tp))
        if elected is not None and not elected[2] and elected[0] not in state.isr:
            self._log("INFO", f"{tp[0]}-{tp[1]}: no ISR member {list(state.isr)} can lead; "
                              f"electing {elected[0]} from the eligible leader replicas "
                              f"{list(state.elr)} (KIP-966)")
        if elected is None:
            if state.leader != NO_LEADER:
                self._log("ERROR", f"NoReplicaOnlineException: No replica in ISR for "
                                   f"partition {tp[0]}-{tp[1]} is alive. Live brokers are: "
                                   f"[{','.join(map(str, sorted(live)))}], ISR brokers are: "
                                   f"[{','.join(map(str, state.isr))}]")
                kept = tuple(r for r in state.isr if r in live) or state.isr
                return NO_LEADER, kept
            return None
        leader, isr, unclean = elected
        if unclean:
            self._log("WARN", f"Unclean leader election: {tp[0]}-{tp[1]} leader {leader} "
                              f"was not in the ISR {list(state.isr)}; data loss is possible")
        return leader, isr
