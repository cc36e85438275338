"""The native Consumer in groups kept by the brokers' group coordinator, with real
brokers and real member processes, for both protocols: KIP-848 (the consumer's default
``group_protocol="consumer"``) and the classic one (``"classic"``): members share a
topic, a killed member's partitions move after its session timeout, a closed member's
at once, and committed offsets survive (the coordinator's SIGKILL too)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from node.client import Admin, Consumer, Producer, TopicPartition
from node.cluster import Cluster
from node.tools.groups_broker import BrokerGroups
from tests.conftest import new_cluster_id
from tests.waiting import poll_until

pytestmark = [pytest.mark.process, pytest.mark.slow]

SESSION_MS = 4_000     # tests wait for sessions to end: short, yet 8 heartbeats
HEARTBEAT_MS = 500
CLOSE_MOVES_S = 3.0    # "at once" after a clean close: well under a session
CONFIG = {"default.replication.factor": "1", "num.partitions": "6",
          "auto.leader.rebalance.enable": "false",
          "group.consumer.session.timeout.ms": str(SESSION_MS),
          "group.consumer.min.session.timeout.ms": str(SESSION_MS),
          "group.min.session.timeout.ms": str(SESSION_MS),     # the classic members' floor
          "group.consumer.heartbeat.interval.ms": str(HEARTBEAT_MS),
          "group.consumer.min.heartbeat.interval.ms": str(HEARTBEAT_MS),
          "group.initial.rebalance.delay.ms": "0"}
WORKER = os.path.join(os.path.dirname(__file__), "group_worker.py")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = Cluster.up(tmp_path_factory.mktemp("bgroups"), brokers=2, config=CONFIG,
                         cluster_id=new_cluster_id())
    try:
        yield cluster
    finally:
        cluster.down(grace_s=5)


@pytest.fixture(params=["consumer", "classic"])
def protocol(request):
    return request.param


@pytest.fixture
def groups(cluster):
    view = BrokerGroups(cluster.bootstrap_servers)
    try:
        yield view
    finally:
        view.close()


_names = iter(range(10_000))


def _topic(cluster, partitions: int = 6, records: int = 0) -> str:
    name = f"b{next(_names)}"
    with Admin(cluster.bootstrap_servers) as admin:
        admin.create_topic(name, partitions, 1)
    _produce(cluster, name, records, partitions)
    return name


def _produce(cluster, topic: str, n: int, partitions: int = 6, start: int = 0) -> None:
    if n == 0:
        return
    with Producer(cluster.bootstrap_servers) as producer:
        for i in range(start, start + n):
            producer.send(topic, b"%d" % i, partition=i % partitions)
        producer.flush()


def _member(cluster, group: str, protocol: str, **kwargs) -> Consumer:
    kwargs.setdefault("auto_offset_reset", "earliest")
    kwargs.setdefault("session_timeout_ms", SESSION_MS)      # the classic members'
    kwargs.setdefault("heartbeat_interval_ms", HEARTBEAT_MS)
    kwargs["group_protocol"] = protocol
    return Consumer(cluster.bootstrap_servers, group_id=group, fetch_max_wait_ms=100,
                    **kwargs)


def _poll_all(consumers, predicate, timeout_s: float = 30.0, read=None) -> dict:
    read = {i: [] for i in range(len(consumers))} if read is None else read
    deadline = time.monotonic() + timeout_s
    while not predicate(read):
        assert time.monotonic() < deadline, \
            f"timed out: assignments {[sorted(c.assignment()) for c in consumers]}"
        for i, c in enumerate(consumers):
            read[i] += c.poll(50)
    return read


def _owners(groups: BrokerGroups, group: str) -> dict:
    info = groups.describe(group)
    return {} if info is None else {tp: m.member_id for tp, m in info.owners().items()}


def _disjoint_cover(consumers, topic: str, partitions: int = 6) -> bool:
    owned = [tp for c in consumers for tp in c.assignment()]
    return len(owned) == len(set(owned)) and \
        set(owned) == {TopicPartition(topic, p) for p in range(partitions)}


@pytest.mark.parametrize("n", [2, 3])
def test_members_share_a_topic_each_partition_read_by_one(cluster, groups, protocol, n):
    topic = _topic(cluster, records=600)
    group = f"share{n}-{topic}"
    members = [_member(cluster, group, protocol) for _ in range(n)]
    try:
        for m in members:
            m.subscribe([topic])
        read = _poll_all(members, lambda r: _disjoint_cover(members, topic) and
                         all(m.assignment() for m in members) and
                         len({rec.value for recs in r.values() for rec in recs}) == 600)
        assert {int(rec.value) for recs in read.values() for rec in recs} == set(range(600))
        # Once settled, each partition's new records go to its one owner only.
        marks = {i: len(recs) for i, recs in read.items()}
        _produce(cluster, topic, 60, start=600)
        read = _poll_all(members, lambda r: sum(len(r[i]) - marks[i] for i in r) >= 60,
                         read=read)
        for i, m in enumerate(members):
            for rec in read[i][marks[i]:]:
                assert TopicPartition(topic, rec.partition) in m.assignment()
        owners = _owners(groups, group)
        assert sorted(owners) == [(topic, p) for p in range(6)]
        assert set(owners.values()) == {m.member_id() for m in members}
    finally:
        for m in members:
            m.close()


def test_close_moves_the_partitions_at_once(cluster, groups, protocol):
    topic = _topic(cluster, records=60)
    group = f"close-{topic}"
    a, b = _member(cluster, group, protocol), _member(cluster, group, protocol)
    try:
        a.subscribe([topic])
        b.subscribe([topic])
        _poll_all([a, b], lambda r: _disjoint_cover([a, b], topic) and
                  a.assignment() and b.assignment())
        started = time.monotonic()
        a.close()
        _poll_all([b], lambda r: len(b.assignment()) == 6, timeout_s=SESSION_MS / 1000)
        moved_s = time.monotonic() - started
        assert moved_s < CLOSE_MOVES_S, f"took {moved_s:.2f} s: not at once"
        assert set(_owners(groups, group).values()) == {b.member_id()}
    finally:
        a.close()
        b.close()


def test_commits_survive_the_member_and_a_new_member_goes_on_from_them(cluster, groups,
                                                                      protocol):
    topic = _topic(cluster, partitions=2, records=40)
    group = f"commits-{topic}"
    first = _member(cluster, group, protocol, enable_auto_commit=False)
    try:
        first.subscribe([topic])
        _poll_all([first], lambda r: len(r[0]) >= 40)
        assert first.commit() == {(topic, 0): 20, (topic, 1): 20}
        first.commit({TopicPartition(topic, 1): 15})
        assert first.committed(TopicPartition(topic, 1)) == 15
        future = first.commit_async({TopicPartition(topic, 0): 18})
        _poll_all([first], lambda r: future.done(), timeout_s=10)
        assert future.result() == {(topic, 0): 18}
    finally:
        first.close()
    assert groups.describe(group).offsets == {(topic, 0): 18, (topic, 1): 15}
    again = _member(cluster, group, protocol, enable_auto_commit=False)
    try:
        again.subscribe([topic])
        read = _poll_all([again], lambda r: len(r[0]) >= 7)
        assert sorted((r.partition, r.offset) for r in read[0]) == \
            [(0, 18), (0, 19), (1, 15), (1, 16), (1, 17), (1, 18), (1, 19)]
    finally:
        again.close()


def test_auto_commit_on_close_lets_the_next_member_start_after_what_was_read(cluster,
                                                                           protocol):
    topic = _topic(cluster, partitions=1, records=10)
    group = f"auto-{topic}"
    first = _member(cluster, group, protocol)
    try:
        first.subscribe([topic])
        _poll_all([first], lambda r: len(r[0]) >= 10)
    finally:
        first.close()           # revokes: commits the positions first
    _produce(cluster, topic, 5, partitions=1, start=10)
    again = _member(cluster, group, protocol)
    try:
        again.subscribe([topic])
        read = _poll_all([again], lambda r: len(r[0]) >= 5)
        assert [int(r.value) for r in read[0]] == [10, 11, 12, 13, 14]
    finally:
        again.close()


def _start_worker(cluster, group: str, topic: str, out, name: str, protocol: str
                  ) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, WORKER, "--bootstrap", cluster.bootstrap_servers,
         "--group-protocol", protocol, "--group", group, "--topic", topic,
         "--out", str(out), "--name", name],
        stdout=subprocess.DEVNULL, stderr=open(f"{out}.log", "w"))


def _lines(path) -> list[dict]:
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.endswith("\n")]
    except FileNotFoundError:
        return []


def test_a_killed_member_s_partitions_move_after_its_session_timeout(cluster, groups,
                                                                     protocol, tmp_path):
    topic = _topic(cluster, records=1200)
    group = f"kill-{topic}"
    names = ("w0", "w1", "w2")
    outs = {n: tmp_path / f"{n}.jsonl" for n in names}
    workers = {n: _start_worker(cluster, group, topic, outs[n], n, protocol) for n in names}
    try:
        poll_until(lambda: all(os.path.exists(f"{outs[n]}.id") for n in names), 30,
                   "three members started")
        ids = {n: open(f"{outs[n]}.id").read() for n in names}
        poll_until(lambda: len(_owners(groups, group)) == 6 and
                   set(_owners(groups, group).values()) == set(ids.values()), 30,
                   "three members owning six partitions")
        workers["w1"].send_signal(signal.SIGKILL)
        workers["w1"].wait(10)
        killed_s = time.monotonic()
        live = {ids["w0"], ids["w2"]}
        poll_until(lambda: len(_owners(groups, group)) == 6 and
                   set(_owners(groups, group).values()) == live,
                   SESSION_MS / 1000 + 10, "the killed member's partitions moving",
                   interval_s=0.05)
        moved_s = time.monotonic() - killed_s
        # Not before the coordinator could know (its session), and not long after.
        assert SESSION_MS / 1000 * 0.7 <= moved_s <= SESSION_MS / 1000 + 5, moved_s
        _produce(cluster, topic, 600, start=1200)
        poll_until(lambda: {int(r["value"]) for o in outs.values() for r in _lines(o)}
                   >= set(range(1800)), 60, "every record read")
    finally:
        for w in workers.values():
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
        for w in workers.values():
            try:
                w.wait(15)
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait()


def test_the_coordinator_sigkilled_members_go_on_and_no_commit_is_lost(tmp_path, protocol):
    """The coordinator broker SIGKILLed: the next leader of the group's
    ``__consumer_offsets`` partition loads the group and its offsets; the members find
    it and go on without a rebalance (same epochs, same partitions): records written
    once the cluster has new leaders are read at once, and commits go on."""
    cluster = Cluster.up(tmp_path / "c", brokers=3,
                         config={**CONFIG, "default.replication.factor": "3"},
                         cluster_id=new_cluster_id())
    members = []
    try:
        topic = _topic(cluster, records=0)
        with Admin(cluster.bootstrap_servers) as admin:
            admin.create_topic(f"{topic}-r3", 6, 3)
        topic = f"{topic}-r3"
        _produce(cluster, topic, 300)
        group = f"failover-{topic}"
        members = [_member(cluster, group, protocol, enable_auto_commit=False)
                   for _ in range(2)]
        for m in members:
            m.subscribe([topic])
        # Both members in the group and every record read (positions at the ends), so
        # the group is settled before the kill (CI once: the second member joined after
        # the first had read everything, and "before" caught it still joining)
        read = _poll_all(members, lambda r: _disjoint_cover(members, topic) and
                         all(m.assignment() for m in members) and
                         sum(m.position(tp) for m in members for tp in m.assignment()) == 300)
        committed = {}
        for m in members:
            committed.update(m.commit())
        assert sum(committed.values()) == 300
        with BrokerGroups(cluster.bootstrap_servers) as view:
            view.coordinators.find(group)
            coordinator = view.coordinators.node_id(group)
        before = [(m._group._epoch(), m.assignment()) for m in members]
        cluster.kill(coordinator)
        _produce(cluster, topic, 300, start=300)   # waits for the new leaders
        written_s = time.monotonic()
        read = _poll_all(members, lambda r: {int(x.value) for recs in r.values()
                                             for x in recs} >= set(range(600)),
                         timeout_s=SESSION_MS / 1000 + 30, read=read)
        back_s = time.monotonic() - written_s
        assert back_s <= 2, f"read {back_s:.1f} s after the records were written"
        assert [(m._group._epoch(), m.assignment()) for m in members] == before
        with BrokerGroups(cluster.bootstrap_servers) as view:
            after = view.committed(group)
        assert {tp: after.get(tp, -1) for tp in committed} == committed
        for m in members:
            committed.update(m.commit())          # to the new coordinator
        assert sum(committed.values()) == 600
        with BrokerGroups(cluster.bootstrap_servers) as view:
            assert view.committed(group) == committed
    finally:
        for m in members:
            m.close()
        cluster.down(grace_s=5)


def test_a_member_committing_without_polling_stays_in_its_group(cluster, protocol):
    """Heartbeats go on inside commit() (their answers, set aside by the commits' waits,
    are handled there): a loop of commits longer than the session keeps the member."""
    topic = _topic(cluster, partitions=2, records=10)
    group = f"busy-{topic}"
    member = _member(cluster, group, protocol, enable_auto_commit=False)
    try:
        member.subscribe([topic])
        _poll_all([member], lambda r: len(member.assignment()) == 2 and len(r[0]) >= 10)
        epoch = member._group._epoch()
        started, n = time.monotonic(), 0
        while time.monotonic() - started < SESSION_MS / 1000 * 1.5:
            n += 1
            assert member.commit({TopicPartition(topic, 0): n % 10}) == {(topic, 0): n % 10}
        assert member._group._epoch() == epoch and len(member.assignment()) == 2
    finally:
        member.close()


def test_a_static_member_restarts_without_a_rebalance(cluster, groups, protocol):
    """KIP-345: a member with a group.instance.id that closes and comes back within its
    session takes its partitions back; the other member's epoch (generation) and
    partitions do not change, and nothing is read twice."""
    topic = _topic(cluster, records=60)
    group = f"static-{topic}"
    a = _member(cluster, group, protocol, group_instance_id="host-a")
    b = _member(cluster, group, protocol)
    again = None
    try:
        a.subscribe([topic])
        b.subscribe([topic])
        read = _poll_all([a, b], lambda r: _disjoint_cover([a, b], topic) and
                         a.assignment() and b.assignment() and
                         sum(len(x) for x in r.values()) >= 60)
        a_had, b_had, b_epoch = a.assignment(), b.assignment(), b._group._epoch()
        a.close()                       # commits; the coordinator keeps its place
        again = _member(cluster, group, protocol, group_instance_id="host-a")
        again.subscribe([topic])
        _poll_all([again, b], lambda r: again.assignment() == a_had,
                  timeout_s=SESSION_MS / 1000 - 1)
        # Several heartbeats of b later (a rebalance would have reached it by then):
        until = time.monotonic() + 3 * HEARTBEAT_MS / 1000
        _poll_all([again, b], lambda r: time.monotonic() >= until)
        assert b.assignment() == b_had and b._group._epoch() == b_epoch
        _produce(cluster, topic, 60, start=60)
        more = _poll_all([again, b], lambda r: sum(len(x) for x in r.values()) >= 60)
        values = [int(x.value) for recs in more.values() for x in recs]
        assert sorted(values) == list(range(60, 120))       # nothing read twice
        assert len(read[0]) + len(read[1]) == 60
    finally:
        for m in (a, b, again):
            if m is not None:
                m.close()


def test_a_topic_created_after_the_subscription_is_read(cluster, protocol):
    """KIP-848: the coordinator assigns the topic once its metadata shows it (the member
    learns its id from metadata); classic: the leader sees the partition count move and
    the group rebalances onto it."""
    topic = f"later{next(_names)}"
    group = f"later-{topic}"
    member = _member(cluster, group, protocol)
    try:
        member.subscribe([topic])
        _poll_all([member], lambda r: member._group.stable, timeout_s=15)
        assert member.assignment() == set()
        with Admin(cluster.bootstrap_servers) as admin:
            admin.create_topic(topic, 3, 1)
        _produce(cluster, topic, 30, partitions=3)
        read = _poll_all([member], lambda r: len(r[0]) >= 30, timeout_s=30)
        assert sorted(int(x.value) for x in read[0]) == list(range(30))
        assert member.assignment() == {TopicPartition(topic, p) for p in range(3)}
    finally:
        member.close()


def test_a_member_paused_past_its_session_is_fenced_and_rejoins(cluster, groups, protocol,
                                                                tmp_path):
    """SIGSTOP a member for longer than its session: the others take its partitions;
    resumed, it learns it was fenced (FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID, or
    ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID classic), drops what it held without
    committing, and joins again: three owners again, every record read."""
    topic = _topic(cluster, records=600)
    group = f"pause-{topic}"
    names = ("w0", "w1", "w2")
    outs = {n: tmp_path / f"{n}.jsonl" for n in names}
    workers = {n: _start_worker(cluster, group, topic, outs[n], n, protocol) for n in names}
    try:
        poll_until(lambda: all(os.path.exists(f"{outs[n]}.id") for n in names), 30,
                   "three members started")
        poll_until(lambda: len(set(_owners(groups, group).values())) == 3 and
                   len(_owners(groups, group)) == 6, 30, "three owners")
        paused = open(f"{outs['w1']}.id").read()
        workers["w1"].send_signal(signal.SIGSTOP)
        try:
            poll_until(lambda: len(_owners(groups, group)) == 6 and
                       paused not in _owners(groups, group).values(),
                       SESSION_MS / 1000 + 10, "the others taking the paused one's share")
        finally:
            workers["w1"].send_signal(signal.SIGCONT)
        poll_until(lambda: len(set(_owners(groups, group).values())) == 3 and
                   len(_owners(groups, group)) == 6, 30, "three owners again")
        _produce(cluster, topic, 600, start=600)
        poll_until(lambda: {int(r["value"]) for o in outs.values() for r in _lines(o)}
                   >= set(range(1200)), 60, "every record read")
    finally:
        for w in workers.values():
            if w.poll() is None:
                w.send_signal(signal.SIGCONT)
                w.send_signal(signal.SIGTERM)
        for w in workers.values():
            try:
                w.wait(15)
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait()
