"""The classic group protocol through GroupShard: one test per Kafka rule."""

import pytest

from node.core.groups import records
from node.core.groups.config import GroupConfig

from .harness import HEARTBEAT, JOIN, LEAVE, SYNC, Harness, subscription

NONE, ILLEGAL_GENERATION, INCONSISTENT, INVALID_GROUP_ID = 0, 22, 23, 24
UNKNOWN_MEMBER, INVALID_SESSION, REBALANCE_IN_PROGRESS = 25, 26, 27
MEMBER_ID_REQUIRED, MAX_SIZE, FENCED = 79, 81, 82


def hb(h, member, generation, instance=None):
    return h.call(HEARTBEAT, {"group_id": "g", "generation_id": generation, "member_id": member,
                              "group_instance_id": instance})["error_code"]


def stable_group(h, n=2, **kw):
    """n members joined and synced; their (member id, generation) in join order."""
    tokens = [h.join_new("g", **kw) for _ in range(n)]
    h.advance(0)
    answers = [h.reply(t) for t in tokens]
    assert all(a is not None and a["error_code"] == NONE for a in answers), answers
    gen = answers[0]["generation_id"]
    members = [a["member_id"] for a in answers]
    leader = answers[0]["leader"]
    syncs = {mid: h.send(SYNC, h.sync_body("g", mid, gen, instance=kw.get("instance")))
             for mid in members if mid != leader}
    assignment = {mid: mid.encode() for mid in members}
    assert h.call(SYNC, h.sync_body("g", leader, gen, assignment,
                                    instance=kw.get("instance")))["assignment"] == leader.encode()
    for mid, token in syncs.items():
        assert h.reply(token)["assignment"] == mid.encode()
    return members, gen


def test_kip394_member_id_required_from_join_v4():
    h = Harness()
    first = h.call(JOIN, h.join_body("g"), version=4)
    assert first["error_code"] == MEMBER_ID_REQUIRED and first["member_id"].startswith("client-")
    assert h.shard.classic.get("g").members == {}          # pending, not a member yet
    token = h.send(JOIN, h.join_body("g", member_id=first["member_id"]), version=4)
    h.advance(0)
    assert h.reply(token)["member_id"] == first["member_id"]
    # v3 and older join at once, without the extra round trip.
    h2 = Harness()
    token = h2.send(JOIN, h2.join_body("g"), version=3)
    h2.advance(0)
    assert h2.reply(token)["error_code"] == NONE


def test_a_pending_member_that_never_rejoins_expires_after_its_session_timeout():
    h = Harness()
    first = h.call(JOIN, h.join_body("g", session_ms=6000))
    h.advance(6000)
    again = h.call(JOIN, h.join_body("g", member_id=first["member_id"]))
    assert again["error_code"] == UNKNOWN_MEMBER


@pytest.mark.parametrize("body,error", [
    ({"group_id": ""}, INVALID_GROUP_ID),
    ({"session_ms": 5999}, INVALID_SESSION),
    ({"session_ms": 1800001}, INVALID_SESSION),
    ({"protocols": ()}, INCONSISTENT),
    ({"protocol_type": ""}, INCONSISTENT),
])
def test_join_validation(body, error):
    h = Harness()
    kw = {"session_ms": body.get("session_ms", 10_000)}
    if "protocols" in body:
        kw["protocols"] = body["protocols"]
    if "protocol_type" in body:
        kw["protocol_type"] = body["protocol_type"]
    request = h.join_body(body.get("group_id", "g"), **kw)
    assert h.call(JOIN, request, version=3)["error_code"] == error


