"""KIP-848 groups through GroupShard: ConsumerGroupHeartbeat and the group APIs around it,
records through Kafka's bytes, and a coordinator fail-over in the middle of a rebalance."""
from __future__ import annotations

from .harness import DELETE, DESCRIBE, LIST, OFFSET_COMMIT, Harness

HEARTBEAT_848, DESCRIBE_848 = 68, 69
T = "AAAAAAAAAAAAAAAAAAAAAQ"
UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH, NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND = 25, 113, 68, 69


def harness() -> Harness:
    h = Harness()
    h._take(h.shard.metadata_changed({"t": (T, 4)}))
    return h


def hb(h: Harness, member_id: str, epoch: int, owned=None, version: int = 1) -> dict:
    joining = epoch == 0
    return h.call(HEARTBEAT_848, {
        "group_id": "g", "member_id": member_id, "member_epoch": epoch, "instance_id": None,
        "rack_id": None, "rebalance_timeout_ms": 30_000 if joining else -1,
        "subscribed_topic_names": ["t"] if joining else None, "subscribed_topic_regex": None,
        "server_assignor": None,
        "topic_partitions": [] if joining else
        None if owned is None else [{"topic_id": T, "partitions": sorted(owned)}]},
        version)


def assigned(reply: dict) -> set[int] | None:
    if reply["assignment"] is None:
        return None
    return {p for tp in reply["assignment"]["topic_partitions"] for p in tp["partitions"]}


def test_a_rebalance_continues_at_the_same_epochs_after_a_fail_over():
    h = harness()
    a = hb(h, "member-a", 0)
    assert (a["member_epoch"], assigned(a)) == (1, {0, 1, 2, 3})
    b = hb(h, "member-b", 0)
    assert (b["member_epoch"], assigned(b)) == (2, set())
    revoke = hb(h, "member-a", 1, {0, 1, 2, 3})
    keep = assigned(revoke)
    assert revoke["member_epoch"] == 1 and len(keep) == 2

    h.failover()                                  # a new shard from the log's bytes
    h._take(h.shard.metadata_changed({"t": (T, 4)}))
    assert h.shard.consumer.groups["g"].group_epoch == 2
    assert hb(h, "member-b", 2, set())["assignment"] is None    # a still owns the rest
    assert hb(h, "member-a", 1, keep)["member_epoch"] == 2       # revoked: moves on
    assert assigned(hb(h, "member-b", 2, set())) == {0, 1, 2, 3} - keep


def test_offset_commits_of_a_consumer_group_are_checked_by_member_epoch():
    h = harness()
    hb(h, "member-a", 0)

    def commit(member_id, epoch):
        reply = h.call(OFFSET_COMMIT, h.commit_body("g", {("t", 0): 5}, epoch, member_id))
        return reply["topics"][0]["partitions"][0]["error_code"]
    assert commit("member-a", 1) == 0
    assert commit("member-a", 0) == STALE_MEMBER_EPOCH
    assert commit("nobody", 1) == UNKNOWN_MEMBER_ID


def test_list_describe_and_delete_know_a_consumer_group():
    h = harness()
    hb(h, "member-a", 0)
    listed = h.call(LIST, {"states_filter": [], "types_filter": []})["groups"]
    assert [(g["group_id"], g["group_state"], g["group_type"]) for g in listed] == \
        [("g", "Stable", "consumer")]
    described = h.call(DESCRIBE_848, {"group_ids": ["g"], "include_authorized_operations": False},
                       0)["groups"][0]
    assert described["group_epoch"] == 1 and described["members"][0]["member_id"] == "member-a"
    assert described["members"][0]["assignment"]["topic_partitions"][0]["topic_name"] == "t"
    classic = h.call(DESCRIBE, {"groups": ["g"], "include_authorized_operations": False})
    assert classic["groups"][0]["group_state"] == "Dead"
    delete = {"groups_names": ["g"]}
    assert h.call(DELETE, delete)["results"][0]["error_code"] == NON_EMPTY_GROUP
    hb(h, "member-a", -1)
    assert h.call(DELETE, delete)["results"][0]["error_code"] == 0
    assert not h.shard.consumer.has("g")


def test_a_consumer_group_heartbeat_on_a_busy_classic_group_is_refused():
    h = harness()
    h.join_new("g")                                  # a classic group with a member
    reply = hb(h, "member-a", 0)
    assert reply["error_code"] == GROUP_ID_NOT_FOUND
    assert "not a consumer group" in reply["error_message"]
    assert not h.shard.consumer.has("g")
