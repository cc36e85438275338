"""The replication core, scripted: each test names the rule of DESIGN.md "Replication"
it checks. The core is pure; ``MemLog`` plays the local log and the test plays the shell
(performing effects in order) and the network."""
from __future__ import annotations


from node.wire.errors import ErrorCode
from node.core.replication import (AssignEpoch, CompleteProduce, ReplicaCore, ReplicationConfig,
                              Role, SendOffsetForLeaderEpoch, SetHighWatermark, Truncate,
                              TruncateFully, TruncationMode, WriteIsr)
from tests.sim.memlog import MemLog

LAG_MS = 10_000


def apply(log: MemLog, effects):
    """Perform log effects as a shell would; return the others."""
    rest = []
    for e in effects:
        if isinstance(e, Truncate):
            log.truncate_to(e.offset)
        elif isinstance(e, TruncateFully):
            log.truncate_fully(e.offset)
        elif isinstance(e, SetHighWatermark):
            log.set_hw(e.offset)
        elif isinstance(e, AssignEpoch):
            log.assign_epoch(e.leader_epoch, e.start_offset)
        else:
            rest.append(e)
    return rest


def leader(min_isr=1, isr=(0, 1, 2), epoch=1, mode=TruncationMode.LEADER_EPOCH):
    core = ReplicaCore("t", 0, 0, ReplicationConfig(LAG_MS, min_isr, mode))
    log = MemLog()
    rest = apply(log, core.become_leader(leader_epoch=epoch, isr=isr, replicas=(0, 1, 2),
                                         zk_version=0, now_ms=0, log=log))
    assert rest == []
    return core, log


def produce(core, log, values, acks, now_ms=0, request_id="r", timeout_ms=30_000):
    error = core.check_produce(acks)
    if error:
        return error, []
    first, last = log.append_as_leader(values, core.leader_epoch)
    return 0, apply(log, core.on_leader_append(request_id, acks, first, last, timeout_ms,
                                               now_ms, log))


def test_acks_1_completes_after_the_local_append_and_acks_all_waits_for_the_isr():
    core, log = leader()
    assert produce(core, log, ["a"], 1, request_id="one") == (0, [CompleteProduce("one", 0, 0)])
    error, out = produce(core, log, ["b"], -1, request_id="all")
    assert (error, out) == (0, [])
    assert log.hw == 0
    assert apply(log, core.on_follower_fetch(1, 2, 1, log)) == []
    assert log.hw == 0, "HW is the minimum LEO over the ISR: follower 2 has not fetched"
    assert apply(log, core.on_follower_fetch(2, 2, 1, log)) == [CompleteProduce("all", 0, 1)]
    assert log.hw == 2


def test_hw_is_min_leo_over_isr_and_never_moves_back():
    core, log = leader()
    produce(core, log, list("abcd"), 1)
    apply(log, core.on_follower_fetch(1, 3, 1, log))
    apply(log, core.on_follower_fetch(2, 2, 1, log))
    assert log.hw == 2
    apply(log, core.on_follower_fetch(2, 1, 2, log))  # a stale fetch offset
    assert log.hw == 2


def test_not_enough_replicas_before_the_append_when_isr_is_below_min_insync():
    core, log = leader(min_isr=2, isr=(0,))
    assert produce(core, log, ["x"], -1)[0] == ErrorCode.NOT_ENOUGH_REPLICAS
    assert log.log_end_offset == 0, "nothing is appended"
    assert produce(core, log, ["x"], 1)[0] == 0, "acks=1 still succeeds"


def test_isr_shrinks_after_replica_lag_time_and_the_hw_waits_for_the_coordinator():
    core, log = leader(min_isr=2)
    produce(core, log, ["a"], -1, request_id="p")
    apply(log, core.on_follower_fetch(1, 1, 100, log))
    assert apply(log, core.tick(LAG_MS, log)) == []
    out = apply(log, core.tick(LAG_MS + 1, log))
    assert out == [WriteIsr(1, (0, 1), 0)], "follower 2 never fetched: it is dropped"
    assert log.hw == 0, "the shrink is not confirmed: the HW still waits for follower 2"
    out = apply(log, core.on_isr_written(True, zk_version=1, now_ms=LAG_MS + 2, log=log))
    assert out == [CompleteProduce("p", 0, 0)] and log.hw == 1 and core.isr == (0, 1)


def test_a_leader_that_cannot_write_its_isr_stops_acknowledging_acks_all():
    core, log = leader(min_isr=1)
    apply(log, core.tick(LAG_MS + 1, log))
    assert core.pending_isr == (0,)
    # The controller moved on (new leader epoch in the znode): the write is refused.
    assert apply(log, core.on_isr_written(False, isr=(1, 2), leader_epoch=2, zk_version=5,
                                          now_ms=LAG_MS + 2, log=log)) == []
    produce(core, log, ["a"], -1, request_id="p", now_ms=LAG_MS + 3, timeout_ms=100)
    assert log.hw == 0, "no HW advance on the shrunken ISR"
    out = apply(log, core.tick(LAG_MS + 200, log))
    assert CompleteProduce("p", ErrorCode.REQUEST_TIMED_OUT, 0) in out
    assert WriteIsr(1, (0,), 0) in out, "the write is retried after a backoff"