def test_the_initial_rebalance_waits_the_delay_and_again_while_members_arrive():
    h = Harness(GroupConfig(group_initial_rebalance_delay_ms=3000))
    a = h.join_new("g", rebalance_ms=10_000)
    h.advance(2000)
    b = h.join_new("g", rebalance_ms=10_000)             # a new member inside the delay
    h.advance(1000)                                      # first delay over: b extends it
    assert h.reply(a) is None and h.reply(b) is None
    h.advance(2999)
    assert h.reply(a) is None
    h.advance(1)
    ra, rb = h.reply(a), h.reply(b)
    assert ra["generation_id"] == rb["generation_id"] == 1 and len(ra["members"]) == 2


def test_the_initial_delay_never_runs_past_the_rebalance_timeout():
    # Kafka: delay 3000, rebalance timeout 5000: the first wait ends at 3 s with 2 s left;
    # members kept arriving, so one more wait of min(3000, 2000); then nothing is left.
    h = Harness(GroupConfig(group_initial_rebalance_delay_ms=3000))
    start = h.now
    first = h.join_new("g", rebalance_ms=5000)
    while first not in h.replies:
        h.advance(500)
        if (h.now - start) % 1000 == 0:
            h.join_new("g", rebalance_ms=5000)             # a new member every second
    assert h.now - start == 5000


def test_generation_fencing_on_heartbeat():
    h = Harness()
    (a, b), gen = stable_group(h)
    assert hb(h, a, gen) == NONE
    assert hb(h, a, gen - 1) == ILLEGAL_GENERATION
    assert hb(h, "nobody", gen) == UNKNOWN_MEMBER
    # A follower rejoining with the same protocols in Stable just gets the generation back.
    same = h.call(JOIN, h.join_body("g", member_id=b))
    assert same["generation_id"] == gen and same["members"] == []
    h.send(JOIN, h.join_body("g", member_id=a))          # the leader rejoins: a rebalance
    assert hb(h, a, gen) == REBALANCE_IN_PROGRESS
    assert h.call(SYNC, h.sync_body("g", a, gen))["error_code"] == REBALANCE_IN_PROGRESS


def test_sync_waits_for_the_leader_and_writes_the_assignment():
    h = Harness()
    t1, t2 = h.join_new("g"), h.join_new("g")
    h.advance(0)
    r1, r2 = h.reply(t1), h.reply(t2)
    leader = r1["leader"]
    follower = r2["member_id"] if r1["member_id"] == leader else r1["member_id"]
    assert len((r1 if r1["member_id"] == leader else r2)["members"]) == 2
    assert (r2 if r1["member_id"] == leader else r1)["members"] == []
    before = len(h.log)
    parked = h.send(SYNC, h.sync_body("g", follower, r1["generation_id"]))
    assert h.reply(parked) is None and len(h.log) == before
    assert h.call(SYNC, h.sync_body("g", follower, r1["generation_id"] + 1))["error_code"] \
        == ILLEGAL_GENERATION
    h.call(SYNC, h.sync_body("g", leader, r1["generation_id"], {follower: b"F"}))
    assert h.reply(parked)["assignment"] == b"F"
    rec = h.decoded()[-1]
    assert rec.key == {"group": "g"} and rec.value["generation"] == r1["generation_id"]
    assert {mb["member_id"]: mb["assignment"] for mb in rec.value["members"]} == \
        {follower: b"F", leader: b""}
    assert h.shard.classic.get("g").state.value == "Stable"


def test_protocol_selection_by_vote_and_inconsistent_protocols():
    h = Harness()
    both = (("range", subscription("t")), ("roundrobin", subscription("t")))
    only_rr = (("roundrobin", subscription("t")),)
    t1 = h.join_new("g", protocols=both)
    t2 = h.join_new("g", protocols=only_rr)
    h.advance(0)
    assert h.reply(t1)["protocol_name"] == h.reply(t2)["protocol_name"] == "roundrobin"
    other = h.call(JOIN, h.join_body("g", protocols=(("sticky", b""),)))
    assert other["error_code"] == INCONSISTENT
    other_type = h.call(JOIN, h.join_body("g", protocol_type="connect"))
    assert other_type["error_code"] == INCONSISTENT


