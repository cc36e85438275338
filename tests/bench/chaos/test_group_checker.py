"""check(..., group=True) on hand-written consumer-group histories: each group anomaly
found in a history built for it, and none in what Kafka legitimately does (at-least-once
redelivery after a rebalance, a zombie of an older generation, records nobody got to
before any commit)."""
from __future__ import annotations

from bench.chaos.checker import ANOMALY_HELP, GROUP_ANOMALIES, Op, check

MS = 1_000_000
LOG = [(o, f"p0-{o}".encode()) for o in range(10)]      # partition 0, offsets 0..9


def sends(log=LOG, partition=0):
    h = []
    for offset, value in log:
        h += [Op("p0", "invoke", "send", offset * MS, value),
              Op("p0", "ok", "send", offset * MS + 1, value, partition, offset)]
    return h


def assign(process, t, *partitions, generation=-1, member=""):
    return [Op(process, "ok", "assign", t * MS, partitions=partitions,
               member=member or f"{process}-id", generation=generation)]


def revoke(process, t, *partitions, lost=False):
    return [Op(process, "ok", "revoke", t * MS, partitions=partitions,
               error="lost" if lost else None)]


def poll(process, t, first, last, partition=0):
    """process reads offsets first..last of partition 0 (the LOG's values)."""
    reads = tuple((partition, o, f"p0-{o}".encode()) for o in range(first, last + 1))
    return [Op(process, "invoke", "poll", t * MS), Op(process, "ok", "poll", t * MS + 1,
                                                      reads=reads)]


def commit(process, t, offset, partition=0, kind="ok"):
    return [Op(process, kind, "commit", t * MS, offsets=((partition, offset),),
               error=None if kind == "ok" else "REBALANCE_IN_PROGRESS")]


def committed(t, offset, partition=0):
    return [Op("observer", "ok", "committed", t * MS, offsets=((partition, offset),))]


def at_least_once_rebalance():
    """c0 reads 0..5 but commits only 4, then loses the partition to c1, which starts at
    the committed 4 and reads 4..5 again (redelivery), then on to 9."""
    return (sends() + assign("c0", 20, 0, generation=1) + poll("c0", 21, 0, 5)
            + commit("c0", 22, 4) + committed(23, 4) + revoke("c0", 24, 0)
            + assign("c1", 25, 0, generation=2) + poll("c1", 26, 4, 9)
            + commit("c1", 27, 10) + committed(28, 10) + revoke("c1", 29, 0))


def judge(history, final=None):
    return check(sorted(history, key=lambda op: op.time_ns),
                 {0: list(LOG)} if final is None else final, group=True)


def test_at_least_once_redelivery_after_a_rebalance_is_no_anomaly():
    v = judge(at_least_once_rebalance())
    assert v.valid, v.summary()
    assert (v.group_lost, v.group_double_read, v.commit_backwards) == ([], [], [])
    assert (v.nonmonotonic, v.skip) == ([], [])
    assert v.group_stats["committed"] == {0: 10} and v.group_stats["members"] == ["c0", "c1"]
    assert (v.group_stats["assign"], v.group_stats["revoke"], v.group_stats["commit"]) == \
        (2, 2, 2)


def test_a_member_that_gets_its_partition_back_restarts_at_the_committed_offset():
    """c0 reads 0..5, commits 3, is revoked (eager rebalance), gets partition 0 back and
    reads 3..9: nonmonotonic restarts at the assign. Without the assign it is one."""
    h = (sends() + assign("c0", 20, 0) + poll("c0", 21, 0, 5) + commit("c0", 22, 3)
         + revoke("c0", 23, 0) + assign("c0", 24, 0) + poll("c0", 25, 3, 9))
    assert judge(h).valid
    no_assign = [op for op in h if op.f != "assign" or op.time_ns != 24 * MS]
    v = judge(no_assign)
    assert v.nonmonotonic == [("c0", 0, 5, 3)] and not v.valid


