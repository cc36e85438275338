"""A deterministic simulator for the replication core and the controller core together.

One seed decides everything: message delays (which reorders them), drops, broker
crashes, pauses and restarts, isolation, and when the client produces. Three simulated
brokers each run the real ``node.core.replication.ReplicaCore`` for every partition of topic
t (``SimConfig.partitions``, replicas placed as DESIGN.md says, so preferred leaders
differ) on a ``MemLog``; the controller is the real ``node.core.controller.Controller`` core, run by
whichever broker won ``/controller`` in the simulated coordinator
(``tests.sim.coordinator``: znodes with versions, sessions whose expiry the simulator
decides, ephemerals, fenced controller ops). Nothing is modelled twice: elections,
ISR removal on failure, failover and fencing are the cores' own decisions.

The world, as the shells see it:
- Coordinator sessions: a broker that is up, running and connected heartbeats every
  tick; a session not heard of for ``session_timeout_ms`` expires and its ephemerals
  (``/brokers/ids/N``, ``/controller``) go. The broker learns of it when it reconnects
  (after a pause or isolation): a new session, re-registration (a new broker epoch),
  its controller core (if any) resigns. A restarted broker registers once its old
  session has expired.
- Each session is a FIFO connection in both directions: requests (registration,
  election, the controller's ``ZkOps``, the leader's ``WriteIsr``), their answers, and
  the watches the controller set (``BrokersChanged`` on registration/expiry,
  ``IsrChanged`` when a leader's ISR write lands: the notification is drained and the
  state read, ``TopicChanged`` when the topic is created), and ``/controller``'s
  deletion to every broker, which then competes. Answers held by an isolation are
  delivered on reconnection while the session lives.
- The controller's channel to each broker is a TCP connection: reliable, ordered, held
  while a side is cut off or the broker is down and resent on reconnection (to the new
  incarnation of a restarted broker), dropped when the controller removes the broker or
  stops being controller (resigns, crashes). A paused controller's bytes in flight
  still arrive. Brokers track the highest controller epoch they have seen and refuse an
  older one (ErrorCode.STALE_CONTROLLER_EPOCH).
- Replication traffic (fetch, OffsetForLeaderEpoch, produce) is datagrams: delayed,
  reordered, dropped with ``drop_probability``, lost when an end is cut off.
- With ``replica_transport="shm"`` followers replicate through the leader's slot
  instead (``tests.sim.shm_model``: slots per incarnation, left behind by a crash,
  doorbells, copies from the leader's log), Fetch being the fallback.

Checked (DESIGN.md "Invariants", plus the controller's):
- NoCommittedRecordLost: every acknowledged acks=all record is, after the faults heal,
  at its offset in the leader's log (asserted when it must hold: unclean election off,
  leader-epoch truncation, fewer than min.insync.replicas brokers down together);
- LogMatching: replicas agree on every offset below the smaller of their HWs;
- the HW never moves backwards on a leader within an epoch; LEO >= HW everywhere;
- at most one leader per leader epoch; leader in ISR, ISR within the replicas (every
  state the coordinator accepts, from the controller or from a leader);
- a consumer never sees an offset at or above the HW, nor two values at one offset;
- at most one controller acts per controller epoch: one core per epoch, and every write
  the coordinator accepts and every request a broker accepts comes from the core that
  won that epoch, which is the coordinator's current one for writes.
A failure (an invariant, or an assertion in a core) names the seed and the line that
replays it.
"""
from __future__ import annotations

import heapq
import random
from collections import deque
from dataclasses import dataclass, field

from node.core import controller as controller_core
from node.wire.errors import ErrorCode
from node.wire import zkdata
from node.wire.protocol import ApiKey
from node.core.replication import (AssignEpoch, CompleteProduce, ReplicaCore, ReplicationConfig,
                              Role, SendOffsetForLeaderEpoch, SetHighWatermark, Truncate,
                              TruncateFully, TruncationMode, WriteIsr, lost_replica_is_back)
from tests.sim.coordinator import SimCoordinator
from tests.sim.memlog import MemLog
from tests.sim.shm_model import ShmTransport

TOPIC = "t"
NONE = 0
CONTROLLER_STEPS_MAX = 10_000      # per delivered event: a core that does not settle is a bug


class InvariantViolation(AssertionError):
    pass


@dataclass
class SimConfig:
    brokers: int = 3
    partitions: int = 1             # of topic t; replicas placed as DESIGN.md says
    min_insync_replicas: int = 2
    unclean_leader_election: bool = False
    truncation_mode: TruncationMode = TruncationMode.LEADER_EPOCH
    auto_leader_rebalance: bool = False
    leader_imbalance_check_interval_s: int = 1
    replica_lag_time_max_ms: int = 300
    session_timeout_ms: int = 400
    request_timeout_ms: int = 250
    fetch_max_wait_ms: int = 100
    produce_timeout_ms: int = 600
    hw_checkpoint_interval_ms: int = 200
    tick_ms: int = 20
    topic_created_ms: int = 40
    duration_ms: int = 6_000
    heal_ms: int = 3_000
    produce_interval_ms: int = 7
    delay_ms: tuple[int, int] = (1, 15)
    drop_probability: float = 0.01
    fault_interval_ms: tuple[int, int] = (150, 900)
    # Faults never take down more than this many brokers at once (crash, pause or cut
    # off); the no-loss guarantee holds for fewer than min.insync.replicas together.
    concurrent_faults_max: int = 1
    random_faults: bool = True
    # Random faults may include power cuts (at most one broker without power at a time).
    power_cuts: bool = False
    # The fixes for composed faults, each switchable so a test can show what it prevents:
    broker_epoch_fencing: bool = True     # KIP-380: refuse requests for another incarnation
    durable_lost_marker: bool = True      # a lost replica stays lost across restarts
    eligible_leader_replicas: bool = False    # KIP-966 ELR + strict min ISR + recovery
    unclean_recovery_timeout_ms: int = 2_000
    unclean_recovery: bool = True         # KIP-966's Balanced strategy (else None)
    # replica.transport: "fetch", or "shm" (tests.sim.shm_model), with the fix for a
    # leader restarted into its old epoch switchable.
    replica_transport: str = "fetch"
    shm_check_slot_name_at_report: bool = True


@dataclass
class Replica:
    """One partition on one broker: the real core, its log, and the shell's state."""
    partition: int
    core: ReplicaCore
    log: MemLog
    checkpointed_hw: int = 0
    fetch_in_flight: int | None = None   # request id
    epoch_request_in_flight: int | None = None
    isr_write_in_flight: int | None = None   # request id of the WriteIsr awaited
    parked_fetches: list = field(default_factory=list)
    last_leader_hw: dict = field(default_factory=dict)   # epoch -> HW as leader
    partition_controller_epoch: int = 0   # of the LeaderAndIsr the core applied
    # The shm transport (tests.sim.shm_model): the slot followed, whether it serves the
    # partition (Fetch skips it then), Fetch-only until (and the last wait for a slot the
    # leader had not made), the last report; as leader, the reports acted on.
    shm_slot: object = None
    shm_serving: bool = False
    shm_retry_ms: int = 0
    shm_slot_retry_ms: int = 0
    shm_last_report_ms: int = 0
    shm_reported_leo: int = -1
    shm_seen: dict = field(default_factory=dict)