def test_group_max_size():
    h = Harness(GroupConfig(group_initial_rebalance_delay_ms=0, group_max_size=2))
    stable_group(h, 2)
    third = h.call(JOIN, h.join_body("g"), version=3)
    assert third["error_code"] == MAX_SIZE


def test_a_member_that_stops_heartbeating_is_removed_after_its_session_timeout():
    h = Harness()
    (a, b), gen = stable_group(h, session_ms=6000)
    h.advance(5000)
    assert hb(h, a, gen) == NONE
    h.advance(1000)                                      # b's session is over
    group = h.shard.classic.get("g")
    assert b not in group.members and group.state.value == "PreparingRebalance"
    assert hb(h, a, gen) == REBALANCE_IN_PROGRESS
    token = h.send(JOIN, h.join_body("g", member_id=a, session_ms=6000))
    answer = h.reply(token)
    assert answer["generation_id"] == gen + 1 and [x["member_id"] for x in answer["members"]] == [a]


def test_a_member_that_does_not_rejoin_is_dropped_at_the_rebalance_timeout():
    h = Harness()
    (a, b), gen = stable_group(h, rebalance_ms=8000)
    token = h.send(JOIN, h.join_body("g", member_id=a, rebalance_ms=8000))
    h.advance(5000)
    assert hb(h, b, gen) == REBALANCE_IN_PROGRESS        # b heartbeats but does not rejoin
    h.advance(3000)
    answer = h.reply(token)
    assert answer["generation_id"] == gen + 1 and [x["member_id"] for x in answer["members"]] == [a]
    assert hb(h, b, gen) == UNKNOWN_MEMBER


def test_a_leader_that_never_syncs_makes_the_pending_members_leave():
    h = Harness()
    t1, t2 = h.join_new("g", rebalance_ms=7000), h.join_new("g", rebalance_ms=7000)
    h.advance(0)
    r1, r2 = h.reply(t1), h.reply(t2)
    follower = r2["member_id"] if r1["leader"] == r1["member_id"] else r1["member_id"]
    parked = h.send(SYNC, h.sync_body("g", follower, r1["generation_id"]))
    h.advance(7000)                                       # the sync wait is over
    assert h.reply(parked)["error_code"] == REBALANCE_IN_PROGRESS
    group = h.shard.classic.get("g")
    assert r1["leader"] not in group.members and follower in group.members


def test_static_member_restart_replaces_its_id_without_a_rebalance():
    h = Harness()
    (old,), gen = stable_group(h, 1, instance="i-1")
    records_before = len(h.log)
    again = h.call(JOIN, h.join_body("g", instance="i-1"))   # restarted: no member id
    assert again["error_code"] == NONE and again["member_id"] != old
    assert again["generation_id"] == gen and again["skip_assignment"] is True  # v9 leader
    assert len(h.log) == records_before + 1 and h.decoded()[-1].value["members"][0][
        "member_id"] == again["member_id"]
    assert hb(h, old, gen, "i-1") == FENCED
    assert hb(h, again["member_id"], gen, "i-1") == NONE
    sync = h.call(SYNC, h.sync_body("g", again["member_id"], gen, instance="i-1"))
    assert sync["assignment"] == old.encode()             # the old member's assignment
    assert h.shard.classic.get("g").state.value == "Stable"


def test_static_member_with_a_new_protocol_choice_causes_a_rebalance():
    h = Harness()
    (old,), gen = stable_group(h, 1, instance="i-1")
    # Still supports the group's protocol, but now prefers another: the vote changes.
    both = (("sticky", subscription("t")), ("range", subscription("t")))
    token = h.send(JOIN, h.join_body("g", instance="i-1", protocols=both))
    h.advance(0)
    answer = h.reply(token)
    assert answer["generation_id"] == gen + 1 and answer["protocol_name"] == "sticky"