def test_a_caught_up_follower_rejoins_the_isr():
    core, log = leader(isr=(0, 1))
    produce(core, log, ["a", "b"], 1)
    apply(log, core.on_follower_fetch(1, 2, 1, log))
    assert log.hw == 2
    assert apply(log, core.on_follower_fetch(2, 1, 2, log)) == [], "below the HW: not yet"
    assert apply(log, core.on_follower_fetch(2, 2, 3, log)) == [WriteIsr(1, (0, 1, 2), 0)]
    apply(log, core.on_isr_written(True, zk_version=1, now_ms=4, log=log))
    assert core.isr == (0, 1, 2)


def test_not_enough_replicas_after_append_when_the_isr_shrank_while_waiting():
    core, log = leader(min_isr=2, isr=(0, 1))
    produce(core, log, ["a"], -1, request_id="p")
    apply(log, core.tick(LAG_MS + 1, log))
    out = apply(log, core.on_isr_written(True, zk_version=1, now_ms=LAG_MS + 2, log=log))
    assert out == [CompleteProduce("p", ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, 0)]


def test_fetch_epoch_fencing():
    core, _ = leader(epoch=5)
    assert core.check_fetch_epoch(5) == 0 and core.check_fetch_epoch(-1) == 0
    assert core.check_fetch_epoch(4) == ErrorCode.FENCED_LEADER_EPOCH
    assert core.check_fetch_epoch(6) == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert core.check_leader_and_isr(5) == ErrorCode.STALE_CONTROLLER_EPOCH
    assert core.check_leader_and_isr(6) == 0


def follower_with(entries, hw, mode):
    core = ReplicaCore("t", 0, 1, ReplicationConfig(LAG_MS, 1, mode))
    log = MemLog()
    log.append_as_follower(entries, 0)
    log.set_hw(hw)
    return core, log


def test_high_watermark_mode_truncates_to_the_hw_on_becoming_follower():
    core, log = follower_with([(0, "m1"), (0, "m2")], 1, TruncationMode.HIGH_WATERMARK)
    out = apply(log, core.become_follower(leader=2, leader_epoch=1, isr=(1, 2), replicas=(1, 2),
                                          zk_version=0, now_ms=0, log=log))
    assert out == [] and log.log_end_offset == 1, "m2 is cut although the leader may have acked it"
    assert core.fetch_state(log).fetch_offset == 1


def test_leader_epoch_mode_asks_the_leader_and_keeps_what_it_has():
    core, log = follower_with([(0, "m1"), (0, "m2")], 1, TruncationMode.LEADER_EPOCH)
    out = apply(log, core.become_follower(leader=2, leader_epoch=1, isr=(1, 2), replicas=(1, 2),
                                          zk_version=0, now_ms=0, log=log))
    assert out == [SendOffsetForLeaderEpoch(2, 1, 0)]
    assert core.fetch_state(log) is None, "no fetch before the truncation point is known"
    assert apply(log, core.on_offset_for_leader_epoch(error=0, leader_epoch=0, end_offset=2,
                                                      now_ms=1, log=log)) == []
    assert log.log_end_offset == 2 and core.fetch_state(log).fetch_offset == 2


def test_leader_epoch_mode_truncates_a_divergent_tail():
    core, log = follower_with([(0, "m1"), (0, "m2"), (0, "m3")], 1, TruncationMode.LEADER_EPOCH)
    apply(log, core.become_follower(leader=2, leader_epoch=3, isr=(1, 2), replicas=(1, 2),
                                    zk_version=0, now_ms=0, log=log))
    apply(log, core.on_offset_for_leader_epoch(error=0, leader_epoch=0, end_offset=1,
                                               now_ms=1, log=log))
    assert log.log_end_offset == 1


def test_leader_epoch_mode_does_not_truncate_while_the_leader_does_not_answer():
    core, log = follower_with([(0, "m1"), (0, "m2")], 1, TruncationMode.LEADER_EPOCH)
    apply(log, core.become_follower(leader=2, leader_epoch=1, isr=(1, 2), replicas=(1, 2),
                                    zk_version=0, now_ms=0, log=log))
    timed_out = ErrorCode.REQUEST_TIMED_OUT
    assert apply(log, core.on_offset_for_leader_epoch(error=timed_out, leader_epoch=-1,
                                                      end_offset=-1, now_ms=1, log=log)) == []
    assert log.log_end_offset == 2
    assert apply(log, core.tick(200, log)) == [SendOffsetForLeaderEpoch(2, 1, 0)]


