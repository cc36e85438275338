"""Unclean recovery (KIP-966, ``unclean_recovery_strategy`` "balanced"), driven by the
clock (Tick). A mixin of ``core.Controller``.

Rules:
- Unclean recovery (KIP-966, ``unclean_recovery_strategy`` "balanced", with or without
  ELR: a replica registered as lost is never elected otherwise): a partition
  that no ISR or ELR member can lead, with unclean election off, asks every live
  replica for its log's end (GetReplicaLogInfo); once every replica has answered, or
  ``unclean_recovery_timeout_ms`` after it went offline, it elects the one with the
  highest (last leader epoch, log end offset), ISR = {it}, and marks the leader
  RECOVERING in LeaderAndIsr (Kafka's LeaderRecoveryState) so a replica that lost data
  may accept; what the others held beyond its end is logged as lost.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from node.core.controller.events import NO_LEADER, TopicPartition
from node.wire.errors import ErrorCode
from node.wire.protocol import ApiKey


@dataclass
class _Recovery:
    """An unclean recovery in progress: the deadline, and the replicas' answers."""
    deadline_ms: int
    asked: set = field(default_factory=set)           # brokers asked (this incarnation)
    answers: dict = field(default_factory=dict)       # broker -> (last epoch, log end)



class UncleanRecovery:
    """Unclean recovery of partitions no clean replica can lead (rules above)."""

    # ---------------------------------------------------------------- unclean recovery

    def _needs_recovery(self, tp: TopicPartition) -> bool:
        """Offline with no replica that may lead it cleanly, now or on its return: every
        ISR and ELR member is registered and lost data of it (a dead one may come back
        with its data, so the recovery waits for it, within the timeout)."""
        state = self.states.get(tp)
        if state is None or state.leader != NO_LEADER or tp[0] in self.deleting or \
                self._unclean_enabled(tp[0]) or \
                self.recovery_epochs.get(tp, -1) > state.leader_epoch:   # its write in flight
            return False
        barred = self._offline_on(tp)
        return not any(r in self.brokers and r not in barred
                       for r in set(state.isr) | set(state.elr))

    def _unclean_recovery(self) -> None:
        if self.config.unclean_recovery_strategy != "balanced":
            return
        for tp in sorted(self.recovering):
            if not self._needs_recovery(tp):
                del self.recovering[tp]
        for tp in self._active_partitions():
            if tp not in self.recovering and self._needs_recovery(tp):
                self.recovering[tp] = _Recovery(
                    self.now_ms + self.config.unclean_recovery_timeout_ms)
                self._log("WARN", f"{tp[0]}-{tp[1]}: every replica that may lead it lost "
                                  f"committed data or is away; unclean recovery asks the "
                                  f"replicas for their logs (elects the longest once all "
                                  f"answered, or in {self.config.unclean_recovery_timeout_ms} "
                                  f"ms)")
        for tp in sorted(self.recovering):
            self._advance_recovery(tp)

    def _advance_recovery(self, tp: TopicPartition) -> None:
        recovery = self.recovering[tp]
        for b in self._replicas(tp):
            if b in self.brokers and b not in recovery.asked:
                recovery.asked.add(b)
                epoch = self.brokers[b].epoch
                self._send(b, ApiKey.GET_REPLICA_LOG_INFO, {
                    "controller_id": self.broker_id, "controller_epoch": self.epoch,
                    "partitions": [[tp[0], tp[1]]]},
                    lambda body, b=b, e=epoch: self._on_replica_log_info(tp, b, e, body))
        replicas = self._replicas(tp)
        everyone = all(b in recovery.answers for b in replicas)
        if not recovery.answers or not (everyone or self.now_ms >= recovery.deadline_ms):
            return
        live = {b: v for b, v in recovery.answers.items() if b in self.brokers}
        if not live:
            return
        best = max(live, key=lambda b: (live[b], -replicas.index(b)))
        best_epoch, best_end = live[best]
        del self.recovering[tp]
        ends = ", ".join(f"broker {b}: epoch {e} end {o}"
                         for b, (e, o) in sorted(recovery.answers.items()))
        lost = {b: o - best_end for b, (e, o) in recovery.answers.items() if o > best_end}
        self._log("WARN", f"unclean recovery of {tp[0]}-{tp[1]}: electing broker {best}, the "
                          f"longest log (last leader epoch {best_epoch}, log end {best_end}; "
                          f"{ends}{'' if everyone else '; not every replica answered'})"
                          + (f"; records beyond {best_end} on "
                             f"{', '.join(f'broker {b} ({n})' for b, n in sorted(lost.items()))}"
                             f" are lost" if lost else ""))

        def decide(tp_):
            state = self.states[tp_]
            if state.leader != NO_LEADER or best not in self.brokers:
                return None
            # Its LeaderAndIsr says RECOVERING, which a replica that lost data accepts.
            self.recovery_epochs[tp_] = state.leader_epoch + 1
            self.recovered.add((best, tp_))
            self.refused.discard((best, tp_))
            return best, (best,), ()

        self._write_states(decide, [tp], "unclean recovery")

    def _on_replica_log_info(self, tp: TopicPartition, broker_id: int, epoch: int,
                             body: dict | None) -> None:
        recovery = self.recovering.get(tp)
        info = self.brokers.get(broker_id)
        if recovery is None or info is None or info.epoch != epoch:
            return
        if body is None or not isinstance(body, dict) or body.get("error") != ErrorCode.NONE:
            recovery.asked.discard(broker_id)      # asked again on the next tick
            return
        for entry in body.get("partitions", []):
            if isinstance(entry, list) and len(entry) == 5 and (entry[0], entry[1]) == tp \
                    and entry[2] == ErrorCode.NONE and all(
                        isinstance(x, int) and not isinstance(x, bool) for x in entry[3:]):
                recovery.answers[broker_id] = (entry[3], entry[4])
        self._advance_recovery(tp)
