"""The KIP-848 member core (node.core.consumer_member): join, reconcile (revoke before
taking), acknowledge, fencing, coordinator errors, leave. The coordinator here is a
script of answers; the core does no I/O."""
from __future__ import annotations

import random

from node.core.consumer_member import (Assign, Commit, Errors, Fatal, FindCoordinator,
                                       Lose, MemberCore, NeedMetadata, Revoke, State)

T1, T2 = "AAAAAAAAAAAAAAAAAAAAAA", "BBBBBBBBBBBBBBBBBBBBBB"
NAMES = {T1: "t1", T2: "t2"}


def member(**kwargs) -> MemberCore:
    core = MemberCore("g", "m-1", rebalance_timeout_ms=30_000, **kwargs)
    core.names_known(NAMES, 0)
    return core


def answer(epoch: int, assignment=None, interval: int = 1000, **extra) -> dict:
    body = {"error_code": 0, "error_message": None, "member_id": None,
            "member_epoch": epoch, "heartbeat_interval_ms": interval, "assignment": None}
    if assignment is not None:
        by: dict = {}
        for t, p in assignment:
            by.setdefault(t, []).append(p)
        body["assignment"] = {"topic_partitions": [{"topic_id": t, "partitions": ps}
                                                   for t, ps in by.items()]}
    body.update(extra)
    return body


def test_join_sends_epoch_zero_with_the_subscription_and_nothing_owned():
    core = member()
    assert not core.heartbeat_due(0)
    core.subscribe(["t2", "t1"], 0)
    assert core.heartbeat_due(0)
    request = core.heartbeat_request(0)
    assert request["member_epoch"] == 0 and request["member_id"] == "m-1"
    assert request["subscribed_topic_names"] == ["t1", "t2"]
    assert request["topic_partitions"] == []
    assert not core.heartbeat_due(0), "one heartbeat in flight at a time"


def test_an_assignment_is_taken_then_acknowledged_at_once():
    core = member()
    core.subscribe(["t1"], 0)
    core.heartbeat_request(0)
    core.on_response(10, answer(1, [(T1, 0), (T1, 1)]))
    assert core.take_actions() == [Assign(frozenset({(T1, 0), (T1, 1)}))]
    assert core.state is State.ACKNOWLEDGING and core.heartbeat_due(10)
    ack = core.heartbeat_request(10)
    assert ack["topic_partitions"] == [{"topic_id": T1, "partitions": [0, 1]}]
    core.on_response(20, answer(1))
    assert core.state is State.STABLE
    assert not core.heartbeat_due(1019) and core.heartbeat_due(1020)


def test_revocation_commits_then_revokes_before_the_new_partitions_are_taken():
    core = member()
    core.subscribe(["t1", "t2"], 0)
    core.heartbeat_request(0)
    core.on_response(0, answer(1, [(T1, 0), (T1, 1)]))
    core.take_actions()
    core.heartbeat_request(0)
    core.on_response(5, answer(2, [(T1, 1), (T2, 0)]))
    actions = core.take_actions()
    assert actions == [Commit(frozenset({(T1, 0)})), Revoke(frozenset({(T1, 0)})),
                       Assign(frozenset({(T2, 0)}))]
    assert core.owned == {(T1, 1), (T2, 0)} and core.member_epoch == 2


def test_without_auto_commit_nothing_is_committed_on_revocation():
    core = member(auto_commit=False)
    core.subscribe(["t1"], 0)
    core.heartbeat_request(0)
    core.on_response(0, answer(1, [(T1, 0)]))
    core.take_actions()
    core.heartbeat_request(0)
    core.on_response(0, answer(2, []))
    assert core.take_actions() == [Revoke(frozenset({(T1, 0)}))]


def test_fenced_member_loses_its_partitions_without_commit_and_rejoins_at_epoch_zero():
    for code in (Errors.FENCED_MEMBER_EPOCH, Errors.UNKNOWN_MEMBER_ID):
        core = member()
        core.subscribe(["t1"], 0)
        core.heartbeat_request(0)
        core.on_response(0, answer(3, [(T1, 0)]))
        core.take_actions()
        core.heartbeat_request(0)
        core.on_response(7, {"error_code": int(code), "member_epoch": -1})
        assert core.take_actions() == [Lose(frozenset({(T1, 0)}))]
        assert core.owned == frozenset() and core.state is State.JOINING
        rejoin = core.heartbeat_request(7)
        assert rejoin["member_epoch"] == 0 and rejoin["member_id"] == "m-1"
        assert rejoin["topic_partitions"] == []


