"""The KIP-848 core (node.core.groups.consumer) under a seeded simulation.

One seed decides everything. Simulated clients behave as Kafka's consumer does: join with
member epoch 0, heartbeat every interval (one request in flight; an answer that comes
after the request timed out is dropped, and the next heartbeat is a full one), take new
partitions at once, revoke at their own pace (some slower than their rebalance timeout),
and on UNKNOWN_MEMBER_ID / FENCED_MEMBER_EPOCH drop everything and rejoin. Faults: members
join, leave (-1), static members leave for a while (-2) and come back under a new member
id, processes crash (their session expires) or pause (shorter and longer than the session
timeout: late heartbeats), messages are lost or late, topics grow, are created or deleted, and the
coordinator fails over: a new core is built by replaying the records committed so far
(what was not committed yet is lost with its answers, as when the leader of the
``__consumer_offsets`` partition dies).

The coordinator answers a request only once its records are committed (the shell's rule).

Checked at every step:
- among the live members the coordinator knows, no partition is held by two, and each
  holds no more than the coordinator has it owning (assigned + pending revocation);
- among all live processes (zombies included), no two hold one partition at the same
  member epoch.
Checked once the faults stop: the run settles, every live member at the group epoch, in
the coordinator's group, holding exactly its assignment, and every partition of every
subscribed topic held exactly once; and the records, replayed into a new core, give the
coordinator's groups exactly.
"""
from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import dataclass, field

import pytest

from node.core.groups import consumer as cons
from node.core.groups import consumer_state as cs
from node.core.groups import records
from node.core.groups.config import GroupConfig

SEEDS = 600
HEARTBEAT_MS = 50
SESSION_MS = 300
REQUEST_TIMEOUT_MS = 120
FAULTS_END_MS = 1500
SETTLE_MS_MAX = 4000
EVENTS_MAX = 200_000
TOPIC_IDS = {"a": "AAAAAAAAAAAAAAAAAAAAAQ", "b": "AAAAAAAAAAAAAAAAAAAAAg"}
CONFIG = GroupConfig(group_consumer_heartbeat_interval_ms=HEARTBEAT_MS,
                     group_consumer_min_heartbeat_interval_ms=HEARTBEAT_MS,
                     group_consumer_max_heartbeat_interval_ms=HEARTBEAT_MS,
                     group_consumer_session_timeout_ms=SESSION_MS,
                     group_consumer_min_session_timeout_ms=SESSION_MS,
                     group_consumer_max_session_timeout_ms=SESSION_MS)


@dataclass
class Client:
    """One consumer process."""
    name: str
    version: int                       # ConsumerGroupHeartbeat version: 0 server ids, 1 own
    topics: list[str]
    instance: str | None
    rebalance_timeout_ms: int
    revoke_ms: tuple[int, int]
    assignor: str | None
    member_id: str = ""
    epoch: int = 0
    held: dict = field(default_factory=dict)         # topic id -> set: what it consumes
    target: dict = field(default_factory=dict)       # the last assignment it was given
    revoking: int | None = None                      # the revocation under way (its id)
    in_flight: int | None = None
    full: bool = True                                # next heartbeat carries every field
    reported: dict | None = None                     # owned partitions last sent
    alive: bool = True
    paused_until: int = 0
    hb_at: int = -1                                  # the heartbeat timer set, or -1
    arrives: int = 0                                 # when its last request arrives


@dataclass
class Batch:
    records: list
    replies: list                                    # (client, request id, body)
    generation: int


