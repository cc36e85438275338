"""The classic member core (node.core.classic_member): KIP-394's member id, the leader's
range assignment, eager revocation before a rejoin, fencing, coordinator errors, leave;
and the consumer protocol's bytes (node.wire.consumer_protocol)."""
from __future__ import annotations

import struct

import pytest

from node.core.classic_member import (HEARTBEAT, JOIN_GROUP, LEAVE_GROUP, SYNC_GROUP,
                                      ClassicMemberCore, Errors, NeedPartitionCounts, State)
from node.core.consumer_member import Assign, Commit, FindCoordinator, Lose, Revoke
from node.wire.consumer_protocol import (ConsumerProtocolError, decode_assignment,
                                         decode_subscription, encode_assignment,
                                         encode_subscription)


def member(**kwargs) -> ClassicMemberCore:
    kwargs.setdefault("session_timeout_ms", 6000)
    kwargs.setdefault("rebalance_timeout_ms", 30_000)
    kwargs.setdefault("heartbeat_interval_ms", 2000)
    return ClassicMemberCore("g", **kwargs)


def join_answer(member_id: str, generation: int, leader: str, members=None) -> dict:
    return {"error_code": 0, "generation_id": generation, "protocol_type": "consumer",
            "protocol_name": "range", "leader": leader, "skip_assignment": False,
            "member_id": member_id, "members": members or []}


def joined_stable(core: ClassicMemberCore, partitions) -> None:
    core.subscribe(["t"], 0)
    core.next_request(0)
    core.on_response(0, join_answer("m-1", 1, "m-0"))
    core.next_request(0)
    core.on_response(0, {"error_code": 0, "assignment": encode_assignment(partitions)})
    core.take_actions()


