"""Kafka's classic group protocol (node.core.groups: GroupShard) under a seeded simulation.

One seed decides everything. Simulated consumers (eager: they give up every partition
before rejoining, as Kafka's eager assignors) join one group, the leader assigning with a
range assignor over the members' subscriptions; they heartbeat, commit offsets of what they
hold, leave, crash (their session then expires), pause (heartbeats late, sometimes past the
session timeout), rejoin slowly, and restart: a static member (group.instance.id) with the
same instance id. Every request and reply takes its own network time.

The coordinator's shell is modelled as the broker's: a Result's records are appended and
committed some time later; its replies go out once every record issued so far is
committed. The coordinator fails over at random: the uncommitted tail is lost (a random
prefix of it may have been committed first), the replies waiting on it and the parked
requests get NOT_COORDINATOR, and a new shard is built by replaying the committed records.

Checked at every step that gives a member partitions: no two live members hold one
partition in the same generation.
Checked when the log has no uncommitted tail: a shard replayed from the log has the same
persisted state (Stable and Empty groups, offsets) as the live one.
Checked at the end, after the faults stop: the run settles - the group is Stable, every live
member is in it at its generation and holds its share, every partition is held once.
"""
from __future__ import annotations

import collections
import heapq
import itertools
import random
from dataclasses import dataclass, field

import pytest

from node.core.groups.classic_group import State, subscription_topics
from node.core.groups.config import GroupConfig
from node.core.groups.shard import GroupShard, error_response

SEEDS = 300
CLIENTS_MAX = 6
JOIN, SYNC, HEARTBEAT, LEAVE, COMMIT = 11, 14, 12, 13, 8
SESSION_MS, REBALANCE_MS, HEARTBEAT_MS = 600, 800, 100     # Kafka's, scaled down 10x
FAULTS_UNTIL_MS = 6_000
SETTLE_MS = 5_000
STEPS_MAX = 200_000
NOT_COORDINATOR = 16
VERSION = {JOIN: 9, SYNC: 5, HEARTBEAT: 4, LEAVE: 5, COMMIT: 9}


def encode_subscription(topics) -> bytes:
    out = (0).to_bytes(2, "big") + len(topics).to_bytes(4, "big")
    for t in sorted(topics):
        out += len(t).to_bytes(2, "big") + t.encode()
    return out + (-1).to_bytes(4, "big", signed=True)


def range_assign(members: dict[str, set[str]], topics: dict[str, int]) -> dict[str, set]:
    """Kafka's RangeAssignor: per topic, its subscribers sorted, contiguous ranges."""
    out: dict[str, set] = {mid: set() for mid in members}
    for topic, count in topics.items():
        subs = sorted(mid for mid, ts in members.items() if topic in ts)
        if not subs:
            continue
        each, extra = divmod(count, len(subs))
        start = 0
        for i, mid in enumerate(subs):
            n = each + (i < extra)
            out[mid] |= {(topic, p) for p in range(start, start + n)}
            start += n
    return out


def pack(tps) -> bytes:
    return repr(sorted(tps)).encode()


def unpack(data: bytes) -> set:
    return set(eval(data.decode())) if data else set()  # noqa: S307 - our own repr of tuples


@dataclass
class Client:
    name: str
    topics: set[str]
    instance: str | None
    incarnation: int = 0                  # bumped on crash/restart: stale events drop
    alive: bool = True
    member_id: str = ""
    generation: int = -1
    phase: str = "idle"                   # idle, joining, syncing, stable, left
    held: set = field(default_factory=set)
    held_generation: int = -1
    paused_until: int = 0
    offsets: dict = field(default_factory=dict)


