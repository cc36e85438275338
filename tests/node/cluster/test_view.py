"""The timeline between two pictures of a cluster (node.cluster.view.events, pure)."""
from __future__ import annotations

import copy

from node.cluster.view import BrokerView, PartitionView, ReplicaView, Snapshot, events


def picture(t_ms=0) -> Snapshot:
    views = [ReplicaView(0, 1005, "leader", True, 1005, 1001),
             ReplicaView(1, 1003, "leader", True, 1004, 1001),
             ReplicaView(2, 1001, "leader", True, 1001, 1000)]
    return Snapshot(t_ms, 0, 1, "alive",
                    [BrokerView(b, "alive", f"127.0.0.1:{9000 + b}", True, b == 0)
                     for b in range(3)],
                    [PartitionView("t", 0, 0, 0, [0, 1, 2], [0, 1, 2], 1001, 1005, views)],
                    [])


def kinds(evs):
    return [(e["kind"], e["text"]) for e in evs]


def test_nothing_happens_between_two_equal_pictures_or_before_the_first():
    assert events(None, picture()) == []
    assert events(picture(), picture(5)) == []


def test_a_leader_killed_then_an_election_an_isr_shrink_and_a_new_controller():
    before, after = picture(), picture(100)
    after.brokers[0].state = "killed"
    after.brokers[0].controller = False
    after.controller, after.controller_epoch = 1, 2
    p = after.partitions[0]
    p.leader, p.leader_epoch, p.isr = 1, 1, [1, 2]
    got = kinds(events(before, after))
    assert ("controller", "controller: broker 1 (epoch 2)") in got
    assert ("process", "broker 0 killed") in got
    assert ("election", "t-0: leader 0 -> 1 (epoch 1)") in got
    assert ("isr", "t-0: ISR shrinks [0, 1, 2] -> [1, 2] (out: [0])") in got
    assert all(e["t_ms"] == 100 for e in events(before, after))


def test_an_offline_partition_an_expansion_a_truncation_and_links():
    before, after = picture(), copy.deepcopy(picture())
    after.partitions[0].leader = -1
    assert kinds(events(before, after)) == [
        ("election", "t-0 offline: no ISR replica is alive (was led by 0)")]
    before, after = picture(), picture()
    before.partitions[0].isr = [0, 1]
    after.partitions[0].views[2].own_leo = 990
    after.cut_links = [["b0", "zk"]]
    got = kinds(events(before, after))
    assert ("isr", "t-0: ISR expands [0, 1] -> [0, 1, 2] (in: [2])") in got
    assert ("truncation", "t-0: broker 2 truncates 11 record(s) (LEO 1001 -> 990)") in got
    assert ("network", "link b0 - zk cut") in got
    assert ("network", "link b0 - zk healed") in kinds(events(after, picture()))


def test_top_shows_the_lso_when_a_transaction_holds_it_below_the_hw():
    from bench.teach.top import render
    snap = picture()
    assert "LSO" not in render(snap, [])                 # not published
    snap.partitions[0].lso = 1001                        # = HW: nothing open
    assert "LSO" not in render(snap, [])
    snap.partitions[0].lso = 990
    line = next(x for x in render(snap, []).splitlines() if x.startswith("t-0"))
    assert "HW 1001" in line and "LSO 990" in line
