"""The measurements of ``python -m bench.kafka_groups``, one client variant at a time,
each member a process (``group.python_member``). Times are the members' own clocks
(time.time() in each process of this machine) against the moment the bench signalled.

- ``rebalance``: two members own the topic; a third joins (waited until the three own
  it), then is closed cleanly (SIGTERM: the client's close, its leave) or SIGKILLed;
  the time until the two others own every partition again. The third member is started
  again for the next try, so a try costs one join, not three.
- ``commits``: one member, once it owns a partition, commits it N times synchronously
  (``--commit-storm``): commits per second and each commit's latency.
- ``throughput``: a new group of three, once it owns the filled topic, is told to read
  it again from the start (SIGUSR1: each member seeks its partitions): every record read,
  from that moment to the last record, against one member alone (a group of one).
- ``failover``: three members read and commit synchronously while a producer (acks=1)
  keeps writing; the broker leading their ``__consumer_offsets`` partition (not leading
  any partition of the topic) is SIGKILLed; the time until every member has had a
  commit acknowledged again (the new coordinator loaded and answering), and until every
  member read again. The broker is started again after each try.
"""
from __future__ import annotations

import itertools
import signal
import statistics
import threading
import time
import uuid

from bench.perf.kafka_groups.group import Member, owned_by, python_member, stop_all
from node.waiting import poll_until

PARTITIONS = 6
JOIN_TIMEOUT_S = 60.0
READ_TIMEOUT_S = 600.0
FAILOVER_TIMEOUT_S = 120.0
BACKGROUND_RATE_PER_S = 1000
OFFSETS_TOPIC = "__consumer_offsets"


class Variant:
    """A client and group protocol, and how its members reach the cluster."""

    def __init__(self, name: str, client: str, protocol: str, bootstrap: str) -> None:
        self.name, self.client, self.protocol, self.bootstrap = name, client, protocol, bootstrap

    def member(self, name: str, group: str, topic: str, args, **kw) -> Member:
        return python_member(f"{self.name}/{name}", self.client, self.bootstrap, group, topic,
                             protocol=self.protocol, session_ms=args.session_ms,
                             heartbeat_ms=args.heartbeat_ms, **kw)


def _group(what: str) -> str:
    return f"kg-{what}-{uuid.uuid4().hex[:8]}"


def rebalance(variant: Variant, topic: str, how: str, args) -> list[float]:
    """``args.repeats`` rebalance times (ms) after a clean close (TERM) or a SIGKILL."""
    group = _group(how.lower())
    stay = [variant.member(n, group, topic, args, report="counts") for n in ("a", "b")]
    members = list(stay)
    times = []
    try:
        owned_by(stay, range(PARTITIONS), JOIN_TIMEOUT_S)
        for k in range(args.repeats):
            third = variant.member(f"c{k}", group, topic, args, report="counts")
            members.append(third)
            owned_by(stay + [third], range(PARTITIONS), JOIN_TIMEOUT_S)
            at = third.kill() if how == "KILL" else third.term()
            moved = owned_by(stay, range(PARTITIONS), JOIN_TIMEOUT_S + args.session_ms / 1000,
                             f"{variant.name}: the others to own every partition")
            times.append((moved - at) * 1000)
            third.stop()
    finally:
        stop_all(members)
    return times


def commits(variant: Variant, topic: str, args) -> list[float]:
    """Each synchronous commit's latency (ms) of one member's ``args.commits`` commits."""
    member = variant.member("storm", _group("commit"), topic, args, commit_storm=args.commits)
    try:
        return poll_until(lambda: member.running() and member.storm, READ_TIMEOUT_S,
                          f"{variant.name}: {args.commits} commits",
                          error=lambda m: RuntimeError(f"{m}: {member.describe()}"))
    finally:
        member.stop()


def _read_rate(members: list[Member], records: int, what: str) -> float:
    """Records/s of ``members`` reading ``records`` records again from the start, from
    the moment they are told (SIGUSR1, once they own the topic) to the last record."""
    told = time.time()
    for m in members:
        m.signal(signal.SIGUSR1)

    def done():
        counts = [m.count for m in members if m.running()]
        return counts if all(c["gen"] >= 1 for c in counts) and \
            sum(c["n"] for c in counts) >= records else None
    counts = poll_until(done, READ_TIMEOUT_S, what, interval_s=0.05,
                        error=lambda m: RuntimeError(
                            f"{m}: " + " | ".join(x.describe() for x in members)))
    return records / max(max(c["last"] for c in counts if c["last"]) - told, 1e-3)