def test_coordinator_errors_rediscover_and_retry_after_the_backoff():
    core = member(retry_backoff_ms=100)
    core.subscribe(["t1"], 0)
    for code, rediscover in ((Errors.NOT_COORDINATOR, True),
                             (Errors.COORDINATOR_NOT_AVAILABLE, True),
                             (Errors.COORDINATOR_LOAD_IN_PROGRESS, False)):
        now = core.next_heartbeat_ms
        core.heartbeat_request(now)
        core.on_response(now, {"error_code": int(code)})
        assert core.take_actions() == ([FindCoordinator()] if rediscover else [])
        assert not core.heartbeat_due(now + 99) and core.heartbeat_due(now + 100)
        assert core.member_epoch == 0 and core.state is State.JOINING
    core.heartbeat_request(core.next_heartbeat_ms)
    core.on_failure(1000, Errors.REQUEST_TIMED_OUT)
    assert core.take_actions() == [FindCoordinator()]


def test_an_unknown_error_is_fatal():
    core = member()
    core.subscribe(["t1"], 0)
    core.heartbeat_request(0)
    core.on_response(0, {"error_code": 112, "error_message": "no such assignor"})
    assert core.take_actions() == [Fatal(112, "no such assignor")]
    assert not core.heartbeat_due(10_000)


def test_a_topic_id_not_in_metadata_waits_for_it():
    core = MemberCore("g", "m-1", rebalance_timeout_ms=1000)
    core.names_known({T1: "t1"}, 0)
    core.subscribe(["t1", "t2"], 0)
    core.heartbeat_request(0)
    core.on_response(0, answer(1, [(T1, 0), (T2, 0)]))
    assert core.take_actions() == [NeedMetadata(frozenset({T2})),
                                   Assign(frozenset({(T1, 0)}))]
    core.names_known(NAMES, 5)
    assert core.take_actions() == [Assign(frozenset({(T2, 0)}))]
    assert core.owned == {(T1, 0), (T2, 0)}


def test_reconciled_while_a_heartbeat_was_out_is_acknowledged_after_its_answer():
    core = MemberCore("g", "m-1", rebalance_timeout_ms=1000)
    core.subscribe(["t1"], 0)
    core.heartbeat_request(0)
    core.on_response(0, answer(1, [(T1, 0)]))       # waits for the name
    core.take_actions()
    core.heartbeat_request(1000)                     # says: owns nothing
    core.names_known(NAMES, 1001)                    # now takes it
    core.on_response(1002, answer(1))
    assert core.state is State.ACKNOWLEDGING and core.heartbeat_due(1002)


def test_leave_commits_revokes_and_sends_epoch_minus_one():
    core = member()
    core.subscribe(["t1"], 0)
    core.heartbeat_request(0)
    core.on_response(0, answer(1, [(T1, 0)]))
    core.take_actions()
    core.heartbeat_request(0)
    core.on_response(0, answer(1))
    core.leave(50)
    assert core.take_actions() == [Commit(frozenset({(T1, 0)})), Revoke(frozenset({(T1, 0)}))]
    request = core.heartbeat_request(50)
    assert request["member_epoch"] == -1
    core.on_response(60, {"error_code": 0, "member_epoch": -1})
    assert core.state is State.LEFT and not core.heartbeat_due(10**9)


def test_random_answers_never_leave_the_member_owning_outside_its_target():
    """Owned partitions stay within the last target; nothing is owned after a fence."""
    rng = random.Random(848)
    tps = [(t, p) for t in (T1, T2) for p in range(4)]
    for _ in range(200):
        core = member(retry_backoff_ms=rng.randrange(0, 50))
        core.subscribe(["t1", "t2"], 0)
        now, epoch = 0, 0
        for _ in range(60):
            now += rng.randrange(0, 2000)
            if not core.heartbeat_due(now):
                continue
            core.heartbeat_request(now)
            roll = rng.random()
            if roll < 0.1:
                core.on_response(now, {"error_code": int(Errors.FENCED_MEMBER_EPOCH)})
                assert core.owned == frozenset()
            elif roll < 0.2:
                core.on_failure(now, int(Errors.NETWORK_EXCEPTION))
            else:
                epoch += 1
                target = rng.sample(tps, rng.randrange(0, len(tps))) \
                    if rng.random() < 0.5 else None
                core.on_response(now, answer(epoch, target))
                if target is not None:
                    assert core.owned == frozenset(target)
            for action in core.take_actions():
                if isinstance(action, (Revoke, Lose, Commit)):
                    assert action.partitions, action
            if core.target is not None:
                assert core.owned <= core.target


def test_a_static_member_sends_its_instance_id_and_leaves_with_epoch_minus_two():
    core = member(instance_id="host-1")
    core.subscribe(["t1"], 0)
    assert core.heartbeat_request(0)["instance_id"] == "host-1"
    core.on_response(0, answer(1, [(T1, 0)]))
    core.take_actions()
    core.leave(5)
    assert core.heartbeat_request(5)["member_epoch"] == -2
