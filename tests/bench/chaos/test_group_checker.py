"""check(..., group=True) on hand-written consumer-group histories: each group anomaly
found in a history built for it, and none in what Kafka legitimately does (at-least-once
redelivery after a rebalance, a zombie of an older generation, records nobody got to
before any commit)."""
from __future__ import annotations

from bench.chaos.checker import ANOMALY_HELP, GROUP_ANOMALIES, Op, check, explain

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
    the partition, a negative offset ("nothing committed") and a failed sample say
    nothing."""
    h = (sends() + assign("c0", 20, 0) + poll("c0", 21, 0, 5) + commit("c0", 22, 6)
         + committed(23, 3) + revoke("c0", 24, 0) + assign("c0", 25, 0) + poll("c0", 26, 3, 4)
         + commit("c0", 27, 5) + [Op("observer", "ok", "committed", 28 * MS)]
         + committed(29, -1) + committed(30, 5) + commit("c0", 31, -1001)
         + [Op("observer", "fail", "committed", 32 * MS, offsets=((0, 0),), error="timeout")])
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
    assert explain("commit_backwards", s["examples"]["commit_backwards"][0]) == \
        "partition 0: committed offset 10 -> 7 (observer)"
    assert explain("group_lost", (0, 4, b"p0-4", 10)) == \
        "partition 0 offset 4 (p0-4): below the group's committed 10, read by no member"
    assert explain("group_double_read", (0, 2, "c0", "c1")) == \
        "partition 0 offset 2: read by c0 and c1 while both owned the partition"


# ---- property: a simulated correct group has no group anomaly; one injected fault of
# each kind is found (and only it).

from hypothesis import assume, given, settings, strategies as st  # noqa: E402

TICK = 1000          # ns between two simulated operations: room to inject between them


class Group:
    """A correct consumer group over a random log: eager or cooperative rebalances
    (with or without a commit before the revoke: at-least-once redelivery), commits of
    any offset up to the position, failed commits, and zombies (an expelled member that
    reads on while the next generation's owner reads too, then finds out it was lost)."""

    def __init__(self, draw):
        self.draw = draw
        self.partitions = range(draw(st.integers(1, 3)))
        self.final = {p: [(o, f"v{p}-{o}".encode()) for o in range(draw(st.integers(1, 12)))]
                      for p in self.partitions}
        self.members = [f"c{i}" for i in range(draw(st.integers(2, 3)))]
        self.knows_generation = {m: draw(st.booleans()) for m in self.members}
        self.cooperative = draw(st.booleans())
        self.history = [op for p, rows in self.final.items() for o, v in rows
                        for op in (Op("p0", "invoke", "send", 0, v),
                                   Op("p0", "ok", "send", 1, v, p, o))]
        self.t = 10
        self.generation = 0
        self.committed: dict[int, int] = {}         # the brokers' truth
        self.owner: dict[int, str] = {}
        self.position: dict[int, int] = {}
        self.last_commit: dict[int, int] = {}       # the owner's, this interval
        self.clean_reads = []     # (process, time_ns, partition, offset, interval)
        self.intervals = 0        # interval ids: the owner's current one per partition
        self.interval: dict[int, int] = {}
        self.lost: set[int] = set()                 # the ids of intervals that ended lost

    def emit(self, process, kind, f, **fields):
        self.t += 1
        self.history.append(Op(process, kind, f, self.t * TICK, **fields))

    def gen(self, member):
        return self.generation if self.knows_generation[member] else -1

    def assign(self, member, partitions):
        self.emit(member, "ok", "assign", partitions=tuple(partitions),
                  member=f"{member}-{self.generation}", generation=self.gen(member))
        for p in partitions:
            self.intervals += 1
            self.interval[p] = self.intervals
            self.owner[p] = member
            self.position[p] = self.committed.get(p, 0)
            self.last_commit[p] = self.position[p]

    def owned(self, member):
        return sorted(p for p, m in self.owner.items() if m == member)

    def poll(self, member, clean=True, partitions=None, position=None):
        position = self.position if position is None else position
        reads = []
        for p in (self.owned(member) if partitions is None else partitions):
            n = self.draw(st.integers(0, 3))
            end = min(position[p] + n, len(self.final[p]))
            reads += [(p, o, self.final[p][o][1]) for o in range(position[p], end)]
            position[p] = end
        if reads:
            self.emit(member, "invoke", "poll")
            self.emit(member, "ok", "poll", reads=tuple(reads))
            if clean:
                self.clean_reads += [(member, self.t * TICK, p, o, self.interval[p])
                                     for p, o, _ in reads]

    def commit(self, member):
        offsets = []
        for p in self.owned(member):
            offset = self.draw(st.integers(self.last_commit[p], self.position[p]))
            offsets.append((p, offset))
        if not offsets:
            return
        if self.draw(st.booleans()) and self.draw(st.booleans()):   # a quarter fail
            self.emit(member, "fail", "commit", error="REQUEST_TIMED_OUT")
            return
        for p, offset in offsets:
            self.committed[p] = self.last_commit[p] = offset
        self.emit(member, "ok", "commit", offsets=tuple(offsets))

    def observe(self):
        self.emit("observer", "ok", "committed", offsets=tuple(sorted(self.committed.items())))

    def rebalance(self):
        moving = [p for p in self.partitions if self.draw(st.booleans())] \
            if self.cooperative and self.owner else list(self.partitions)
        losing = sorted({self.owner[p] for p in moving if p in self.owner})
        for member in losing:
            if self.draw(st.booleans()):
                self.commit(member)                 # else: redelivered to the next owner
            mine = [p for p in moving if self.owner.get(p) == member]
            self.emit(member, "ok", "revoke", partitions=tuple(mine))
            for p in mine:
                del self.owner[p]
        self.generation += 1
        gets = {m: [] for m in self.members}
        for p in moving:
            gets[self.draw(st.sampled_from(self.members))].append(p)
        for member, partitions in gets.items():
            if partitions or not self.cooperative:
                self.assign(member, partitions)

    def zombie(self):
        """The owner of a partition is expelled without noticing: the next generation
        gives the partition to another member; both read; the zombie's commit is
        fenced; then it finds out (lost)."""
        if not self.owner:
            return
        p = self.draw(st.sampled_from(sorted(self.owner)))
        old = self.owner[p]
        new = self.draw(st.sampled_from([m for m in self.members if m != old]))
        zombie_position = {p: self.position[p]}
        self.lost.add(self.interval[p])
        self.generation += 1
        self.assign(new, [p])
        self.poll(new, clean=False, partitions=[p])
        self.poll(old, clean=False, partitions=[p], position=zombie_position)
        self.emit(old, "fail", "commit", error="ILLEGAL_GENERATION")
        self.poll(new, clean=False, partitions=[p])
        self.emit(old, "ok", "revoke", partitions=(p,), error="lost")

    def run(self):
        self.rebalance()
        owner0 = self.owner[0]
        self.position[0] = 1                                       # one read, one commit
        self.emit(owner0, "ok", "poll", reads=((0, 0, self.final[0][0][1]),))
        self.clean_reads.append((owner0, self.t * TICK, 0, 0, self.interval[0]))
        self.first_read = (owner0, self.t * TICK)       # every later start is at 1 or more
        self.committed[0] = self.last_commit[0] = 1
        self.emit(owner0, "ok", "commit", offsets=((0, 1),))
        self.first_commit = (owner0, self.t * TICK)
        steps = self.draw(st.lists(st.sampled_from(
            ["poll", "poll", "commit", "rebalance", "observe", "zombie"]), max_size=30))
        for step in steps:
            if step in ("poll", "commit"):
                getattr(self, step)(self.draw(st.sampled_from(self.members)))
            else:
                getattr(self, step)()
        for member in self.members:                       # each stops: its final revoke
            if self.owned(member):
                self.emit(member, "ok", "revoke", partitions=tuple(self.owned(member)))
        for p in list(self.owner):
            del self.owner[p]
        self.observe()
        return self


def group_anomalies(v):
    return {k: getattr(v, k) for k in GROUP_ANOMALIES if getattr(v, k)}


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_a_correct_group_has_no_anomaly(data):
    g = Group(data.draw).run()
    v = check(g.history, g.final, group=True)
    assert v.valid, v.summary()
    assert group_anomalies(v) == {} and (v.nonmonotonic, v.skip) == ([], [])


@settings(max_examples=60, deadline=None)
@given(st.data(), st.sampled_from(["group_lost", "group_double_read", "observer_backwards",
                                   "member_backwards"]))
def test_one_injected_fault_is_found(data, fault):
    g = Group(data.draw).run()
    h = list(g.history)
    if fault == "group_lost":          # the one read of offset 0 (below a commit) gone
        owner0, t = g.first_read
        h = [op if (op.process, op.time_ns, op.f) != (owner0, t, "poll") else
             Op(owner0, "ok", "poll", t) for op in h]
        expected = {"group_lost": [(0, 0, b"v0-0", g.committed[0])]}
    elif fault == "group_double_read":  # another member owned and read it at once
        # Not a read in an interval that ended lost: with generations unknown, a
        # second owner then is what a zombie looks like (tolerated by design).
        eligible = [r for r in g.clean_reads if r[4] not in g.lost]
        assume(eligible)
        a, t, p, o, _ = data.draw(st.sampled_from(eligible))
        b = data.draw(st.sampled_from([m for m in g.members if m != a]))
        generation = next((op.generation for op in reversed(h) if op.f == "assign"
                           and op.process == a and op.time_ns <= t), -1)
        h += [Op(b, "ok", "assign", t - 1, partitions=(p,), generation=generation),
              Op(b, "ok", "poll", t + 1, reads=((p, o, g.final[p][o][1]),)),
              Op(b, "ok", "revoke", t + 2, partitions=(p,))]
        expected = {"group_double_read": [(p, o, *sorted((a, b)))]}
    elif fault == "observer_backwards":
        c = g.committed[0]
        h += [Op("observer", "ok", "committed", (g.t + 1) * TICK, offsets=((0, c),)),
              Op("observer", "ok", "committed", (g.t + 2) * TICK, offsets=((0, c - 1),))]
        expected = {"commit_backwards": [("observer", 0, c, c - 1)]}
    else:                               # the first commit (1), then 0 in its interval
        member, t = g.first_commit
        h.append(Op(member, "ok", "commit", t + 1, offsets=((0, 0),)))
        expected = {"commit_backwards": [(member, 0, 1, 0)]}
    v = check(sorted(h, key=lambda op: op.time_ns), g.final, group=True)
    found = group_anomalies(v)
    if fault == "group_double_read":
        # The injected assign also gives b's later reads of its other partitions a's
        # generation, which can make another of b's reads a same-generation double
        # read too (hypothesis seed 8): the injected one must be found, nothing else kind.
        assert set(found) == {"group_double_read"} and not v.valid, found
        assert expected["group_double_read"][0] in found["group_double_read"], found
    else:
        assert found == expected and not v.valid
    assert (v.nonmonotonic, v.skip) == ([], [])