def test_follower_hw_is_min_of_its_leo_and_the_leaders_hw():
    core, log = follower_with([(0, "m1")], 0, TruncationMode.HIGH_WATERMARK)
    apply(log, core.become_follower(leader=2, leader_epoch=1, isr=(1, 2), replicas=(1, 2),
                                    zk_version=0, now_ms=0, log=log))
    apply(log, core.on_fetch_response(error=0, leader_high_watermark=5, leader_log_start_offset=0,
                                      leader_log_end_offset=5, now_ms=1, log=log))
    assert log.hw == 0, "truncated to HW 0 first: LEO 0"
    log.append_as_follower([(0, "m1"), (1, "m2")], 0)
    apply(log, core.on_fetch_response(error=0, leader_high_watermark=5, leader_log_start_offset=0,
                                      leader_log_end_offset=5, now_ms=1, log=log))
    assert log.hw == 2


def test_out_of_range_follower_ahead_of_the_leader_cuts_to_the_leaders_leo():
    core, log = follower_with([(0, "a"), (0, "b"), (0, "c")], 3, TruncationMode.HIGH_WATERMARK)
    apply(log, core.become_follower(leader=2, leader_epoch=1, isr=(1, 2), replicas=(1, 2),
                                    zk_version=0, now_ms=0, log=log))
    out = core.on_fetch_response(error=ErrorCode.OFFSET_OUT_OF_RANGE, leader_high_watermark=1,
                                 leader_log_start_offset=0, leader_log_end_offset=1, now_ms=1,
                                 log=log)
    assert out == [Truncate(1)]
    out = core.on_fetch_response(error=ErrorCode.OFFSET_OUT_OF_RANGE, leader_high_watermark=9,
                                 leader_log_start_offset=7, leader_log_end_offset=9, now_ms=1,
                                 log=log)
    assert out == [TruncateFully(7)]


def test_becoming_follower_fails_pending_produces():
    core, log = leader()
    produce(core, log, ["a"], -1, request_id="p")
    out = core.become_follower(leader=1, leader_epoch=2, isr=(1, 2), replicas=(0, 1, 2),
                               zk_version=1, now_ms=5, log=log)
    assert CompleteProduce("p", ErrorCode.NOT_LEADER_OR_FOLLOWER, 0) in out
    assert core.role is Role.FOLLOWER


def test_leader_answers_offset_for_leader_epoch_from_its_epoch_cache():
    core, log = leader(epoch=1)
    produce(core, log, ["a", "b"], 1)
    apply(log, core.become_leader(leader_epoch=3, isr=(0,), replicas=(0, 1, 2), zk_version=1,
                                  now_ms=1, log=log))
    produce(core, log, ["c"], 1)
    assert core.answer_offset_for_leader_epoch(3, 1, log) == (0, 1, 2)
    assert core.answer_offset_for_leader_epoch(3, 3, log) == (0, 3, 3)
    assert core.answer_offset_for_leader_epoch(2, 1, log)[0] == ErrorCode.FENCED_LEADER_EPOCH


def strict_leader(min_isr=1):
    """A leader under KIP-966's strict min ISR (as the broker runs it)."""
    core = ReplicaCore("t", 0, 0, ReplicationConfig(LAG_MS, min_isr, TruncationMode.LEADER_EPOCH,
                                                    eligible_leader_replicas=True))
    log = MemLog()
    assert apply(log, core.become_leader(leader_epoch=1, isr=(0, 1, 2), replicas=(0, 1, 2),
                                         zk_version=0, now_ms=0, log=log)) == []
    return core, log


def test_a_min_insync_raise_answers_the_waiting_acks_all_writes_at_once():
    """min.insync.replicas raised above |ISR| by a topic config change while an acks=all
    write waits: under the strict min ISR the HW will not reach it, so it is answered
    NOT_ENOUGH_REPLICAS_AFTER_APPEND now, not at its timeout (a CI run under load: the
    write reached the leader before the new config)."""
    core, log = strict_leader()
    assert produce(core, log, ["a"], -1, request_id="p") == (0, [])
    out = apply(log, core.set_min_insync_replicas(4, now_ms=1, log=log))
    assert out == [CompleteProduce("p", ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, 0)]
    assert core.check_produce(-1) == ErrorCode.NOT_ENOUGH_REPLICAS
    # Caught-up followers do not move the HW while the ISR is below the new minimum...
    apply(log, core.on_follower_fetch(1, 1, 2, log))
    apply(log, core.on_follower_fetch(2, 1, 2, log))
    assert log.hw == 0
    # ...and lowering it again lets the held HW move at once.
    assert apply(log, core.set_min_insync_replicas(2, now_ms=3, log=log)) == []
    assert log.hw == 1
    assert core.check_produce(-1) == 0
