"""A deterministic simulator for the replication core (and the controller's election rules).

One seed decides everything: message delays (which reorders them), drops, network
partitions, broker crashes, pauses and restarts, and when the client produces. The real
``node.replication.ReplicaCore`` runs on every simulated broker; ``MemLog`` plays its
log; a coordinator model holds the partition-state znode (conditional updates on its
version) and broker sessions; the controller elects leaders as DESIGN.md says. A failure
prints the seed that reproduces it (``Sim(seed).run()``).

Checked (DESIGN.md "Invariants"):
- NoCommittedRecordLost: every acknowledged acks=all record is, after the faults heal,
  at its offset in the leader's log (only asserted when it must hold: unclean election off,
  leader-epoch truncation);
- LogMatching: replicas agree on every offset below the smaller of their HWs;
- the HW never moves backwards on a leader within an epoch; LEO >= HW everywhere;
- at most one leader per leader epoch; leader in ISR, ISR within the replicas;
- a consumer never sees an offset at or above the HW, nor two values at one offset.
"""
from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from node import errors as E
from node.replication import (AssignEpoch, CompleteProduce, ReplicaCore, ReplicationConfig,
                              Role, SendOffsetForLeaderEpoch, SetHighWatermark, Truncate,
                              TruncateFully, TruncationMode, WriteIsr)
from tests.sim.memlog import MemLog

CONTROLLER = "controller"
NONE = 0
TIMED_OUT = E.code_of("REQUEST_TIMED_OUT")
NOT_LEADER = E.code_of("NOT_LEADER_OR_FOLLOWER")
OUT_OF_RANGE = E.code_of("OFFSET_OUT_OF_RANGE")


class InvariantViolation(AssertionError):
    pass


@dataclass
class SimConfig:
    brokers: int = 3
    min_insync_replicas: int = 2
    unclean_leader_election: bool = False
    truncation_mode: TruncationMode = TruncationMode.LEADER_EPOCH
    replica_lag_time_max_ms: int = 300
    session_timeout_ms: int = 400
    request_timeout_ms: int = 250
    fetch_max_wait_ms: int = 100
    produce_timeout_ms: int = 600
    hw_checkpoint_interval_ms: int = 200
    tick_ms: int = 20
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


@dataclass
class Broker:
    broker_id: int
    core: ReplicaCore
    log: MemLog
    up: bool = True
    paused: bool = False
    isolated: bool = False          # cut off from everyone, coordinator included
    checkpointed_hw: int = 0
    fetch_in_flight: int | None = None   # request id
    epoch_request_in_flight: int | None = None
    parked_fetches: list = field(default_factory=list)
    backlog: list = field(default_factory=list)   # messages held while paused
    last_leader_hw: dict = field(default_factory=dict)   # epoch -> HW as leader