@dataclass
class Broker:
    broker_id: int
    incarnation: int
    parts: dict[int, Replica]
    session: int = 0
    up: bool = True
    paused: bool = False
    isolated: bool = False          # cut off from everyone, coordinator included
    backlog: list = field(default_factory=list)   # messages held while paused
    # Coordinator client and controller shell.
    registered: bool = False        # /brokers/ids/N created in the current session
    session_replaced: bool = False  # the client has a new session; the shell not told yet
    register_in_flight: bool = False
    want_election: bool = True
    election_in_flight: bool = False
    controller: controller_core.Controller | None = None
    term: int = 0                   # the running controller core's id (0: none)
    epoch_zk_version: int = -1
    controller_epoch: int = 0       # highest controller epoch seen (ReplicaManager's)
    lost: frozenset = frozenset()   # partitions its registration names as lost (power cut)
    marked: dict = field(default_factory=dict)   # partition -> HW it lost (the marker)
    clean_shutdown: bool = True     # how its previous incarnation ended
    epoch: int = -1                 # its registration's czxid (broker epoch), -1: none yet
    # Controller requests that arrived while its registration was in flight: the real
    # broker registers synchronously on its loop, so they wait in the socket till then.
    held_requests: list = field(default_factory=list)
    power_cut: bool = False         # its last death was a power failure

    @property
    def core(self) -> ReplicaCore:
        """Partition 0's (the single-partition view the scripted tests use)."""
        return self.parts[0].core

    @property
    def log(self) -> MemLog:
        return self.parts[0].log


@dataclass
class Channel:
    """A FIFO connection: messages after one held are held behind it."""
    last_ms: int = 0
    held: deque = field(default_factory=deque)
    closed: bool = False


