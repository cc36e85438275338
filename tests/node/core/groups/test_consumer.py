"""The KIP-848 core (node.core.groups.consumer), one rule per test, as Kafka 4 answers."""
from __future__ import annotations

import itertools

import pytest

from node.core.groups import consumer as c
from node.core.groups import consumer_state as cs
from node.core.groups import records
from node.core.groups.config import GroupConfig

T1 = "AAAAAAAAAAAAAAAAAAAAAQ"
T2 = "AAAAAAAAAAAAAAAAAAAAAg"
SESSION_MS = GroupConfig().group_consumer_session_timeout_ms


def core(topics=None, **config):
    ids = (f"m{i}" for i in itertools.count())
    groups = c.ConsumerGroups(GroupConfig(**config), new_member_id=lambda: next(ids))
    groups.metadata_changed(topics if topics is not None else {"t": (T1, 4)})
    return groups


def hb(groups, member_id, epoch, owned=None, *, now=0, version=0, topics=("t",),
       instance=None, assignor=None, full=False, group="g", timeout_ms=30_000):
    joining = epoch == 0 or full
    body = {"group_id": group, "member_id": member_id, "member_epoch": epoch,
            "instance_id": instance, "rack_id": None,
            "rebalance_timeout_ms": timeout_ms if joining else -1,
            "subscribed_topic_names": list(topics) if joining else None,
            "subscribed_topic_regex": None, "server_assignor": assignor,
            "topic_partitions": [] if epoch == 0 else owned}
    out = groups.heartbeat(now, version, body, "client", "/127.0.0.1")
    for rec in out.records:                      # every record is one Kafka can encode
        assert records.decode(*records.encode(rec)) == rec
    return out


def parts(out):
    a = out.body["assignment"]
    return None if a is None else {t["topic_id"]: set(t["partitions"])
                                   for t in a["topic_partitions"]}


def owned(*ps, topic=T1):
    return [{"topic_id": topic, "partitions": list(ps)}]


def snapshot(groups):
    return {gid: (g.group_epoch, g.assignment_epoch, g.subscription_metadata, g.members,
                  g.target, g.owners, g.static) for gid, g in groups.groups.items()}


def test_a_first_member_gets_every_partition_at_group_epoch_1_with_kafkas_records():
    groups = core()
    out = hb(groups, "", 0)
    assert out.body["error_code"] == 0 and out.body["member_id"] == "m0"
    assert out.body["member_epoch"] == 1 and out.body["heartbeat_interval_ms"] == 5000
    assert parts(out) == {T1: {0, 1, 2, 3}}
    # member metadata, partition metadata, group epoch, target member, target epoch, current
    assert [r.key_version for r in out.records] == [5, 4, 3, 7, 6, 8]


def test_a_second_member_waits_until_the_first_revokes():
    groups = core()
    hb(groups, "", 0)
    second = hb(groups, "", 0)                                   # m1: epoch 2, nothing free
    assert second.body["member_epoch"] == 2 and parts(second) == {}
    first = hb(groups, "m0", 1, owned(0, 1, 2, 3))
    assert first.body["member_epoch"] == 1                       # revoking: stays at 1
    keep = parts(first)[T1]
    assert len(keep) == 2
    assert groups.groups["g"].members["m0"].state == cs.UNREVOKED_PARTITIONS
    assert parts(hb(groups, "m1", 2, [])) is None                # still nothing free
    done = hb(groups, "m0", 1, owned(*keep))
    assert done.body["member_epoch"] == 2
    got = hb(groups, "m1", 2, [])
    assert parts(got) == {T1: {0, 1, 2, 3} - keep}
    assert groups.state("g") == cs.STABLE_GROUP


def test_leaving_frees_the_partitions_and_bumps_the_group_epoch():
    groups = core()
    hb(groups, "", 0)
    hb(groups, "", 0)
    out = hb(groups, "m0", -1)
    assert out.body["member_epoch"] == -1
    assert [r.key_version for r in out.records][:3] == [8, 7, 5]   # tombstones, Kafka's order
    assert all(r.value is None for r in out.records[:3])
    assert groups.groups["g"].group_epoch == 3
    assert parts(hb(groups, "m1", 2, [])) == {T1: {0, 1, 2, 3}}


