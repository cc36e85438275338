"""Consumer groups that outlive a process, with real clients, on one 3-broker cluster:

- commits survive the coordinator's SIGKILL: the members commit synchronously while
  the broker leading their ``__consumer_offsets`` partition is SIGKILLed; another broker
  takes the partition and the group over; what the coordinator acknowledged is still
  committed (OffsetFetch, asked as soon as the new coordinator answers), every record is
  read, and a record is read twice only if it was in the uncommitted tail (no commit
  past it had been acknowledged when it was read again);
- a static member (``group.instance.id``) restarted within its session timeout gets its
  partitions back without a rebalance: the other member's assignment never changes, not
  even once the old incarnation's session would have ended. Classic: the member is
  SIGKILLed (the coordinator replaces a static member by its instance id). KIP-848: it
  is closed (a static leave, epoch -2, keeps its assignment for the session), since
  Kafka refuses a new member with an instance id not yet released (UNRELEASED_INSTANCE_ID,
  GroupMetadataManager.throwIfInstanceIdIsUnreleased) until the old one's session ends.

The killed broker is started again at the end of each test (the next one needs three).
"""
from __future__ import annotations

import time
from collections import defaultdict

import pytest

from bench.perf.kafka_groups.group import owned_by, stop_all
from tests.node.kafka.clients import create_topic, running_cluster
from tests.node.kafka.groups import (GROUPS_CONFIG, JOIN_TIMEOUT_S, OFFSETS_TOPIC,
                                     PYTHON_KINDS, assert_one_reader_per_partition,
                                     committed_offsets, coordinator_of,
                                     coordinator_partition, kind_params, new_name,
                                     produce_wave, read_all, reads_of, skip_unless_present,
                                     start_member)
from tests.waiting import poll_until

pytestmark = [pytest.mark.process, pytest.mark.slow]
STATIC_SESSION_MS = 6000
OFFSETS_PARTITIONS = 3
CONFIG = {**GROUPS_CONFIG, "group.consumer.session.timeout.ms": str(STATIC_SESSION_MS),
          "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
          "min.insync.replicas": "2"}
PARTITIONS = 3
PER_PARTITION = 100
FAILOVER_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("groups-fo") / "c", config=CONFIG) as c:
        yield c


def _topic(cluster, partitions: int = PARTITIONS) -> str:
    topic = new_name("gf")
    create_topic(cluster, topic, partitions, 3, config={"min.insync.replicas": "2"})
    return topic


def _all_committed(members, end: int, partitions) -> dict[int, int]:
    top = {p: max((m.commits.get(p, -1) for m in members), default=-1) for p in partitions}
    return top if all(o == end for o in top.values()) else None


def _reread_beyond_the_tail(members) -> list:
    """Reads of a record already read, at a time when a commit past it had been
    acknowledged (by any member): what a lost commit would cause."""
    commits = sorted((t, p, o) for m in members for t, p, o in m.commit_log)
    reads = sorted((t, p, o, m.name) for m in members for p, o, _, t in m.read())
    seen: set[tuple[int, int]] = set()
    committed: dict[int, int] = defaultdict(lambda: -1)
    i, bad = 0, []
    for t, p, o, who in reads:
        while i < len(commits) and commits[i][0] < t:
            _, cp, co = commits[i]
            committed[cp] = max(committed[cp], co)
            i += 1
        if (p, o) in seen and o < committed[p]:
            bad.append((who, p, o, committed[p]))
        seen.add((p, o))
    return bad