class World:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.seed = seed
        self.now = 0
        self.events: list = []
        self.seq = itertools.count()
        self.steps = 0
        self.topics = {"a": self.rng.randint(1, 6), "b": self.rng.randint(0, 4)}
        self.config = GroupConfig(group_min_session_timeout_ms=100,
                                  group_initial_rebalance_delay_ms=self.rng.choice((0, 10, 300)))
        self.ids = itertools.count(1)
        self.tokens = itertools.count(1)
        self.token_api: dict[int, tuple[int, dict, str, int]] = {}
        self.committed: list = []           # the log up to the high watermark
        self.uncommitted: list = []
        self.waiting: list = []             # (end of log needed, replies)
        self.shard = self.new_shard()
        self.shard.loaded(self.now)
        self.replica = self.new_shard()     # replays each committed record, never loaded
        self.tick_at: int | None = None
        self.clients: dict[str, Client] = {}
        self.names = itertools.count()
        self.stats: collections.Counter = collections.Counter()

    def new_shard(self) -> GroupShard:
        return GroupShard(0, self.config, new_id=lambda: f"u{next(self.ids)}")

    # ---- scheduling ----------------------------------------------------------------------
    def at(self, delay: int, fn, *args) -> None:
        heapq.heappush(self.events, (self.now + delay, next(self.seq), fn, args))

    def net(self) -> int:
        return self.rng.choice((1, 2, 5, 10, 30))

    def run(self, until: int) -> None:
        while self.events and self.events[0][0] <= until:
            self.steps += 1
            assert self.steps < STEPS_MAX, f"seed {self.seed}: no quiet (a livelock)"
            self.now, _, fn, args = heapq.heappop(self.events)
            fn(*args)
        self.now = max(self.now, until)

    # ---- the coordinator's shell -----------------------------------------------------------
    def take(self, result) -> None:
        self.uncommitted += result.records
        end = len(self.committed) + len(self.uncommitted)
        self.waiting.append((end, result.replies))
        if result.records:
            self.at(self.rng.choice((1, 3, 10, 40)), self.commit, end)
        self.release()
        self.arm_timer()

    def commit(self, end: int) -> None:
        count = end - len(self.committed)
        if count <= 0:
            return
        for key, value in self.uncommitted[:count]:
            self.replica.replay(len(self.committed), key, value)
            self.committed.append((key, value))
        del self.uncommitted[:count]
        self.release()
        if not self.uncommitted:
            self.check_replay()

    def release(self) -> None:
        while self.waiting and self.waiting[0][0] <= len(self.committed):
            for reply in self.waiting.pop(0)[1]:
                self.answer(reply.token, reply.body)

    def answer(self, token: int, body: dict) -> None:
        api, _, name, incarnation = self.token_api.pop(token)
        self.at(self.net(), self.on_response, name, incarnation, api, body)

    def failover(self) -> None:
        if self.uncommitted and self.rng.random() < 0.5:
            self.commit(len(self.committed) + self.rng.randint(0, len(self.uncommitted)))
        for _, replies in self.waiting:
            for reply in replies:
                api, request, _, _ = self.token_api[reply.token]
                self.answer(reply.token, error_response(api, request, NOT_COORDINATOR))
        self.waiting.clear()
        self.uncommitted.clear()
        for reply in self.shard.unload():
            self.answer(reply.token, reply.body)
        self.shard = self.new_shard()
        for offset, (key, value) in enumerate(self.committed):
            self.shard.replay(offset, key, value)
        self.take(self.shard.loaded(self.now))

    def tick(self) -> None:
        self.tick_at = None
        self.take(self.shard.tick(self.now))

    def arm_timer(self) -> None:
        """The shell's timer: a tick at the shard's next deadline."""
        due = self.shard.next_deadline_ms()
        if due is not None and (self.tick_at is None or due < self.tick_at):
            self.tick_at = max(due, self.now)
            self.at(self.tick_at - self.now, self.tick)

    def send(self, c: Client, api: int, body: dict) -> None:
        token = next(self.tokens)
        self.token_api[token] = (api, body, c.name, c.incarnation)
        self.at(self.net(), self.arrive, token, api, body)

    def arrive(self, token: int, api: int, body: dict) -> None:
        self.take(self.shard.handle(self.now, api, VERSION[api], body, token, "sim", "/sim"))

    # ---- the clients ---------------------------------------------------------------------
    def client(self, name: str, incarnation: int) -> Client | None:
        c = self.clients[name]
        return c if c.alive and c.incarnation == incarnation else None

    def start(self, name: str | None = None, static: bool | None = None) -> None:
        if name is None:
            name = f"c{next(self.names)}"
            static = self.rng.random() < 0.4
            topics = set(self.rng.sample(sorted(self.topics), self.rng.randint(1, 2)))
            self.clients[name] = Client(name, topics, f"i-{name}" if static else None)
        c = self.clients[name]
        c.alive, c.incarnation = True, c.incarnation + 1
        c.member_id, c.generation, c.phase, c.held = "", -1, "idle", set()
        c.paused_until = 0
        self.rejoin(c)
        self.at(HEARTBEAT_MS, self.heartbeat, name, c.incarnation)

    def rejoin(self, c: Client, delay: int = 0) -> None:
        c.held, c.held_generation = set(), -1          # eager: give everything up first
        c.phase = "joining"
        self.at(delay, self.send_join, c.name, c.incarnation)

    def send_join(self, name: str, incarnation: int) -> None:
        c = self.client(name, incarnation)
        if c is None or c.phase != "joining":
            return
        if self.now < c.paused_until:
            return self.at(c.paused_until - self.now, self.send_join, name, incarnation)
        self.send(c, JOIN, {
            "group_id": "g", "session_timeout_ms": SESSION_MS,
            "rebalance_timeout_ms": REBALANCE_MS, "member_id": c.member_id,
            "group_instance_id": c.instance, "protocol_type": "consumer", "reason": None,
            "protocols": [{"name": "range", "metadata": encode_subscription(c.topics)}]})

    def heartbeat(self, name: str, incarnation: int) -> None:
        c = self.client(name, incarnation)
        if c is None or c.phase == "left":
            return
        self.at(HEARTBEAT_MS, self.heartbeat, name, incarnation)
        if self.now < c.paused_until or c.phase not in ("stable", "syncing"):
            return
        self.send(c, HEARTBEAT, {"group_id": "g", "generation_id": c.generation,
                                 "member_id": c.member_id, "group_instance_id": c.instance})
        if c.phase == "stable" and c.held and self.rng.random() < 0.3:
            c.offsets = {tp: c.offsets.get(tp, 0) + 1 for tp in c.held}
            topics: dict[str, list] = {}
            for (t, p), off in sorted(c.offsets.items()):
                topics.setdefault(t, []).append({
                    "partition_index": p, "committed_offset": off, "committed_leader_epoch": -1,
                    "commit_timestamp": -1, "committed_metadata": c.name})
            self.send(c, COMMIT, {"group_id": "g", "generation_id_or_member_epoch": c.generation,
                                  "member_id": c.member_id, "group_instance_id": c.instance,
                                  "retention_time_ms": -1, "topics": [
                                      {"name": t, "partitions": ps} for t, ps in topics.items()]})

    def on_response(self, name: str, incarnation: int, api: int, body: dict) -> None:
        c = self.client(name, incarnation)
        if c is None or c.phase == "left":
            return
        error = body.get("error_code", 0)
        if api == JOIN and c.phase == "joining":
            if error == 79:                                   # MEMBER_ID_REQUIRED
                c.member_id = body["member_id"]
                return self.rejoin(c)
            if error:
                return self.on_error(c, error)
            c.member_id, c.generation, c.phase = body["member_id"], body["generation_id"], "syncing"
            assignments = []
            if body["leader"] == c.member_id and not body["skip_assignment"]:
                subs = {mb["member_id"]: subscription_topics(mb["metadata"])
                        for mb in body["members"]}
                plan = range_assign(subs, self.topics)
                assignments = [{"member_id": k, "assignment": pack(v)} for k, v in plan.items()]
            self.send(c, SYNC, {"group_id": "g", "generation_id": c.generation,
                                "member_id": c.member_id, "group_instance_id": c.instance,
                                "protocol_type": "consumer", "protocol_name": "range",
                                "assignments": assignments})
        elif api == SYNC and c.phase == "syncing":
            if error:
                return self.on_error(c, error)
            c.phase, c.held, c.held_generation = "stable", unpack(body["assignment"]), c.generation
            self.check_safety()               # the only step that gives a member partitions
        elif api == HEARTBEAT and c.phase in ("stable", "syncing") and error:
            self.on_error(c, error)
        elif api == COMMIT:
            codes = {p["error_code"] for t in body["topics"] for p in t["partitions"]}
            if codes - {0} and c.phase == "stable":
                self.on_error(c, max(codes))

    def on_error(self, c: Client, error: int) -> None:
        self.stats[f"error {error}"] += 1
        if error == 82:                                       # FENCED_INSTANCE_ID: fatal
            c.alive, c.held = False, set()
            return
        if error in (25, 22):                     # UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION
            c.member_id = "" if error == 25 else c.member_id
        self.rejoin(c, self.rng.choice((0, 10, 100)))

    # ---- faults --------------------------------------------------------------------------
    def fault(self) -> None:
        if self.now >= FAULTS_UNTIL_MS:
            return
        self.at(self.rng.randint(50, 800), self.fault)
        live = [c for c in self.clients.values() if c.alive and c.phase != "left"]
        kind = self.rng.choice(("start", "start", "crash", "leave", "pause", "slow",
                                "restart", "failover"))
        self.stats[kind] += 1
        if kind == "start" or not live:
            dead = [c.name for c in self.clients.values() if not c.alive or c.phase == "left"]
            if len(self.clients) < CLIENTS_MAX:
                self.start()
            elif dead:
                self.start(self.rng.choice(dead))       # the same process again
            return
        c = self.rng.choice(live)
        if kind == "crash":
            c.alive, c.held = False, set()
        elif kind == "leave":
            self.send(c, LEAVE, {"group_id": "g", "member_id": "", "members": [
                {"member_id": c.member_id, "group_instance_id": c.instance, "reason": None}]})
            c.phase, c.held = "left", set()
        elif kind == "pause":                                 # heartbeats late, maybe too late
            c.paused_until = self.now + self.rng.choice((50, 300, 700, 1500))
        elif kind == "slow":                                  # rejoins slowly
            self.rejoin(c, self.rng.choice((100, 500, 1000)))
        elif kind == "restart":                               # crash, then the same process
            c.alive, c.held = False, set()                    # (same instance id) starts
            self.at(self.rng.choice((10, 100, 500)), self.start, c.name)
        else:
            self.failover()

    # ---- checks --------------------------------------------------------------------------
    def check_safety(self) -> None:
        holders: dict = {}
        for c in self.clients.values():
            if c.alive:
                for tp in c.held:
                    key = (c.held_generation, tp)
                    assert key not in holders, \
                        f"seed {self.seed}: {tp} held by {holders[key]} and {c.name} in " \
                        f"generation {c.held_generation}"
                    holders[key] = c.name

    def check_replay(self) -> None:
        self.stats["replay checked"] += 1
        again = self.replica
        assert again.offsets.by_group == self.shard.offsets.by_group, f"seed {self.seed}"
        live = {gid: persisted(g) for gid, g in self.shard.classic.groups.items()
                if g.state in (State.STABLE, State.EMPTY)}
        replayed = {gid: persisted(again.classic.groups[gid]) for gid in live
                    if gid in again.classic.groups}
        assert replayed == live, f"seed {self.seed}: replay differs"

    def check_settled(self) -> None:
        live = {c.name: c for c in self.clients.values() if c.alive and c.phase != "left"}
        group = self.shard.classic.get("g")
        if not live:
            assert group is None or not group.members, f"seed {self.seed}"
            return
        assert group is not None and group.state is State.STABLE, \
            f"seed {self.seed}: {group and group.state}"
        assert {c.member_id for c in live.values()} == set(group.members), f"seed {self.seed}"
        assert all(c.phase == "stable" and c.generation == group.generation
                   for c in live.values()), f"seed {self.seed}: not all stable"
        subs = {c.member_id: c.topics for c in live.values()}
        plan = range_assign(subs, self.topics)
        for c in live.values():
            assert c.held == plan[c.member_id], f"seed {self.seed}: {c.name} holds the wrong share"
        held = [tp for c in live.values() for tp in c.held]
        wanted = {(t, p) for t, n in self.topics.items() for p in range(n)
                  if any(t in c.topics for c in live.values())}
        assert sorted(held) == sorted(wanted), f"seed {self.seed}: partitions not held once"