def test_a_standalone_consumer_keeps_the_old_rules_in_a_group_run():
    h = at_least_once_rebalance() + poll("s0", 30, 0, 4) + poll("s0", 31, 7, 7) + \
        poll("s0", 32, 6, 6)
    v = judge(h)
    assert v.skip == [("s0", 0, 4, 7)] and v.nonmonotonic == [("s0", 0, 7, 6)]


def test_group_lost_an_offset_below_a_commit_that_no_member_read():
    """c1 starts at 6 although the committed offset is 4 (a broker that served the wrong
    offset): 4 and 5 are below its later commit of 10 and no member read them."""
    h = (sends() + assign("c0", 20, 0, generation=1) + poll("c0", 21, 0, 3)
         + commit("c0", 22, 4) + revoke("c0", 24, 0)
         + assign("c1", 25, 0, generation=2) + poll("c1", 26, 6, 9) + commit("c1", 27, 10))
    v = judge(h)
    assert v.group_lost == [(0, 4, b"p0-4", 10), (0, 5, b"p0-5", 10)] and not v.valid
    assert v.anomalies["group_lost"] == 2
    assert v.skip == []       # each member's reads are contiguous: only the group lost them


def test_group_lost_from_the_observers_committed_offset_alone():
    """No member reports commits (a client without commit callbacks); the observer saw
    the group commit 8 while only 0..5 were read."""
    h = sends() + assign("c0", 20, 0) + poll("c0", 21, 0, 5) + committed(22, 8)
    v = judge(h)
    assert [o for _, o, _, _ in v.group_lost] == [6, 7] and not v.valid


def test_records_nobody_read_above_every_commit_are_not_group_lost():
    """The group read 0..3 and committed 4; 4..9 were written but never consumed (the
    run ended first): not group lost, and the final read has them, so not lost."""
    h = sends() + assign("c0", 20, 0) + poll("c0", 21, 0, 3) + commit("c0", 22, 4) + \
        committed(23, 4)
    v = judge(h)
    assert v.group_lost == [] and v.lost == [] and v.valid


def test_a_failed_commit_and_a_standalone_read_do_not_count():
    """c0 read 0..3 and its commit of 8 failed: that commits nothing. Once the observer
    sees 8 committed, 4..7 are lost to the group, although a standalone consumer (not a
    member) read them."""
    h = (sends() + assign("c0", 20, 0) + poll("c0", 21, 0, 3) + commit("c0", 22, 8, kind="fail")
         + poll("s0", 23, 0, 9))
    assert judge(h).group_lost == []                       # the failed commit says nothing
    v = judge(h + committed(24, 8))
    assert [o for _, o, _, _ in v.group_lost] == [4, 5, 6, 7]


def test_group_double_read_two_owners_at_once():
    """One generation, partition 0 owned by c0 and c1 at once, both read 2..3."""
    h = (sends() + assign("c0", 20, 0, generation=3) + assign("c1", 21, 0, generation=3)
         + poll("c0", 22, 0, 3) + poll("c1", 23, 2, 5))
    v = judge(h)
    assert v.group_double_read == [(0, 2, "c0", "c1"), (0, 3, "c0", "c1")] and not v.valid
    unknown = (sends() + assign("c0", 20, 0) + assign("c1", 21, 0) + poll("c0", 22, 0, 3)
               + poll("c1", 23, 2, 5))
    assert len(judge(unknown).group_double_read) == 2       # no generations: overlap decides


def test_a_zombie_of_an_older_generation_is_no_double_read():
    """c0 (generation 3) was expelled without noticing and reads on; c1 got partition 0 in
    generation 4 and reads the same offsets. Fetches are not fenced: Kafka allows it."""
    h = (sends() + assign("c0", 20, 0, generation=3) + assign("c1", 21, 0, generation=4)
         + poll("c0", 22, 0, 3) + poll("c1", 23, 2, 5))
    assert judge(h).group_double_read == []