class Sim:
    def __init__(self, seed: int, config: SimConfig | None = None) -> None:
        self.seed = seed
        self.config = config or SimConfig()
        self.random = random.Random(seed)
        self.now = 0
        self._queue: list = []
        self._seq = 0
        self._ids = 0
        c = self.config
        self.replicas = tuple(range(c.brokers))
        self.brokers = {b: self._new_broker(b, MemLog()) for b in self.replicas}
        # Coordinator model: the partition-state znode and broker sessions.
        self.state = {"leader": 0, "leader_epoch": 0, "isr": self.replicas, "version": 0}
        self.registered = set(self.replicas)
        self.session_alive_until = {b: 0 for b in self.replicas}
        self.controller_epoch = 1
        self.leaders_by_epoch: dict[int, int] = {0: 0}
        # Client.
        self.acked: dict[object, int] = {}          # value -> offset (acks=all, NONE)
        self.in_flight_produce: dict[int, object] = {}
        self.next_value = 0
        self.consumed: dict[int, object] = {}       # offset -> value seen by the consumer
        self.trace: list[str] = []
        self.faulty: set[int] = set()
        self.restarted: set[int] = set()
        # The guarantees hold with clean elections and leader-epoch truncation; in the
        # other modes violations are counted (the literature's loss modes), not fatal.
        self.strict = (self.config.truncation_mode is TruncationMode.LEADER_EPOCH
                       and not self.config.unclean_leader_election)
        self.violations: list[str] = []

    # ------------------------------------------------------------------ plumbing

    def _new_broker(self, broker_id: int, log: MemLog) -> Broker:
        c = self.config
        core = ReplicaCore("t", 0, broker_id, ReplicationConfig(
            c.replica_lag_time_max_ms, c.min_insync_replicas, c.truncation_mode))
        return Broker(broker_id, core, log)

    def _at(self, time_ms: int, fn, *args) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (time_ms, self._seq, fn, args))

    def _id(self) -> int:
        self._ids += 1
        return self._ids

    def _violation(self, what: str) -> None:
        if self.strict:
            self._fail(what)
        self.violations.append(f"{self.now} ms: {what}")

    def _fail(self, what: str) -> None:
        tail = "\n".join(self.trace[-40:])
        raise InvariantViolation(f"seed {self.seed} at {self.now} ms: {what}\n"
                                 f"reproduce: Sim({self.seed}, config).run()\n{tail}")

    def _note(self, text: str) -> None:
        self.trace.append(f"{self.now:6d} {text}")
        if len(self.trace) > 400:
            del self.trace[:200]

    def _reachable(self, a, b) -> bool:
        for x in (a, b):
            if isinstance(x, int) and (not self.brokers[x].up or self.brokers[x].isolated):
                return False
        return True

    def send(self, src, dst, message: tuple) -> None:
        """Deliver after a random delay (so messages reorder), unless dropped or cut."""
        if src != CONTROLLER and self.random.random() < self.config.drop_probability:
            return
        delay = self.random.randint(*self.config.delay_ms)
        self._at(self.now + delay, self._deliver, src, dst, message)

    def _deliver(self, src, dst, message: tuple) -> None:
        if not self._reachable(src, dst):
            if src == CONTROLLER and dst in self.registered:
                # The controller's channel is a TCP connection that reconnects and
                # resends (Kafka's ControllerChannelManager): retry while registered.
                self._at(self.now + 50, self._deliver, src, dst, message)
            return
        if dst == CONTROLLER:
            return  # the controller acts on the coordinator model directly
        if dst == "client":
            self._client_receive(message)
            return
        broker = self.brokers[dst]
        if broker.paused:
            broker.backlog.append((src, message))
            return
        self._broker_receive(broker, src, message)

    # ------------------------------------------------------------------ effects

    def _perform(self, broker: Broker, effects) -> None:
        for e in effects:
            log = broker.log
            if isinstance(e, Truncate):
                log.truncate_to(e.offset)
                self._note(f"b{broker.broker_id} truncate to {e.offset}")
            elif isinstance(e, TruncateFully):
                log.truncate_fully(e.offset)
            elif isinstance(e, AssignEpoch):
                log.assign_epoch(e.leader_epoch, e.start_offset)
            elif isinstance(e, SetHighWatermark):
                if e.offset > log.log_end_offset:
                    self._fail(f"b{broker.broker_id} HW {e.offset} > LEO {log.log_end_offset}")
                if broker.core.role is Role.LEADER:
                    epoch = broker.core.leader_epoch
                    if e.offset < broker.last_leader_hw.get(epoch, -1):
                        self._fail(f"b{broker.broker_id} leader HW moved back to {e.offset}")
                    broker.last_leader_hw[epoch] = e.offset
                log.set_hw(e.offset)
            elif isinstance(e, WriteIsr):
                self._write_isr(broker, e)
            elif isinstance(e, SendOffsetForLeaderEpoch):
                rid = self._id()
                broker.epoch_request_in_flight = rid
                self.send(broker.broker_id, e.leader,
                          ("OFLE", rid, e.current_leader_epoch, e.leader_epoch))
                self._at(self.now + self.config.request_timeout_ms, self._epoch_timeout,
                         broker.broker_id, rid)
            elif isinstance(e, CompleteProduce):
                self.send(broker.broker_id, "client", ("ProduceResp", e.request_id, e.error,
                                                       e.base_offset))
            else:
                raise AssertionError(e)
        broker.core.check_invariants(broker.log)
        self._maybe_complete_parked(broker)
        self._maybe_fetch(broker)

    def _write_isr(self, broker: Broker, e: WriteIsr) -> None:
        core = broker.core
        if broker.isolated:
            self._perform(broker, core.on_isr_written(False, now_ms=self.now, log=broker.log))
            return
        s = self.state
        if s["version"] != e.zk_version:
            self._note(f"b{broker.broker_id} ISR write {e.isr} refused (version)")
            self._perform(broker, core.on_isr_written(
                False, isr=s["isr"], leader_epoch=s["leader_epoch"], zk_version=s["version"],
                now_ms=self.now, log=broker.log))
            return
        assert s["leader"] == broker.broker_id and s["leader_epoch"] == e.leader_epoch
        s["isr"], s["version"] = tuple(e.isr), s["version"] + 1
        self._note(f"b{broker.broker_id} ISR -> {list(e.isr)} v{s['version']}")
        self._perform(broker, core.on_isr_written(True, zk_version=s["version"], now_ms=self.now,
                                                  log=broker.log))

    # ------------------------------------------------------------------ broker behaviour

    def _maybe_fetch(self, broker: Broker) -> None:
        if not broker.up or broker.paused or broker.fetch_in_flight is not None:
            return
        state = broker.core.fetch_state(broker.log)
        if state is None:
            return
        rid = self._id()
        broker.fetch_in_flight = rid
        self.send(broker.broker_id, state.leader,
                  ("Fetch", rid, state.fetch_offset, state.leader_epoch))
        self._at(self.now + self.config.request_timeout_ms, self._fetch_timeout,
                 broker.broker_id, rid)

    def _fetch_timeout(self, broker_id: int, rid: int) -> None:
        broker = self.brokers[broker_id]
        if broker.fetch_in_flight == rid:
            broker.fetch_in_flight = None
            self._maybe_fetch(broker)

    def _epoch_timeout(self, broker_id: int, rid: int) -> None:
        broker = self.brokers[broker_id]
        if broker.up and not broker.paused and broker.epoch_request_in_flight == rid:
            broker.epoch_request_in_flight = None
            self._perform(broker, broker.core.on_offset_for_leader_epoch(
                error=TIMED_OUT, leader_epoch=-1, end_offset=-1, now_ms=self.now, log=broker.log))

    def _broker_receive(self, broker: Broker, src, message: tuple) -> None:
        kind = message[0]
        core, log = broker.core, broker.log
        if kind == "LeaderAndIsr":
            _, controller_epoch, leader, epoch, isr, version = message
            if core.check_leader_and_isr(epoch):
                return
            if leader == broker.broker_id:
                effects = core.become_leader(leader_epoch=epoch, isr=isr, replicas=self.replicas,
                                             zk_version=version, now_ms=self.now, log=log)
            else:
                effects = core.become_follower(leader=leader, leader_epoch=epoch, isr=isr,
                                               replicas=self.replicas, zk_version=version,
                                               now_ms=self.now, log=log)
                broker.fetch_in_flight = None
            self._note(f"b{broker.broker_id} LeaderAndIsr leader={leader} epoch={epoch} "
                       f"isr={list(isr)} LEO={log.log_end_offset} HW={log.hw}")
            self._perform(broker, effects)
        elif kind == "Produce":
            _, rid, values, acks = message
            error = core.check_produce(acks)
            if error:
                self.send(broker.broker_id, src, ("ProduceResp", rid, error, -1))
                return
            first, last = log.append_as_leader(values, core.leader_epoch)
            self._perform(broker, core.on_leader_append(rid, acks, first, last,
                                                        self.config.produce_timeout_ms,
                                                        self.now, log))
        elif kind == "Fetch":
            self._leader_fetch(broker, src, message)
        elif kind == "FetchResp":
            self._follower_fetch_response(broker, message)
        elif kind == "OFLE":
            _, rid, current_epoch, requested = message
            answer = core.answer_offset_for_leader_epoch(current_epoch, requested, log)
            self.send(broker.broker_id, src, ("OFLEResp", rid) + answer)
        elif kind == "OFLEResp":
            _, rid, error, epoch, end_offset = message
            if broker.epoch_request_in_flight != rid:
                return
            broker.epoch_request_in_flight = None
            self._perform(broker, core.on_offset_for_leader_epoch(
                error=error, leader_epoch=epoch, end_offset=end_offset, now_ms=self.now, log=log))
        else:
            raise AssertionError(message)

    def _leader_fetch(self, broker: Broker, src: int, message: tuple, parked: bool = False
                      ) -> None:
        _, rid, fetch_offset, epoch = message
        core, log = broker.core, broker.log
        error = core.check_fetch_epoch(epoch) or (0 if core.role is Role.LEADER else NOT_LEADER)
        if not error and not log.log_start_offset <= fetch_offset <= log.log_end_offset:
            error = OUT_OF_RANGE
        if error:
            self.send(broker.broker_id, src, ("FetchResp", rid, error, [], fetch_offset, log.hw,
                                              log.log_start_offset, log.log_end_offset))
            return
        if not parked:
            self._perform(broker, core.on_follower_fetch(src, fetch_offset, self.now, log))
        entries = log.read(fetch_offset, 8)
        if not entries and not parked:
            # Long poll: only new data or the wait completes it (a HW change does not).
            broker.parked_fetches.append((src, message, self.now + self.config.fetch_max_wait_ms))
            self._at(self.now + self.config.fetch_max_wait_ms, self._expire_parked,
                     broker.broker_id)
            return
        self.send(broker.broker_id, src, ("FetchResp", rid, NONE, list(entries), fetch_offset,
                                          log.hw, log.log_start_offset, log.log_end_offset))

    def _maybe_complete_parked(self, broker: Broker) -> None:
        if not broker.parked_fetches:
            return
        still = []
        for src, message, deadline in broker.parked_fetches:
            if broker.log.log_end_offset > message[2] or broker.core.role is not Role.LEADER:
                self._leader_fetch(broker, src, message, parked=True)
            else:
                still.append((src, message, deadline))
        broker.parked_fetches = still

    def _expire_parked(self, broker_id: int) -> None:
        broker = self.brokers[broker_id]
        if not broker.up or broker.paused:
            return
        due = [p for p in broker.parked_fetches if p[2] <= self.now]
        broker.parked_fetches = [p for p in broker.parked_fetches if p[2] > self.now]
        for src, message, _ in due:
            self._leader_fetch(broker, src, message, parked=True)

    def _follower_fetch_response(self, broker: Broker, message: tuple) -> None:
        _, rid, error, entries, first, hw, start, leo = message
        if broker.fetch_in_flight != rid:
            return
        broker.fetch_in_flight = None
        core, log = broker.core, broker.log
        if error == NONE and entries:
            if core.fetch_state(log) is None or first != log.log_end_offset:
                self._maybe_fetch(broker)
                return  # stale: we truncated or changed role meanwhile
            log.append_as_follower(entries, first)
        self._perform(broker, core.on_fetch_response(
            error=error, leader_high_watermark=hw, leader_log_start_offset=start,
            leader_log_end_offset=leo, now_ms=self.now, log=log))

    def _tick(self) -> None:
        for broker in self.brokers.values():
            if broker.up and not broker.paused:
                self._perform(broker, broker.core.tick(self.now, broker.log))
                if self.now % self.config.hw_checkpoint_interval_ms < self.config.tick_ms:
                    broker.checkpointed_hw = broker.log.hw
        self._controller_check_sessions()
        self._check_log_matching()
        self._at(self.now + self.config.tick_ms, self._tick)

    # ------------------------------------------------------------------ controller

    def _controller_check_sessions(self) -> None:
        for b in self.replicas:
            broker = self.brokers[b]
            if broker.up and not broker.paused and not broker.isolated:
                self.session_alive_until[b] = self.now + self.config.session_timeout_ms
            if b in self.restarted and broker.up:
                # A restarted broker registers only once its old session is gone.
                self.restarted.discard(b)
                if b in self.registered:
                    self.registered.discard(b)
                    self._note(f"controller: broker {b} session replaced")
                    self._on_broker_gone(b)
            if b in self.registered and self.now > self.session_alive_until[b]:
                self.registered.discard(b)
                self._note(f"controller: broker {b} session expired")
                self._on_broker_gone(b)
            elif b not in self.registered and broker.up and not broker.paused and \
                    not broker.isolated:
                self.registered.add(b)
                self._note(f"controller: broker {b} registered")
                self._on_broker_back(b)

    def _write_state(self, leader: int, isr: tuple[int, ...]) -> None:
        """Conditional update of the state znode (the controller holds the latest
        version here: the model is atomic), then LeaderAndIsr to the live replicas."""
        s = self.state
        epoch = s["leader_epoch"] + 1
        if leader >= 0:
            if epoch in self.leaders_by_epoch and self.leaders_by_epoch[epoch] != leader:
                self._fail(f"two leaders in epoch {epoch}")
            self.leaders_by_epoch[epoch] = leader
            assert leader in isr
        assert set(isr) <= set(self.replicas)
        s.update(leader=leader, leader_epoch=epoch, isr=tuple(isr), version=s["version"] + 1)
        self._note(f"controller: state leader={leader} epoch={epoch} isr={list(isr)}")
        for b in sorted(self.registered):
            self.send(CONTROLLER, b, ("LeaderAndIsr", self.controller_epoch, leader, epoch,
                                      tuple(isr), s["version"]))

    def _on_broker_gone(self, b: int) -> None:
        s = self.state
        live_isr = tuple(r for r in s["isr"] if r in self.registered)
        if s["leader"] == b or s["leader"] < 0:
            if live_isr:
                self._write_state(live_isr[0], live_isr)
            elif self.config.unclean_leader_election and self.registered:
                new = min(self.registered)
                self._write_state(new, (new,))
            else:
                self._note("controller: NoReplicaOnlineException, partition offline")
                isr = live_isr or tuple(r for r in s["isr"] if r == b) or s["isr"]
                self._write_state(-1, isr)
        elif b in s["isr"]:
            self._write_state(s["leader"], tuple(r for r in s["isr"] if r != b))

    def _on_broker_back(self, b: int) -> None:
        s = self.state
        if s["leader"] < 0:
            live_isr = tuple(r for r in s["isr"] if r in self.registered)
            if live_isr:
                self._write_state(live_isr[0], live_isr)
                return
            if self.config.unclean_leader_election:
                self._write_state(b, (b,))
                return
        self.send(CONTROLLER, b, ("LeaderAndIsr", self.controller_epoch, s["leader"],
                                  s["leader_epoch"], s["isr"], s["version"]))

    # ------------------------------------------------------------------ client

    def _produce(self) -> None:
        leader = self.state["leader"]
        if leader >= 0 and self.now < self.config.duration_ms + self.config.heal_ms // 2:
            rid = self._id()
            values = [f"v{self.next_value + i}" for i in range(self.random.randint(1, 3))]
            self.next_value += len(values)
            self.in_flight_produce[rid] = values
            self.send("client", leader, ("Produce", rid, values, -1))
        self._at(self.now + self.config.produce_interval_ms, self._produce)

    def _client_receive(self, message: tuple) -> None:
        kind, rid, error, base_offset = message
        values = self.in_flight_produce.pop(rid, None)
        if values is not None and error == NONE:
            for i, v in enumerate(values):
                self.acked[v] = base_offset + i

    def _consume(self) -> None:
        """A consumer reads from whoever is leader now, below its HW only."""
        leader = self.state["leader"]
        if leader >= 0:
            broker = self.brokers[leader]
            if broker.up and not broker.isolated and broker.core.role is Role.LEADER:
                log = broker.log
                for offset in range(max(log.log_start_offset, log.hw - 20), log.hw):
                    _, value = log.value_at(offset)
                    seen = self.consumed.setdefault(offset, value)
                    if seen != value:
                        self._violation(f"consumer saw {seen} then {value} at offset {offset}")
        self._at(self.now + 50, self._consume)

    # ------------------------------------------------------------------ faults

    def _fault(self) -> None:
        c = self.config
        if self.now >= c.duration_ms:
            return
        b = self.random.choice(self.replicas)
        broker = self.brokers[b]
        if b not in self.faulty and len(self.faulty) < c.concurrent_faults_max:
            kind = self.random.choice(["crash", "pause", "isolate"])
            length = self.random.randint(100, 1200)
            self.faulty.add(b)
            self._note(f"fault: {kind} b{b} for {length} ms")
            if kind == "crash":
                broker.up = False
                self._at(self.now + length, self._restart, b)
            elif kind == "pause":
                broker.paused = True
                self._at(self.now + length, self._resume, b)
            else:
                broker.isolated = True
                self._at(self.now + length, self._heal, b)
        self._at(self.now + self.random.randint(*c.fault_interval_ms), self._fault)

    def script(self, time_ms: int, action: str, b: int) -> "Sim":
        """Schedule a fault by hand: crash, restart, pause, resume, isolate, heal."""
        def act():
            self._note(f"script: {action} b{b}")
            broker = self.brokers[b]
            if action == "crash":
                broker.up = False
            elif action == "pause":
                broker.paused = True
            elif action == "isolate":
                broker.isolated = True
            else:
                {"restart": self._restart, "resume": self._resume, "heal": self._heal}[action](b)
        self._at(time_ms, act)
        return self

    def _restart(self, b: int) -> None:
        old = self.brokers[b]
        log = old.log
        log.hw = min(old.checkpointed_hw, log.log_end_offset)   # HW from its checkpoint
        self.brokers[b] = self._new_broker(b, log)
        self.brokers[b].checkpointed_hw = log.hw
        self.faulty.discard(b)
        self.restarted.add(b)
        self._note(f"b{b} restarted LEO={log.log_end_offset} HW={log.hw}")

    def _resume(self, b: int) -> None:
        broker = self.brokers[b]
        broker.paused = False
        self.faulty.discard(b)
        backlog, broker.backlog = broker.backlog, []
        for src, message in backlog:
            if broker.up and not broker.paused:
                self._broker_receive(broker, src, message)
        self._expire_parked(b)
        if broker.epoch_request_in_flight is not None:
            self._at(self.now + self.config.request_timeout_ms, self._epoch_timeout, b,
                     broker.epoch_request_in_flight)
        self._maybe_fetch(broker)

    def _heal(self, b: int) -> None:
        self.brokers[b].isolated = False
        self.faulty.discard(b)
        self._maybe_fetch(self.brokers[b])

    # ------------------------------------------------------------------ checks

    def _check_log_matching(self) -> None:
        bs = [x for x in self.brokers.values()]
        for i, a in enumerate(bs):
            for b in bs[i + 1:]:
                low = max(a.log.log_start_offset, b.log.log_start_offset)
                high = min(a.log.hw, b.log.hw)
                for offset in range(max(low, high - 30), high):
                    if a.log.value_at(offset) != b.log.value_at(offset):
                        self._violation(f"LogMatching: b{a.broker_id} and b{b.broker_id} differ at "
                                   f"{offset} below HWs {a.log.hw}/{b.log.hw}")

    def run(self) -> "Sim":
        c = self.config
        self._at(0, self._tick)
        self._at(0, self._produce)
        self._at(0, self._consume)
        if c.random_faults:
            self._at(self.random.randint(*c.fault_interval_ms), self._fault)
        for b in self.replicas:
            self.send(CONTROLLER, b, ("LeaderAndIsr", 1, 0, 0, self.replicas, 0))
        end = c.duration_ms + c.heal_ms
        while self._queue:
            time_ms, _, fn, args = heapq.heappop(self._queue)
            if time_ms > end:
                break
            self.now = time_ms
            fn(*args)
        return self

    def lost(self) -> dict[object, int]:
        """Acknowledged records not at their offset in the leader's log."""
        leader = self.state["leader"]
        if leader < 0:
            return dict(self.acked)
        log = self.brokers[leader].log
        lost = {}
        for value, offset in self.acked.items():
            if not (log.log_start_offset <= offset < log.log_end_offset) or \
                    log.value_at(offset)[1] != value:
                lost[value] = offset
        return lost

    def check_no_committed_record_lost(self) -> None:
        lost = self.lost()
        if lost:
            sample = sorted(lost.items(), key=lambda kv: kv[1])[:5]
            self._fail(f"NoCommittedRecordLost: {len(lost)} acknowledged records lost, "
                       f"e.g. {sample}")
