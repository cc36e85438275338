"""TxnOffsetCommit in the group coordinator core (Kafka's OffsetMetadataManager): pending
transactional offsets, made the committed ones by the producer's COMMIT marker, dropped by
its ABORT, rebuilt at load from transactional records and markers, and OffsetFetch's
UNSTABLE_OFFSET_COMMIT (KIP-447)."""
from __future__ import annotations

import pytest

from node.core.groups import records
from node.core.groups.txn_offsets import PendingOffsets
from node.core.groups.offsets import Committed
from node.wire.errors import ErrorCode

from .harness import NEWEST, OFFSET_COMMIT, OFFSET_DELETE, OFFSET_FETCH, Harness

TXN_OFFSET_COMMIT = 28
NEWEST.setdefault(TXN_OFFSET_COMMIT, 4)
PID, EPOCH = 4000, 3


class TxnHarness(Harness):
    """The log keeps each record's producer (transactional batches) and the markers."""

    def _take(self, result) -> None:
        producer = getattr(result, "producer", None)
        for key, value in result.records:
            self.entries.append(("record", key, value, -1 if producer is None else producer[0]))
        self.log += result.records
        for reply in result.replies:
            self.replies[reply.token] = reply.body

    def __init__(self, **kw):
        self.entries: list = []
        super().__init__(**kw)

    def marker(self, producer_id: int, commit: bool) -> None:
        """A marker lands on the partition (WriteTxnMarkers), then the runtime's hook."""
        self.entries.append(("marker", producer_id, commit))
        self._take(self.shard.transaction_completed(self.now, producer_id, commit))

    def failover(self) -> None:
        self.shard = self._new_shard()
        for offset, entry in enumerate(self.entries):
            if entry[0] == "marker":
                self.shard.replay_marker(offset, entry[1], entry[2])
            else:
                self.shard.replay(offset, entry[1], entry[2], producer_id=entry[3])
        self._take(self.shard.loaded(self.now))


def txn_commit(h, group, offsets, pid=PID, epoch=EPOCH, generation=-1, member=""):
    by_topic: dict = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(
            {"partition_index": partition, "committed_offset": offset,
             "committed_leader_epoch": -1, "committed_metadata": "m"})
    return h.call(TXN_OFFSET_COMMIT, {
        "transactional_id": "tx", "group_id": group, "producer_id": pid,
        "producer_epoch": epoch, "generation_id": generation, "member_id": member,
        "group_instance_id": None,
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})


def commit(h, group, offsets):
    by_topic: dict = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(
            {"partition_index": partition, "committed_offset": offset})
    return h.call(OFFSET_COMMIT, {"group_id": group, "generation_id_or_member_epoch": -1,
                                  "member_id": "", "topics": [
                                      {"name": t, "partitions": ps}
                                      for t, ps in by_topic.items()]})


def fetch(h, group, partitions, require_stable=True):
    by_topic: dict = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    answer = h.call(OFFSET_FETCH, {"groups": [{"group_id": group, "member_id": None,
                                               "member_epoch": -1, "topics": [
                                                   {"name": t, "partition_indexes": ps}
                                                   for t, ps in by_topic.items()]}],
                                   "require_stable": require_stable})
    (g,) = answer["groups"]
    return {(t["name"], p["partition_index"]): (p["committed_offset"], p["error_code"])
            for t in g["topics"] for p in t["partitions"]}


def codes(answer):
    return {(t["name"], p["partition_index"]): p["error_code"]
            for t in answer["topics"] for p in t["partitions"]}


@pytest.fixture
def h():
    return TxnHarness()


def test_txn_offsets_are_written_as_the_producers_transactional_records_and_stay_pending(h):
    answer = txn_commit(h, "g", {("in", 0): 10, ("in", 1): 20})
    assert codes(answer) == {("in", 0): 0, ("in", 1): 0}
    assert [e[3] for e in h.entries] == [PID, PID]
    assert [records.decode(e[1], e[2]).value["offset"] for e in h.entries] == [10, 20]
    assert fetch(h, "g", [("in", 0)], require_stable=False) == {("in", 0): (-1, 0)}


def test_require_stable_answers_unstable_offset_commit_for_a_pending_partition(h):
    commit(h, "g", {("in", 0): 5, ("in", 1): 6})
    txn_commit(h, "g", {("in", 0): 10})
    assert fetch(h, "g", [("in", 0), ("in", 1)]) == {
        ("in", 0): (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT), ("in", 1): (6, 0)}
    assert fetch(h, "g", [("in", 0)], require_stable=False) == {("in", 0): (5, 0)}


def test_the_commit_marker_makes_them_committed_and_the_abort_marker_drops_them(h):
    txn_commit(h, "g", {("in", 0): 10})
    txn_commit(h, "g", {("in", 1): 30}, pid=PID + 1)
    h.marker(PID, commit=True)
    h.marker(PID + 1, commit=False)
    assert fetch(h, "g", [("in", 0), ("in", 1)]) == {("in", 0): (10, 0), ("in", 1): (-1, 0)}
    assert not h.shard.pending.by_producer and not h.shard.pending.open_by_group