def persisted(group) -> tuple:
    members = {mid: (mb.instance_id, mb.session_timeout_ms, mb.rebalance_timeout_ms,
                     mb.metadata(group.protocol_name) if group.protocol_name else None,
                     mb.assignment) for mid, mb in group.members.items()}
    stamp = group.state_timestamp_ms if group.state is State.EMPTY else None
    return (group.state, group.generation, group.protocol_type, group.protocol_name,
            group.leader if group.members else None, members, stamp)


def static_replacements(log) -> int:
    """GroupMetadata records that change the members but not the generation: a static
    member's restart replacing its old id without a rebalance."""
    from node.core.groups import records
    count, last = 0, None
    for key, value in log:
        rec = records.decode(key, value)
        if rec.key_version != 2 or rec.value is None:
            continue
        now = (rec.value["generation"], {mb["member_id"] for mb in rec.value["members"]})
        if last is not None and now[0] == last[0] and now[1] != last[1] and now[1]:
            count += 1
        last = now
    return count


def simulate(seed: int) -> World:
    w = World(seed)
    for _ in range(w.rng.randint(1, 4)):
        w.start()
    w.at(w.rng.randint(100, 2000), w.fault)
    w.run(FAULTS_UNTIL_MS)
    for c in w.clients.values():                      # the faults stop: pauses end
        c.paused_until = min(c.paused_until, w.now)
    w.run(FAULTS_UNTIL_MS + SETTLE_MS)
    w.commit(len(w.committed) + len(w.uncommitted))
    w.check_settled()
    return w


@pytest.mark.parametrize("chunk", range(6))
def test_classic_groups_are_safe_and_settle(chunk):
    for seed in range(chunk, SEEDS, 6):
        simulate(seed)


def test_the_simulation_sees_what_it_claims_to():
    # The runs exercise rebalances, fail-overs, static restarts that replace a member
    # without a rebalance, fencing, session expiry and the replay check.
    totals: collections.Counter = collections.Counter()
    generations = []
    for seed in range(25):
        w = simulate(seed)
        totals.update(w.stats)
        group = w.shard.classic.get("g")
        generations.append(group.generation if group else 0)
        totals["static replaced"] += static_replacements(w.committed)
    assert max(generations) >= 8
    for what in ("failover", "restart", "crash", "pause", "leave", "replay checked",
                 "error 27", "error 25", "error 16", "static replaced"):
        assert totals[what] > 0, (what, totals)
