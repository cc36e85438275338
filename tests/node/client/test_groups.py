"""Consumer groups (the Kafka paper's, on the coordinator) with real brokers, a real
zk_lite and real consumer processes. Every consumer here is pinned to
``group_protocol="zookeeper"``: this module is about the paper's groups (the brokers'
group coordinator is tests/node/client/test_broker_groups.py)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from kazoo.client import KazooClient

from node.client import Admin, Consumer, Producer, TopicPartition
from node.cluster import Cluster
from tests.conftest import new_cluster_id
from tests.waiting import poll_until

pytestmark = [pytest.mark.process, pytest.mark.slow]

CONFIG = {"default.replication.factor": "1", "num.partitions": "6",
          "auto.leader.rebalance.enable": "false"}
WORKER = os.path.join(os.path.dirname(__file__), "group_worker.py")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = Cluster.up(tmp_path_factory.mktemp("groups"), brokers=2, config=CONFIG,
                         cluster_id=new_cluster_id())
    try:
        yield cluster
    finally:
        cluster.down(grace_s=5)


@pytest.fixture
def zk(cluster):
    client = KazooClient(hosts=cluster.zookeeper, timeout=10)
    client.start(timeout=10)
    try:
        yield client
    finally:
        client.stop()
        client.close()


_names = iter(range(10_000))


def _topic(cluster, partitions: int = 6, records: int = 0) -> str:
    name = f"g{next(_names)}"
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


def _member(cluster, group: str, **kwargs) -> Consumer:
    kwargs.setdefault("auto_offset_reset", "earliest")
    kwargs.setdefault("zookeeper_connect", cluster.zookeeper)
    kwargs.setdefault("group_protocol", "zookeeper")
    return Consumer(cluster.bootstrap_servers, group_id=group, fetch_max_wait_ms=100,
                    **kwargs)


def _poll_until(consumers, predicate, timeout_s: float = 20.0, read=None) -> dict:
    """Poll every consumer in turn until ``predicate(read)``; read = {consumer index:
    [records]} (pass one in to go on adding to it)."""
    read = {i: [] for i in range(len(consumers))} if read is None else read
    deadline = time.monotonic() + timeout_s
    while not predicate(read):
        assert time.monotonic() < deadline, f"not reached in {timeout_s} s: " \
            f"{ {i: len(r) for i, r in read.items()} }"
        for i, c in enumerate(consumers):
            read[i] += c.poll(50)
    return read


def _owners(zk, group: str, topic: str) -> dict[int, str]:
    from kazoo.exceptions import NoNodeError
    base = f"/consumers/{group}/owners/{topic}"
    out = {}
    try:
        children = zk.get_children(base)
    except NoNodeError:
        return out
    for p in children:
        try:
            out[int(p)] = zk.get(f"{base}/{p}")[0].decode()
        except NoNodeError:     # released meanwhile
            continue
    return out


def test_members_share_the_partitions_and_a_clean_close_hands_them_over(cluster, zk):
    topic = _topic(cluster, records=600)
    group = f"share-{topic}"
    events = []

    class Listener:
        def on_partitions_revoked(self, tps):
            events.append(("revoked", sorted(tp.partition for tp in tps)))

        def on_partitions_assigned(self, tps):
            events.append(("assigned", sorted(tp.partition for tp in tps)))

    a, b = _member(cluster, group), _member(cluster, group)
    try:
        a.subscribe([topic], listener=Listener())
        b.subscribe([topic])
        read = _poll_until([a, b], lambda read: len(a.assignment()) == 3 and
                           len(b.assignment()) == 3 and
                           not (a.assignment() & b.assignment()))
        owners = _owners(zk, group, topic)
        assert sorted(owners) == list(range(6))
        assert {owners[tp.partition] for tp in a.assignment()} == {a.member_id()}
        # Range assignment: the smaller member id takes partitions 0-2.
        first = min(a.member_id(), b.member_id())
        assert {p for p, m in owners.items() if m == first} == {0, 1, 2}
        read = _poll_until([a, b], lambda read: sum(map(len, read.values())) >= 600,
                           read=read)
        values = sorted(int(r.value) for records in read.values() for r in records)
        assert values == list(range(600))
        a.commit()
        committed = {tp.partition: a.committed(tp) for tp in a.assignment()}
        assert all(offset == 100 for offset in committed.values()), committed
        started = time.monotonic()
        b.close()
        _poll_until([a], lambda read: len(a.assignment()) == 6, timeout_s=5)
        handover_s = time.monotonic() - started
        assert handover_s < 2.0, handover_s
        assert events[0][0] == "assigned" and events[-1] == ("assigned", list(range(6)))
        assert ("revoked", events[0][1]) in events
    finally:
        a.close()
        b.close()
    assert _owners(zk, group, topic) == {}
    assert zk.get_children(f"/consumers/{group}/ids") == []


def test_a_new_member_starts_at_the_committed_offsets_never_skipping(cluster):
    topic = _topic(cluster, partitions=2, records=100)
    group = f"resume-{topic}"
    first = _member(cluster, group, enable_auto_commit=False)
    try:
        first.subscribe([topic])
        read = _poll_until([first], lambda read: len(read[0]) >= 100)
        assert len(read[0]) == 100 and len({(r.partition, r.offset) for r in read[0]}) == 100
        # Commit half of what was read (asynchronously): the rest must be read again by
        # the next owner.
        done = []
        future = first.commit_async({TopicPartition(topic, 0): 20,
                                     TopicPartition(topic, 1): 30},
                                    callback=lambda offsets, e: done.append((offsets, e)))
        assert future.result(10) == {(topic, 0): 20, (topic, 1): 30}
        poll_until(lambda: done, 5, "the commit callback")
        assert done[0][1] is None
        assert first.committed(TopicPartition(topic, 1)) == 30
    finally:
        first.close()
    second = _member(cluster, group, auto_offset_reset="latest")
    try:
        second.subscribe([topic])
        read = _poll_until([second], lambda read: len(read[0]) >= 50)
        assert sorted((r.partition, r.offset) for r in read[0]) == \
            [(0, o) for o in range(20, 50)] + [(1, o) for o in range(30, 50)]
    finally:
        second.close()
    # A new group with auto_offset_reset=latest starts at the end.
    fresh = _member(cluster, f"new-{group}", auto_offset_reset="latest")
    try:
        fresh.subscribe([topic])
        _poll_until([fresh], lambda read: len(fresh.assignment()) == 2)
        assert {fresh.position(tp) for tp in fresh.assignment()} == {50}
    finally:
        fresh.close()


def test_a_pattern_subscription_follows_new_topics(cluster):
    prefix = f"pat{next(_names)}"
    with Admin(cluster.bootstrap_servers) as admin:
        admin.create_topic(f"{prefix}-a", 2, 1)
    member = _member(cluster, f"group-{prefix}")
    try:
        member.subscribe(pattern=f"{prefix}-.*")
        _poll_until([member], lambda read: len(member.assignment()) == 2)
        with Admin(cluster.bootstrap_servers) as admin:
            admin.create_topic(f"{prefix}-b", 3, 1)
        _poll_until([member], lambda read: len(member.assignment()) == 5)
        assert {tp.topic for tp in member.assignment()} == {f"{prefix}-a", f"{prefix}-b"}
    finally:
        member.close()


def test_the_coordinator_is_found_through_a_broker_and_commits_survive_its_restart(
        cluster):
    topic = _topic(cluster, partitions=1, records=10)
    group = f"found-{topic}"
    member = Consumer(cluster.bootstrap_servers, group_id=group, auto_offset_reset="earliest",
                      group_protocol="zookeeper")
    try:
        member.subscribe([topic])
        _poll_until([member], lambda read: len(read[0]) >= 10)
        member.commit()
        assert member.zookeeper_connect == cluster.zookeeper
    finally:
        member.close()
    cluster.kill("zk", "KILL")
    cluster.start("zk")
    again = _member(cluster, group)
    try:
        again.subscribe([topic])
        assert again.committed(TopicPartition(topic, 0)) == 10
    finally:
        again.close()


def test_wrong_group_use_is_a_clear_error(cluster):
    with pytest.raises(RuntimeError, match="needs a group_id"):
        Consumer(cluster.bootstrap_servers).subscribe(["t"])
    consumer = _member(cluster, "mixed")
    try:
        consumer.assign([("t", 0)])
        with pytest.raises(RuntimeError, match="mutually exclusive"):
            consumer.subscribe(["t"])
    finally:
        consumer.close()
    from node.client.group import GroupError
    with pytest.raises(GroupError, match="invalid group id"):
        Consumer(cluster.bootstrap_servers, group_id="a/b")
    with pytest.raises(GroupError, match="cannot reach the coordinator"):
        Consumer(cluster.bootstrap_servers, group_id="g", zookeeper_connect="127.0.0.1:1",
                 session_timeout_ms=1000, group_protocol="zookeeper").subscribe(["t"])
    with pytest.raises(ValueError, match="group_protocol"):
        Consumer(cluster.bootstrap_servers, group_id="g", group_protocol="gossip")


def _start_worker(cluster, group: str, topic: str, out, name: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, WORKER, "--bootstrap", cluster.bootstrap_servers, "--zookeeper",
         cluster.zookeeper, "--group", group, "--topic", topic, "--out", str(out),
         "--name", name], stdout=subprocess.DEVNULL, stderr=open(f"{out}.log", "w"))


def _missing(outs, n: int) -> str:
    """Which records nobody read, per partition (value i is in partition i % 6)."""
    seen = {int(r["value"]) for o in outs.values() for r in _lines(o)}
    gone = sorted(set(range(n)) - seen)
    by_partition: dict[int, list] = {}
    for v in gone:
        by_partition.setdefault(v % 6, []).append(v)
    return ", ".join(f"p{p}: {len(vs)} from {vs[0]}" for p, vs in sorted(by_partition.items()))


def _lines(path) -> list[dict]:
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.endswith("\n")]
    except FileNotFoundError:
        return []


def test_three_member_processes_one_killed_one_added_read_every_record(cluster, zk,
                                                                      tmp_path):
    """Every record is read at least once; once the group settles, each partition's new
    records are read by its one owner only."""
    topic = _topic(cluster, records=3000)
    group = f"procs-{topic}"
    outs = {name: tmp_path / f"{name}.jsonl" for name in ("w0", "w1", "w2", "w3")}
    workers = {name: _start_worker(cluster, group, topic, outs[name], name)
               for name in ("w0", "w1", "w2")}
    try:
        def members():
            return zk.get_children(f"/consumers/{group}/ids") \
                if zk.exists(f"/consumers/{group}/ids") else []
        poll_until(lambda: len(members()) == 3 and len(_owners(zk, group, topic)) == 6,
                 30, "three members owning six partitions")
        poll_until(lambda: sum(len(_lines(o)) for o in outs.values()) >= 1000, 30,
                 "reading under way")
        workers["w1"].send_signal(signal.SIGKILL)
        workers["w1"].wait(10)
        _produce(cluster, topic, 3000, start=3000)
        workers["w3"] = _start_worker(cluster, group, topic, outs["w3"], "w3")
        # The killed member's session ends after its timeout (6 s); then the three live
        # members share the six partitions.
        poll_until(lambda: all(os.path.exists(f"{outs[n]}.id") for n in ("w0", "w2", "w3")),
                   30, "the new member registered")
        live = {open(f"{outs[n]}.id").read() for n in ("w0", "w2", "w3")}
        poll_until(lambda: set(members()) == live and
                   set(_owners(zk, group, topic).values()) == live and
                   len(_owners(zk, group, topic)) == 6, 40, "the group settling again")
        poll_until(lambda: {int(r["value"]) for o in outs.values() for r in _lines(o)}
                 >= set(range(6000)), 60, "every record read",
                 error=lambda message: AssertionError(
                     f"{message}: missing {_missing(outs, 6000)}; owners "
                     f"{_owners(zk, group, topic)}; members {members()}"))
        owners = _owners(zk, group, topic)
        marks = {name: len(_lines(o)) for name, o in outs.items()}
        _produce(cluster, topic, 600, start=6000)
        poll_until(lambda: {int(r["value"]) for o in outs.values() for r in _lines(o)}
                 >= set(range(6600)), 30, "the last records read")
        readers: dict[int, set] = {}
        for name, out in outs.items():
            for r in _lines(out)[marks[name]:]:
                if int(r["value"]) >= 6000:
                    readers.setdefault(r["partition"], set()).add(r["member"])
        assert {p: len(m) for p, m in readers.items()} == {p: 1 for p in range(6)}
        assert {p: next(iter(m)) for p, m in readers.items()} == owners
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