def test_the_consumer_protocol_bytes_round_trip_and_reject_garbage():
    assert decode_subscription(encode_subscription(["b", "a", "a"])) == ["a", "b"]
    tps = [("a", 2), ("b", 0), ("a", 0)]
    assert sorted(decode_assignment(encode_assignment(tps))) == sorted(tps)
    assert decode_assignment(b"") == []
    # A version 1 subscription (owned partitions after the user data) reads the same.
    v1 = struct.pack(">hi", 1, 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", -1) + \
        struct.pack(">i", 0)
    assert decode_subscription(v1) == ["t"]
    for bad in (b"\x00", encode_assignment(tps)[:-9], struct.pack(">hi", 0, 99)):
        with pytest.raises(ConsumerProtocolError):
            decode_assignment(bad)


def test_join_asks_for_a_member_id_then_the_follower_syncs_and_takes_its_share():
    core = member()
    core.subscribe(["t"], 0)
    api, body = core.next_request(0)
    assert api == JOIN_GROUP and body["member_id"] == ""
    assert body["protocols"][0]["name"] == "range"
    assert decode_subscription(body["protocols"][0]["metadata"]) == ["t"]
    core.on_response(0, {"error_code": int(Errors.MEMBER_ID_REQUIRED), "member_id": "m-1"})
    api, body = core.next_request(0)
    assert api == JOIN_GROUP and body["member_id"] == "m-1"
    core.on_response(5, join_answer("m-1", 3, "m-0"))
    api, body = core.next_request(5)
    assert api == SYNC_GROUP and body["generation_id"] == 3 and body["assignments"] == []
    core.on_response(6, {"error_code": 0, "assignment": encode_assignment([("t", 1)])})
    assert core.take_actions() == [Assign(frozenset({("t", 1)}))]
    assert core.state is State.STABLE
    assert core.next_request(2005) is None
    assert core.next_request(2006)[0] == HEARTBEAT


def test_the_leader_assigns_ranges_over_every_members_subscription():
    core = member()
    core.subscribe(["t"], 0)
    core.next_request(0)
    members = [{"member_id": m, "group_instance_id": None,
                "metadata": encode_subscription(["t"])} for m in ("m-1", "m-0")]
    core.on_response(0, join_answer("m-0", 1, "m-0", members))
    assert core.take_actions() == [NeedPartitionCounts(frozenset({"t"}))]
    assert core.next_request(0) is None           # waits for the counts
    core.partition_counts({"t": 5}, 1)
    api, body = core.next_request(1)
    assert api == SYNC_GROUP
    shares = {a["member_id"]: sorted(decode_assignment(a["assignment"]))
              for a in body["assignments"]}
    assert shares == {"m-0": [("t", 0), ("t", 1), ("t", 2)], "m-1": [("t", 3), ("t", 4)]}


def test_a_rebalance_commits_and_revokes_everything_before_joining_again():
    core = member()
    joined_stable(core, [("t", 0), ("t", 1)])
    core.next_request(5000)
    core.on_response(5000, {"error_code": int(Errors.REBALANCE_IN_PROGRESS)})
    owned = frozenset({("t", 0), ("t", 1)})
    assert core.take_actions() == [Commit(owned), Revoke(owned)]
    api, body = core.next_request(5000)
    assert api == JOIN_GROUP and body["member_id"] == "m-1"


def test_fenced_members_lose_their_partitions_and_an_unknown_one_forgets_its_id():
    for code, member_id in ((Errors.ILLEGAL_GENERATION, "m-1"),
                            (Errors.UNKNOWN_MEMBER_ID, ""),
                            (Errors.FENCED_INSTANCE_ID, "m-1")):
        core = member()
        joined_stable(core, [("t", 0)])
        core.next_request(9000)
        core.on_response(9000, {"error_code": int(code)})
        assert core.take_actions() == [Lose(frozenset({("t", 0)}))]
        api, body = core.next_request(9000)
        assert api == JOIN_GROUP and body["member_id"] == member_id


def test_coordinator_errors_rediscover_and_a_failed_sync_joins_again():
    core = member(retry_backoff_ms=100)
    core.subscribe(["t"], 0)
    core.next_request(0)
    core.on_response(0, join_answer("m-1", 1, "m-0"))
    core.next_request(0)
    core.on_failure(10, int(Errors.NETWORK_EXCEPTION))
    assert core.take_actions() == [FindCoordinator()]
    assert core.next_request(109) is None
    assert core.next_request(110)[0] == JOIN_GROUP
    core.on_response(120, {"error_code": int(Errors.COORDINATOR_LOAD_IN_PROGRESS)})
    assert core.take_actions() == [] and core.next_request(220)[0] == JOIN_GROUP


def test_leave_commits_revokes_and_sends_leave_group():
    core = member()
    joined_stable(core, [("t", 0)])
    core.leave(100)
    assert core.take_actions() == [Commit(frozenset({("t", 0)})),
                                   Revoke(frozenset({("t", 0)}))]
    api, body = core.next_request(100)
    assert api == LEAVE_GROUP and body["members"][0]["member_id"] == "m-1"
    core.on_response(101, {"error_code": 0, "members": []})
    assert core.state is State.LEFT and core.next_request(10**9) is None


def test_a_static_member_names_its_instance_and_leaves_without_leave_group():
    core = member(instance_id="host-1")
    core.subscribe(["t"], 0)
    assert core.next_request(0)[1]["group_instance_id"] == "host-1"
    core.on_response(0, join_answer("m-1", 1, "m-0"))
    assert core.next_request(0)[1]["group_instance_id"] == "host-1"
    core.on_response(0, {"error_code": 0, "assignment": encode_assignment([("t", 0)])})
    core.take_actions()
    core.leave(10)
    assert core.take_actions() == [Commit(frozenset({("t", 0)})),
                                   Revoke(frozenset({("t", 0)}))]
    assert core.state is State.LEFT and core.next_request(10) is None


def test_the_leader_joins_again_when_a_partition_count_moved():
    core = member()
    core.subscribe(["t", "u"], 0)
    core.next_request(0)
    core.on_response(0, join_answer("m-0", 1, "m-0", [{
        "member_id": "m-0", "metadata": encode_subscription(["t", "u"])}]))
    core.take_actions()
    core.partition_counts({"t": 2, "u": 0}, 0)           # u does not exist yet
    core.next_request(0)
    core.on_response(0, {"error_code": 0, "assignment": encode_assignment([("t", 0),
                                                                           ("t", 1)])})
    core.take_actions()
    core.counts_changed({"t": 2, "u": 0}, 10)
    assert core.state is State.STABLE
    core.counts_changed({"t": 2, "u": 3}, 20)
    assert core.take_actions() == [Commit(frozenset({("t", 0), ("t", 1)})),
                                   Revoke(frozenset({("t", 0), ("t", 1)}))]
    assert core.next_request(20)[0] == JOIN_GROUP