def test_a_plain_commit_written_after_the_transactions_offset_wins(h):
    txn_commit(h, "g", {("in", 0): 10})
    commit(h, "g", {("in", 0): 7})
    h.marker(PID, commit=True)
    assert fetch(h, "g", [("in", 0)]) == {("in", 0): (7, 0)}
    h.failover()
    assert fetch(h, "g", [("in", 0)]) == {("in", 0): (7, 0)}


def test_a_load_rebuilds_pending_offsets_and_applies_the_markers_in_the_log(h):
    txn_commit(h, "g", {("in", 0): 10})
    txn_commit(h, "g", {("in", 1): 11}, pid=PID + 1)
    txn_commit(h, "g", {("in", 2): 12}, pid=PID + 2)
    h.marker(PID, commit=True)
    h.marker(PID + 1, commit=False)
    h.failover()
    assert fetch(h, "g", [("in", 0), ("in", 1), ("in", 2)]) == {
        ("in", 0): (10, 0), ("in", 1): (-1, 0),
        ("in", 2): (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)}
    h.marker(PID + 2, commit=True)             # the open one, after the load
    assert fetch(h, "g", [("in", 2)]) == {("in", 2): (12, 0)}


def test_a_marker_for_a_producer_with_nothing_pending_changes_nothing(h):
    commit(h, "g", {("in", 0): 5})
    h.marker(PID, commit=True)
    h.marker(PID, commit=False)
    assert fetch(h, "g", [("in", 0)]) == {("in", 0): (5, 0)}


def test_offset_delete_tombstones_a_pending_only_partition_and_drops_it(h):
    txn_commit(h, "g", {("in", 0): 10})
    answer = h.call(OFFSET_DELETE, {"group_id": "g", "topics": [
        {"name": "in", "partitions": [{"partition_index": 0}]}]})
    assert codes(answer) == {("in", 0): 0}
    last = records.decode(h.log[-1][0], h.log[-1][1])
    assert last.tombstone and last.key["partition"] == 0
    h.marker(PID, commit=True)
    assert fetch(h, "g", [("in", 0)]) == {("in", 0): (-1, 0)}
    h.failover()                                # the same after a load
    assert fetch(h, "g", [("in", 0)]) == {("in", 0): (-1, 0)}


def test_an_unknown_group_with_a_generation_is_illegal_generation(h):
    answer = txn_commit(h, "nope", {("in", 0): 1}, generation=5, member="m1")
    assert codes(answer) == {("in", 0): ErrorCode.ILLEGAL_GENERATION}
    assert h.entries == []


def test_a_classic_members_generation_is_checked(h):
    token = h.join_new("cg")
    h.advance(0)
    join = h.reply(token)
    assert join is not None and join["error_code"] == 0, join
    member, generation = join["member_id"], join["generation_id"]
    assert codes(txn_commit(h, "cg", {("in", 0): 1}, generation=generation + 1,
                            member=member)) == {("in", 0): ErrorCode.ILLEGAL_GENERATION}
    assert codes(txn_commit(h, "cg", {("in", 0): 1}, generation=generation,
                            member="stranger")) == {("in", 0): ErrorCode.UNKNOWN_MEMBER_ID}
    # in CompletingRebalance (no SyncGroup yet) a transactional commit is accepted, as Kafka's
    assert codes(txn_commit(h, "cg", {("in", 0): 1}, generation=generation,
                            member=member)) == {("in", 0): 0}
    # a plain commit is not, then (REBALANCE_IN_PROGRESS)
    plain = h.call(OFFSET_COMMIT, h.commit_body("cg", {("in", 0): 1}, generation, member))
    assert codes(plain) == {("in", 0): ErrorCode.REBALANCE_IN_PROGRESS}


def test_a_request_without_a_producer_is_invalid(h):
    answer = txn_commit(h, "g", {("in", 0): 1}, pid=-1)
    assert codes(answer) == {("in", 0): ErrorCode.INVALID_REQUEST} and h.entries == []


def test_a_group_with_an_open_transaction_is_not_expired():
    h = TxnHarness()
    txn_commit(h, "g", {("in", 0): 10})
    h.advance(h.config.offsets_retention_ms + 2 * h.config.offsets_retention_check_interval_ms)
    assert h.shard.classic.get("g") is not None
    h.marker(PID, commit=True)
    assert fetch(h, "g", [("in", 0)]) == {("in", 0): (10, 0)}


def test_pending_offsets_keep_their_invariant_through_discard_and_complete():
    p = PendingOffsets()
    c = Committed(1, -1, "", 0, -1, 5)
    p.put(1, "g", "t", 0, c)
    p.put(1, "h", "t", 0, c)
    p.put(2, "g", "t", 0, c)
    p.check()
    assert p.has("g", "t", 0) and p.partitions("g") == {("t", 0)}
    p.discard("g", "t", 0)
    assert not p.has("g", "t", 0) and p.has_open_transaction("g") and p.has("h", "t", 0)
    assert p.complete(1) == {("h", "t", 0): c}
    assert p.open_by_group == {"g": {2}}
    assert p.complete(2) == {} and p.open_by_group == {}
    p.check()
