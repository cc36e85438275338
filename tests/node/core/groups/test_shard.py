"""GroupShard: offsets, group admin (List/Describe/Delete), expiry, loading and fail-over."""

from node.core.groups import records
from node.core.groups.config import GroupConfig
from node.core.groups.shard import GroupShard, error_response

from .harness import (DELETE, DESCRIBE, HEARTBEAT, JOIN, LEAVE, LIST, OFFSET_COMMIT,
                      OFFSET_DELETE, OFFSET_FETCH, SYNC, Harness, subscription)
from .test_classic import stable_group

NONE, TOO_LARGE, LOADING, NOT_COORDINATOR = 0, 12, 14, 16
ILLEGAL_GENERATION, UNKNOWN_MEMBER, REBALANCE_IN_PROGRESS = 22, 25, 27
NON_EMPTY, NOT_FOUND, SUBSCRIBED = 68, 69, 86
MINUTE = 60_000


def fetched(h, group="g", topics=None) -> dict:
    out = h.call(OFFSET_FETCH, h.fetch_body(group, topics))["groups"][0]
    return {(t["name"], p["partition_index"]): (p["committed_offset"], p["metadata"])
            for t in out["topics"] for p in t["partitions"]}


def codes(response) -> list[int]:
    return [p["error_code"] for t in response["topics"] for p in t["partitions"]]


def leave_all(h, members):
    h.call(LEAVE, {"group_id": "g", "member_id": "", "members": [
        {"member_id": mid, "group_instance_id": None, "reason": None} for mid in members]})


def test_simple_commits_create_a_group_and_survive_fail_over():
    h = Harness()
    assert codes(h.call(OFFSET_COMMIT, h.commit_body("g", {("t", 0): 5, ("t", 1): 7},
                                                     metadata="m"))) == [NONE, NONE]
    assert fetched(h) == {("t", 0): (5, "m"), ("t", 1): (7, "m")}
    h.failover()
    assert fetched(h) == {("t", 0): (5, "m"), ("t", 1): (7, "m")}
    assert fetched(h, topics={"t": [0, 9]}) == {("t", 0): (5, "m"), ("t", 9): (-1, "")}
    assert fetched(h, "other", {"t": [0]}) == {("t", 0): (-1, "")}


def test_a_commit_with_a_generation_to_no_group_is_refused_by_version():
    h = Harness()
    body = h.commit_body("nope", {("t", 0): 1}, generation=3, member_id="m")
    assert codes(h.call(OFFSET_COMMIT, body, version=9)) == [NOT_FOUND]
    assert codes(h.call(OFFSET_COMMIT, body, version=8)) == [ILLEGAL_GENERATION]


def test_group_commits_are_fenced_by_generation_and_member():
    h = Harness()
    (a, b), gen = stable_group(h)
    assert codes(h.call(OFFSET_COMMIT, h.commit_body("g", {("t", 0): 1}, gen, a))) == [NONE]
    assert codes(h.call(OFFSET_COMMIT, h.commit_body("g", {("t", 0): 2}, gen - 1, a))) == \
        [ILLEGAL_GENERATION]
    assert codes(h.call(OFFSET_COMMIT, h.commit_body("g", {("t", 0): 3}, gen, "x"))) == \
        [UNKNOWN_MEMBER]
    # A simple (generation -1, no member) commit to a group with members is refused.
    assert codes(h.call(OFFSET_COMMIT, h.commit_body("g", {("t", 0): 4}))) == [UNKNOWN_MEMBER]
    assert fetched(h)[("t", 0)][0] == 1


def test_a_commit_during_completing_rebalance_is_rebalance_in_progress():
    h = Harness()
    (a, b), gen = stable_group(h)
    h.send(JOIN, h.join_body("g", member_id=a))          # the leader rejoins
    t = h.send(JOIN, h.join_body("g", member_id=b))
    assert h.reply(t)["generation_id"] == gen + 1        # now CompletingRebalance
    body = h.commit_body("g", {("t", 0): 1}, gen + 1, a)
    assert codes(h.call(OFFSET_COMMIT, body)) == [REBALANCE_IN_PROGRESS]


