"""The chaos checker on hand-written histories: each anomaly found in a history built
for it, none in a valid one."""
from __future__ import annotations

from bench.chaos.checker import Fault, Op, check

MS = 1_000_000


def send(process, value, t, partition=None, offset=None, outcome="ok"):
    ops = [Op(process, "invoke", "send", t, value)]
    if outcome == "ok":
        ops.append(Op(process, "ok", "send", t + MS, value, partition, offset))
    else:
        ops.append(Op(process, outcome, "send", t + MS, value, error="x"))
    return ops


def poll(process, t, *reads):
    return [Op(process, "invoke", "poll", t), Op(process, "ok", "poll", t + MS, reads=reads)]


def valid_history():
    h = send("p0", b"a", 0, 0, 0) + send("p0", b"b", 10 * MS, 0, 1) + \
        send("p1", b"c", 20 * MS, 1, 0) + send("p1", b"d", 30 * MS, outcome="info")
    h += poll("c0", 40 * MS, (0, 0, b"a"), (0, 1, b"b"), (1, 0, b"c"))
    final = {0: [(0, b"a"), (1, b"b")], 1: [(0, b"c"), (1, b"d")]}   # d: unknown, written
    return h, final


def test_a_valid_history_has_no_anomaly_and_availability_is_measured():
    h, final = valid_history()
    v = check(h, final, [Fault("kill", 5 * MS, 8 * MS, "broker 1")], start_ns=0,
              end_ns=60 * MS)
    assert v.valid and not any(v.anomalies.values())
    assert (v.sends, v.acknowledged, v.unknown, v.read) == (4, 3, 1, 3)
    assert v.recovery_ms == [("kill", "broker 1", 6.0)]   # the ack of b at 11 ms
    assert v.longest_gap_ms == 39.0                         # c acked at 21 ms, end at 60


def test_lost_an_acknowledged_write_the_final_read_went_past():
    h, final = valid_history()
    final[0] = [(0, b"a"), (1, b"x")]
    h += send("p0", b"x", 50 * MS, 0, 1)          # x overwrote b's offset after truncation
    v = check(h, final)
    assert v.lost == [(b"b", 0, 1)] and not v.valid
    assert v.inconsistent == [(0, 1, [b"b", b"x"])]   # c0 had read b there


def test_lost_when_the_log_after_healing_ends_before_it():
    """An isolated leader acknowledged b at offset 1 alone; after healing the log ends
    at 1 (it was truncated away): b is lost although no read went past offset 1."""
    h, final = valid_history()
    final[0] = [(0, b"a")]
    assert check(h, final).lost == [(b"b", 0, 1)]


def test_a_partition_the_final_read_did_not_cover_is_not_judged():
    h, final = valid_history()
    del final[0]
    assert check(h, final).lost == []


def test_duplicate_is_counted_and_fails_only_when_asked():
    h, final = valid_history()
    final[1] = [(0, b"c"), (1, b"c"), (2, b"d")]
    v = check(h, final)
    assert v.duplicate == [(b"c", [(1, 0), (1, 1)])] and v.valid
    assert not check(h, final, duplicates_fail=True).valid


def test_inconsistent_offsets():
    h, final = valid_history()
    h += poll("c1", 50 * MS, (0, 1, b"z"))
    h += send("p2", b"z", 45 * MS, 0, 1)
    v = check(h, final)
    assert v.inconsistent == [(0, 1, [b"b", b"z"])] and not v.valid


def test_nonmonotonic_poll_and_poll_skip():
    h, final = valid_history()
    h += poll("c1", 50 * MS, (0, 1, b"b"), (0, 0, b"a"))
    v = check(h, final)
    assert v.nonmonotonic == [("c1", 0, 1, 0)] and not v.valid
    h, final = valid_history()
    final[0].append((2, b"e"))
    h += send("p0", b"e", 45 * MS, 0, 2)
    h += poll("c1", 50 * MS, (0, 0, b"a"), (0, 2, b"e"))
    v = check(h, final)
    assert v.skip == [("c1", 0, 0, 2)] and not v.valid


def test_an_unknown_outcome_write_missing_from_the_final_read_is_not_lost():
    """d's send timed out (info): it may never have been written."""
    h, final = valid_history()
    final[1] = [(0, b"c")]
    v = check(h, final)
    assert v.lost == [] and v.valid and v.unknown == 1


def test_a_failed_write_in_the_log_is_an_aborted_read():
    """The client was told e certainly was not written (fail), and a consumer and the
    final read find it: not lost, not unexpected (it was sent), but an aborted read."""
    h, final = valid_history()
    h += send("p0", b"e", 45 * MS, outcome="fail")
    h += poll("c1", 50 * MS, (0, 2, b"e"))
    final[0].append((2, b"e"))
    v = check(h, final)
    assert v.aborted_read == [(b"e", [(0, 2)])] and not v.valid
    assert (v.lost, v.unexpected, v.failed) == ([], [], 1)
    assert v.summary()["aborted_read"] == 1
    h, final = valid_history()                     # failed, and nowhere: no anomaly
    assert check(h + send("p0", b"e", 45 * MS, outcome="fail"), final).valid


def test_unexpected_value():
    h, final = valid_history()
    final[1].append((2, b"never-sent"))
    v = check(h, final)
    assert v.unexpected == [(b"never-sent", [(1, 2)])] and not v.valid


def test_a_fault_with_no_acknowledgement_after_it():
    h, final = valid_history()
    v = check(h, final, [Fault("pause", 100 * MS, 200 * MS, "zk")])
    assert v.recovery_ms == [("pause", "zk", None)]


def test_replicas_that_match_below_the_high_watermark_are_not_divergent():
    h, final = valid_history()
    same = [(0, b"a"), (1, b"b")]
    replicas = {0: {0: same, 1: same + [(2, b"uncommitted")], 2: same}}
    v = check(h, final, replicas=replicas, high_watermarks={0: 2})
    assert v.divergent == [] and v.valid


def test_two_values_at_one_offset_below_the_high_watermark_are_divergent():
    """KIP-101 scenario 2: after a power failure offset 1 holds m2 on one replica and
    m3 on the other, both below the HW."""
    h, final = valid_history()
    replicas = {0: {0: [(0, b"m1"), (1, b"m2")], 1: [(0, b"m1"), (1, b"m3")]}}
    v = check(h, final, replicas=replicas, high_watermarks={0: 2})
    assert v.divergent == [(0, 1, {0: b"m2", 1: b"m3"})]
    assert not v.valid and v.summary()["divergent"] == 1


def test_a_replica_short_of_the_high_watermark_is_divergent():
    h, final = valid_history()
    replicas = {0: {0: [(0, b"a"), (1, b"b")], 1: [(0, b"a")], 2: []}}
    v = check(h, final, replicas=replicas, high_watermarks={0: 2})
    assert (0, 1, {0: b"b", 1: None}) in v.divergent
    assert (0, 0, {2: None}) in v.divergent and not v.valid


def test_a_replica_whose_log_starts_later_is_compared_from_its_start():
    h, final = valid_history()
    replicas = {0: {0: [(0, b"a"), (1, b"b")], 1: [(1, b"b")]}}
    assert check(h, final, replicas=replicas, high_watermarks={0: 2}).divergent == []