def throughput(variant: Variant, topic: str, records: int, args) -> tuple[float, float]:
    """(a group of 3's records/s, one member's records/s) reading every record."""
    rates = []
    for size in (3, 1):
        group = _group(f"read{size}")
        members = [variant.member(f"r{i}", group, topic, args, report="counts")
                   for i in range(size)]
        try:
            owned_by(members, range(PARTITIONS), JOIN_TIMEOUT_S)
            rates.append(_read_rate(members, records, f"{variant.name}: a group of {size} "
                                                      f"to read {records:,} records"))
        finally:
            stop_all(members)
    return rates[0], rates[1]


# ------------------------------------------------------------------ fail-over
class Background:
    """A producer thread writing to ``topic`` (acks=1, so a dead follower never holds
    it) at about ``rate`` records/s until stopped."""

    def __init__(self, bootstrap: str, topic: str, rate: int = BACKGROUND_RATE_PER_S) -> None:
        from node.client import Producer
        self.producer = Producer(bootstrap, acks=1, linger_ms=5)
        self.topic, self.rate = topic, rate
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="background")
        self.thread.start()

    def _run(self) -> None:
        started = time.monotonic()
        for i in itertools.count():
            if self.stopped.is_set():
                return
            self.producer.send(self.topic, f"bg-{i}".encode(), partition=i % PARTITIONS)
            ahead = i / self.rate - (time.monotonic() - started)
            if ahead > 0:
                self.stopped.wait(ahead)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(10)
        self.producer.close(10)


def _offsets_leader(cluster, partition: int) -> int | None:
    state = cluster.partition_state(OFFSETS_TOPIC, partition)
    return None if state is None or state.leader < 0 else state.leader


def _group_led_by_one(cluster, offsets_partitions: int) -> tuple[str, int]:
    """A new group id and the broker coordinating it (its partition's leader)."""
    from bench.perf.kafka_groups.placement import coordinator_partition
    for _ in range(1000):
        group = _group("fo")
        leader = _offsets_leader(cluster, coordinator_partition(group, offsets_partitions))
        if leader is not None:
            return group, leader
    raise RuntimeError(f"{OFFSETS_TOPIC} has no leader")


def _topic_away_from(cluster, admin, broker: int) -> str:
    """A topic whose partitions are all led by brokers other than ``broker``."""
    others = [b for b in cluster.broker_ids if b != broker]
    topic = f"kgroups-fo-{uuid.uuid4().hex[:6]}"
    assignment = {p: [others[p % len(others)], others[(p + 1) % len(others)], broker]
                  for p in range(PARTITIONS)}
    admin.create_topic(topic, PARTITIONS, 3, replica_assignment=assignment, timeout_ms=60_000)
    return topic


def _after(members: list[Member], killed_at: float, what) -> float:
    """When every member had done ``what`` (a list of times) after ``killed_at``."""
    def each():
        assert all(m.running() for m in members)
        firsts = [min((t for t in what(m) if t > killed_at), default=None) for m in members]
        return max(firsts) if all(firsts) else None
    return poll_until(each, FAILOVER_TIMEOUT_S, "every member again", interval_s=0.01,
                      error=lambda m: RuntimeError(
                          f"{m}: " + " | ".join(x.describe() for x in members)))


def failover(variant: Variant, cluster, admin, offsets_partitions: int, args
             ) -> tuple[list[float], list[float], list[int]]:
    """Per try: ms until every member commits again, ms until every member reads again,
    and how many members' assignments changed (a rebalance: a member's session ended
    before it found the new coordinator)."""
    commit_ms, read_ms, rebalanced = [], [], []
    for _ in range(args.repeats):
        group, coordinator = _group_led_by_one(cluster, offsets_partitions)
        topic = _topic_away_from(cluster, admin, coordinator)
        background = Background(cluster.bootstrap_servers, topic)
        members = [variant.member(n, group, topic, args, commit="sync") for n in "abc"]
        try:
            owned_by(members, range(PARTITIONS), JOIN_TIMEOUT_S)
            _after(members, time.time(), lambda m: [t for t, _, _ in m.commit_log])
            killed_at = time.time()
            cluster.kill(coordinator, "KILL")
            committed = _after(members, killed_at, lambda m: [t for t, _, _ in m.commit_log])
            read = _after(members, killed_at, lambda m: [r[3] for r in m.read()])
            commit_ms.append((committed - killed_at) * 1000)
            read_ms.append((read - killed_at) * 1000)
            rebalanced.append(sum(1 for m in members if m.changes_since(killed_at)))
        finally:
            stop_all(members)
            background.stop()
            if cluster.process(coordinator).pid() is None:
                cluster.start(coordinator)
    return commit_ms, read_ms, rebalanced


def summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "best": min(values), "worst": max(values),
            "n": len(values)}