def test_a_static_member_that_does_not_rejoin_stays_through_a_rebalance():
    h = Harness()
    ts = h.join_new("g", instance="s-1")
    td = h.join_new("g")
    h.advance(0)
    static_id, dynamic = h.reply(ts)["member_id"], h.reply(td)["member_id"]
    gen = h.shard.classic.get("g").generation
    newcomer = h.join_new("g")                           # a new member: a rebalance ...
    token = h.send(JOIN, h.join_body("g", member_id=dynamic))   # ... that s-1 does not join
    for _ in range(2):                                   # s-1 lives (heartbeats), never rejoins
        h.advance(8_000)
        assert hb(h, static_id, gen, "s-1") == REBALANCE_IN_PROGRESS
    h.advance(4_000)                                             # the rebalance timeout
    group = h.shard.classic.get("g")
    assert static_id in group.members and group.generation == gen + 1
    assert h.reply(token)["generation_id"] == h.reply(newcomer)["generation_id"] == gen + 1
    # ... while a dynamic member that does not rejoin is dropped.
    h2 = Harness()
    (a, b), gen2 = stable_group(h2, 2)
    h2.send(JOIN, h2.join_body("g", member_id=a))
    h2.advance(20_000)
    assert list(h2.shard.classic.get("g").members) == [a]


def test_batched_leave_v3_and_static_leave_by_instance_id():
    h = Harness()
    (a, b, c), gen = stable_group(h, 3)
    response = h.call(LEAVE, {"group_id": "g", "member_id": "", "members": [
        {"member_id": a, "group_instance_id": None, "reason": None},
        {"member_id": "ghost", "group_instance_id": None, "reason": None},
        {"member_id": b, "group_instance_id": None, "reason": "bye"}]})
    assert [(x["member_id"], x["error_code"]) for x in response["members"]] == \
        [(a, NONE), ("ghost", UNKNOWN_MEMBER), (b, NONE)]
    assert list(h.shard.classic.get("g").members) == [c]
    h2 = Harness()
    (s,), _ = stable_group(h2, 1, instance="i-9")
    out = h2.call(LEAVE, {"group_id": "g", "member_id": "", "members": [
        {"member_id": "", "group_instance_id": "i-9", "reason": None}]})
    assert out["members"][0]["error_code"] == NONE
    assert h2.shard.classic.get("g").members == {}


def test_leave_v0_reports_the_members_error_at_the_top():
    h = Harness()
    stable_group(h, 1)
    out = h.call(LEAVE, {"group_id": "g", "member_id": "ghost", "members": []}, version=0)
    assert out["error_code"] == UNKNOWN_MEMBER


def test_the_last_member_leaving_empties_the_group_and_writes_it():
    h = Harness()
    (a,), gen = stable_group(h, 1)
    h.call(LEAVE, {"group_id": "g", "member_id": "", "members": [
        {"member_id": a, "group_instance_id": None, "reason": None}]})
    group = h.shard.classic.get("g")
    assert group.state.value == "Empty" and group.generation == gen + 1
    last = h.decoded()[-1].value
    assert last["members"] == [] and last["generation"] == gen + 1 and last["protocol"] is None


def test_a_second_join_while_one_is_parked_answers_the_first():
    h = Harness()
    (a, b), gen = stable_group(h)
    first = h.send(JOIN, h.join_body("g", member_id=a))
    h.send(JOIN, h.join_body("g", member_id=a))
    assert h.reply(first)["error_code"] == REBALANCE_IN_PROGRESS


def test_group_metadata_record_is_kafkas_layout():
    h = Harness()
    stable_group(h, 2)
    key, value = h.log[-1]
    assert key[:2] == b"\x00\x02" and value[:2] == b"\x00\x03"
    rec = records.decode(key, value)
    assert rec.value["protocol_type"] == "consumer" and len(rec.value["members"]) == 2
    assert all(mb["client_host"] == "/127.0.0.1" for mb in rec.value["members"])