class Sim(ShmTransport):
    def __init__(self, seed: int, config: SimConfig | None = None) -> None:
        self.seed = seed
        self.config = config or SimConfig()
        self.random = random.Random(seed)
        self.now = 0
        self._queue: list = []
        self._seq = 0
        self._ids = 0
        self._incarnations = 0
        c = self.config
        self.replicas = tuple(range(c.brokers))
        self.partitions = tuple(range(c.partitions))
        # DESIGN.md placement: partition p's j-th replica on broker (p + j) % n.
        self.assignment = {p: tuple((p + j) % c.brokers for j in range(c.brokers))
                           for p in self.partitions}
        self.zk = SimCoordinator()
        self.slots: dict = {}          # (leader, partition) -> its SimSlot (shm transport)
        self.brokers = {b: self._new_broker(b, {p: MemLog() for p in self.partitions})
                        for b in self.replicas}
        self._next_partition = 0
        self.controller_config = controller_core.ControllerConfig(
            unclean_leader_election_enable=c.unclean_leader_election,
            auto_leader_rebalance_enable=c.auto_leader_rebalance,
            leader_imbalance_check_interval_seconds=c.leader_imbalance_check_interval_s,
            min_insync_replicas=c.min_insync_replicas,
            eligible_leader_replicas=c.eligible_leader_replicas,
            unclean_recovery_timeout_ms=c.unclean_recovery_timeout_ms,
            unclean_recovery_strategy="balanced" if c.unclean_recovery else "none")
        self.zk_down: dict[int, Channel] = {}           # session -> coordinator-to-broker
        self.zk_up: dict[int, Channel] = {}             # session -> broker-to-coordinator
        self.channels: dict[tuple[int, int], Channel] = {}   # (term, broker) controller's
        self.terms: dict[int, tuple[int, int]] = {}     # term -> (broker, controller epoch)
        self.term_of_epoch: dict[int, int] = {}         # controller epoch -> its one core
        self.leaders_by_epoch: dict[int, int] = {}
        # Client.
        self.acked: dict[object, int] = {}          # value -> offset (acks=all, NONE)
        self.in_flight_produce: dict[int, object] = {}
        self.next_value = 0
        self.consumed: dict[int, object] = {}       # offset -> value seen by the consumer
        self.trace: list[str] = []
        self.faulty: set[int] = set()
        # The guarantees hold with clean elections and leader-epoch truncation; in the
        # other modes violations are counted (the literature's loss modes), not fatal.
        self.strict = (self.config.truncation_mode is TruncationMode.LEADER_EPOCH
                       and not self.config.unclean_leader_election)
        self.violations: list[str] = []
        self.stats = {"controller_epochs": 0, "stale_controller_refused": 0,
                      "stale_broker_epoch_refused": 0, "lost_registrations": 0,
                      "unclean_recoveries": 0,
                      "zombie_writes_refused": 0, "isr_writes": 0, "isr_write_conflicts": 0,
                      "controller_version_conflicts": 0}

    # ------------------------------------------------------------------ plumbing

    def _new_broker(self, broker_id: int, logs: dict[int, MemLog]) -> Broker:
        c = self.config
        config = ReplicationConfig(c.replica_lag_time_max_ms, c.min_insync_replicas,
                                   c.truncation_mode, c.eligible_leader_replicas)
        self._incarnations += 1
        broker = Broker(broker_id, self._incarnations, {
            p: Replica(p, ReplicaCore(TOPIC, p, broker_id, config), log)
            for p, log in logs.items()})
        broker.session = self.zk.open_session(broker_id, broker.incarnation, self.now)
        return broker

    def _at(self, time_ms: int, fn, *args) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (time_ms, self._seq, fn, args))

    def _id(self) -> int:
        self._ids += 1
        return self._ids

    def _violation(self, what: str) -> None:
        # An unclean recovery (KIP-966) follows the loss of every replica that could
        # lead cleanly: what it loses is counted, like an unclean election's.
        if self.strict and not self.stats["unclean_recoveries"]:
            self._fail(what)
        self.violations.append(f"{self.now} ms: {what}")

    def replay_line(self) -> str:
        return (f"replay: Sim({self.seed}, {self.config!r}).run()  "
                f"(or MK_SIM_SEED={self.seed} in tests/sim/test_simulator.py)")

    def _fail(self, what: str) -> None:
        tail = "\n".join(self.trace[-60:])
        raise InvariantViolation(f"seed {self.seed} at {self.now} ms: {what}\n"
                                 f"{self.replay_line()}\n{tail}")

    def _note(self, text: str) -> None:
        self.trace.append(f"{self.now:6d} {text}")
        if len(self.trace) > 400:
            del self.trace[:200]

    def _delay(self) -> int:
        low, high = self.config.delay_ms
        return low + int(self.random.random() * (high - low + 1))

    def _connected(self, b: int) -> bool:
        broker = self.brokers[b]
        return broker.up and not broker.isolated

    def _running(self, broker: Broker) -> bool:
        return broker.up and not broker.paused

    @property
    def state(self) -> dict:
        """Partition 0's state znode (leader, leader_epoch, isr, version), or {}."""
        return self.partition_state(0)

    def partition_state(self, p: int) -> dict:
        s = self.zk.state(TOPIC, p)
        if s is None:
            return {}
        return {"leader": s.leader, "leader_epoch": s.leader_epoch, "isr": s.isr,
                "controller_epoch": s.controller_epoch, "version": s.zk_version,
                "elr": s.elr}

    def current_leader(self, p: int = 0) -> int:
        s = self.zk.state(TOPIC, p)
        return -1 if s is None else s.leader

    # ------------------------------------------------------------------ datagrams

    def send(self, src, dst, message: tuple) -> None:
        """Replication traffic: a random delay (so messages reorder), maybe dropped."""
        if self.random.random() < self.config.drop_probability:
            return
        self._seq += 1
        heapq.heappush(self._queue, (self.now + self._delay(), self._seq, self._deliver,
                                     (src, dst, message)))

    def _deliver(self, src, dst, message: tuple) -> None:
        for x in (src, dst):
            if isinstance(x, int) and not self._connected(x):
                return
        if dst == "client":
            self._client_receive(message)
            return
        self._to_broker(self.brokers[dst], src, message)

    def _to_broker(self, broker: Broker, src, message: tuple) -> None:
        if broker.paused:
            broker.backlog.append((src, message))
        else:
            self._broker_receive(broker, src, message)

    # ------------------------------------------------------------------ ordered channels

    def _channel_send(self, channel: Channel, deliver, *args) -> None:
        channel.last_ms = max(self.now + self._delay(), channel.last_ms)
        self._at(channel.last_ms, self._channel_arrive, channel, deliver, args)

    def _channel_arrive(self, channel: Channel, deliver, args) -> None:
        if channel.held:
            channel.held.append((deliver, args))
            return
        if deliver(*args) is False:
            channel.held.append((deliver, args))

    def _channel_flush(self, channel: Channel) -> None:
        while channel.held:
            deliver, args = channel.held.popleft()
            if deliver(*args) is False:
                channel.held.appendleft((deliver, args))
                return

    # ------------------------------------------------------------------ coordinator link

    def _zk_request(self, broker: Broker, message: tuple) -> bool:
        """Broker -> coordinator on its session; False (ConnectionLoss) when cut off."""
        if broker.isolated:
            return False
        sid = broker.session
        self._channel_send(self.zk_up.setdefault(sid, Channel()), self._zk_receive, sid,
                           broker.broker_id, message)
        return True

    def _zk_push(self, sid: int, message: tuple) -> None:
        """Coordinator -> the broker of session ``sid`` (answers and watch events)."""
        if self.zk.alive(sid):
            self._channel_send(self.zk_down.setdefault(sid, Channel()), self._zk_arrive, sid,
                               message)

    def _zk_arrive(self, sid: int, message: tuple):
        session = self.zk.sessions[sid]
        broker = self.brokers[session.broker_id]
        if broker.incarnation != session.incarnation or not broker.up or \
                broker.session != sid:
            return None          # the process or its connection is gone (a new session)
        if broker.isolated:
            return False if self.zk.alive(sid) else None    # held until reconnection
        self._to_broker(broker, "zk", message)
        return None

    def _zk_receive(self, sid: int, broker_id: int, message: tuple) -> None:
        """The coordinator handles a request."""
        kind = message[0]
        if kind == "Register":
            epoch = self.zk.register(sid, broker_id, message[1], message[2])
            ok = epoch >= 0
            self._zk_push(sid, ("Registered", sid, epoch))
            if ok:
                self._note(f"zk: broker {broker_id} registered (session {sid})")
                self._watch_brokers()
        elif kind == "Elect":
            result, epoch, version = self.zk.elect(sid, broker_id)
            if result == "released":
                self._note(f"zk: b{broker_id} released /controller")
                self._controller_gone()
                self._zk_push(sid, ("Elected", sid, None, -1, -1))
            elif result == "won":
                self._note(f"zk: b{broker_id} won /controller, controller_epoch {epoch}")
                self._zk_push(sid, ("Elected", sid, self.zk.snapshot(epoch, self.now), epoch,
                                    version))
            else:
                self._zk_push(sid, ("Elected", sid, None, -1, -1))
        elif kind == "ZkOps":
            _, term, epoch, epoch_version, ops = message
            results = self.zk.controller_ops(sid, epoch_version, ops.ops)
            ok = [r for r, op in zip(results, ops.ops) if r.error is None]
            if ok:
                self._check_controller_acts(epoch, term, f"wrote {len(ok)} znodes")
                current, _ = self.zk.controller_epoch
                if epoch != current:
                    self._fail(f"a write of controller epoch {epoch} landed under {current}")
                for op, r in zip(ops.ops, results):
                    if r.error is None and op.path.endswith("/state"):
                        self._check_state_written(int(op.path.split("/")[5]),
                                                  f"controller epoch {epoch}")
            if any(r.error in ("Fenced", "SessionExpiredError") for r in results):
                self.stats["zombie_writes_refused"] += 1
                key = "zombie_writes_" + results[0].error
                self.stats[key] = self.stats.get(key, 0) + 1
                self._note(f"zk: controller epoch {epoch} (b{broker_id}) refused: "
                           f"{results[0].error}")
            if any(r.error == "BadVersion" for r in results):
                self.stats["controller_version_conflicts"] += 1
            self._zk_push(sid, ("ZkOpsDone", term, controller_core.ZkOpsDone(ops.op_id, results)))
        elif kind == "WriteIsr":
            _, p, rid, e, controller_epoch = message
            ok, current = self.zk.write_isr(sid, TOPIC, p, zkdata.PartitionState(
                broker_id, e.leader_epoch, tuple(e.isr), controller_epoch, e.zk_version))
            self.stats["isr_writes"] += 1
            if ok:
                self._note(f"zk: b{broker_id} ISR of t-{p} -> {list(e.isr)} "
                           f"v{current.zk_version}")
                self._check_state_written(p, f"leader b{broker_id}", writer=broker_id,
                                          leader_epoch=e.leader_epoch)
                self._watch_isr_change()
            else:
                self.stats["isr_write_conflicts"] += 1
                self._note(f"zk: b{broker_id} ISR write t-{p} {list(e.isr)} at "
                           f"v{e.zk_version} refused")
            self._zk_push(sid, ("IsrWritten", p, rid, ok, current))
        else:
            raise AssertionError(message)

    # -- watches: the controller's (its session), /controller's (everyone's)

    def _controller_session(self) -> int | None:
        return self.zk.controller_owner()

    def _watch_brokers(self) -> None:
        sid = self._controller_session()
        if sid is not None:
            self._zk_push(sid, ("Watch", controller_core.BrokersChanged(self.zk.brokers())))

    def _watch_isr_change(self) -> None:
        sid = self._controller_session()
        if sid is None:
            return      # the notification waits for the next controller's snapshot
        tps = self.zk.drain_isr_notifications()
        self._zk_push(sid, ("Watch", controller_core.IsrChanged(
            {tp: self.zk.state(*tp) for tp in tps})))

    def _controller_gone(self) -> None:
        for sid, session in self.zk.sessions.items():
            if session.alive:
                self._zk_push(sid, ("ControllerGone",))

    def _create_topic(self) -> None:
        """An admin creates the topic: the controller's topic watch fires."""
        path = zkdata.topic_path(TOPIC)
        self.zk.zk.put(path, zkdata.encode_assignment({p: list(r) for p, r in
                                                       self.assignment.items()}))
        self._note(f"zk: topic {TOPIC} created, replicas {self.assignment}")
        sid = self._controller_session()
        if sid is not None:
            data, version = self.zk.zk.get(path)
            self._zk_push(sid, ("Watch", controller_core.TopicChanged(
                controller_core.TopicSnapshot(TOPIC, dict(self.assignment), version))))

    def _expire_sessions(self) -> None:
        for session, gone in self.zk.expire_due(self.now, self.config.session_timeout_ms):
            self._note(f"zk: session {session.sid} of b{session.broker_id} expired "
                       f"({', '.join(gone) or 'no ephemerals'})")
            if zkdata.CONTROLLER in gone:
                self._controller_gone()
            if any(p.startswith(zkdata.BROKER_IDS) for p in gone):
                self._watch_brokers()

    # ------------------------------------------------------------------ the coordinator client

    def _zk_client(self, broker: Broker) -> None:
        """Every tick of a running, connected broker: heartbeat, or find the session
        expired (a new one), then register and compete for /controller as needed."""
        if broker.session_replaced or not self.zk.alive(broker.session):
            self._session_lost(broker)
        self.zk.heartbeat(broker.session, self.now)
        if not broker.registered and not broker.register_in_flight:
            broker.register_in_flight = self._zk_request(
                broker, ("Register", broker.lost, broker.clean_shutdown))
        if broker.want_election and broker.controller is None and \
                not broker.election_in_flight:
            broker.election_in_flight = self._zk_request(broker, ("Elect",))
            if broker.election_in_flight:
                broker.want_election = False

    def _replace_session(self, broker: Broker) -> None:
        """The coordinator client reconnects and finds its session expired: it opens a
        new one at once; the shell hears of it (``_session_lost``) after whatever the
        broker had already received."""
        if broker.session_replaced or self.zk.alive(broker.session):
            return
        self._note(f"b{broker.broker_id}: coordinator session {broker.session} expired")
        broker.session = self.zk.open_session(broker.broker_id, broker.incarnation, self.now)
        broker.session_replaced = True

    def _session_lost(self, broker: Broker) -> None:
        self._replace_session(broker)
        broker.session_replaced = False
        broker.registered = broker.register_in_flight = broker.election_in_flight = False
        broker.want_election = True
        self._end_controller(broker, "coordinator session lost")
        for r in broker.parts.values():
            if r.isr_write_in_flight is not None:   # its answer is lost with the connection
                r.isr_write_in_flight = None
                self._perform(broker, r, r.core.on_isr_written(False, now_ms=self.now,
                                                               log=r.log))

    def _zk_message(self, broker: Broker, message: tuple) -> None:
        kind = message[0]
        if kind == "Registered":
            _, sid, epoch = message
            if sid == broker.session:
                broker.register_in_flight = False
                broker.registered = epoch >= 0
                if epoch >= 0:
                    broker.epoch = epoch
                held, broker.held_requests = broker.held_requests, []
                for request in held:
                    if broker.up and not broker.paused:
                        self._controller_request(broker, request)
        elif kind == "Elected":
            _, sid, snapshot, epoch, version = message
            if sid == broker.session:
                broker.election_in_flight = False
            if snapshot is None:
                return
            # A paused winner may only now hear it won (its session may be gone by now):
            # it acts as a zombie with that epoch until fenced, as a real broker would.
            self._start_controller(broker, snapshot, version)
        elif kind == "ControllerGone":
            if broker.controller is None:
                broker.want_election = True
        elif kind == "Watch":
            if broker.controller is not None:
                self._controller_step(broker, message[1])
        elif kind == "ZkOpsDone":
            _, term, done = message
            if broker.term == term and broker.controller is not None:
                self._controller_step(broker, done)
        elif kind == "IsrWritten":
            _, p, rid, ok, current = message
            r = broker.parts[p]
            if r.isr_write_in_flight != rid:
                return          # the answer to a write the core has since forgotten
            r.isr_write_in_flight = None
            core = r.core
            if ok:
                effects = core.on_isr_written(True, zk_version=current.zk_version,
                                              now_ms=self.now, log=r.log)
            elif current is not None:
                effects = core.on_isr_written(
                    False, isr=current.isr, leader_epoch=current.leader_epoch,
                    zk_version=current.zk_version, now_ms=self.now, log=r.log)
            else:
                effects = core.on_isr_written(False, now_ms=self.now, log=r.log)
            self._perform(broker, r, effects)
        else:
            raise AssertionError(message)

    # ------------------------------------------------------------------ the controller shell

    def _start_controller(self, broker: Broker, snapshot: controller_core.BecomeController,
                          epoch_version: int) -> None:
        self._end_controller(broker, "a new term")
        term = self._id()
        if snapshot.epoch in self.term_of_epoch:
            self._fail(f"two controllers for controller epoch {snapshot.epoch}: "
                       f"{self.terms[self.term_of_epoch[snapshot.epoch]]} and "
                       f"b{broker.broker_id}")
        self.term_of_epoch[snapshot.epoch] = term
        self.terms[term] = (broker.broker_id, snapshot.epoch)
        self.stats["controller_epochs"] += 1
        broker.controller = controller_core.Controller(broker.broker_id, self.controller_config)
        broker.term = term
        broker.epoch_zk_version = epoch_version
        self._note(f"b{broker.broker_id} becomes controller, controller_epoch {snapshot.epoch}")
        self._controller_step(broker, snapshot)

    def _end_controller(self, broker: Broker, reason: str) -> None:
        if broker.controller is None:
            return
        if broker.controller.active:
            self._note(f"b{broker.broker_id} stops being controller: {reason}")
        broker.controller = None
        for key in [k for k in self.channels if k[0] == broker.term]:
            self._close_channel(key)
        broker.term = 0

    def _controller_step(self, broker: Broker, event) -> None:
        core, term = broker.controller, broker.term
        epoch = self.terms[term][1]
        queue = deque([event])
        steps = 0
        while queue and broker.controller is core:
            steps += 1
            if steps > CONTROLLER_STEPS_MAX:
                self._fail("the controller core does not settle")
            effects = core.step(queue.popleft())
            for e in effects:
                if isinstance(e, controller_core.ZkOps):
                    sent = self._zk_request(broker, ("ZkOps", term, epoch,
                                                     broker.epoch_zk_version, e))
                    if not sent:
                        queue.append(controller_core.ZkOpsDone(e.op_id, tuple(
                            controller_core.ZkResult("ConnectionLoss") for _ in e.ops)))
                elif isinstance(e, controller_core.SendRequest):
                    self._controller_send(broker, term, e)
                elif isinstance(e, controller_core.LogLine):
                    if e.message.startswith("unclean recovery of "):
                        self.stats["unclean_recoveries"] += 1
                    if " leader_epoch " in e.message:    # "<reason>: t-0 leader ..."
                        reason = "state writes: " + e.message.split(":")[0]
                        self.stats[reason] = self.stats.get(reason, 0) + 1
                    if e.level != "INFO" or "leader" in e.message:
                        self._note(f"controller b{broker.broker_id}/{epoch}: {e.message}")
                elif isinstance(e, controller_core.Resign):
                    self._end_controller(broker, e.reason)
                    broker.want_election = True
                    break
                elif isinstance(e, controller_core.ReplyControlledShutdown):
                    pass
                else:
                    raise AssertionError(e)
        if broker.controller is core:
            # Kafka drops a broker's channel (and its queued requests) when it dies.
            for key in [k for k in self.channels if k[0] == term and k[1] not in core.brokers]:
                self._close_channel(key)

    def _close_channel(self, key) -> None:
        """What was handed to the connection is on its way; what it held is dropped."""
        channel = self.channels.pop(key)
        channel.closed = True
        channel.held.clear()

    def _controller_send(self, broker: Broker, term: int, e: controller_core.SendRequest) -> None:
        key = (term, e.broker_id)
        channel = self.channels.setdefault(key, Channel())
        message = ("Controller", broker.broker_id, broker.incarnation, term, e.api_key, e.body,
                   e.tag)
        self._channel_send(channel, self._controller_arrive, key, channel, message)

    def _controller_arrive(self, key, channel: Channel, message: tuple):
        src = self.brokers[message[1]]
        if src.incarnation != message[2]:
            if not channel.closed:
                self._close_channel(key)    # the controller's process died
            return None
        dst = self.brokers[key[1]]
        if src.isolated or not dst.up or dst.isolated:
            # TCP retransmits; reconnects and resends while the channel is open.
            return None if channel.closed else False
        self._to_broker(dst, message[1], message)
        return None

    def _flush_channels(self) -> None:
        for key in sorted(self.channels):
            channel = self.channels.get(key)
            if channel is not None and channel.held:
                self._channel_flush(channel)
        for sid in sorted(self.zk_down):
            channel = self.zk_down[sid]
            if channel.held:
                if not self.zk.alive(sid):
                    channel.held.clear()
                else:
                    self._channel_flush(channel)

    def _check_controller_acts(self, epoch: int, term: int, what: str) -> None:
        if self.term_of_epoch.get(epoch) != term:
            self._fail(f"controller epoch {epoch} acted ({what}) by core {self.terms.get(term)}"
                       f", not by its winner {self.term_of_epoch.get(epoch)}")

    def _check_state_written(self, p: int, by: str, writer: int | None = None,
                             leader_epoch: int | None = None) -> None:
        s = self.zk.state(TOPIC, p)
        if writer is not None and (s.leader != writer or s.leader_epoch != leader_epoch):
            self._fail(f"{by}: ISR write accepted for a state it does not lead: {s}")
        if s.leader >= 0:
            known = self.leaders_by_epoch.setdefault((p, s.leader_epoch), s.leader)
            if known != s.leader:
                self._fail(f"t-{p}: two leaders in leader epoch {s.leader_epoch}: {known} and "
                           f"{s.leader} (written by {by})")
            if s.leader not in s.isr:
                self._fail(f"t-{p}: leader {s.leader} not in ISR {s.isr} (written by {by})")
        if not s.isr or not set(s.isr) <= set(self.assignment[p]):
            self._fail(f"t-{p}: ISR {s.isr} not within replicas (written by {by})")
        self._note(f"zk: t-{p} leader={s.leader} epoch={s.leader_epoch} isr={list(s.isr)} "
                   f"v{s.zk_version} by {by}")

    # ------------------------------------------------------------------ effects

    def _perform(self, broker: Broker, r: Replica, effects) -> None:
        log = r.log
        for e in effects:
            if isinstance(e, Truncate):
                log.truncate_to(e.offset)
                self._note(f"b{broker.broker_id} t-{r.partition} truncate to {e.offset}")
            elif isinstance(e, TruncateFully):
                log.truncate_fully(e.offset)
            elif isinstance(e, AssignEpoch):
                log.assign_epoch(e.leader_epoch, e.start_offset)
            elif isinstance(e, SetHighWatermark):
                if e.offset > log.log_end_offset:
                    self._fail(f"b{broker.broker_id} t-{r.partition} HW {e.offset} > LEO "
                               f"{log.log_end_offset}")
                if r.core.role is Role.LEADER:
                    epoch = r.core.leader_epoch
                    if e.offset < r.last_leader_hw.get(epoch, -1):
                        self._fail(f"b{broker.broker_id} t-{r.partition} leader HW moved back "
                                   f"to {e.offset}")
                    r.last_leader_hw[epoch] = e.offset
                log.set_hw(e.offset)
            elif isinstance(e, WriteIsr):
                self._write_isr(broker, r, e)
            elif isinstance(e, SendOffsetForLeaderEpoch):
                rid = self._id()
                r.epoch_request_in_flight = rid
                self.send(broker.broker_id, e.leader,
                          ("OFLE", r.partition, rid, e.current_leader_epoch, e.leader_epoch))
                self._at(self.now + self.config.request_timeout_ms, self._epoch_timeout,
                         broker.broker_id, r.partition, rid)
            elif isinstance(e, CompleteProduce):
                self.send(broker.broker_id, "client", ("ProduceResp", r.partition,
                                                       e.request_id, e.error, e.base_offset))
            else:
                raise AssertionError(e)
        r.core.check_invariants(log)
        if r.parked_fetches:
            self._maybe_complete_parked(broker, r)
        if self._shm() and r.core.role is Role.LEADER:
            self._shm_publish(broker, r)
        if r.fetch_in_flight is None:
            self._maybe_fetch(broker, r)

    def _write_isr(self, broker: Broker, r: Replica, e: WriteIsr) -> None:
        """Through the coordinator, conditional on the version (it races the
        controller's writes); a cut-off leader gets ConnectionLoss at once."""
        rid = self._id()
        if self._zk_request(broker, ("WriteIsr", r.partition, rid, e,
                                     r.partition_controller_epoch)):
            r.isr_write_in_flight = rid
            return
        self._perform(broker, r, r.core.on_isr_written(False, now_ms=self.now, log=r.log))

    # ------------------------------------------------------------------ broker behaviour

    def _maybe_fetch(self, broker: Broker, r: Replica) -> None:
        if not broker.up or broker.paused or r.fetch_in_flight is not None:
            return
        if self._shm() and r.shm_serving:
            return                      # the shm path serves it (tests.sim.shm_model)
        state = r.core.fetch_state(r.log)
        if state is None:
            return
        rid = self._id()
        r.fetch_in_flight = rid
        self.send(broker.broker_id, state.leader,
                  ("Fetch", r.partition, rid, state.fetch_offset, state.leader_epoch))
        self._at(self.now + self.config.request_timeout_ms, self._fetch_timeout,
                 broker.broker_id, r.partition, rid)

    def _fetch_timeout(self, broker_id: int, p: int, rid: int) -> None:
        broker = self.brokers[broker_id]
        r = broker.parts[p]
        if r.fetch_in_flight == rid:
            r.fetch_in_flight = None
            self._maybe_fetch(broker, r)

    def _epoch_timeout(self, broker_id: int, p: int, rid: int) -> None:
        broker = self.brokers[broker_id]
        r = broker.parts[p]
        if broker.up and not broker.paused and r.epoch_request_in_flight == rid:
            r.epoch_request_in_flight = None
            self._perform(broker, r, r.core.on_offset_for_leader_epoch(
                error=ErrorCode.REQUEST_TIMED_OUT, leader_epoch=-1, end_offset=-1, now_ms=self.now, log=r.log))

    def _broker_receive(self, broker: Broker, src, message: tuple) -> None:
        kind = message[0]
        if src == "zk":
            self._zk_message(broker, message)
            return
        if kind == "Controller":
            self._controller_request(broker, message)
            return
        if kind == "ControllerResp":
            _, term, tag, body = message
            if broker.term == term and broker.controller is not None:
                self._controller_step(broker, controller_core.BrokerResponse(tag, body))
            return
        r = broker.parts[message[1]]
        core, log = r.core, r.log
        if kind == "Produce":
            _, p, rid, values, acks = message
            error = core.check_produce(acks)
            if error:
                self.send(broker.broker_id, src, ("ProduceResp", p, rid, error, -1))
                return
            first, last = log.append_as_leader(values, core.leader_epoch)
            self._perform(broker, r, core.on_leader_append(rid, acks, first, last,
                                                           self.config.produce_timeout_ms,
                                                           self.now, log))
        elif kind == "Fetch":
            self._leader_fetch(broker, r, src, message)
        elif kind == "FetchResp":
            self._follower_fetch_response(broker, r, message)
        elif kind == "OFLE":
            _, p, rid, current_epoch, requested = message
            answer = core.answer_offset_for_leader_epoch(current_epoch, requested, log)
            self.send(broker.broker_id, src, ("OFLEResp", p, rid) + answer)
        elif kind == "OFLEResp":
            _, p, rid, error, epoch, end_offset = message
            if r.epoch_request_in_flight != rid:
                return
            r.epoch_request_in_flight = None
            self._perform(broker, r, core.on_offset_for_leader_epoch(
                error=error, leader_epoch=epoch, end_offset=end_offset, now_ms=self.now, log=log))
        else:
            raise AssertionError(message)

    def _controller_request(self, broker: Broker, message: tuple) -> None:
        """LeaderAndIsr / UpdateMetadata / StopReplica, as Kafka's ReplicaManager: an
        older controller epoch than the highest seen is refused."""
        if broker.register_in_flight:
            broker.held_requests.append(message)
            return
        _, src, _, term, api_key, body, tag = message
        epoch = body["controller_epoch"]
        if epoch < broker.controller_epoch:
            self.stats["stale_controller_refused"] += 1
            self._note(f"b{broker.broker_id} refuses {ApiKey(api_key).name} of controller "
                       f"epoch {epoch} < {broker.controller_epoch}: STALE_CONTROLLER_EPOCH")
            self._controller_answer(broker, src, term, tag, {"error": ErrorCode.STALE_CONTROLLER_EPOCH,
                                                             "partitions": []})
            return
        broker_epoch = body.get("broker_epoch", -1)
        if self.config.broker_epoch_fencing and broker_epoch >= 0 and \
                broker_epoch != broker.epoch:
            self.stats["stale_broker_epoch_refused"] += 1
            self._note(f"b{broker.broker_id} refuses {ApiKey(api_key).name} for broker epoch "
                       f"{broker_epoch} (its own: {broker.epoch}): STALE_BROKER_EPOCH")
            self._controller_answer(broker, src, term, tag, {
                "error": ErrorCode.STALE_BROKER_EPOCH, "partitions": []})
            return
        self._check_controller_acts(epoch, term, f"{ApiKey(api_key).name} accepted by "
                                                 f"b{broker.broker_id}")
        broker.controller_epoch = epoch
        results = []
        if api_key == ApiKey.GET_REPLICA_LOG_INFO:
            for t, p in body["partitions"]:
                log = broker.parts[p].log
                results.append([t, p, NONE, log.latest_epoch(), log.log_end_offset])
        if api_key == ApiKey.LEADER_AND_ISR:
            for entry in body["partitions"]:
                results.append([entry[0], entry[1], self._leader_and_isr(broker, entry, epoch)])
        elif api_key == ApiKey.STOP_REPLICA:
            for t, p, _ in body["partitions"]:
                r = broker.parts[p]
                if self._shm():
                    self._shm_follow(broker, r)
                self._perform(broker, r, r.core.stop(self.now))
                results.append([t, p, NONE])
        self._controller_answer(broker, src, term, tag, {"error": NONE, "partitions": results})

    def _controller_answer(self, broker: Broker, src: int, term: int, tag, body: dict) -> None:
        if tag is None:
            return
        if not self._connected(src) or not self._connected(broker.broker_id):
            body = None                 # the controller's request times out
        self._at(self.now + self._delay(), self._to_controller, src, term,
                 ("ControllerResp", term, tag, body))

    def _to_controller(self, src: int, term: int, message: tuple) -> None:
        broker = self.brokers[src]
        if broker.up and broker.term == term:
            self._to_broker(broker, broker.broker_id, message)

    def _leader_and_isr(self, broker: Broker, entry: list, controller_epoch: int) -> int:
        topic, partition, leader, epoch, isr, version, replicas = entry[:7]
        elr, recovery = (entry[8], entry[9]) if len(entry) == 10 else ((), 0)
        assert topic == TOPIC and partition in broker.parts, entry
        r = broker.parts[partition]
        core, log = r.core, r.log
        error = core.check_leader_and_isr(epoch)
        if error:
            return error
        if leader == broker.broker_id and partition in broker.marked:
            if not recovery:
                self._note(f"b{broker.broker_id} refuses to lead t-{partition} in epoch {epoch}: "
                           f"it lost committed data (INELIGIBLE_REPLICA)")
                return ErrorCode.INELIGIBLE_REPLICA
            self._note(f"b{broker.broker_id} leads t-{partition} by unclean recovery "
                       f"(LEO {log.log_end_offset})")
            del broker.marked[partition]
        r.partition_controller_epoch = controller_epoch
        if self._shm() and leader != broker.broker_id:
            self._shm_follow(broker, r)      # before the follower's truncation
        if leader == broker.broker_id:
            effects = core.become_leader(leader_epoch=epoch, isr=isr, replicas=replicas,
                                         zk_version=version, now_ms=self.now, log=log, elr=elr)
        else:
            effects = core.become_follower(leader=leader, leader_epoch=epoch, isr=isr,
                                           replicas=replicas, zk_version=version,
                                           now_ms=self.now, log=log, elr=elr)
            r.fetch_in_flight = None
        r.isr_write_in_flight = None
        self._note(f"b{broker.broker_id} LeaderAndIsr t-{partition} leader={leader} "
                   f"epoch={epoch} isr={list(isr)} LEO={log.log_end_offset} HW={log.hw}")
        self._perform(broker, r, effects)
        if self._shm() and leader == broker.broker_id:
            self._shm_lead(broker, r)
        return NONE

    def _leader_fetch(self, broker: Broker, r: Replica, src: int, message: tuple,
                      parked: bool = False) -> None:
        _, p, rid, fetch_offset, epoch = message
        core, log = r.core, r.log
        error = core.check_fetch_epoch(epoch) or (0 if core.role is Role.LEADER else ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if not error and not log.log_start_offset <= fetch_offset <= log.log_end_offset:
            error = ErrorCode.OFFSET_OUT_OF_RANGE
        self.stats["fetches"] = self.stats.get("fetches", 0) + 1
        if error:
            self.send(broker.broker_id, src, ("FetchResp", p, rid, error, [], fetch_offset,
                                              log.hw, log.log_start_offset,
                                              log.log_end_offset))
            return
        if not parked:
            self._perform(broker, r, core.on_follower_fetch(src, fetch_offset, self.now, log))
        entries = log.read(fetch_offset, 8)
        if not entries and not parked:
            # Long poll: only new data or the wait completes it (a HW change does not).
            r.parked_fetches.append((src, message, self.now + self.config.fetch_max_wait_ms))
            self._at(self.now + self.config.fetch_max_wait_ms, self._expire_parked,
                     broker.broker_id, p)
            return
        self.send(broker.broker_id, src, ("FetchResp", p, rid, NONE, list(entries),
                                          fetch_offset, log.hw, log.log_start_offset,
                                          log.log_end_offset))

    def _maybe_complete_parked(self, broker: Broker, r: Replica) -> None:
        still = []
        for src, message, deadline in r.parked_fetches:
            if r.log.log_end_offset > message[3] or r.core.role is not Role.LEADER:
                self._leader_fetch(broker, r, src, message, parked=True)
            else:
                still.append((src, message, deadline))
        r.parked_fetches = still

    def _expire_parked(self, broker_id: int, p: int) -> None:
        broker = self.brokers[broker_id]
        if not broker.up or broker.paused:
            return
        r = broker.parts[p]
        due = [x for x in r.parked_fetches if x[2] <= self.now]
        r.parked_fetches = [x for x in r.parked_fetches if x[2] > self.now]
        for src, message, _ in due:
            self._leader_fetch(broker, r, src, message, parked=True)

    def _follower_fetch_response(self, broker: Broker, r: Replica, message: tuple) -> None:
        _, p, rid, error, entries, first, hw, start, leo = message
        if r.fetch_in_flight != rid:
            return
        r.fetch_in_flight = None
        core, log = r.core, r.log
        if error == NONE and entries:
            if core.fetch_state(log) is None or first != log.log_end_offset:
                self._maybe_fetch(broker, r)
                return  # stale: we truncated or changed role meanwhile
            log.append_as_follower(entries, first)
        self._perform(broker, r, core.on_fetch_response(
            error=error, leader_high_watermark=hw, leader_log_start_offset=start,
            leader_log_end_offset=leo, now_ms=self.now, log=log))

    def _tick(self) -> None:
        self._flush_channels()
        checkpoint = self.now % self.config.hw_checkpoint_interval_ms < self.config.tick_ms
        for broker in self.brokers.values():
            if broker.up and not broker.paused:
                for r in broker.parts.values():
                    effects = r.core.tick(self.now, r.log)
                    if effects:
                        self._perform(broker, r, effects)
                    if checkpoint:
                        r.checkpointed_hw = r.log.hw
                if self._shm():
                    self._shm_wake(broker)
                if broker.marked and broker.registered:
                    self._clear_recovered_marks(broker)
                if not broker.isolated:
                    self._zk_client(broker)
                if broker.controller is not None:
                    self._controller_step(broker, controller_core.Tick(self.now))
        self._expire_sessions()
        self._check_log_matching()
        self._at(self.now + self.config.tick_ms, self._tick)

    def _clear_recovered_marks(self, broker: Broker) -> None:
        """As the broker shell: drop the markers of lost replicas that are back
        (``lost_replica_is_back``); the registration then says so."""
        for p, lost_hw in sorted(broker.marked.items()):
            r, state = broker.parts[p], self.partition_state(p)
            if lost_replica_is_back(r.core, state.get("leader", -1), state.get("isr", ()),
                                    r.log.hw, lost_hw):
                del broker.marked[p]
                broker.lost = frozenset((TOPIC, q) for q in broker.marked)
                self._note(f"b{broker.broker_id}: t-{p} is back (HW {r.log.hw} >= {lost_hw})")
                self.zk.update_registration(broker.session, broker.broker_id, broker.lost)

    # ------------------------------------------------------------------ client

    def _produce(self) -> None:
        """acks=all batches of 1-3 records, round robin over the partitions, to the
        leader the coordinator names."""
        p = self._next_partition
        self._next_partition = (p + 1) % len(self.partitions)
        leader = self.current_leader(p)
        if leader >= 0 and self.now < self.config.duration_ms + self.config.heal_ms // 2:
            rid = self._id()
            values = [f"v{self.next_value + i}" for i in range(self.random.randint(1, 3))]
            self.next_value += len(values)
            self.in_flight_produce[rid] = values
            self.send("client", leader, ("Produce", p, rid, values, -1))
        self._at(self.now + self.config.produce_interval_ms, self._produce)

    def _client_receive(self, message: tuple) -> None:
        kind, p, rid, error, base_offset = message
        values = self.in_flight_produce.pop(rid, None)
        if values is not None and error == NONE:
            for i, v in enumerate(values):
                self.acked[v] = (p, base_offset + i)

    def _consume(self) -> None:
        """A consumer reads from whoever is leader now, below its HW only."""
        for p in self.partitions:
            leader = self.current_leader(p)
            if leader < 0:
                continue
            broker = self.brokers[leader]
            r = broker.parts[p]
            if broker.up and not broker.isolated and r.core.role is Role.LEADER:
                log = r.log
                for offset in range(max(log.log_start_offset, log.hw - 20), log.hw):
                    _, value = log.value_at(offset)
                    seen = self.consumed.setdefault((p, offset), value)
                    if seen != value:
                        self._violation(f"consumer saw {seen} then {value} at offset {offset} "
                                        f"of t-{p}")
        self._at(self.now + 50, self._consume)

    # ------------------------------------------------------------------ faults

    def _fault(self) -> None:
        c = self.config
        if self.now >= c.duration_ms:
            return
        b = self.random.choice(self.replicas)
        if b not in self.faulty and len(self.faulty) < c.concurrent_faults_max:
            kinds = ["crash", "pause", "isolate"]
            if c.power_cuts and not any(not x.up and x.power_cut for x in self.brokers.values()):
                kinds.append("power-cut")
            kind = self.random.choice(kinds)
            length = self.random.randint(100, 1200)
            self.faulty.add(b)
            self._note(f"fault: {kind} b{b} for {length} ms")
            self._act(kind, b)
            self._at(self.now + length, self._act,
                     {"crash": "restart", "pause": "resume", "isolate": "heal",
                      "power-cut": "restart"}[kind], b)
        self._at(self.now + self.random.randint(*c.fault_interval_ms), self._fault)

    def script(self, time_ms: int, action: str, b: int) -> "Sim":
        """Schedule a fault by hand: crash, power-cut, restart, pause, resume, isolate,
        heal."""
        def act():
            self._note(f"script: {action} b{b}")
            self._act(action, b)
        self._at(time_ms, act)
        return self

    def controller_broker(self) -> int | None:
        """The broker whose session holds /controller now, None if none does."""
        owner = self.zk.controller_owner()
        return None if owner is None else self.zk.sessions[owner].broker_id

    def script_controller(self, time_ms: int, action: str, undo_after_ms: int) -> "Sim":
        """Fault whichever broker is the controller at ``time_ms``; undo it later."""
        undo = {"crash": "restart", "pause": "resume", "isolate": "heal",
                "power-cut": "restart"}[action]

        def act():
            b = self.controller_broker()
            if b is None:
                return
            self._note(f"script: {action} the controller b{b}")
            self._act(action, b)
            self._at(self.now + undo_after_ms, self._act, undo, b)
        self._at(time_ms, act)
        return self

    def _act(self, action: str, b: int) -> None:
        broker = self.brokers[b]
        if action == "crash":
            broker.up = False
        elif action == "power-cut":
            # A power failure: the process dies and every log loses what was not flushed
            # (nothing is flushed here: the logs are cut to their start), but the HW
            # checkpoint survives (it was fsynced when written).
            broker.up = False
            for r in broker.parts.values():
                r.log.truncate_to(r.log.log_start_offset)
            broker.power_cut = True
        elif action == "pause":
            broker.paused = True
        elif action == "isolate":
            broker.isolated = True
        elif action == "restart":
            self._restart(b)
        elif action == "resume":
            self._resume(b)
        elif action == "heal":
            self._heal(b)
        else:
            raise ValueError(action)

    def _restart(self, b: int) -> None:
        old = self.brokers[b]
        # As the broker shell at start-up: a partition whose ISR names it but whose log
        # ends below its checkpointed HW lost committed records; the registration says so.
        found = {p: r.checkpointed_hw for p, r in old.parts.items()
                 if r.log.log_end_offset < r.checkpointed_hw
                 and (b in self.partition_state(p).get("isr", ())
                      or b in self.partition_state(p).get("elr", ()))}
        marked = dict(old.marked) if self.config.durable_lost_marker else {}
        marked.update(found)
        for r in old.parts.values():
            r.log.hw = min(r.checkpointed_hw, r.log.log_end_offset)   # from its checkpoint
        self.brokers[b] = broker = self._new_broker(b, {p: r.log for p, r in old.parts.items()})
        broker.marked = marked
        broker.lost = frozenset((TOPIC, p) for p in marked)
        broker.clean_shutdown = False           # a crash or a power cut
        self.stats["lost_registrations"] += bool(marked)
        for r in broker.parts.values():
            r.checkpointed_hw = r.log.hw
        self.faulty.discard(b)
        self._note(f"b{b} restarted " + " ".join(
            f"t-{p} LEO={r.log.log_end_offset} HW={r.log.hw}" for p, r in broker.parts.items())
            + f" session {broker.session}")

    def _resume(self, b: int) -> None:
        broker = self.brokers[b]
        broker.paused = False
        self.faulty.discard(b)
        # The buffered messages first (what the peers sent before they gave up on it),
        # then the coordinator client finds out about its session on the next tick.
        self._replace_session(broker)
        backlog, broker.backlog = broker.backlog, []
        for src, message in backlog:
            if broker.up and not broker.paused:
                self._broker_receive(broker, src, message)
        for p, r in broker.parts.items():
            self._expire_parked(b, p)
            if r.epoch_request_in_flight is not None:
                self._at(self.now + self.config.request_timeout_ms, self._epoch_timeout, b, p,
                         r.epoch_request_in_flight)
            self._maybe_fetch(broker, r)

    def _heal(self, b: int) -> None:
        broker = self.brokers[b]
        broker.isolated = False
        self.faulty.discard(b)
        self._flush_channels()     # TCP retransmits at once; the zk session check follows
        for r in broker.parts.values():
            self._maybe_fetch(broker, r)

    # ------------------------------------------------------------------ checks

    def _check_log_matching(self) -> None:
        bs = [x for x in self.brokers.values()]
        for p in self.partitions:
            for i, a in enumerate(bs):
                for b in bs[i + 1:]:
                    la, lb = a.parts[p].log, b.parts[p].log
                    low = max(la.log_start_offset, lb.log_start_offset)
                    high = min(la.hw, lb.hw)
                    first = max(low, high - 30)
                    if first >= high or la.entries[first - la.start:high - la.start] == \
                            lb.entries[first - lb.start:high - lb.start]:
                        continue
                    for offset in range(first, high):
                        if la.value_at(offset) != lb.value_at(offset):
                            self._violation(f"LogMatching: b{a.broker_id} and b{b.broker_id} "
                                            f"differ at t-{p} offset {offset} below HWs "
                                            f"{la.hw}/{lb.hw}")

    def run(self) -> "Sim":
        c = self.config
        self._at(0, self._tick)
        self._at(0, self._produce)
        self._at(0, self._consume)
        self._at(c.topic_created_ms, self._create_topic)
        if c.random_faults:
            self._at(self.random.randint(*c.fault_interval_ms), self._fault)
        end = c.duration_ms + c.heal_ms
        try:
            while self._queue:
                time_ms, _, fn, args = heapq.heappop(self._queue)
                if time_ms > end:
                    break
                self.now = time_ms
                fn(*args)
        except InvariantViolation:
            raise
        except Exception as e:   # an assertion in a core, or a simulator bug
            self._fail(f"{type(e).__name__}: {e}")
        return self

    def lost(self) -> dict[object, tuple[int, int]]:
        """Acknowledged records not at their offset in their partition leader's log:
        value -> (partition, offset)."""
        lost = {}
        for value, (p, offset) in self.acked.items():
            leader = self.current_leader(p)
            log = self.brokers[leader].parts[p].log if leader >= 0 else None
            if log is None or not (log.log_start_offset <= offset < log.log_end_offset) or \
                    log.value_at(offset)[1] != value:
                lost[value] = (p, offset)
        return lost

    def check_no_committed_record_lost(self) -> None:
        lost = self.lost()
        if lost:
            sample = sorted(lost.items(), key=lambda kv: kv[1])[:5]
            self._fail(f"NoCommittedRecordLost: {len(lost)} acknowledged records lost, "
                       f"e.g. {sample}")