def test_a_silent_member_is_fenced_after_the_session_timeout():
    groups = core()
    hb(groups, "", 0, now=0)
    hb(groups, "", 0, now=1000)
    assert groups.next_deadline_ms() == SESSION_MS
    assert groups.tick(SESSION_MS - 1) == []
    recs = groups.tick(SESSION_MS)
    assert recs and "m0" not in groups.groups["g"].members
    out = hb(groups, "m0", 1, owned(0, 1), now=SESSION_MS + 1)
    assert out.body["error_code"] == c.UNKNOWN_MEMBER_ID


def test_a_member_that_does_not_revoke_in_time_is_fenced():
    groups = core()
    hb(groups, "", 0, timeout_ms=500)
    hb(groups, "", 0)
    hb(groups, "m0", 1, owned(0, 1, 2, 3), now=100)              # asked to revoke at 100
    assert groups.tick(599) == []
    assert groups.tick(600) and "m0" not in groups.groups["g"].members


def test_epochs_ahead_or_behind_are_fenced_but_a_lost_answer_is_forgiven():
    groups = core()
    hb(groups, "", 0)
    assert hb(groups, "m0", 2, owned()).body["error_code"] == c.FENCED_MEMBER_EPOCH
    hb(groups, "", 0)
    hb(groups, "m0", 1, owned(0, 1, 2, 3))
    keep = groups.groups["g"].members["m0"].assigned[T1]
    hb(groups, "m0", 1, owned(*keep))                            # now at 2, answer "lost"
    retry = hb(groups, "m0", 1, owned(*keep), full=True)         # previous epoch, a subset
    assert retry.body["error_code"] == 0 and retry.body["member_epoch"] == 2
    assert parts(retry) == {T1: set(keep)}                       # a full request: the answer
    stale = hb(groups, "m0", 1, owned(0, 1, 2, 3))               # owns more than assigned
    assert stale.body["error_code"] == c.FENCED_MEMBER_EPOCH


def test_a_static_member_comes_back_without_a_rebalance():
    groups = core()
    hb(groups, "", 0, instance="i1")
    hb(groups, "", 0, instance="i2")
    for mid in ("m0", "m1", "m0", "m1"):                         # settle both
        member = groups.groups["g"].members[mid]
        hb(groups, mid, member.member_epoch,
           owned(*member.assigned.get(T1, ())) if member.assigned else [])
    before = groups.groups["g"].members["m0"]
    epoch = groups.groups["g"].group_epoch
    left = hb(groups, "m0", -2, instance="i1")
    assert left.body["member_epoch"] == -2
    assert hb(groups, "", 0, instance="i1").body["error_code"] == 0     # new id m2
    m2 = groups.groups["g"].members["m2"]
    assert "m0" not in groups.groups["g"].members
    assert m2.assigned == before.assigned and groups.groups["g"].group_epoch == epoch
    assert m2.member_epoch == before.member_epoch


def test_static_member_errors():
    groups = core()
    hb(groups, "", 0, instance="i1")
    assert hb(groups, "", 0, instance="i1").body["error_code"] == c.UNRELEASED_INSTANCE_ID
    assert hb(groups, "zz", 1, owned(), instance="i1").body["error_code"] == \
        c.FENCED_INSTANCE_ID
    assert hb(groups, "zz", 1, owned(), instance="i9").body["error_code"] == c.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("change, code, message", [
    ({"group_id": ""}, c.INVALID_REQUEST, "GroupId can't be empty."),
    ({"instance_id": ""}, c.INVALID_REQUEST, "InstanceId can't be empty."),
    ({"rebalance_timeout_ms": -1}, c.INVALID_REQUEST, "RebalanceTimeoutMs must be provided"),
    ({"topic_partitions": None}, c.INVALID_REQUEST, "TopicPartitions must be empty"),
    ({"subscribed_topic_names": []}, c.INVALID_REQUEST, "SubscribedTopicNames or Subscribed"),
    ({"group_id": "  "}, c.INVALID_REQUEST, "GroupId can't be empty."),
    ({"rack_id": " "}, c.INVALID_REQUEST, "RackId can't be empty."),
    ({"member_epoch": -3}, c.INVALID_REQUEST, "MemberEpoch is invalid."),
    ({"subscribed_topic_regex": "t.*"}, c.INVALID_REQUEST, "SubscribedTopicRegex is not"),
    ({"server_assignor": "sticky"}, c.UNSUPPORTED_ASSIGNOR, "Supported assignors: uniform, range"),
    ({"member_epoch": "0"}, c.INVALID_REQUEST, "wrong type"),
    ({"subscribed_topic_names": ["t", 3]}, c.INVALID_REQUEST, "SubscribedTopicNames has the"),
    ({"topic_partitions": [{"topic_id": "x", "partitions": ["1"]}]}, c.INVALID_REQUEST,
     "TopicPartitions has the wrong type"),
])
def test_bad_heartbeats_get_kafkas_errors_and_change_nothing(change, code, message):
    groups = core()
    body = {"group_id": "g", "member_id": "", "member_epoch": 0, "instance_id": None,
            "rack_id": None, "rebalance_timeout_ms": 1000, "subscribed_topic_names": ["t"],
            "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": []}
    out = groups.heartbeat(0, 0, {**body, **change})
    assert out.body["error_code"] == code and message in out.body["error_message"]
    assert out.records == [] and groups.groups == {}