def test_a_zombie_that_found_out_it_was_lost_is_no_double_read():
    """Generations unknown, but c0's ownership ended lost (the client was told)."""
    h = (sends() + assign("c0", 20, 0) + assign("c1", 21, 0) + poll("c0", 22, 0, 3)
         + poll("c1", 23, 2, 5) + revoke("c0", 24, 0, lost=True))
    v = judge(h)
    assert v.group_double_read == [] and v.group_stats["lost"] == 1
    clean = [op if op.f != "revoke" else Op("c0", "ok", "revoke", op.time_ns, partitions=(0,))
             for op in h]
    assert len(judge(clean).group_double_read) == 2


def test_a_re_read_of_what_the_last_owner_read_before_the_assign_is_no_double_read():
    """c0 stops: its final revoke is written late, after c1 was assigned, but c0 read
    0..5 before that; c1 re-reads 4..5 from the committed offset."""
    h = (sends() + assign("c0", 20, 0) + poll("c0", 21, 0, 5) + commit("c0", 22, 4)
         + assign("c1", 25, 0) + poll("c1", 26, 4, 9) + revoke("c0", 27, 0))
    assert judge(h).group_double_read == []


def test_commit_backwards_at_the_observer():
    h = at_least_once_rebalance() + committed(30, 7)
    v = judge(h)
    assert v.commit_backwards == [("observer", 0, 10, 7)] and not v.valid
    assert v.group_lost == []          # the highest commit, 10, still bounds it


def test_commit_backwards_within_one_members_interval():
    h = (sends() + assign("c0", 20, 0) + poll("c0", 21, 0, 5) + commit("c0", 22, 6)
         + commit("c0", 23, 3))
    assert judge(h).commit_backwards == [("c0", 0, 6, 3)]


def test_a_lower_commit_in_a_new_interval_or_a_sample_without_the_partition_is_fine():
    """c0 committed 6; that commit was lost, so after a rebalance it restarts at 3 and
    commits 5 (the observer saw no decrease: it never saw the 6). A sample that lacks
    the partition, and a negative offset ("nothing committed"), say nothing."""
    h = (sends() + assign("c0", 20, 0) + poll("c0", 21, 0, 5) + commit("c0", 22, 6)
         + committed(23, 3) + revoke("c0", 24, 0) + assign("c0", 25, 0) + poll("c0", 26, 3, 4)
         + commit("c0", 27, 5) + [Op("observer", "ok", "committed", 28 * MS)]
         + committed(29, -1) + committed(30, 5) + commit("c0", 31, -1001))
    v = judge(h)
    assert v.commit_backwards == [] and v.valid


def test_a_late_commit_callback_after_the_revoke_belongs_to_its_interval():
    """librdkafka serves the commit callback after the revoke: still the same interval."""
    h = (sends() + assign("c0", 20, 0) + poll("c0", 21, 0, 5) + commit("c0", 22, 6)
         + revoke("c0", 23, 0) + commit("c0", 24, 4))
    assert judge(h).commit_backwards == [("c0", 0, 6, 4)]


def test_old_histories_are_judged_as_before():
    """Without group=True nothing changes: no group keys in the summary; with it, a
    history without group ops has none of the group anomalies."""
    h = sends() + poll("s0", 20, 0, 9)
    plain = check(h, {0: list(LOG)})
    assert not plain.group and set(plain.summary()) & set(GROUP_ANOMALIES) == set()
    assert "group_stats" not in plain.summary()
    grouped = check(h, {0: list(LOG)}, group=True)
    assert grouped.valid and all(grouped.anomalies[k] == 0 for k in GROUP_ANOMALIES)
    assert grouped.group_stats["members"] == []


def test_the_summary_lists_examples_and_every_anomaly_has_a_help_line():
    h = at_least_once_rebalance() + committed(30, 7) + assign("c2", 31, 0) + \
        poll("c2", 32, 0, 0)
    s = judge(h).summary()
    assert s["commit_backwards"] == 1 and s["valid"] is False
    assert s["examples"]["commit_backwards"] == [["observer", 0, 10, 7]]
    assert s["group_stats"]["commit"] == 2
    assert set(judge(h).anomalies) == set(ANOMALY_HELP)
