"""Partition reassignment (/admin/reassign_partitions; Kafka's KIP-455 algorithm in
its ZK-mode controller). A mixin of ``core.Controller``.

Rules:
- Reassignment (Kafka's algorithm, RS = replicas, ORS original, TRS target, AR = TRS -
  ORS, RR = ORS - TRS): write RS = TRS + ORS (AR/RR in the topic znode), bump the leader
  epoch and send LeaderAndIsr to RS (AR as new replicas); once every TRS replica is in
  the ISR: leader stays if in TRS, else the first live ISR replica of TRS; RS = TRS,
  ISR = ISR ∩ TRS, leader_epoch + 1 (Kafka's steps B3 and B4 in one write);
  StopReplica(delete) to RR; write the topic znode; drop the entry from
  ``/admin/reassign_partitions`` (the znode is deleted when empty). A new target for a
  moving partition starts from the current RS (nothing leaves RS, or the ISR, before
  the new target is in sync); an entry removed from the znode cancels: the partition
  moves back to the replicas it had before its first reassignment.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from node.core.controller import elections
from node.core.controller.events import (
    NO_LEADER, STATE_WRITE_ATTEMPTS_MAX, ReassignmentRequested, TopicDeletionRequested,
    TopicPartition, ZkDelete, ZkResult, ZkSetData)
from node.wire import zkdata


@dataclass
class _Reassignment:
    original: tuple[int, ...]    # RS when this (possibly replacing) reassignment began
    target: tuple[int, ...]
    cancel_target: tuple[int, ...] = ()   # the replicas before the first reassignment
    completing: bool = False     # the final state write is in flight

    @property
    def full(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys(self.target + self.original))

    @property
    def adding(self) -> tuple[int, ...]:
        return tuple(r for r in self.target if r not in self.original)

    @property
    def removing(self) -> tuple[int, ...]:
        return tuple(r for r in self.original if r not in self.target)



class Reassignments:
    """Partition reassignment (rules above; state: ``core.Controller``)."""

    # ---------------------------------------------------------------- reassignment

    def _on_reassignment_requested(self, ev: ReassignmentRequested) -> None:
        self.reassign_znode = {tp: tuple(r) for tp, r in ev.moves.items()}
        self.reassign_znode_version = ev.zk_version
        finished: list[TopicPartition] = []
        for tp in sorted(self.reassign_znode):
            target = self.reassign_znode[tp]
            current = self.reassigning.get(tp)
            if current is not None and current.target == target:
                continue
            error = self._reassignment_error(tp, target)
            if error is not None:
                self._log("ERROR", f"reassignment of {tp[0]}-{tp[1]} to {list(target)} "
                                   f"refused: {error}")
                finished.append(tp)
                continue
            if current is None and self._replicas(tp) == target:
                finished.append(tp)
                continue
            self._start_reassignment(tp, target, current)
        # An entry that vanished from the znode while its partition moves is a
        # cancellation: the partition goes back to its original replicas.
        for tp in sorted(set(self.reassigning) - set(self.reassign_znode)):
            move = self.reassigning[tp]
            if not move.completing and move.target != move.cancel_target:
                self._log("INFO", f"reassignment of {tp[0]}-{tp[1]} cancelled")
                self._start_reassignment(tp, move.cancel_target, move)
        if finished:
            self._remove_reassignment_entries(finished)

    def _reassignment_error(self, tp: TopicPartition, target: tuple[int, ...]) -> str | None:
        if tp[0] not in self.assignments or tp[1] not in self.assignments[tp[0]]:
            return "unknown topic or partition"
        if tp[0] in self.deleting:
            return "topic is being deleted"
        if not target or len(set(target)) != len(target):
            return "the replica list is empty or has duplicates"
        dead = sorted(set(target) - set(self.brokers) - set(self._replicas(tp)))
        if dead:
            return f"replicas {dead} are not alive"
        if tp not in self.states:
            return "the partition has no state yet"
        return None

    def _start_reassignment(self, tp: TopicPartition, target: tuple[int, ...],
                            previous: _Reassignment | None) -> None:
        # A replaced (or cancelled) reassignment starts from the current replica set, so
        # no replica leaves it (and the ISR) before the new target is in sync; Kafka
        # stops the replaced one's new replicas at once (its step U3), here they go with
        # the other removed replicas at completion.
        original = self._replicas(tp)
        move = _Reassignment(original=tuple(original), target=tuple(target),
                             cancel_target=previous.cancel_target if previous is not None
                             else tuple(original))
        self.reassigning[tp] = move
        self._log("INFO", f"reassigning {tp[0]}-{tp[1]}: {list(original)} -> {list(target)} "
                          f"(adding {list(move.adding)}, removing {list(move.removing)})")
        self.assignments[tp[0]][tp[1]] = move.full

        def after_topic_written() -> None:
            if tp not in self.reassigning:
                return

            def decide(tp_):
                state = self.states[tp_]
                full = self._replicas(tp_)
                isr = tuple(r for r in state.isr if r in full)
                if state.leader in full and state.leader in isr:
                    return state.leader, isr
                elected = elections.elect_offline(full, isr, self._eligible(), False)
                return (NO_LEADER, isr or state.isr) if elected is None else elected[:2]

            # A1/A2: bump the leader epoch so every replica of RS hears of the change;
            # the added ones start as new replicas and fetch from the leader.
            self._write_states(decide, [tp], "reassignment started",
                               new=lambda tp_, b: b in move.adding, force=True)

        self._write_topic(tp[0], after_topic_written)

    def _maybe_complete_reassignment(self, tp: TopicPartition) -> None:
        move = self.reassigning.get(tp)
        state = self.states.get(tp)
        if move is None or state is None or move.completing:
            return
        if self._replicas(tp) != move.full or not set(move.target) <= set(state.isr):
            return
        elected = elections.elect_reassigned(move.target, state, set(self.brokers),
                                             self._eligible())
        if elected is None:
            self._log("WARN", f"reassignment of {tp[0]}-{tp[1]} waits for a live leader "
                              f"in {list(move.target)}")
            return
        move.completing = True
        self.assignments[tp[0]][tp[1]] = move.target          # B2
        removed = move.removing

        def decide(tp_):
            return elections.elect_reassigned(move.target, self.states[tp_],
                                              set(self.brokers), self._eligible())

        def after_state(written) -> None:
            if tp not in written:
                move.completing = False
                self.assignments[tp[0]][tp[1]] = move.full
                return
            epoch = {tp: self.states[tp].leader_epoch}
            for r in removed:                                  # B4/B5
                self._send_stop_replica(r, [tp], delete=True, leader_epoch=epoch)
            self.reassigning.pop(tp, None)

            def after_topic() -> None:                         # B7
                self._log("INFO", f"reassignment of {tp[0]}-{tp[1]} to {list(move.target)} "
                                  f"completed")
                self._remove_reassignment_entries([tp])
                if tp[0] in self.deletion_queued:
                    self._on_topic_deletion_requested(TopicDeletionRequested(
                        tuple(sorted(self.deletion_queued))))

            self._write_topic(tp[0], after_topic)             # B6

        # B3: the new replica set (and ISR within it) with a new leader epoch, sent to TRS.
        self._write_states(decide, [tp], "reassignment completed", then=after_state,
                           recipients=lambda _tp: set(move.target), force=True)

    def _write_topic(self, topic: str, then: Callable[[], None], attempt: int = 1) -> None:
        """Write /brokers/topics/T from memory (RS, and AR/RR of running reassignments),
        conditional on the version held."""
        if topic not in self.assignments:
            return
        parts = self.assignments[topic]
        adding = {p: list(self.reassigning[(topic, p)].adding) for p in sorted(parts)
                  if (topic, p) in self.reassigning and self.reassigning[(topic, p)].adding}
        removing = {p: list(self.reassigning[(topic, p)].removing) for p in sorted(parts)
                    if (topic, p) in self.reassigning and self.reassigning[(topic, p)].removing}
        data = zkdata.encode_assignment({p: list(r) for p, r in parts.items()}, adding, removing,
                                        topic_id=self.topic_ids.get(topic))

        def on_done(results: tuple[ZkResult, ...]) -> None:
            result = results[0]
            if result.error is None:
                self.topic_versions[topic] = result.version
                then()
            elif result.error == "BadVersion" and result.current_data is not None \
                    and attempt < STATE_WRITE_ATTEMPTS_MAX:
                # Someone added partitions meanwhile: take them, write again.
                try:
                    theirs = zkdata.decode_assignment(topic, result.current_data)
                except zkdata.ZkDataError as e:
                    self._log("ERROR", str(e))
                    theirs = {}
                self.topic_versions[topic] = result.current_version
                added = sorted(p for p in theirs if p not in self.assignments.get(topic, {}))
                for p in added:
                    self.assignments[topic][p] = tuple(theirs[p])
                self._initialize_partitions([(topic, p) for p in added])
                self._write_topic(topic, then, attempt + 1)
            else:
                self._log("ERROR", f"topic {topic} assignment not written ({result.error})")

        self._zk([ZkSetData(zkdata.topic_path(topic), data, self.topic_versions.get(topic, -1))],
                 on_done)

    def _remove_reassignment_entries(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            self.reassign_znode.pop(tp, None)
        if self.reassign_znode_version < 0:
            return
        if self.reassign_znode:
            op = ZkSetData(zkdata.REASSIGN_PARTITIONS,
                           zkdata.encode_reassignment({tp: list(r) for tp, r in
                                                  self.reassign_znode.items()}),
                           self.reassign_znode_version)
        else:
            op = ZkDelete(zkdata.REASSIGN_PARTITIONS, self.reassign_znode_version)

        def on_done(results: tuple[ZkResult, ...]) -> None:
            result = results[0]
            if result.error is None:
                self.reassign_znode_version = result.version if self.reassign_znode else -1
            elif result.error == "NoNode":
                self.reassign_znode_version = -1
            elif result.error == "BadVersion" and result.current_data is not None:
                # New requests arrived meanwhile: take the znode as it is now; the
                # finished entries (target == replicas) are dropped from it again.
                try:
                    moves = zkdata.decode_reassignment(result.current_data)
                except zkdata.ZkDataError as e:
                    self._log("ERROR", str(e))
                    return
                self._on_reassignment_requested(
                    ReassignmentRequested(moves, result.current_version))
            else:
                self._log("ERROR", f"/admin/reassign_partitions not updated ({result.error})")

        self._zk([op], on_done)