def test_version_1_requires_the_client_to_name_the_member():
    groups = core()
    assert hb(groups, "", 0, version=1).body["error_code"] == c.INVALID_REQUEST
    out = hb(groups, "client-made-id", 0, version=1)
    assert out.body["member_id"] == "client-made-id" and out.body["member_epoch"] == 1
    body = {"group_id": "g", "member_id": "other", "member_epoch": 0, "instance_id": None,
            "rack_id": None, "rebalance_timeout_ms": 1000, "subscribed_topic_names": ["t"],
            "subscribed_topic_regex": "", "server_assignor": None, "topic_partitions": []}
    assert groups.heartbeat(0, 1, body).body["error_code"] == 0     # "" regex: none


def test_heartbeats_wait_for_topic_metadata_after_loading():
    groups = c.ConsumerGroups(GroupConfig())
    assert hb(groups, "", 0).body["error_code"] == c.COORDINATOR_LOAD_IN_PROGRESS


def test_the_group_is_full_at_its_max_size():
    groups = core(group_consumer_max_size=1)
    hb(groups, "", 0)
    assert hb(groups, "", 0).body["error_code"] == c.GROUP_MAX_SIZE_REACHED


def test_a_grown_topic_bumps_the_group_epoch_and_its_new_partitions_are_assigned():
    groups = core()
    hb(groups, "", 0)
    recs = groups.metadata_changed({"t": (T1, 6)})
    assert [r.key_version for r in recs] == [4, 3]
    out = hb(groups, "m0", 1, owned(0, 1, 2, 3))
    assert out.body["member_epoch"] == 2 and parts(out) == {T1: set(range(6))}


def test_the_assignor_is_the_one_most_members_ask_for():
    groups = core({"t": (T1, 4), "u": (T2, 4)})
    hb(groups, "", 0, topics=("t", "u"), assignor="range")
    hb(groups, "", 0, topics=("t", "u"), assignor="range")
    hb(groups, "", 0, topics=("t", "u"))
    assert groups.describe(["g"])[0]["assignor_name"] == "range"
    target = groups.groups["g"].target
    assert target["m0"][T1] == target["m0"][T2] == {0, 1}      # co-partitioned ranges


def test_commits_are_checked_against_the_member_epoch():
    groups = core()
    hb(groups, "", 0)
    assert groups.validate_commit("g", "m0", 1, 9) == (0, None)
    assert groups.validate_commit("g", "m0", 0, 9)[0] == c.STALE_MEMBER_EPOCH
    assert groups.validate_commit("g", "zz", 1, 9)[0] == c.UNKNOWN_MEMBER_ID
    assert groups.validate_commit("g", "m0", 1, 8)[0] == c.UNSUPPORTED_VERSION
    assert groups.validate_commit("g", "", -1, 9)[0] == c.UNKNOWN_MEMBER_ID   # not empty
    hb(groups, "m0", -1)
    assert groups.validate_commit("g", "", -1, 9) == (0, None)                 # empty: simple


def test_describe_list_and_delete():
    groups = core()
    hb(groups, "", 0)
    assert groups.list_groups([], []) == [{"group_id": "g", "protocol_type": "consumer",
                                           "group_state": "Stable", "group_type": "consumer"}]
    assert groups.list_groups(["EMPTY"], []) == [] and groups.list_groups([], ["classic"]) == []
    assert groups.describe(["nope"])[0]["error_code"] == c.GROUP_ID_NOT_FOUND
    assert groups.describe_classic("g", 5)["group_state"] == "Dead"
    assert groups.describe_classic("g", 6)["error_code"] == c.GROUP_ID_NOT_FOUND
    assert groups.delete("g").body["error_code"] == c.NON_EMPTY_GROUP
    hb(groups, "m0", -1)
    out = groups.delete("g")
    assert out.body["error_code"] == 0 and not groups.has("g")
    assert [r.value for r in out.records] == [None] * 3             # target epoch, metadata x2


