"""GroupShard under random request sequences and malformed bodies: it never raises, every
request is answered exactly once (parked ones by the end, at the latest when it unloads),
and a body that is not its request gets INVALID_REQUEST."""

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .harness import (DELETE, DESCRIBE, HEARTBEAT, JOIN, LEAVE, LIST, OFFSET_COMMIT,
                      OFFSET_DELETE, OFFSET_FETCH, SYNC, Harness, subscription)

INVALID_REQUEST = 42
GROUPS = ("g", "h")
junk = st.one_of(st.none(), st.integers(-3, 3), st.text(max_size=3), st.binary(max_size=3),
                 st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=2),
                                                                      st.integers(), max_size=2))
op = st.one_of(
    st.tuples(st.just("join"), st.sampled_from(GROUPS), st.integers(0, 5),
              st.sampled_from((3, 4, 9)), st.sampled_from((None, "i-1", "i-2")),
              st.sampled_from(("range", "rr"))),
    st.tuples(st.just("sync"), st.sampled_from(GROUPS), st.integers(0, 5), st.integers(-1, 1)),
    st.tuples(st.just("hb"), st.sampled_from(GROUPS), st.integers(0, 5), st.integers(-1, 1)),
    st.tuples(st.just("leave"), st.sampled_from(GROUPS), st.lists(st.integers(0, 5), max_size=3)),
    st.tuples(st.just("commit"), st.sampled_from(GROUPS), st.integers(0, 5), st.integers(-2, 1)),
    st.tuples(st.just("admin"), st.sampled_from(GROUPS),
              st.sampled_from((OFFSET_FETCH, DESCRIBE, LIST, DELETE, OFFSET_DELETE))),
    st.tuples(st.just("consumer"), st.sampled_from(GROUPS), st.integers(0, 5), st.integers(0, 2)),
    st.tuples(st.just("advance"), st.sampled_from((0, 1, 100, 3000, 7000, 40_000))),
    st.tuples(st.just("failover")),
    st.tuples(st.just("garbage"), st.sampled_from((JOIN, SYNC, HEARTBEAT, LEAVE, OFFSET_COMMIT,
                                                   OFFSET_FETCH, 68)),
              st.dictionaries(st.sampled_from(("group_id", "member_id", "generation_id",
                                               "topics", "protocols", "bogus",
                                               "session_timeout_ms", "member_epoch")),
                              junk, max_size=4)),
)


def member(h, slot: int) -> str:
    ids = sorted(h.member_ids)
    return ids[slot % len(ids)] if ids and slot else ""


@settings(max_examples=int(os.environ.get("GROUPS_FUZZ_EXAMPLES", "150")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, max_size=40))
def test_random_requests_are_answered_once_and_never_raise(ops):
    h = Harness()
    h.member_ids = set()
    sent = []
    for o in ops:
        kind, token = o[0], None
        if kind == "join":
            _, g, slot, version, instance, proto = o
            token = h.send(JOIN, h.join_body(g, member_id=member(h, slot), instance=instance,
                                             protocols=((proto, subscription("t")),)), version)
        elif kind in ("sync", "hb"):
            _, g, slot, delta = o
            group = h.shard.classic.get(g)
            gen = (group.generation if group else 0) + delta
            if kind == "sync":
                mid = member(h, slot)
                token = h.send(SYNC, h.sync_body(g, mid, gen, {mid: b"x"} if mid else {}))
            else:
                token = h.send(HEARTBEAT, {"group_id": g, "generation_id": gen,
                                           "member_id": member(h, slot), "group_instance_id": None})
        elif kind == "leave":
            token = h.send(LEAVE, {"group_id": o[1], "member_id": "", "members": [
                {"member_id": member(h, s), "group_instance_id": None, "reason": None}
                for s in o[2]]})
        elif kind == "commit":
            _, g, slot, gen = o
            token = h.send(OFFSET_COMMIT, h.commit_body(g, {("t", 0): 1}, gen, member(h, slot)))
        elif kind == "admin":
            _, g, api = o
            body = {OFFSET_FETCH: h.fetch_body(g), DESCRIBE: {"groups": [g]},
                    LIST: {"states_filter": ["Stable"]}, DELETE: {"groups_names": [g]},
                    OFFSET_DELETE: {"group_id": g, "topics": [
                        {"name": "t", "partitions": [{"partition_index": 0}]}]}}[api]
            token = h.send(api, body)
        elif kind == "consumer":
            _, g, slot, epoch = o
            token = h.send(68, {"group_id": g, "member_id": member(h, slot) or "m-new",
                                "member_epoch": epoch, "subscribed_topic_names": ["t"],
                                "rebalance_timeout_ms": 1000, "topic_partitions": []}, 1)
        elif kind == "advance":
            h.advance(o[1])
        elif kind == "failover":
            h.failover()
        else:
            _, api, body = o
            token = h.send(api, body)
            answer = h.replies.get(token)
            assert answer is not None
            if answer.get("error_code", 0) not in (0, INVALID_REQUEST):
                pass                           # a well-formed body by chance: any answer
        if token is not None:
            sent.append(token)
        for answer in h.replies.values():
            if answer.get("member_id"):
                h.member_ids.add(answer["member_id"])
    h.failover()                                        # parked requests: NOT_COORDINATOR
    assert set(sent) <= set(h.replies), "a request was never answered"


def test_a_body_that_is_not_its_request_gets_invalid_request():
    h = Harness()
    for api, body in ((HEARTBEAT, {"group_id": 5}), (JOIN, {"bogus": 1}),
                      (OFFSET_COMMIT, {"group_id": "g", "topics": "nope"}),
                      (SYNC, "not a dict")):
        answer = h.call(api, body)
        assert answer.get("error_code", INVALID_REQUEST) == INVALID_REQUEST
        if api == OFFSET_COMMIT:
            assert answer["topics"] == []
    assert h.log == [] and h.shard.classic.groups == {}