def test_metadata_over_the_limit_is_refused_per_partition():
    h = Harness(GroupConfig(group_initial_rebalance_delay_ms=0, offset_metadata_max_bytes=4))
    body = h.commit_body("g", {("t", 0): 1}, metadata="12345")
    body["topics"][0]["partitions"].append({"partition_index": 1, "committed_offset": 2,
                                            "committed_leader_epoch": -1,
                                            "commit_timestamp": -1, "committed_metadata": "ok"})
    assert codes(h.call(OFFSET_COMMIT, body)) == [TOO_LARGE, NONE]
    assert fetched(h) == {("t", 1): (2, "ok")}


def test_a_commit_keeps_the_members_session():
    h = Harness()
    (a, b), gen = stable_group(h, session_ms=6000)
    for _ in range(3):
        h.advance(4000)
        h.call(OFFSET_COMMIT, h.commit_body("g", {("t", 0): 1}, gen, a))
        h.call(HEARTBEAT, {"group_id": "g", "generation_id": gen, "member_id": b,
                           "group_instance_id": None})
    assert set(h.shard.classic.get("g").members) == {a, b}


def test_offset_delete_rules():
    h = Harness()
    h.call(OFFSET_COMMIT, h.commit_body("simple", {("t", 0): 1, ("u", 0): 2}))
    out = h.call(OFFSET_DELETE, {"group_id": "simple", "topics": [
        {"name": "t", "partitions": [{"partition_index": 0}, {"partition_index": 5}]}]})
    assert out["error_code"] == NONE and codes(out) == [NONE, NONE]
    assert h.decoded()[-1] == records.offset_tombstone("simple", "t", 0)
    assert fetched(h, "simple") == {("u", 0): (2, "")}
    assert h.call(OFFSET_DELETE, {"group_id": "nope", "topics": []})["error_code"] == NOT_FOUND
    (a, b), gen = stable_group(h)                         # subscribed to "t"
    h.call(OFFSET_COMMIT, h.commit_body("g", {("t", 0): 1, ("old", 0): 1}, gen, a))
    out = h.call(OFFSET_DELETE, {"group_id": "g", "topics": [
        {"name": "t", "partitions": [{"partition_index": 0}]},
        {"name": "old", "partitions": [{"partition_index": 0}]}]})
    assert codes(out) == [SUBSCRIBED, NONE]
    # A non-empty group of another protocol type: NON_EMPTY_GROUP.
    t = h.send(JOIN, h.join_body("c", protocol_type="connect"), version=3)
    h.advance(0)
    assert h.reply(t)["error_code"] == NONE
    assert h.call(OFFSET_DELETE, {"group_id": "c", "topics": []})["error_code"] == NON_EMPTY


def test_list_describe_and_delete_groups():
    h = Harness()
    (a, b), gen = stable_group(h)
    h.call(OFFSET_COMMIT, h.commit_body("g", {("t", 0): 1}, gen, a))
    h.call(OFFSET_COMMIT, h.commit_body("s", {("t", 0): 1}))
    listed = h.call(LIST, {"states_filter": [], "types_filter": []})["groups"]
    assert {(x["group_id"], x["group_state"], x["protocol_type"]) for x in listed} == \
        {("g", "Stable", "consumer"), ("s", "Empty", "")}
    only = h.call(LIST, {"states_filter": ["stable"], "types_filter": ["Classic"]})["groups"]
    assert [x["group_id"] for x in only] == ["g"]
    assert h.call(LIST, {"states_filter": [], "types_filter": ["consumer"]})["groups"] == []
    described = h.call(DESCRIBE, {"groups": ["g"], "include_authorized_operations": False})
    group = described["groups"][0]
    assert group["group_state"] == "Stable" and group["protocol_data"] == "range"
    assert {mb["member_id"]: mb["member_assignment"] for mb in group["members"]} == \
        {a: a.encode(), b: b.encode()}
    out = h.call(DELETE, {"groups_names": ["g", "s", "missing"]})["results"]
    assert [(r["group_id"], r["error_code"]) for r in out] == \
        [("g", NON_EMPTY), ("s", NONE), ("missing", NOT_FOUND)]
    assert h.decoded()[-2:] == [records.offset_tombstone("s", "t", 0), records.group_tombstone("s")]
    leave_all(h, [a, b])
    assert h.call(DELETE, {"groups_names": ["g"]})["results"][0]["error_code"] == NONE
    h.failover()
    assert h.call(LIST, {"states_filter": [], "types_filter": []})["groups"] == []
    assert fetched(h, "g", {"t": [0]}) == {("t", 0): (-1, "")}


