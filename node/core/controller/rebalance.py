"""Requested elections (preferred, unclean: /admin/preferred_replica_election) and the
automatic leader rebalance, checked on the clock (Tick). A mixin of
``core.Controller``.

Rules:
- Preferred election: the first replica of the assignment, when alive and in the ISR.
  Auto rebalance every ``leader.imbalance.check.interval.seconds``: for a broker whose
  share of preferred partitions it does not lead exceeds
  ``leader.imbalance.per.broker.percentage``.
- An unclean election on request elects any live replica of a partition without a live
  leader (the ISR and the ELR first).
"""
from __future__ import annotations

from node.core.controller import elections
from node.core.controller.events import (NO_LEADER, ElectionRequested, Tick, TopicPartition,
                                         ZkDelete)
from node.wire import zkdata


class Rebalance:
    """Requested elections and the auto leader rebalance (rules above)."""

    # ---------------------------------------------------------------- elections

    def _on_election_requested(self, ev: ElectionRequested) -> None:
        tps = (self._active_partitions() if ev.partitions is None else
               sorted(tp for tp in set(ev.partitions)
                      if tp[0] in self.assignments and tp[1] in self.assignments[tp[0]]
                      and tp[0] not in self.deleting))
        decide = self._decide_unclean if ev.election_type == "unclean" else self._decide_preferred
        self._log("INFO", f"{ev.election_type} leader election for {len(tps)} partitions")
        self._write_states(decide, [tp for tp in tps if tp in self.states],
                           f"{ev.election_type} election")
        # A merged request written meanwhile fails the delete and comes back by the watch.
        self._zk([ZkDelete(zkdata.PREFERRED_REPLICA_ELECTION, ev.zk_version)],
                 lambda results: None)

    def _on_tick(self, ev: Tick) -> None:
        self.now_ms = ev.now_ms
        self._unclean_recovery()
        if not self.config.auto_leader_rebalance_enable:
            return
        if self.next_rebalance_check_ms is None or ev.now_ms < self.next_rebalance_check_ms:
            return
        self.next_rebalance_check_ms = ev.now_ms + \
            self.config.leader_imbalance_check_interval_seconds * 1000
        self._check_leader_imbalance()

    def imbalance(self) -> dict[int, tuple[int, int]]:
        """broker -> (preferred partitions it does not lead, preferred partitions)."""
        result: dict[int, tuple[int, int]] = {}
        for tp in self._active_partitions():
            if tp not in self.states:
                continue
            preferred = self._replicas(tp)[0]
            not_led, total = result.get(preferred, (0, 0))
            result[preferred] = (not_led + (self.states[tp].leader != preferred), total + 1)
        return result

    def _check_leader_imbalance(self) -> None:
        """Kafka's checkAndTriggerAutoLeaderRebalance."""
        if self.reassigning or self.deleting:
            return
        eligible = self._eligible()
        chosen: list[TopicPartition] = []
        for broker, (not_led, total) in sorted(self.imbalance().items()):
            if broker not in eligible or total == 0:
                continue
            ratio_percent = 100.0 * not_led / total
            if ratio_percent <= self.config.leader_imbalance_per_broker_percentage:
                continue
            self._log("INFO", f"leader imbalance of broker {broker}: {ratio_percent:.1f}% > "
                              f"{self.config.leader_imbalance_per_broker_percentage}%")
            chosen += [tp for tp in self._active_partitions()
                       if tp in self.states and self._replicas(tp)[0] == broker
                       and self.states[tp].leader != broker
                       and broker in self.states[tp].isr]
        if chosen:
            self._write_states(self._decide_preferred, chosen, "auto leader rebalance")

    # ---------------------------------------------------------------- decisions

    def _decide_unclean(self, tp: TopicPartition) -> tuple[int, tuple] | None:
        state = self.states[tp]
        if state.leader != NO_LEADER and state.leader in self._live_for(tp):
            return None
        elected = elections.elect_offline(self._replicas(tp), state.isr,
                                          self._eligible_for(tp), True,
                                          self._electable_elr(tp))
        if elected is None:
            return None
        if elected[2]:
            self._log("WARN", f"Unclean leader election (requested): {tp[0]}-{tp[1]} leader "
                              f"{elected[0]} was not in the ISR {list(state.isr)}")
        return elected[0], elected[1]

    def _decide_preferred(self, tp: TopicPartition) -> tuple[int, tuple] | None:
        if tp in self.reassigning:
            return None
        return elections.elect_preferred(self._replicas(tp), self.states[tp],
                                         self._eligible_for(tp))
