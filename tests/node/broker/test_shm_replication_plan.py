"""The pure decisions of the shared-memory replication path
(node.broker.shm_replication.plan), with seeded random states."""
from __future__ import annotations

import random

import pytest

from node.broker.shm_replication import plan
from shm.replication_slot import FollowerReport, LeaderState


def leader(epoch=5, leo=100, hw=90, start=10):
    return LeaderState(epoch, leo, hw, start, 1234)


def step(**kw):
    args = dict(leader_epoch=5, fetch_offset=100, high_watermark=90, log_start_offset=10,
                leader=leader(), report_due=False)
    args.update(kw)
    return plan.follower_step(**args)


def test_the_cases_one_by_one():
    assert step(fetch_offset=95) == plan.Copy(95, 100)
    assert step() == plan.Wait("caught up")
    assert step(report_due=True) == plan.Report()
    # The leader's HW or log start moved alone: learnt at the next copy or report, as a
    # parked Fetch is not completed by them
    assert step(high_watermark=80) == plan.Wait("caught up")
    assert step(high_watermark=80, report_due=True) == plan.Report()
    assert step(leader=leader(hw=120, leo=120, start=60), fetch_offset=120, high_watermark=120,
                log_start_offset=50) == plan.Wait("caught up")
    # Nothing is copied from a leader whose process is stopped or dead
    assert step(fetch_offset=95, leader_running=False) == \
        plan.Wait("the leader's process is not running")
    assert step(leader_running=False, report_due=True) == plan.Report()
    assert isinstance(step(leader=leader(epoch=6)), plan.Wait)     # LeaderAndIsr pending
    assert isinstance(step(leader=leader(epoch=-1)), plan.Wait)    # the leader retired
    assert isinstance(step(fetch_offset=101), plan.Fallback)      # ahead of the leader
    assert isinstance(step(fetch_offset=9), plan.Fallback)        # below its log start


@pytest.mark.parametrize("seed", range(5))
def test_random_states_never_copy_outside_the_leaders_log_or_epoch(seed):
    rng = random.Random(seed)
    for _ in range(2000):
        epoch = rng.randint(0, 4)
        start = rng.randint(0, 50)
        leo = start + rng.randint(0, 50)
        state = leader(epoch=rng.choice([epoch, epoch + 1, epoch - 1, -1]), leo=leo,
                       hw=rng.randint(start, leo), start=start)
        offset = rng.randint(0, 120)
        hw = rng.randint(0, offset)
        running = rng.random() < 0.8
        result = plan.follower_step(leader_epoch=epoch, fetch_offset=offset,
                                    high_watermark=hw, log_start_offset=min(hw, 30),
                                    leader=state, report_due=rng.random() < 0.2,
                                    leader_running=running)
        if state.leader_epoch != epoch:
            assert isinstance(result, plan.Wait), (state, epoch, result)
        elif not start <= offset <= leo:
            assert isinstance(result, plan.Fallback)
        elif offset < leo:
            assert result == (plan.Copy(offset, leo) if running else
                              plan.Wait("the leader's process is not running"))
        else:
            assert isinstance(result, (plan.Report, plan.Wait))
        if isinstance(result, plan.Copy):
            assert state.log_start_offset <= result.start < result.end == state.log_end_offset


def test_a_report_taking_over_from_fetch_learns_no_hw():
    # A caught-up follower that Fetch served until now: its first report tells the leader
    # its LEO, as a fetch at the log end would, but teaches it nothing (that fetch would
    # be parked): its HW stays until the next copy or report
    first = step(report_due=True, taking_over=True)
    assert first == plan.Report(learn_high_watermark=False)
    assert plan.learnt_high_watermark(first, leader_high_watermark=100, high_watermark=90) == 90
    later = step(report_due=True)
    assert plan.learnt_high_watermark(later, leader_high_watermark=100, high_watermark=90) == 100
    # a copy carries the leader's HW (a fetch answered with data does), taking over or not
    copy = step(fetch_offset=95, taking_over=True)
    assert copy == plan.Copy(95, 100)
    assert plan.learnt_high_watermark(copy, leader_high_watermark=93, high_watermark=90) == 93


def test_a_caught_up_follower_reports_as_often_as_a_fetchers_long_poll_returns():
    # Kafka's defaults: every replica.fetch.wait.max.ms
    assert plan.report_interval_ms(500, 30_000) == 500
    # The HW-truncation scenario's: 30 s, not sooner (a report a third of the lag time
    # after the last copy taught the follower the HW a Fetch follower had not learnt yet)
    assert plan.report_interval_ms(30_000, 60_000) == 30_000
    # A wait as long as the lag time (allowed): twice per lag time all the same
    assert plan.report_interval_ms(60_000, 60_000) == 30_000
    assert plan.report_interval_ms(0, 30_000) == 1


def test_a_copy_is_kept_only_if_the_epoch_held_throughout():
    assert plan.copy_valid(5, 5, 5)
    assert not plan.copy_valid(5, 5, -1)     # retired during the copy: may be truncated
    assert not plan.copy_valid(5, 4, 5)
    assert not plan.copy_valid(5, 5, 6)


def test_the_leader_acts_once_per_report_of_its_epoch_and_followers():
    seen: dict[int, int] = {}
    reports = [FollowerReport(1, 2, 5, 40), FollowerReport(2, 4, 4, 99),
               FollowerReport(7, 2, 5, 50)]
    fresh = plan.fresh_reports(reports, seen, 5, {1: None, 2: None})
    assert fresh == [reports[0]]             # broker 2 in an old epoch, 7 not a follower
    assert plan.fresh_reports(reports, seen, 5, {1: None, 2: None}) == []  # read already
    newer = [FollowerReport(1, 4, 5, 41)]
    assert plan.fresh_reports(newer, seen, 5, {1: None}) == newer
    assert seen == {1: 4}


def test_a_follower_looks_for_a_missing_slot_again_soon_then_less_often():
    # The leader's LeaderAndIsr may come a moment after the follower's: soon at first ...
    waits = [plan.slot_retry_ms(0, 1000)]
    while len(waits) < 10:
        waits.append(plan.slot_retry_ms(waits[-1], 1000))
    assert waits == [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000]
    # ... and never beyond the backoff (a Fetch-only leader is asked as a fetcher retries),
    # nor nothing at all
    assert plan.slot_retry_ms(0, 5) == 5
    assert plan.slot_retry_ms(0, 0) == 1
    assert plan.slot_retry_ms(10**9, 30_000) == 30_000