@pytest.mark.parametrize("kind", kind_params(PYTHON_KINDS))
def test_commits_survive_the_coordinators_sigkill(cluster, kind):
    skip_unless_present(kind)
    topic, group = _topic(cluster), new_name("gf")
    bootstrap, partitions = cluster.kafka_bootstrap_servers, range(PARTITIONS)
    members = [start_member(kind, bootstrap, group, topic, n) for n in ("a", "b")]
    coordinator = None
    try:
        owned_by(members, partitions, JOIN_TIMEOUT_S)
        coordinator = coordinator_of(cluster, group, OFFSETS_PARTITIONS)
        assert coordinator is not None, f"{OFFSETS_TOPIC} has no leader"
        one = produce_wave(cluster, topic, "one", partitions, PER_PARTITION)
        read_all(members, one, "one")
        poll_until(lambda: _all_committed(members, PER_PARTITION, partitions), JOIN_TIMEOUT_S,
                   "the first wave to be committed")

        # The members are reading and committing the second wave when the coordinator dies.
        two = produce_wave(cluster, topic, "two", partitions, PER_PARTITION)
        poll_until(lambda: any(m.commits.get(p, 0) > PER_PARTITION for m in members
                               for p in partitions), JOIN_TIMEOUT_S, "commits of wave two")
        killed_at = time.time()
        cluster.kill(coordinator, "KILL")
        acknowledged = {p: max((o for m in members for t, q, o in m.commit_log
                                if q == p and t < killed_at), default=-1) for p in partitions}

        new = poll_until(lambda: coordinator_of(cluster, group, OFFSETS_PARTITIONS) not in
                         (None, coordinator), FAILOVER_TIMEOUT_S,
                         f"another broker to lead {OFFSETS_TOPIC}-"
                         f"{coordinator_partition(group, OFFSETS_PARTITIONS)}")
        assert new
        after = poll_until(lambda: committed_offsets(cluster, group, topic, partitions),
                           FAILOVER_TIMEOUT_S, "the new coordinator to answer OffsetFetch")
        lost = {p: (after[p], acknowledged[p]) for p in partitions if after[p] < acknowledged[p]}
        assert not lost, f"acknowledged commits lost (now, acknowledged): {lost}"

        three = produce_wave(cluster, topic, "three", partitions, PER_PARTITION)
        for wave, values in (("two", two), ("three", three)):
            read_all(members, values, wave, FAILOVER_TIMEOUT_S)
        poll_until(lambda: _all_committed(members, 3 * PER_PARTITION, partitions),
                   FAILOVER_TIMEOUT_S, "every record to be committed")
        assert committed_offsets(cluster, group, topic, partitions) == \
            {p: 3 * PER_PARTITION for p in partitions}
        bad = _reread_beyond_the_tail(members)
        assert not bad, f"read again although committed past (member, p, offset, " \
                        f"committed): {bad[:5]}"
    finally:
        stop_all(members)
        if coordinator is not None and cluster.process(coordinator).pid() is None:
            cluster.start(coordinator)


STATIC_KINDS = ("confluent-classic", "confluent-consumer", "kafka-python", "aiokafka", "kcat")


@pytest.mark.parametrize("kind", kind_params(STATIC_KINDS))
def test_a_static_member_restarts_without_a_rebalance(cluster, kind):
    skip_unless_present(kind)
    topic, group = _topic(cluster, 4), new_name("gs")
    bootstrap, partitions = cluster.kafka_bootstrap_servers, range(4)

    def member(name: str, instance: str):
        return start_member(kind, bootstrap, group, topic, name, instance_id=instance,
                            session_ms=STATIC_SESSION_MS)

    a, b = members = [member("a", f"{group}-a"), member("b", f"{group}-b")]
    try:
        owned_by(members, partitions, JOIN_TIMEOUT_S)
        owners = {"a": a.snapshot()[0], "b": b.snapshot()[0]}
        one = produce_wave(cluster, topic, "one", partitions, 5)
        read_all(members, one, "one")
        reports_commits = kind in PYTHON_KINDS   # kcat commits, but does not say when
        if reports_commits:
            poll_until(lambda: _all_committed(members, 5, partitions), JOIN_TIMEOUT_S,
                       "the first wave to be committed")

        if kind == "confluent-consumer":
            killed_at = a.term()
            assert a.proc.wait(30) == 0, a.describe()
        else:
            killed_at = a.kill()
        a2 = member("a2", f"{group}-a")
        members.append(a2)
        poll_until(lambda: a2.snapshot()[0] == owners["a"], STATIC_SESSION_MS / 1000 + 10,
                   f"the restarted static member to get {sorted(owners['a'])} back",
                   error=lambda m: AssertionError(f"{m}: {a2.describe()} | {b.describe()}"))
        # Past the old incarnation's session: still no rebalance (ends early if one comes).
        until = killed_at + STATIC_SESSION_MS / 1000 + 1.0
        poll_until(lambda: b.changes_since(killed_at) or time.time() >= until,
                   STATIC_SESSION_MS / 1000 + 5, "the old session's end")
        assert b.changes_since(killed_at) == [], f"b was rebalanced: {b.describe()}"
        assert a2.snapshot()[0] == owners["a"], a2.describe()

        two = produce_wave(cluster, topic, "two", partitions, 5)
        reads = read_all([a2, b], two, "two")
        assert_one_reader_per_partition(reads, {"a2": owners["a"], "b": owners["b"]})
        if reports_commits:
            assert not reads_of([a2], "one"), \
                "the restarted member read again what its first incarnation committed"
    finally:
        stop_all(members)