def test_offsets_of_an_empty_group_expire_after_retention_from_when_it_emptied():
    config = GroupConfig(group_initial_rebalance_delay_ms=0, offsets_retention_minutes=10,
                         offsets_retention_check_interval_ms=MINUTE)
    h = Harness(config)
    (a,), gen = stable_group(h, 1, session_ms=60_000)
    h.call(OFFSET_COMMIT, h.commit_body("g", {("t", 0): 1}, gen, a))
    for _ in range(20):                                   # alive for 20 minutes: kept
        h.advance(MINUTE // 2)
        h.call(HEARTBEAT, {"group_id": "g", "generation_id": gen, "member_id": a,
                           "group_instance_id": None})
    assert fetched(h) == {("t", 0): (1, "")} and a in h.shard.classic.get("g").members
    leave_all(h, [a])                                      # empty from now
    h.advance(9 * MINUTE)
    assert fetched(h) == {("t", 0): (1, "")}
    h.advance(2 * MINUTE)
    assert fetched(h, topics={"t": [0]}) == {("t", 0): (-1, "")}
    assert h.shard.classic.get("g") is None                # the group went with them
    assert h.decoded()[-1] == records.group_tombstone("g")


def test_a_stable_consumer_group_expires_only_offsets_of_topics_it_does_not_read():
    config = GroupConfig(group_initial_rebalance_delay_ms=0, offsets_retention_minutes=10,
                         offsets_retention_check_interval_ms=MINUTE)
    h = Harness(config)
    (a,), gen = stable_group(h, 1, session_ms=1_800_000)   # subscribed to "t"
    h.call(OFFSET_COMMIT, h.commit_body("g", {("t", 0): 1, ("gone", 0): 2}, gen, a))
    h.advance(11 * MINUTE)
    assert fetched(h) == {("t", 0): (1, "")}


def test_a_retention_time_from_offset_commit_v2_to_v4_sets_the_expiry():
    config = GroupConfig(group_initial_rebalance_delay_ms=0,
                         offsets_retention_check_interval_ms=MINUTE)
    h = Harness(config)
    h.call(OFFSET_COMMIT, h.commit_body("s", {("t", 0): 1}, retention_ms=2 * MINUTE),
           version=4)
    assert h.decoded()[-1].value["expire_timestamp"] == h.now + 2 * MINUTE
    h.advance(3 * MINUTE)
    assert fetched(h, "s", {"t": [0]}) == {("t", 0): (-1, "")}


def test_a_stable_group_replays_to_the_same_members_and_fresh_sessions():
    h = Harness()
    (a, b), gen = stable_group(h, 2, session_ms=6000)
    before = h.shard.classic.get("g")
    h.advance(5000)
    h.failover()                                           # at t: sessions start again
    after = h.shard.classic.get("g")
    assert after.state.value == "Stable" and after.generation == gen == before.generation
    assert {k: (v.assignment, v.protocols) for k, v in after.members.items()} == \
        {k: (v.assignment, v.protocols) for k, v in before.members.items()}
    h.advance(5999)
    assert set(h.shard.classic.get("g").members) == {a, b}
    sync = h.call(SYNC, h.sync_body("g", b, gen))
    assert sync["assignment"] == b.encode()
    h.advance(1)
    assert a not in h.shard.classic.get("g").members       # a never heartbeated


def test_parked_requests_get_not_coordinator_on_unload():
    h = Harness()
    (a, b), gen = stable_group(h)
    token = h.send(JOIN, h.join_body("g", member_id=a))
    assert token not in h.replies
    h.failover()
    assert h.reply(token)["error_code"] == NOT_COORDINATOR


def test_before_loading_every_request_gets_load_in_progress():
    shard = GroupShard(0, GroupConfig())
    result = shard.handle(0, OFFSET_COMMIT, 9, Harness.commit_body("g", {("t", 0): 1}), "tok")
    assert result.records == []
    assert [p["error_code"] for t in result.replies[0].body["topics"]
            for p in t["partitions"]] == [LOADING]
    assert shard.tick(10**9).records == []


def test_error_response_fills_every_error_field():
    out = error_response(DELETE, {"groups_names": ["a", "b"]}, NOT_COORDINATOR)
    assert out["results"] == [{"group_id": "a", "error_code": 16},
                              {"group_id": "b", "error_code": 16}]
    assert error_response(JOIN, {}, NOT_COORDINATOR)["error_code"] == NOT_COORDINATOR
    fetch = error_response(OFFSET_FETCH, Harness.fetch_body("g"), NOT_COORDINATOR)
    assert fetch["groups"][0]["error_code"] == NOT_COORDINATOR


def test_a_deleted_topic_loses_its_offsets():
    h = Harness()
    h.call(OFFSET_COMMIT, h.commit_body("s", {("t", 0): 1, ("u", 0): 1}))
    h._take(h.shard.metadata_changed({"t": ("AAAAAAAAAAAAAAAAAAAAAQ", 1),
                                      "u": ("AAAAAAAAAAAAAAAAAAAAAg", 1)}))
    h._take(h.shard.metadata_changed({}))                  # not known: nothing deleted
    assert fetched(h, "s") == {("t", 0): (1, ""), ("u", 0): (1, "")}
    h._take(h.shard.metadata_changed({"u": ("AAAAAAAAAAAAAAAAAAAAAg", 1)}))
    assert fetched(h, "s") == {("u", 0): (1, "")}
    assert records.offset_tombstone("s", "t", 0) in h.decoded()


def test_replay_skips_unknown_record_types_and_refuses_malformed_ones():
    import pytest
    shard = GroupShard(0, GroupConfig())
    shard.replay(0, b"\x00\x0a\x00\x01g", None)            # a share group record
    assert shard.skipped_records == 1
    with pytest.raises(records.RecordError):
        shard.replay(1, b"\x00\x02\x00", b"\x00\x03")


def test_subscription_parse_feeds_offset_delete_protection():
    h = Harness()
    stable_group(h, 1, protocols=(("range", subscription("x", "y")),))
    assert h.shard.classic.get("g").subscribed_topics == {"x", "y"}


T_ID = "AAAAAAAAAAAAAAAAAAAAAQ"


def consumer_hb(h, member_id, epoch, group="g"):
    return h.call(68, {
        "group_id": group, "member_id": member_id, "member_epoch": epoch, "instance_id": None,
        "rack_id": None, "rebalance_timeout_ms": 30_000, "subscribed_topic_names": ["t"],
        "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": []}, 1)


def test_a_group_id_is_one_kind():
    h = Harness()
    h._take(h.shard.metadata_changed({"t": (T_ID, 2)}))
    # A busy consumer group refuses a classic JoinGroup (no online migration).
    assert consumer_hb(h, "m-1", 0)["error_code"] == NONE
    assert h.call(JOIN, h.join_body("g"), version=3)["error_code"] == 23
    # A busy classic group refuses ConsumerGroupHeartbeat: GROUP_ID_NOT_FOUND.
    token = h.send(JOIN, h.join_body("c"), version=3)
    h.advance(0)
    assert h.reply(token)["error_code"] == NONE
    busy = consumer_hb(h, "m-2", 0, group="c")
    assert busy["error_code"] == NOT_FOUND and "not a consumer group" in busy["error_message"]
    # An Empty classic group (here: a simple one, offsets only) becomes a consumer group;
    # its offsets stay.
    h.call(OFFSET_COMMIT, h.commit_body("s", {("t", 0): 4}))
    assert consumer_hb(h, "m-3", 0, group="s")["error_code"] == NONE
    assert h.shard.classic.get("s") is None and h.shard.consumer.has("s")
    assert records.group_tombstone("s") in h.decoded()
    assert fetched(h, "s", {"t": [0]}) == {("t", 0): (4, "")}
    h.failover()
    assert h.shard.consumer.has("s") and h.shard.classic.get("s") is None
    assert fetched(h, "s", {"t": [0]}) == {("t", 0): (4, "")}