class World:
    def __init__(self, seed: int):
        self.seed, self.rng = seed, random.Random(seed)
        self.now, self.events, self.seq, self.steps = 0, [], itertools.count(), 0
        self.server_ids = (f"s{i}" for i in itertools.count())
        self.topics = {"a": (TOPIC_IDS["a"], self.rng.randint(1, 6))}
        if self.rng.random() < 0.5:
            self.topics["b"] = (TOPIC_IDS["b"], self.rng.randint(1, 4))
        self.log: list = []                          # committed records, as (key, value) bytes
        self.uncommitted: list[Batch] = []           # made by the leader, not committed yet
        self.generation, self.up = 0, True
        self.last_commit = 0
        self.clients: dict[str, Client] = {}
        self.names = itertools.count()
        self.faults = True
        self.rebalances = 0
        self.core = self.new_core()
        self.submit(self.core.metadata_changed(self.topics), [])

    # ----------------------------------------------------------- scheduling
    def at(self, when: int, fn, *args) -> None:
        heapq.heappush(self.events, (when, next(self.seq), fn, args))

    def net(self) -> int | None:
        """A message's delay, or None when it is lost. Some arrive after the request timed
        out (their answer is dropped)."""
        if self.faults:
            roll = self.rng.random()
            if roll < 0.03:
                return None
            if roll < 0.05:
                return self.rng.randint(REQUEST_TIMEOUT_MS, 2 * REQUEST_TIMEOUT_MS)
        return self.rng.choice((1, 2, 3, 5, 8, 20, 40))

    def step(self) -> None:
        self.steps += 1
        assert self.steps < EVENTS_MAX, f"seed {self.seed}: no end after {EVENTS_MAX} events"
        self.now, _, fn, args = heapq.heappop(self.events)
        fn(*args)
        self.check_safety()

    # ----------------------------------------------------------- the coordinator
    def new_core(self) -> cons.ConsumerGroups:
        return cons.ConsumerGroups(CONFIG, new_member_id=lambda: next(self.server_ids))

    def submit(self, recs: list, replies: list) -> None:
        """Records are committed a little later, in order; the answers go out after."""
        self.last_commit = max(self.last_commit, self.now + self.rng.choice((0, 1, 3, 10)))
        batch = Batch(recs, replies, self.generation)
        self.uncommitted.append(batch)
        self.at(self.last_commit, self.commit, batch)
        deadline = self.core.next_deadline_ms()
        if deadline is not None:
            self.at(max(deadline, self.now), self.tick, self.generation)

    def commit(self, batch: Batch) -> None:
        if batch.generation != self.generation:
            return                                   # lost with the old leader
        assert self.uncommitted.pop(0) is batch, "batches commit in order"
        self.log.extend(records.encode(rec) for rec in batch.records)   # Kafka's bytes
        for client, request, body in batch.replies:
            delay = self.net()
            if delay is not None:
                self.at(self.now + delay, self.on_reply, client, request, body)

    def tick(self, generation: int) -> None:
        if generation == self.generation and self.up:
            self.submit(self.core.tick(self.now), [])

    def on_request(self, client: Client, request: int, body: dict) -> None:
        if not self.up:
            delay = self.net()
            if delay is not None:
                self.at(self.now + delay, self.on_reply, client, request,
                        cons.heartbeat_error(16, "not the coordinator"))
            return
        out = self.core.heartbeat(self.now, client.version, body, client.name, "/127.0.0.1")
        self.submit(out.records, [(client, request, out.body)])

    def fail_over(self) -> None:
        self.uncommitted.clear()
        self.generation += 1
        self.up = False
        self.at(self.now + self.rng.choice((5, 30, 100)), self.take_over, self.generation)

    def take_over(self, generation: int) -> None:
        if generation != self.generation:
            return                                   # it failed over again meanwhile
        self.core = self.new_core()
        for key, value in self.log:
            self.core.replay(records.decode(key, value))
        self.core.loaded(self.now)
        self.up = True
        self.last_commit = self.now
        self.submit(self.core.metadata_changed(self.topics), [])

    def grow(self) -> None:
        """A topic grows, is created, or ("b") is deleted."""
        name = self.rng.choice(["a", "b"])
        if name == "b" and "b" in self.topics and self.rng.random() < 0.3:
            del self.topics["b"]
        else:
            tid, n = self.topics.get(name, (TOPIC_IDS[name], 0))
            self.topics[name] = (tid, n + self.rng.randint(1, 3))
        if self.up:
            self.submit(self.core.metadata_changed(self.topics), [])

    # ----------------------------------------------------------- a client
    def start(self, instance: str | None = None) -> None:
        if not self.faults:
            return
        if instance in {c.instance for c in self.clients.values() if c.alive}:
            instance = None                          # one process per instance id
        n = next(self.names)
        version = self.rng.choice((0, 1))
        slow = self.rng.random() < 0.15
        c = Client(name=f"c{n}", version=version,
                   topics=self.rng.sample(["a", "b"], self.rng.randint(1, 2)),
                   instance=instance, rebalance_timeout_ms=self.rng.choice((150, 250, 400)),
                   revoke_ms=(200, 500) if slow else (0, 40),
                   assignor=self.rng.choice((None, None, "uniform", "range")),
                   member_id=f"c{n}-id" if version == 1 else "")
        self.clients[c.name] = c
        self.send(c)

    def busy(self, c: Client, fn, *args) -> bool:
        """A paused process does nothing until it resumes (its events wait)."""
        if self.now < c.paused_until:
            self.at(c.paused_until, fn, c, *args)
            return True
        return False

    def body(self, c: Client) -> dict:
        joining = c.epoch == 0
        full = joining or c.full
        owned = [] if joining else [
            {"topic_id": t, "partitions": sorted(ps)} for t, ps in sorted(c.held.items()) if ps]
        if not full and owned == c.reported:
            owned_sent = None                        # unchanged since the last heartbeat
        else:
            owned_sent = owned
        c.reported = owned
        return {"group_id": "g", "member_id": c.member_id, "member_epoch": c.epoch,
                "instance_id": c.instance, "rack_id": None,
                "rebalance_timeout_ms": c.rebalance_timeout_ms if full else -1,
                "subscribed_topic_names": c.topics if full else None,
                "subscribed_topic_regex": None,
                "server_assignor": c.assignor if full else None,
                "topic_partitions": owned_sent}

    def send(self, c: Client) -> None:
        if not c.alive or c.in_flight is not None or self.busy(c, self.send_later):
            return
        if c.epoch == 0:
            assert not any(c.held.values()), f"seed {self.seed}: {c.name} rejoins holding"
        request = next(self.seq)
        c.in_flight = request
        body = self.body(c)
        c.full = False
        delay = self.net()
        if delay is not None:
            # One connection: a client's requests arrive in the order sent (TCP), as
            # Kafka's "previous epoch" rule assumes.
            c.arrives = max(c.arrives, self.now + delay)
            self.at(c.arrives, self.on_request, c, request, body)
        self.at(self.now + REQUEST_TIMEOUT_MS, self.timed_out, c, request)

    def send_later(self, c: Client) -> None:
        self.send(c)

    def timer(self, c: Client, at: int) -> None:
        if c.hb_at == -1 or at < c.hb_at:
            c.hb_at = at
            self.at(at, self.on_timer, c, at)

    def on_timer(self, c: Client, at: int) -> None:
        if c.hb_at != at or not c.alive:
            return
        c.hb_at = -1
        if c.in_flight is None:
            self.send(c)
        self.timer(c, self.now + HEARTBEAT_MS)

    def timed_out(self, c: Client, request: int) -> None:
        if c.alive and c.in_flight == request and not self.busy(c, self.timed_out, request):
            c.in_flight, c.full = None, True
            self.timer(c, self.now + 5)

    def on_reply(self, c: Client, request: int, body: dict) -> None:
        if not c.alive or c.in_flight != request or self.busy(c, self.on_reply, request, body):
            return
        c.in_flight = None
        code = body["error_code"]
        if code in (cons.UNKNOWN_MEMBER_ID, cons.FENCED_MEMBER_EPOCH):
            c.held, c.target, c.epoch, c.full = {}, {}, 0, True     # partitions lost
            c.revoking = None
            self.timer(c, self.now + 1)
            return
        if code != 0:                               # not the coordinator, instance unreleased
            c.full = True
            self.timer(c, self.now + 20)
            return
        if body["member_epoch"] < 0:                # it left
            return
        c.member_id, c.epoch = body["member_id"], body["member_epoch"]
        if body["assignment"] is not None:
            c.target = {t["topic_id"]: set(t["partitions"])
                        for t in body["assignment"]["topic_partitions"]}
            for t, ps in c.target.items():          # new partitions are taken at once
                c.held.setdefault(t, set()).update(ps)
            if any(c.held[t] - c.target.get(t, set()) for t in c.held) and c.revoking is None:
                c.revoking = next(self.seq)
                self.rebalances += 1
                # A slow member is slow while the faults last (one that always revokes
                # later than its rebalance timeout is fenced at every rebalance, in Kafka
                # too, and never settles).
                slowest = c.revoke_ms if self.faults else (0, 40)
                self.at(self.now + self.rng.randint(*slowest), self.revoked, c, c.revoking)
            if c.revoking is None:
                self.timer(c, self.now)             # acknowledge at once
        self.timer(c, self.now + HEARTBEAT_MS)

    def revoked(self, c: Client, revocation: int) -> None:
        if not c.alive or c.revoking != revocation or self.busy(c, self.revoked, revocation):
            return
        c.revoking = None
        c.held = {t: ps & c.target.get(t, set()) for t, ps in c.held.items()}
        self.timer(c, self.now)

    def leave(self, c: Client, temporarily: bool) -> None:
        """A clean close: partitions revoked, then the leave heartbeat; the process ends."""
        if not c.alive or c.epoch <= 0 or self.busy(c, self.leave, temporarily):
            return
        c.held, c.in_flight, c.epoch = {}, None, -2 if temporarily else -1
        self.send(c)
        c.alive = False

    def crash(self, c: Client) -> None:
        c.alive = False

    # ----------------------------------------------------------- faults
    def schedule_faults(self) -> None:
        rng = self.rng
        for _ in range(rng.randint(1, 4)):
            self.at(rng.randint(0, 200), self.start, rng.choice((None, None, "i1", "i2")))
        for _ in range(rng.randint(0, 6)):
            self.at(rng.randint(100, FAULTS_END_MS), self.fault)
        for _ in range(rng.choice((0, 0, 1, 2))):
            self.at(rng.randint(100, FAULTS_END_MS), self.fail_over)
        for _ in range(rng.choice((0, 1, 1, 2))):
            self.at(rng.randint(100, FAULTS_END_MS), self.grow)

    def fault(self) -> None:
        rng = self.rng
        live = [c for c in self.clients.values() if c.alive]
        kind = rng.choice(("join", "leave", "static", "crash", "pause", "pause"))
        if kind == "join" or not live:
            used = {c.instance for c in live}
            free = [i for i in ("i1", "i2") if i not in used]
            self.start(rng.choice(free + [None]) if free else None)
            return
        c = rng.choice(live)
        if kind == "leave":
            self.leave(c, temporarily=False)
        elif kind == "static" and c.instance is not None:
            self.leave(c, temporarily=True)
            self.at(self.now + rng.choice((20, 100, 2 * SESSION_MS)), self.start, c.instance)
        elif kind == "crash":
            self.crash(c)
            if c.instance is not None:
                self.at(self.now + rng.choice((10, 100, 400)), self.start, c.instance)
        else:
            c.paused_until = self.now + rng.choice((30, 100, 2 * SESSION_MS))

    # ----------------------------------------------------------- the checks
    def check_safety(self) -> None:
        group = self.core.groups.get("g") if self.up else None
        known = group.members if group is not None else {}
        by_epoch: dict = {}
        coordinated: dict = {}
        for c in self.clients.values():
            if not c.alive:
                continue
            member = known.get(c.member_id)
            for t, ps in c.held.items():
                for p in ps:
                    key = (t, p, c.epoch)
                    assert key not in by_epoch, (f"seed {self.seed}: {t}-{p} held by "
                                                 f"{by_epoch[key]} and {c.name} at epoch {c.epoch}")
                    by_epoch[key] = c.name
                    if member is None:
                        continue
                    assert (t, p) not in coordinated, (f"seed {self.seed}: {t}-{p} held by "
                                                       f"{coordinated[(t, p)]} and {c.name}")
                    coordinated[(t, p)] = c.name
                    assert p in member.assigned.get(t, ()) or \
                        p in member.pending_revocation.get(t, ()), \
                        f"seed {self.seed}: {c.name} holds {t}-{p} the coordinator did not give"

    def settled(self) -> bool:
        if not self.up or self.events and self.events[0][0] < self.last_commit:
            return False
        group = self.core.groups.get("g")
        live = [c for c in self.clients.values() if c.alive]
        if group is None:
            return not live
        if {c.member_id for c in live} != set(group.members):
            return False
        if group.state not in (cs.STABLE_GROUP, cs.EMPTY):
            return False
        for c in live:
            m = group.members[c.member_id]
            if c.revoking is not None or c.epoch != m.member_epoch \
                    or c.epoch != group.group_epoch:
                return False
            if {t: frozenset(ps) for t, ps in c.held.items() if ps} != dict(m.assigned):
                return False
        return True

    def check_settled(self) -> None:
        group = self.core.groups["g"] if "g" in self.core.groups else None
        live = [c for c in self.clients.values() if c.alive]
        held: dict = {}
        for c in live:
            for t, ps in c.held.items():
                for p in ps:
                    assert (t, p) not in held, f"seed {self.seed}: {t}-{p} held twice"
                    held[(t, p)] = c.name
        subscribed = {n for c in live for n in c.topics if n in self.topics}
        want = {(self.topics[n][0], p) for n in subscribed for p in range(self.topics[n][1])}
        assert set(held) == want, f"seed {self.seed}: held {sorted(held)} != {sorted(want)}"
        if group is not None and live:
            assert group.assignment_epoch == group.group_epoch
        # The records say it all: replayed, they give the coordinator's groups exactly.
        again = cons.ConsumerGroups(CONFIG)
        for key, value in self.log:
            again.replay(records.decode(key, value))
        for batch in self.uncommitted:
            for rec in batch.records:
                again.replay(rec)
        assert snapshot(again) == snapshot(self.core), f"seed {self.seed}: replay differs"


