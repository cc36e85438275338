"""The controller: a pure core (no coordinator client, no sockets, no clock).

One broker at a time holds the ephemeral ``/controller`` znode and runs this core, as
Kafka's ZooKeeper-mode ``KafkaController`` (with its partition and replica state
machines). ``node.broker.controller_runner.ControllerRunner`` feeds it events and performs its
effects; a seeded simulator in tests can do the same.

Rules (Kafka ZK mode, DESIGN.md "Replication"):
- Leader election after a failure (``elect_offline``): the first live replica in ISR
  order (DESIGN.md; Kafka walks the assignment order) becomes leader, ISR = the live ISR
  members. None: with ``unclean.leader.election.enable`` (broker config, overridden by
  ``/config/topics/T``) the first live replica in assignment order, ISR = {it};
  otherwise the partition goes offline (leader -1, ISR kept) and the controller logs
  NoReplicaOnlineException; it comes back when an ISR replica returns.
- A dead follower leaves the ISR of every partition it follows (leader_epoch + 1, as
  Kafka's ZK controller). Brokers in controlled shutdown are alive but never elected.
- New partitions: leader = first live replica, ISR = the live replicas, leader_epoch 0.
- Preferred election: the first replica of the assignment, when alive and in the ISR.
  Auto rebalance every ``leader.imbalance.check.interval.seconds``: for a broker whose
  share of preferred partitions it does not lead exceeds
  ``leader.imbalance.per.broker.percentage``.
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
- Controlled shutdown: leadership moves to the first replica (assignment order) that is
  alive, in the ISR and not shutting down; the broker leaves the ISR of partitions it
  follows; the answer lists the partitions it still leads.
- Topic deletion: UpdateMetadata with leader -2 (Kafka's LeaderDuringDelete),
  StopReplica(delete) to every replica; once every replica confirmed (a dead broker's
  replica waits for it to come back), the topic's znodes go.

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
- Unclean recovery (KIP-966, ``unclean_recovery_strategy`` "balanced", with or without
  ELR: a replica registered as lost is never elected otherwise): a partition
  that no ISR or ELR member can lead, with unclean election off, asks every live
  replica for its log's end (GetReplicaLogInfo); once every replica has answered, or
  ``unclean_recovery_timeout_ms`` after it went offline, it elects the one with the
  highest (last leader epoch, log end offset), ISR = {it}, and marks the leader
  RECOVERING in LeaderAndIsr (Kafka's LeaderRecoveryState) so a replica that lost data
  may accept; what the others held beyond its end is logged as lost.

Invariants (asserted on every state this core writes): leader ∈ ISR ⊆ replicas (an
offline partition: leader -1, ISR non-empty ⊆ replicas); ELR ⊆ replicas, disjoint from
the ISR; the leader epoch of a partition strictly increases with every controller
write; every write is conditional on the znode version the core holds; every request
carries the controller epoch and the receiving broker's epoch.

Events (``Controller.step(event) -> list[Effect]``):
    BecomeController      this broker won /controller; a snapshot of the coordinator
    BrokersChanged        the full set of registered brokers (/brokers/ids)
    TopicChanged          a topic znode appeared or its data changed
    TopicRemoved          a topic znode vanished (not by this controller)
    TopicConfigChanged    /config/topics/T
    IsrChanged            partition states re-read after /isr_change_notification
    ElectionRequested     /admin/preferred_replica_election (preferred | unclean)
    ReassignmentRequested /admin/reassign_partitions (its whole content and version)
    TopicDeletionRequested children of /admin/delete_topics
    ControlledShutdownRequested  a broker's ControlledShutdown request
    BrokerResponse        the answer (None = timed out) to a SendRequest with a tag
    ZkOpsDone             the results of a ZkOps effect, one per op, in order
    Tick                  the clock (auto leader rebalance)

Effects, to be performed in the order given:
    ZkOps(op_id, ops)     ops = ZkCreate | ZkSetData | ZkDelete. Each op runs on its own
                          (not atomically with the others) and fenced: a multi with a
                          check of /controller_epoch's version. Report every op's
                          outcome with ZkOpsDone(op_id, results) — before the core is
                          told anything that happened after the ops ran; a failed create
                          or setData reports the znode's current data and version.
    SendRequest           send to a broker (LeaderAndIsr, UpdateMetadata, StopReplica);
                          per broker in the order given. Report BrokerResponse only when
                          ``tag`` is not None.
    ReplyControlledShutdown  answer a ControlledShutdownRequested
    LogLine               a line for the broker's log
    Resign                this core is no longer the controller (fenced, or the
                          coordinator refused a write); it ignores every later event.
A state-changing decision is always written first (ZkOps) and sent to brokers only from
the step that handles its ZkOpsDone, so brokers never hear of a state the coordinator
does not hold.

Driving it without a coordinator (a simulator): keep a dict path -> (data, version),
answer each ZkOps op by op as ZooKeeper would (``tests/node/controller_harness.py``
does, and shows the loop), deliver SendRequests to simulated brokers in order per
broker, and feed BrokersChanged / IsrChanged / Tick as the simulated world changes.
Everything the core emits is sorted (brokers, topics, partitions), so one seed gives
one trace.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from node.core.replication import next_elr
from node.wire.errors import ErrorCode
from node.wire import zkdata as Z
from node.wire.control import (LEADER_RECOVERED, LEADER_RECOVERING, LeaderAndIsrPartition,
                               StopReplicaPartition, UpdateMetadataPartition)
from node.wire.protocol import ApiKey
from node.wire.zkdata import PartitionState

# ------------------------------------------------------------------ limits
STATE_WRITE_ATTEMPTS_MAX = 5        # re-decide after a version conflict at most this often
DELETE_STOP_REPLICA_ATTEMPTS_MAX = 10
FIRST_REBALANCE_CHECK_DELAY_MS = 5_000   # Kafka: first auto-rebalance check 5 s after failover
NO_LEADER = -1
LEADER_DURING_DELETE = -2           # Kafka's LeaderAndIsr.LeaderDuringDelete

TopicPartition = tuple[str, int]


# ------------------------------------------------------------------ configuration

@dataclass(frozen=True)
class ControllerConfig:
    """The broker configs the controller reads (Kafka's keys, dots -> underscores)."""

    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    min_insync_replicas: int = 1
    eligible_leader_replicas: bool = False       # KIP-966 (brokers turn it on)
    unclean_recovery_strategy: str = "balanced"  # or "none"
    unclean_recovery_timeout_ms: int = 300_000

    def __post_init__(self):
        assert self.leader_imbalance_check_interval_seconds > 0
        assert 0 <= self.leader_imbalance_per_broker_percentage <= 100
        assert self.min_insync_replicas >= 1
        assert self.unclean_recovery_strategy in ("balanced", "none")
        assert self.unclean_recovery_timeout_ms > 0

    @classmethod
    def from_broker_config(cls, config) -> "ControllerConfig":
        default = cls()
        return cls(**{name: getattr(config, name, getattr(default, name))
                      for name in cls.__dataclass_fields__})


def _is_true(value) -> bool:
    return str(value).strip().lower() == "true"


# ------------------------------------------------------------------ data

@dataclass(frozen=True, order=True)
class Broker:
    """A registered broker; ``epoch`` is the czxid of its /brokers/ids/N znode (Kafka's
    broker epoch: a bounced broker comes back with a new one)."""

    broker_id: int
    host: str = "127.0.0.1"
    port: int = 0
    rack: str | None = None
    epoch: int = 0
    # Replicas whose data this broker lost (its registration says so: the log dir is new
    # or was wiped): never elected until they are back in an ISR (KIP-966's intent).
    lost: frozenset = frozenset()
    clean_shutdown: bool = True    # its previous run ended cleanly (else: leaves ELRs)

    @property
    def endpoint(self) -> str:
        return f"tcp://{self.host}:{self.port}"


@dataclass(frozen=True)
class TopicSnapshot:
    """A topic znode: partition -> replicas, its version, and /config/topics/T."""

    name: str
    assignment: Mapping[int, tuple[int, ...]]
    zk_version: int = 0
    config: Mapping[str, str] = field(default_factory=dict)


# ------------------------------------------------------------------ events

@dataclass(frozen=True)
class BecomeController:
    epoch: int
    brokers: tuple[Broker, ...]
    topics: tuple[TopicSnapshot, ...]
    states: Mapping[TopicPartition, PartitionState]       # with zk_version
    reassignments: Mapping[TopicPartition, tuple[int, ...]] = field(default_factory=dict)
    reassignments_zk_version: int = -1                    # -1: no znode
    election: "ElectionRequested | None" = None
    topics_to_delete: tuple[str, ...] = ()
    now_ms: int = 0


@dataclass(frozen=True)
class BrokersChanged:
    brokers: tuple[Broker, ...]


@dataclass(frozen=True)
class TopicChanged:
    topic: TopicSnapshot


@dataclass(frozen=True)
class TopicRemoved:
    topic: str


@dataclass(frozen=True)
class TopicConfigChanged:
    topic: str
    config: Mapping[str, str]


@dataclass(frozen=True)
class ReplicasOffline:
    """A broker's log directory failed: its replicas of ``partitions`` are offline until
    it restarts (Kafka's LogDirEventNotification, KIP-112)."""
    broker_id: int
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class IsrChanged:
    states: Mapping[TopicPartition, PartitionState | None]   # None: the znode is gone


@dataclass(frozen=True)
class ElectionRequested:
    partitions: tuple[TopicPartition, ...] | None     # None: every partition
    election_type: str = "preferred"                   # or "unclean"
    zk_version: int = -1                               # of the admin znode (deleted after)

    def __post_init__(self):
        assert self.election_type in ("preferred", "unclean"), self.election_type


@dataclass(frozen=True)
class ReassignmentRequested:
    moves: Mapping[TopicPartition, tuple[int, ...]]
    zk_version: int


@dataclass(frozen=True)
class TopicDeletionRequested:
    topics: tuple[str, ...]


@dataclass(frozen=True)
class ControlledShutdownRequested:
    request_id: object
    broker_id: int
    broker_epoch: int = -1         # -1: not checked


@dataclass(frozen=True)
class BrokerResponse:
    tag: int
    body: dict | None              # None: no answer within request.timeout.ms


@dataclass(frozen=True)
class ZkResult:
    """Outcome of one op. ``error``: None, "BadVersion", "NoNode", "NodeExists",
    "NotEmpty", "Fenced" (the /controller_epoch check failed) or another name (any other
    failure: the core resigns). ``version``: the znode's version after a successful
    create/setData. ``current_*``: the znode as it is after a failed create/setData
    (None: it does not exist)."""

    error: str | None = None
    version: int = -1
    current_data: bytes | None = None
    current_version: int = -1


@dataclass(frozen=True)
class ZkOpsDone:
    op_id: int
    results: tuple[ZkResult, ...]


@dataclass(frozen=True)
class Tick:
    now_ms: int


Event = (BecomeController | BrokersChanged | TopicChanged | TopicRemoved |
         TopicConfigChanged | IsrChanged | ReplicasOffline | ElectionRequested |
         ReassignmentRequested |
         TopicDeletionRequested | ControlledShutdownRequested | BrokerResponse | ZkOpsDone |
         Tick)


# ------------------------------------------------------------------ effects

@dataclass(frozen=True)
class ZkCreate:
    path: str
    data: bytes
    makepath: bool = True          # create missing parents first (outside the fence)


@dataclass(frozen=True)
class ZkSetData:
    path: str
    data: bytes
    version: int                   # expected version (-1: any)


@dataclass(frozen=True)
class ZkDelete:
    path: str
    version: int = -1
    recursive: bool = False


ZkOp = ZkCreate | ZkSetData | ZkDelete


@dataclass(frozen=True)
class ZkOps:
    op_id: int
    ops: tuple[ZkOp, ...]


@dataclass(frozen=True)
class SendRequest:
    broker_id: int
    endpoint: str
    api_key: int
    body: dict
    tag: int | None = None


@dataclass(frozen=True)
class ReplyControlledShutdown:
    request_id: object
    body: dict


@dataclass(frozen=True)
class LogLine:
    level: str                     # "INFO" | "WARN" | "ERROR"
    message: str


@dataclass(frozen=True)
class Resign:
    reason: str


Effect = ZkOps | SendRequest | ReplyControlledShutdown | LogLine | Resign


# ------------------------------------------------------------------ election rules
# Pure functions of (replicas, state, who may lead): the new (leader, isr), or None when
# there is nothing to elect. Kafka's PartitionLeaderElectionAlgorithms.

def elect_offline(replicas: Iterable[int], isr: Iterable[int], eligible: set[int],
                  unclean: bool, elr: Iterable[int] = ()) -> tuple[int, tuple[int, ...], bool] | None:
    """(leader, isr, was_unclean) for a partition without a live leader, or None: the
    live ISR members; else a live ELR member (KIP-966: it holds everything below the
    HW), alone in the ISR; else, with unclean election, any live replica."""
    live_isr = tuple(r for r in isr if r in eligible)
    if live_isr:
        return live_isr[0], live_isr, False
    elr = set(elr)
    live_elr = [r for r in replicas if r in elr and r in eligible]
    if live_elr:
        return live_elr[0], (live_elr[0],), False
    if unclean:
        live = [r for r in replicas if r in eligible]
        if live:
            return live[0], (live[0],), True
    return None


def elect_preferred(replicas: tuple[int, ...], state: PartitionState, eligible: set[int]
                    ) -> tuple[int, tuple[int, ...]] | None:
    preferred = replicas[0]
    if state.leader == preferred or preferred not in eligible or preferred not in state.isr:
        return None
    return preferred, state.isr


def elect_controlled_shutdown(replicas: tuple[int, ...], state: PartitionState,
                              eligible: set[int], shutting_down: set[int]
                              ) -> tuple[int, tuple[int, ...]] | None:
    leader = next((r for r in replicas if r in eligible and r in state.isr), None)
    if leader is None:
        return None
    return leader, tuple(r for r in state.isr if r not in shutting_down)


def elect_reassigned(target: tuple[int, ...], state: PartitionState, live: set[int],
                     eligible: set[int]) -> tuple[int, tuple[int, ...]] | None:
    """Completion of a reassignment: keep a live leader that stays, else the first
    eligible ISR member of the target."""
    isr = tuple(r for r in state.isr if r in target)
    if state.leader in target and state.leader in live and state.leader in isr:
        return state.leader, isr
    leader = next((r for r in target if r in eligible and r in isr), None)
    return None if leader is None else (leader, isr)


# ------------------------------------------------------------------ the core

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


@dataclass
class _Recovery:
    """An unclean recovery in progress: the deadline, and the replicas' answers."""
    deadline_ms: int
    asked: set = field(default_factory=set)           # brokers asked (this incarnation)
    answers: dict = field(default_factory=dict)       # broker -> (last epoch, log end)


@dataclass
class _Batch:
    """A group of state writes whose completion (with retries) runs ``then``."""

    outstanding: int = 0
    written: list = field(default_factory=list)
    then: Callable[[list], None] | None = None


class Controller:
    """See the module docstring. Create one per controller term (BecomeController)."""

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
        self.recovering: dict[TopicPartition, _Recovery] = {}
        self.recovery_epochs: dict[TopicPartition, int] = {}   # leader epoch it elected
        self.now_ms = 0
        self.assignments: dict[str, dict[int, tuple[int, ...]]] = {}
        self.topic_versions: dict[str, int] = {}
        self.topic_configs: dict[str, dict[str, str]] = {}
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

    # ---------------------------------------------------------------- small helpers

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
        return [[b.broker_id, b.host, b.port, b.rack]
                for b in sorted(self.brokers.values())]

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
        for tp in tps:
            if tp[0] not in self.assignments or tp not in self.states:
                continue
            decision = decide(tp)
            if decision is None:
                continue
            old = self.states[tp]
            leader, isr = decision[0], tuple(decision[1])
            elr = tuple(decision[2]) if len(decision) > 2 else self._elr_after(tp, old, isr)
            if leader == old.leader and isr == old.isr and elr == old.elr and not force:
                continue
            state = PartitionState(leader, old.leader_epoch + 1, isr, self.epoch,
                                   old.zk_version, elr)
            self._check_transition(tp, old, state)
            writes.append((tp, state))
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
            state = Z.decode_partition_state(data, version, f"state of {tp[0]}-{tp[1]}")
        except Z.ZkDataError as e:
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

    # ---------------------------------------------------------------- decisions

    def _decide_reconcile(self, tp: TopicPartition) -> tuple[int, tuple] | None:
        """After brokers died or came back: elect a leader if it has none alive, drop
        dead replicas from the ISR."""
        state = self.states[tp]
        live = self._live_for(tp)
        if state.leader != NO_LEADER and state.leader in live:
            isr = tuple(r for r in state.isr if r in live)
            return None if isr == state.isr else (state.leader, isr)
        replicas = self._replicas(tp)
        elected = elect_offline(replicas, state.isr, self._eligible_for(tp),
                                self._unclean_enabled(tp[0]), self._electable_elr(tp))
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

    def _decide_unclean(self, tp: TopicPartition) -> tuple[int, tuple] | None:
        state = self.states[tp]
        if state.leader != NO_LEADER and state.leader in self._live_for(tp):
            return None
        elected = elect_offline(self._replicas(tp), state.isr, self._eligible_for(tp), True,
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
        return elect_preferred(self._replicas(tp), self.states[tp], self._eligible_for(tp))

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
        for topic in ev.topics:
            self.assignments[topic.name] = {p: tuple(r) for p, r in topic.assignment.items()}
            self.topic_versions[topic.name] = topic.zk_version
            self.topic_configs[topic.name] = dict(topic.config)
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
                if not now[b].clean_shutdown:
                    self.elr_barred |= {(b, tp) for tp, st in self.states.items() if b in st.elr}
            self._on_brokers_startup(set(born))
            self._leave_elrs_after_unclean_shutdown(born)
        for b, info in now.items():   # a re-registration with new endpoints, same epoch
            self.brokers[b] = info

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
        self._leader_and_isr_to_replicas(live_parts, only=born)
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
        for tp in sorted(self.reassigning):
            self._maybe_complete_reassignment(tp)

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

        self._zk([ZkCreate(Z.partition_state_path(*tp), Z.encode_partition_state(state))
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
        if changed:
            self._send_update_metadata(changed)
        for tp in changed:
            if tp in self.reassigning:
                self._maybe_complete_reassignment(tp)

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
        self._zk([ZkDelete(Z.PREFERRED_REPLICA_ELECTION, ev.zk_version)], lambda results: None)

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

    # ---------------------------------------------------------------- controlled shutdown

    def _on_controlled_shutdown(self, ev: ControlledShutdownRequested) -> None:
        b = ev.broker_id
        broker = self.brokers.get(b)
        if broker is None:
            self._out.append(ReplyControlledShutdown(ev.request_id, {
                "error": ErrorCode.BROKER_NOT_AVAILABLE, "remaining_partitions": []}))
            return
        if ev.broker_epoch >= 0 and ev.broker_epoch != broker.epoch:
            code = ErrorCode.STALE_BROKER_EPOCH
            self._out.append(ReplyControlledShutdown(ev.request_id, {
                "error": code, "remaining_partitions": []}))
            return
        self._log("INFO", f"controlled shutdown of broker {b}")
        self.shutting_down.add(b)
        mine = [tp for tp in self._active_partitions()
                if tp in self.states and b in self._replicas(tp) and len(self._replicas(tp)) > 1]
        led = [tp for tp in mine if self.states[tp].leader == b]
        followed = [tp for tp in mine if self.states[tp].leader not in (b, NO_LEADER)]

        def decide_led(tp):
            state = self.states[tp]
            if state.leader != b:
                return None
            return elect_controlled_shutdown(self._replicas(tp), state, self._eligible_for(tp),
                                             self.shutting_down)

        def decide_followed(tp):
            state = self.states[tp]
            if state.leader in (b, NO_LEADER) or b not in state.isr:
                return None
            return state.leader, tuple(r for r in state.isr if r != b)

        def reply(_written) -> None:
            if not self.active:
                return
            remaining = [[t, p] for t, p in self._active_partitions()
                         if (t, p) in self.states and self.states[(t, p)].leader == b
                         and len(self._replicas((t, p))) > 1]
            self._out.append(ReplyControlledShutdown(ev.request_id, {
                "error": ErrorCode.NONE, "remaining_partitions": remaining}))

        pending = {"n": 2}

        def part_done(_written) -> None:
            pending["n"] -= 1
            if pending["n"] == 0:
                reply(_written)

        self._write_states(decide_led, led, f"controlled shutdown of {b}", then=part_done)
        # The follower replicas stop (delete=false) and leave the ISR; the new state goes
        # to the other replicas only.
        self._send_stop_replica(b, followed, delete=False)
        self._write_states(decide_followed, followed, f"controlled shutdown of {b}",
                           then=part_done, recipients=lambda tp: set(self.brokers) - {b})

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
                elected = elect_offline(full, isr, self._eligible(), False)
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
        elected = elect_reassigned(move.target, state, set(self.brokers), self._eligible())
        if elected is None:
            self._log("WARN", f"reassignment of {tp[0]}-{tp[1]} waits for a live leader "
                              f"in {list(move.target)}")
            return
        move.completing = True
        self.assignments[tp[0]][tp[1]] = move.target          # B2
        removed = move.removing

        def decide(tp_):
            return elect_reassigned(move.target, self.states[tp_], set(self.brokers),
                                    self._eligible())

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
        data = Z.encode_assignment({p: list(r) for p, r in parts.items()}, adding, removing)

        def on_done(results: tuple[ZkResult, ...]) -> None:
            result = results[0]
            if result.error is None:
                self.topic_versions[topic] = result.version
                then()
            elif result.error == "BadVersion" and result.current_data is not None \
                    and attempt < STATE_WRITE_ATTEMPTS_MAX:
                # Someone added partitions meanwhile: take them, write again.
                try:
                    theirs = Z.decode_assignment(topic, result.current_data)
                except Z.ZkDataError as e:
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

        self._zk([ZkSetData(Z.topic_path(topic), data, self.topic_versions.get(topic, -1))],
                 on_done)

    def _remove_reassignment_entries(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            self.reassign_znode.pop(tp, None)
        if self.reassign_znode_version < 0:
            return
        if self.reassign_znode:
            op = ZkSetData(Z.REASSIGN_PARTITIONS,
                           Z.encode_reassignment({tp: list(r) for tp, r in
                                                  self.reassign_znode.items()}),
                           self.reassign_znode_version)
        else:
            op = ZkDelete(Z.REASSIGN_PARTITIONS, self.reassign_znode_version)

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
                    moves = Z.decode_reassignment(result.current_data)
                except Z.ZkDataError as e:
                    self._log("ERROR", str(e))
                    return
                self._on_reassignment_requested(
                    ReassignmentRequested(moves, result.current_version))
            else:
                self._log("ERROR", f"/admin/reassign_partitions not updated ({result.error})")

        self._zk([op], on_done)

    # ---------------------------------------------------------------- topic deletion

    def _topic_replica_brokers(self, topic: str) -> set[int]:
        return {r for replicas in self.assignments.get(topic, {}).values() for r in replicas}

    def _on_topic_deletion_requested(self, ev: TopicDeletionRequested) -> None:
        for topic in sorted(set(ev.topics)):
            if topic in self.deleting:
                continue
            if topic not in self.assignments:
                self._log("INFO", f"deletion of unknown topic {topic}: nothing to do")
                self.deletion_queued.discard(topic)
                self._zk([ZkDelete(Z.delete_topic_path(topic))], lambda results: None)
                continue
            if any(tp[0] == topic for tp in self.reassigning):
                self._log("INFO", f"deletion of {topic} waits for its reassignments")
                self.deletion_queued.add(topic)
                continue
            self.deletion_queued.discard(topic)
            self._start_topic_deletion(topic)

    def _start_topic_deletion(self, topic: str) -> None:
        self._log("INFO", f"deleting topic {topic}")
        tps = [(topic, p) for p in sorted(self.assignments[topic])]
        self.deleting[topic] = set(self._topic_replica_brokers(topic))
        self._send_update_metadata([], deleted=tps)
        for b in sorted(self.deleting[topic] & set(self.brokers)):
            self._stop_replica_for_deletion(topic, b, 1)
        self._maybe_finish_deletion(topic)

    def _stop_replica_for_deletion(self, topic: str, broker_id: int, attempt: int) -> None:
        tps = [(topic, p) for p, r in sorted(self.assignments[topic].items()) if broker_id in r]

        def on_response(body: dict | None) -> None:
            if topic not in self.deleting:
                return
            ok = body is not None and body.get("error", -1) == ErrorCode.NONE and all(
                e[2] in (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                for e in body.get("partitions", []) if isinstance(e, list) and len(e) == 3)
            if ok:
                self.deleting[topic].discard(broker_id)
                self._maybe_finish_deletion(topic)
            elif broker_id in self.brokers and attempt < DELETE_STOP_REPLICA_ATTEMPTS_MAX:
                self._stop_replica_for_deletion(topic, broker_id, attempt + 1)
            else:
                self._log("WARN", f"deletion of {topic}: broker {broker_id} did not confirm; "
                                  f"retried when it restarts")

        self._send_stop_replica(broker_id, tps, delete=True, on_response=on_response)

    def _maybe_finish_deletion(self, topic: str) -> None:
        if self.deleting.get(topic):
            return
        ops = [ZkDelete(Z.topic_path(topic), recursive=True),
               ZkDelete(Z.topic_config_path(topic)),
               ZkDelete(Z.delete_topic_path(topic))]

        def on_done(results: tuple[ZkResult, ...]) -> None:
            self._log("INFO", f"topic {topic} deleted")
            self.deleting.pop(topic, None)
            self._forget_topic(topic)

        self._zk(ops, on_done)

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
    return ZkSetData(Z.partition_state_path(*tp), Z.encode_partition_state(state),
                     state.zk_version)
