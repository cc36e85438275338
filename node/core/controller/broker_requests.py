"""The requests the controller sends to brokers, built from its state: LeaderAndIsr,
UpdateMetadata and StopReplica (Kafka's ControllerBrokerRequestBatch). A mixin of
``core.Controller``.

Rules:
- LeaderAndIsr goes per live broker (sorted) with its partitions (sorted) and the live
  leaders among them; a leader elected by an unclean recovery is marked RECOVERING
  (Kafka's LeaderRecoveryState).
- UpdateMetadata carries the live broker list and, per partition, the replicas that are
  offline (dead, or on a failed log dir, or lost their data); a partition being deleted
  carries leader -2 (LeaderDuringDelete).
- Every request carries the controller epoch and the receiving broker's epoch (KIP-380,
  added by ``core.Controller._send``).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from node.core.controller.events import LEADER_DURING_DELETE, TopicPartition
from node.wire.control import (LEADER_RECOVERED, LEADER_RECOVERING, LeaderAndIsrPartition,
                               StopReplicaPartition, UpdateMetadataPartition)
from node.wire.protocol import ApiKey


class BrokerRequests:
    """Builds and sends the controller's requests to brokers (state: ``core.Controller``)."""

    # ---------------------------------------------------------------- requests to brokers

    def _leader_and_isr_entry(self, tp: TopicPartition, is_new: bool) -> LeaderAndIsrPartition:
        state = self.states[tp]
        recovering = self.recovery_epochs.get(tp) == state.leader_epoch
        return LeaderAndIsrPartition(tp[0], tp[1], state.leader, state.leader_epoch,
                                     tuple(state.isr), state.zk_version,
                                     tuple(self._replicas(tp)), is_new, tuple(state.elr),
                                     LEADER_RECOVERING if recovering else LEADER_RECOVERED)

    def _update_metadata_entry(self, tp: TopicPartition, offline: Iterable[int],
                               leader_override: int | None = None) -> UpdateMetadataPartition:
        state = self.states[tp]
        leader = state.leader if leader_override is None else leader_override
        return UpdateMetadataPartition(tp[0], tp[1], leader, state.leader_epoch,
                                       tuple(state.isr), state.zk_version,
                                       tuple(self._replicas(tp)), tuple(offline))

    def _send_leader_and_isr(self, targets: Mapping[int, Iterable[TopicPartition]],
                             new: Callable[[TopicPartition, int], bool] | None = None) -> None:
        """LeaderAndIsr per live broker (sorted) with its partitions (sorted);
        ``new(tp, broker)`` says whether that replica is a new one (is_new)."""
        for broker_id in sorted(targets):
            tps = sorted(set(targets[broker_id]) & set(self.states))
            if broker_id not in self.brokers or not tps:
                continue
            entries = [self._leader_and_isr_entry(tp, bool(new and new(tp, broker_id)))
                       for tp in tps]
            leaders = sorted({self.states[tp].leader for tp in tps} & set(self.brokers))
            epoch = self.brokers[broker_id].epoch
            self._send(broker_id, ApiKey.LEADER_AND_ISR, {
                "controller_id": self.broker_id, "controller_epoch": self.epoch,
                "partitions": [e.to_wire() for e in entries],
                "live_leaders": [[b, self.brokers[b].host, self.brokers[b].port]
                                 for b in leaders]},
                lambda body, b=broker_id, e=epoch: self._on_leader_and_isr_answer(b, e, body))

    def _leader_and_isr_to_replicas(self, tps: Iterable[TopicPartition],
                                    new: Callable[[TopicPartition, int], bool] | None = None,
                                    only: set[int] | None = None) -> None:
        targets: dict[int, list[TopicPartition]] = {}
        for tp in tps:
            for r in self._replicas(tp):
                if r in self.brokers and (only is None or r in only):
                    targets.setdefault(r, []).append(tp)
        self._send_leader_and_isr(targets, new)

    def _broker_list(self) -> list:
        """[id, host, port, rack], + {listener name: [host, port]} for a broker with
        other listeners than the native one (the Kafka-protocol one)."""
        out = []
        for b in sorted(self.brokers.values()):
            entry = [b.broker_id, b.host, b.port, b.rack]
            if b.other_endpoints:
                entry.append({name: [host, port] for name, host, port in b.other_endpoints})
            out.append(entry)
        return out

    def _send_update_metadata(self, tps: Iterable[TopicPartition],
                              to: Iterable[int] | None = None,
                              deleted: Iterable[TopicPartition] = ()) -> None:
        """UpdateMetadata (every live broker by default) with the live broker list and
        the given partitions; ``deleted`` ones carry leader -2 (LeaderDuringDelete)."""
        deleted = sorted(set(deleted) & set(self.states))
        entries = []
        for tp in sorted(set(tps) & set(self.states)):
            if tp in deleted:
                continue
            replicas = self._replicas(tp)
            offline = self._offline_on(tp)
            entries.append(self._update_metadata_entry(
                tp, [r for r in replicas if r not in self.brokers or r in offline]))
        for tp in deleted:
            entries.append(self._update_metadata_entry(tp, (), LEADER_DURING_DELETE))
        entries.sort(key=lambda e: (e.topic, e.partition))
        body = {"controller_id": self.broker_id, "controller_epoch": self.epoch,
                "brokers": self._broker_list(), "partitions": [e.to_wire() for e in entries]}
        ids = {e.topic: self.topic_ids[e.topic] for e in entries if e.topic in self.topic_ids}
        if ids:
            body["topic_ids"] = ids          # KIP-516: Metadata v10+, Fetch v13
        for broker_id in sorted(self.brokers if to is None else set(to) & set(self.brokers)):
            self._send(broker_id, ApiKey.UPDATE_METADATA, body)

    def _send_stop_replica(self, broker_id: int, tps: Iterable[TopicPartition], delete: bool,
                           on_response: Callable[[dict | None], None] | None = None,
                           leader_epoch: Mapping[TopicPartition, int] | None = None) -> None:
        entries = [StopReplicaPartition(t, p, (leader_epoch or {}).get((t, p), -1)).to_wire()
                   for t, p in sorted(tps)]
        if not entries:
            return
        self._send(broker_id, ApiKey.STOP_REPLICA, {
            "controller_id": self.broker_id, "controller_epoch": self.epoch,
            "delete_partitions": delete, "partitions": entries}, on_response)