def snapshot(core: cons.ConsumerGroups) -> dict:
    return {gid: (g.group_epoch, g.assignment_epoch, g.subscription_metadata, g.members,
                  g.target, g.owners, g.static) for gid, g in core.groups.items()}


def simulate(seed: int) -> World:
    world = World(seed)
    world.schedule_faults()
    while world.events and world.events[0][0] <= FAULTS_END_MS:
        world.step()
    world.faults = False
    for c in world.clients.values():
        c.paused_until = min(c.paused_until, FAULTS_END_MS + 2 * SESSION_MS)
    deadline = FAULTS_END_MS + SETTLE_MS_MAX
    while not world.settled():
        assert world.events and world.now < deadline, \
            f"seed {world.seed}: not settled by {deadline} ms"
        world.step()
    world.check_settled()
    return world


@pytest.mark.parametrize("block", range(4))
def test_kip848_groups_never_double_assign_and_always_settle(block):
    """SEEDS seeds in 4 blocks (parallel workers); a failure names the seed."""
    rebalances = failovers = 0
    for seed in range(block, SEEDS, 4):
        world = simulate(seed)
        rebalances += world.rebalances
        failovers += world.generation
    assert rebalances > SEEDS // 8 and failovers > SEEDS // 8     # the runs did something


def test_the_checker_catches_a_core_that_does_not_wait_for_revocations(monkeypatch):
    def no_wait(member, target_epoch, target, partition_epoch, owned):
        """Broken on purpose: takes revoked partitions back at once, without waiting for the
        member to say it let them go (the coordinator's own books stay consistent)."""
        assigned = {t: frozenset(p for p in ps if p in member.assigned.get(t, ())
                                 or partition_epoch(t, p) == -1)
                    for t, ps in target.items()}
        assigned = cs.freeze(assigned)
        state = cs.STABLE if assigned == dict(target) else cs.UNRELEASED_PARTITIONS
        return member.with_epoch(target_epoch, state=state, assigned=assigned,
                                 pending_revocation={})
    monkeypatch.setattr(cons, "next_member", no_wait)
    caught = 0
    for seed in range(60):
        try:
            simulate(seed)
        except AssertionError as e:
            assert f"seed {seed}: " in str(e), e
            assert " held by " in str(e) or "did not give" in str(e), e
            caught += 1
    assert caught > 10, caught
