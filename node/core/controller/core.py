"""The controller core: ``Controller``, its ``step`` and handler table (the step
table), what it knows of the cluster, and the state-write machinery every part uses.
The parts (failover, topics, reassignment, ...) are mixins in their own modules; each
opens with its rules.

Invariants (asserted on every state this core writes): leader ∈ ISR ⊆ replicas (an
offline partition: leader -1, ISR non-empty ⊆ replicas); ELR ⊆ replicas, disjoint from
the ISR; the leader epoch of a partition strictly increases with every controller
write; every write is conditional on the znode version the core holds; every request
carries the controller epoch and the receiving broker's epoch.

A state-changing decision is always written first (ZkOps) and sent to brokers only from
the step that handles its ZkOpsDone, so brokers never hear of a state the coordinator
does not hold. Everything the core emits is sorted (brokers, topics, partitions), so one
seed gives one trace.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from node.core.controller.broker_requests import BrokerRequests
from node.core.controller.deletion import TopicDeletion
from node.core.controller.events import (
    NO_LEADER, STATE_WRITE_ATTEMPTS_MAX, BecomeController, Broker, BrokerResponse, BrokersChanged,
    ControlledShutdownRequested, ControllerConfig, Effect, ElectionRequested, Event, IsrChanged,
    LogLine, ReassignmentRequested, ReplicasOffline, ReplyControlledShutdown, Resign, SendRequest,
    Tick, TopicChanged, TopicConfigChanged, TopicDeletionRequested, TopicPartition, TopicRemoved,
    ZkOp, ZkOps, ZkOpsDone, ZkResult, ZkSetData, _is_true)
from node.core.controller.failover import Failover
from node.core.controller.reassignment import Reassignments, _Reassignment
from node.core.controller.rebalance import Rebalance
from node.core.controller.recovery import UncleanRecovery, _Recovery
from node.core.controller.shutdown import ControlledShutdown
from node.core.controller.topics import Topics
from node.core.replication import next_elr
from node.wire.errors import ErrorCode
from node.wire import zkdata
from node.wire.protocol import ApiKey
from node.wire.zkdata import PartitionState


@dataclass
class _Batch:
    """A group of state writes whose completion (with retries) runs ``then``."""

    outstanding: int = 0
    written: list = field(default_factory=list)
    then: Callable[[list], None] | None = None


class Controller(Failover, UncleanRecovery, Topics, Rebalance, ControlledShutdown,
                 Reassignments, TopicDeletion, BrokerRequests):
    """See the package's and this module's docstrings; the parts are the mixins named
    above, each with its rules. Create one per controller term (BecomeController)."""

    def __init__(self, broker_id: int, config: ControllerConfig = ControllerConfig()) -> None:
        self.broker_id = broker_id
        self.config = config
        self.epoch = -1
        self.active = False
        self.brokers: dict[int, Broker] = {}
        self.shutting_down: set[int] = set()
        # broker -> its replicas on a failed log dir (forgotten when the broker restarts)
        self.offline_replicas: dict[int, set[TopicPartition]] = {}
        # (broker, partition) of lost replicas that have rejoined an ISR since
        self.recovered: set[tuple[int, TopicPartition]] = set()
        # (broker, partition) whose leadership the broker refused (INELIGIBLE_REPLICA)
        self.refused: set[tuple[int, TopicPartition]] = set()
        # broker -> the epoch of a registration found to belong to a dead incarnation
        self.replaced: dict[int, int] = {}
        # (broker, partition): an ELR member whose broker came back from an unclean
        # shutdown; not elected from the ELR even before the write removing it lands.
        self.elr_barred: set[tuple[int, TopicPartition]] = set()
        # (broker, partition): the broker came back from an unclean shutdown while in the
        # partition's ISR, so it may have lost acknowledged records (a power failure);
        # while another ISR member is live it neither leads nor stays in that ISR, until
        # a leader takes it back in (KIP-966's unclean shutdown handling, KAFKA-18106).
        self.unclean_isr: dict[TopicPartition, set[int]] = {}
        self.recovering: dict[TopicPartition, _Recovery] = {}
        self.recovery_epochs: dict[TopicPartition, int] = {}   # leader epoch it elected
        self.now_ms = 0
        self.assignments: dict[str, dict[int, tuple[int, ...]]] = {}
        self.topic_versions: dict[str, int] = {}
        self.topic_configs: dict[str, dict[str, str]] = {}
        # KIP-516: topic -> its id (Kafka's text form), carried to brokers in UpdateMetadata.
        self.topic_ids: dict[str, str] = {}
        self.states: dict[TopicPartition, PartitionState] = {}
        self.uninitialized: set[TopicPartition] = set()
        self.reassigning: dict[TopicPartition, _Reassignment] = {}
        self.reassign_znode: dict[TopicPartition, tuple[int, ...]] = {}
        self.reassign_znode_version = -1
        self.deleting: dict[str, set[int]] = {}      # topic -> brokers yet to confirm
        self.deletion_queued: set[str] = set()
        self.next_rebalance_check_ms: int | None = None
        self._next_op_id = 1
        self._next_tag = 1
        self._pending_ops: dict[int, Callable[[tuple[ZkResult, ...]], None]] = {}
        self._pending_tags: dict[int, Callable[[dict | None], None]] = {}
        self._out: list[Effect] = []
        self._handlers = {
            BecomeController: self._on_become_controller,
            BrokersChanged: self._on_brokers_changed,
            TopicChanged: self._on_topic_changed,
            TopicRemoved: self._on_topic_removed,
            TopicConfigChanged: self._on_topic_config_changed,
            IsrChanged: self._on_isr_changed,
            ReplicasOffline: self._on_replicas_offline,
            ElectionRequested: self._on_election_requested,
            ReassignmentRequested: self._on_reassignment_requested,
            TopicDeletionRequested: self._on_topic_deletion_requested,
            ControlledShutdownRequested: self._on_controlled_shutdown,
            BrokerResponse: self._on_broker_response,
            ZkOpsDone: self._on_zk_ops_done,
            Tick: self._on_tick,
        }
        assert set(self._handlers) == set(Event.__args__)

    # ---------------------------------------------------------------- driving

    def step(self, event: Event) -> list[Effect]:
        handler = self._handlers.get(type(event))
        if handler is None:
            raise TypeError(f"not a controller event: {event!r}")
        if not self.active and not isinstance(event, BecomeController):
            if isinstance(event, ControlledShutdownRequested):
                return [ReplyControlledShutdown(event.request_id, {
                    "error": ErrorCode.NOT_CONTROLLER, "remaining_partitions": []})]
            return []
        self._out = []
        handler(event)
        out, self._out = self._out, []
        return out

    @property
    def pending_op_count(self) -> int:
        return len(self._pending_ops)

    # -------------------------------------------------------- what it knows (every part asks)

    def _log(self, level: str, message: str) -> None:
        self._out.append(LogLine(level, message))

    def _eligible(self) -> set[int]:
        """Brokers that may lead: registered and not in controlled shutdown."""
        return set(self.brokers) - self.shutting_down

    def _offline_on(self, tp: TopicPartition) -> set[int]:
        """Brokers whose replica of ``tp`` is on a failed log dir, or lost its data and
        has not caught up since."""
        out = {b for b, tps in self.offline_replicas.items() if tp in tps} \
            if self.offline_replicas else set()
        for b, info in self.brokers.items():
            if info.lost and tp in info.lost and (b, tp) not in self.recovered:
                out.add(b)
        if self.refused:
            out |= {b for b, x in self.refused if x == tp}
        suspects = self.unclean_isr.get(tp) if self.unclean_isr else None
        if suspects:
            state = self.states.get(tp)
            if state is not None and any(r not in suspects and r not in out and
                                         r in self.brokers for r in state.isr):
                out |= suspects
        return out

    def _live_for(self, tp: TopicPartition) -> set[int]:
        return set(self.brokers) - self._offline_on(tp)

    def _eligible_for(self, tp: TopicPartition) -> set[int]:
        return self._eligible() - self._offline_on(tp)

    def _replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        return self.assignments[tp[0]][tp[1]]

    def _all_partitions(self) -> list[TopicPartition]:
        return [(t, p) for t in sorted(self.assignments) for p in sorted(self.assignments[t])]

    def _active_partitions(self) -> list[TopicPartition]:
        """Partitions not being deleted."""
        return [tp for tp in self._all_partitions() if tp[0] not in self.deleting]

    def _min_insync(self, topic: str) -> int:
        override = self.topic_configs.get(topic, {}).get("min.insync.replicas")
        try:
            return max(1, int(override)) if override is not None \
                else self.config.min_insync_replicas
        except ValueError:
            return self.config.min_insync_replicas

    def _elr_after(self, tp: TopicPartition, old: PartitionState, isr) -> tuple[int, ...]:
        """The ELR once the ISR is ``isr``: KIP-966's rule, without the replicas that
        lost data or cannot serve it, within the replica set."""
        if not self.config.eligible_leader_replicas:
            return ()
        replicas = set(self._replicas(tp))
        barred = self._offline_on(tp) | {b for b, x in self.elr_barred if x == tp}
        return tuple(r for r in next_elr(old.isr, isr, old.elr, self._min_insync(tp[0]))
                     if r in replicas and r not in barred)

    def _electable_elr(self, tp: TopicPartition) -> tuple[int, ...]:
        state = self.states[tp]
        if not self.elr_barred:
            return state.elr
        return tuple(r for r in state.elr if (r, tp) not in self.elr_barred)

    def _unclean_enabled(self, topic: str) -> bool:
        override = self.topic_configs.get(topic, {}).get("unclean.leader.election.enable")
        if override is not None:
            return _is_true(override)
        return self.config.unclean_leader_election_enable

    def _zk(self, ops: list[ZkOp], on_done: Callable[[tuple[ZkResult, ...]], None]) -> None:
        assert ops
        op_id = self._next_op_id
        self._next_op_id += 1
        self._pending_ops[op_id] = on_done
        self._out.append(ZkOps(op_id, tuple(ops)))

    def _send(self, broker_id: int, api_key: ApiKey, body: dict,
              on_response: Callable[[dict | None], None] | None = None) -> None:
        broker = self.brokers.get(broker_id)
        if broker is None:
            return
        assert body["controller_epoch"] == self.epoch
        body = dict(body, broker_epoch=broker.epoch)     # KIP-380
        tag = None
        if on_response is not None:
            tag = self._next_tag
            self._next_tag += 1
            self._pending_tags[tag] = on_response
        self._out.append(SendRequest(broker_id, broker.endpoint, int(api_key), body, tag))

    def _resign(self, reason: str) -> None:
        if self.active:
            self.active = False
            self._log("WARN", f"controller {self.broker_id} resigns (epoch {self.epoch}): {reason}")
            self._out.append(Resign(reason))

    # ---------------------------------------------------------------- state writes

    def _check_transition(self, tp: TopicPartition, old: PartitionState | None,
                          new: PartitionState) -> None:
        replicas = set(self._replicas(tp))
        assert new.isr, f"{tp}: empty ISR {new}"
        assert set(new.isr) <= replicas, f"{tp}: ISR {new.isr} not within replicas {replicas}"
        assert len(set(new.isr)) == len(new.isr), f"{tp}: duplicate in ISR {new.isr}"
        assert new.leader == NO_LEADER or new.leader in new.isr, f"{tp}: leader not in ISR {new}"
        assert set(new.elr) <= replicas and not set(new.elr) & set(new.isr), \
            f"{tp}: ELR {new.elr} not within replicas {replicas} outside the ISR {new.isr}"
        assert new.controller_epoch == self.epoch
        if old is not None:
            assert new.leader_epoch > old.leader_epoch, f"{tp}: epoch {old} -> {new}"

    def _write_states(self, decide: Callable[[TopicPartition], tuple[int, tuple] | None],
                      tps: Iterable[TopicPartition], reason: str,
                      then: Callable[[list], None] | None = None,
                      recipients: Callable[[TopicPartition], set[int] | None] | None = None,
                      new: Callable[[TopicPartition, int], bool] | None = None,
                      force: bool = False) -> None:
        """Decide each partition's new (leader, isr), write the changed ones (each
        conditional on the version the core holds), and once written send LeaderAndIsr
        to the live replicas (or ``recipients(tp)``) and UpdateMetadata to every broker.
        After a version conflict the state is re-read and the decision made again.
        ``then(written)`` runs when every write (and retry) has finished. ``force``:
        write (bumping the leader epoch) even when leader and ISR stay the same."""
        batch = _Batch(then=then)
        self._write_states_attempt(decide, sorted(set(tps)), reason, batch, 1,
                                   recipients, new, force)
        if batch.outstanding == 0:
            self._finish_batch(batch)

    def _write_states_attempt(self, decide, tps, reason, batch: _Batch, attempt: int,
                              recipients, new, force) -> None:
        writes: list[tuple[TopicPartition, PartitionState]] = []
        unwritten: list[TopicPartition] = []
        for tp in tps:
            if tp[0] not in self.assignments or tp not in self.states:
                continue
            decision = decide(tp)
            old = self.states[tp]
            if decision is None:
                unwritten.append(tp)
                continue
            leader, isr = decision[0], tuple(decision[1])
            elr = tuple(decision[2]) if len(decision) > 2 else self._elr_after(tp, old, isr)
            if leader == old.leader and isr == old.isr and elr == old.elr and not force:
                unwritten.append(tp)
                continue
            state = PartitionState(leader, old.leader_epoch + 1, isr, self.epoch,
                                   old.zk_version, elr)
            self._check_transition(tp, old, state)
            writes.append((tp, state))
        if attempt > 1 and unwritten:
            # Read back after a conflict (a leader's ISR write, whose notification will
            # carry the version held now and be skipped): nothing to write, but the
            # brokers must hear of the state as it is.
            self._send_update_metadata(unwritten)
        if not writes:
            return
        batch.outstanding += 1
        for tp, state in writes:
            elr = f" elr {list(state.elr)}" if state.elr else ""
            self._log("INFO", f"{reason}: {tp[0]}-{tp[1]} leader {state.leader} "
                              f"leader_epoch {state.leader_epoch} isr {list(state.isr)}{elr}")

        def on_done(results: tuple[ZkResult, ...]) -> None:
            retry: list[TopicPartition] = []
            written: list[TopicPartition] = []
            for (tp, state), result in zip(writes, results):
                if result.error is None:
                    self.states[tp] = replace(state, zk_version=result.version)
                    written.append(tp)
                elif result.error == "BadVersion" and result.current_data is not None:
                    if not self._adopt_state(tp, result.current_data, result.current_version):
                        return
                    retry.append(tp)
                else:
                    self._log("WARN", f"{reason}: state of {tp[0]}-{tp[1]} not written "
                                      f"({result.error})")
            self._after_states_written(written, recipients, new)
            batch.written.extend(written)
            if retry and attempt < STATE_WRITE_ATTEMPTS_MAX:
                self._write_states_attempt(decide, retry, reason, batch, attempt + 1,
                                           recipients, new, force)
            elif retry:
                self._log("ERROR", f"{reason}: gave up on {retry} after {attempt} attempts")
            batch.outstanding -= 1
            if batch.outstanding == 0:
                self._finish_batch(batch)

        self._zk([_set_state_op(tp, state) for tp, state in writes], on_done)

    def _finish_batch(self, batch: _Batch) -> None:
        if batch.then is not None:
            batch.then(sorted(set(batch.written)))

    def _adopt_state(self, tp: TopicPartition, data: bytes, version: int) -> bool:
        """Take a state read back from the coordinator; False if it shows a newer
        controller (this one then resigns)."""
        try:
            state = zkdata.decode_partition_state(data, version, f"state of {tp[0]}-{tp[1]}")
        except zkdata.ZkDataError as e:
            self._log("ERROR", str(e))
            return True
        if state.controller_epoch > self.epoch:
            self._resign(f"{tp[0]}-{tp[1]} was written by controller epoch "
                         f"{state.controller_epoch}")
            return False
        old = self.states.get(tp)
        if old is None or version > old.zk_version:
            self.states[tp] = state
        return True

    def _after_states_written(self, written, recipients, new) -> None:
        if not written:
            return
        targets: dict[int, list[TopicPartition]] = {}
        for tp in written:
            chosen = recipients(tp) if recipients is not None else None
            for r in self._replicas(tp):
                if r in self.brokers and (chosen is None or r in chosen):
                    targets.setdefault(r, []).append(tp)
        self._send_leader_and_isr(targets, new)
        self._send_update_metadata(written)
        for tp in written:
            if tp in self.reassigning:
                self._maybe_complete_reassignment(tp)
        # Brokers may have died or come back while the write was in flight (the events
        # that said so were decided on the state before it): decide again on what
        # landed, or an offline partition would wait for a broker that is already back.
        live = set(self.brokers)
        stale = [tp for tp in written if tp in self.states and tp[0] not in self.deleting
                 and (self.states[tp].leader not in live or not set(self.states[tp].isr) <= live)]
        if stale:
            self._write_states(self._decide_reconcile, stale, "brokers changed during a write")

    # ---------------------------------------------------------------- plumbing events

    def _on_broker_response(self, ev: BrokerResponse) -> None:
        callback = self._pending_tags.pop(ev.tag, None)
        if callback is not None:
            callback(ev.body)

    def _on_zk_ops_done(self, ev: ZkOpsDone) -> None:
        callback = self._pending_ops.pop(ev.op_id, None)
        assert callback is not None, f"unknown op id {ev.op_id}"
        fatal = [r.error for r in ev.results
                 if r.error not in (None, "BadVersion", "NoNode", "NodeExists", "NotEmpty")]
        if fatal:
            self._resign(f"the coordinator refused a write ({fatal[0]})")
            return
        callback(ev.results)


def _set_state_op(tp: TopicPartition, state: PartitionState) -> ZkSetData:
    return ZkSetData(zkdata.partition_state_path(*tp), zkdata.encode_partition_state(state),
                     state.zk_version)