def test_replaying_the_records_rebuilds_the_same_groups():
    groups = core({"t": (T1, 5), "u": (T2, 3)})
    log = []
    for out in (hb(groups, "", 0, instance="s"), hb(groups, "", 0, topics=("t", "u")),
                hb(groups, "m0", 1, owned(0, 1, 2, 3, 4)), hb(groups, "", 0)):
        log.extend(out.records)
    log.extend(groups.metadata_changed({"t": (T1, 7), "u": (T2, 3)}))
    log.extend(hb(groups, "m2", -1).records)
    log.extend(groups.tick(SESSION_MS))
    again = c.ConsumerGroups(GroupConfig())
    for rec in log:
        again.replay(records.decode(*records.encode(rec)))
    assert snapshot(again) == snapshot(groups)


# ------------------------------------------------------------------ reconcile's rules
from hypothesis import given, settings, strategies as st  # noqa: E402

from node.core.groups.reconcile import next_member  # noqa: E402

_parts = st.dictionaries(st.sampled_from([T1, T2]), st.frozensets(st.integers(0, 5), min_size=1))


@given(_parts, _parts, _parts, st.sets(st.tuples(st.sampled_from([T1, T2]), st.integers(0, 5))),
       st.sampled_from([cs.STABLE, cs.UNREVOKED_PARTITIONS, cs.UNRELEASED_PARTITIONS]),
       st.one_of(st.none(), _parts), st.integers(1, 5), st.integers(0, 3))
@settings(max_examples=500, deadline=None)
def test_reconciliation_never_gives_what_another_owns_nor_takes_back_unasked(
        assigned, pending, target, others, state, owned, epoch, ahead):
    pending = cs.freeze({t: ps - assigned.get(t, frozenset()) for t, ps in pending.items()})
    member = cs.Member("m", member_epoch=epoch, previous_member_epoch=epoch - 1, state=state,
                       assigned=assigned, pending_revocation=pending if state == 1 else {})
    mine = {(t, p) for parts in (member.assigned, member.pending_revocation)
            for t, ps in parts.items() for p in ps}
    taken = others - mine                       # owned by other members

    def partition_epoch(t, p):
        return 7 if (t, p) in taken else (epoch if (t, p) in mine else -1)
    new = next_member(member, epoch + ahead, target, partition_epoch, owned)
    new_set = {(t, p) for t, ps in new.assigned.items() for p in ps}
    old_set = {(t, p) for t, ps in member.assigned.items() for p in ps}
    target_set = {(t, p) for t, ps in target.items() for p in ps}
    assert not (new_set - old_set) & taken, "gave a partition another member owns"
    assert new_set <= old_set | target_set
    if new.state == cs.UNREVOKED_PARTITIONS:
        assert new_set <= old_set and new.member_epoch <= epoch + 1, "grew while revoking"
        assert not {(t, p) for t, ps in new.pending_revocation.items() for p in ps} & new_set
    elif new is not member:
        assert new.member_epoch == epoch + ahead and not new.pending_revocation
        revoked = (old_set | {(t, p) for t, ps in member.pending_revocation.items()
                              for p in ps}) - new_set
        if revoked:                              # what it gave up, it said it no longer owns
            assert owned is not None
            assert not revoked & {(t, p) for t, ps in owned.items() for p in ps}


def test_every_answer_has_exactly_the_fields_of_kafkas_message():
    from node.kafka.protocol import messages as m
    groups = core()
    ok = hb(groups, "", 0, instance="i")
    answers = [(m.ConsumerGroupHeartbeatResponse, ok.body),
               (m.ConsumerGroupHeartbeatResponse, hb(groups, "zz", 3, owned()).body),
               (m.ConsumerGroupDescribeResponse.DescribedGroup, groups.describe(["g"])[0]),
               (m.ConsumerGroupDescribeResponse.DescribedGroup, groups.describe(["x"])[0]),
               (m.ListGroupsResponse.ListedGroup, groups.list_groups([], [])[0]),
               (m.DescribeGroupsResponse.DescribedGroup, groups.describe_classic("g"))]
    for cls, body in answers:
        assert set(body) == set(records.to_dict(cls())), cls.__name__
        records.from_dict(cls, body)                 # and every value has the field's type
