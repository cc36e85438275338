"""Pending transactional offsets of one shard's groups (TxnOffsetCommit, KIP-98/447), as
Kafka's OffsetMetadataManager keeps them: producer id -> (group, topic, partition) ->
Committed, and group -> the producers with an open transaction in it.

Rules (Kafka 4's OffsetMetadataManager):
- A TxnOffsetCommit (or, at load, an offset commit record of a transactional batch)
  is pending under its producer id: OffsetFetch does not see it; with ``require_stable``
  its partition answers UNSTABLE_OFFSET_COMMIT (KIP-447).
- The producer's COMMIT marker on the partition moves its pending offsets into the
  committed ones, each only if it was written after the committed offset there
  (``Committed.order``: the record's log order; a plain commit written later wins, as
  Kafka's recordOffset rule); an ABORT marker drops them. A marker for a producer with
  nothing pending changes nothing.
- A tombstone of a partition (OffsetDelete, DeleteGroups, a deleted topic, expiry) drops
  the pending offsets of that partition in every open transaction; the producers stay
  open in the group until their marker.
- A group with an open transaction is not deleted by expiry, and a partition with a
  pending offset does not expire.
"""
from __future__ import annotations

from node.kafka.protocol import messages as m

from . import effects as E
from . import records
from .classic import State
from .effects import Effects, Result
from .offsets import Committed, record_of
from .records import Rec

TXN_OFFSET_COMMIT = 28

Key = tuple[str, str, int]          # (group, topic, partition)


class PendingOffsets:
    def __init__(self) -> None:
        self.by_producer: dict[int, dict[Key, Committed]] = {}
        self.open_by_group: dict[str, set[int]] = {}

    # ---- reads ---------------------------------------------------------------------------

    def has(self, group: str, topic: str, partition: int) -> bool:
        """A pending offset of ``group`` for the partition, in any open transaction."""
        key = (group, topic, partition)
        return any(key in self.by_producer.get(pid, ())
                   for pid in self.open_by_group.get(group, ()))

    def has_open_transaction(self, group: str) -> bool:
        return group in self.open_by_group

    def partitions(self, group: str) -> set[tuple[str, int]]:
        """The partitions of ``group`` with a pending offset."""
        return {(t, p) for pid in self.open_by_group.get(group, ())
                for (g, t, p) in self.by_producer.get(pid, ()) if g == group}

    def get(self, producer_id: int, group: str, topic: str, partition: int) -> Committed | None:
        return self.by_producer.get(producer_id, {}).get((group, topic, partition))

    # ---- writes --------------------------------------------------------------------------

    def put(self, producer_id: int, group: str, topic: str, partition: int,
            committed: Committed) -> None:
        assert producer_id >= 0, producer_id
        self.by_producer.setdefault(producer_id, {})[(group, topic, partition)] = committed
        self.open_by_group.setdefault(group, set()).add(producer_id)

    def discard(self, group: str, topic: str, partition: int) -> None:
        """A tombstone of the partition: no transaction's pending offset for it survives."""
        key = (group, topic, partition)
        for pid in self.open_by_group.get(group, ()):
            self.by_producer.get(pid, {}).pop(key, None)

    def complete(self, producer_id: int) -> dict[Key, Committed]:
        """The producer's transaction ended: its pending offsets, taken out (empty if it
        had none), and the producer is no longer open in any group."""
        pending = self.by_producer.pop(producer_id, {})
        for group in {g for g, _, _ in pending} | {
                g for g, pids in self.open_by_group.items() if producer_id in pids}:
            pids = self.open_by_group.get(group)
            if pids is not None:
                pids.discard(producer_id)
                if not pids:
                    del self.open_by_group[group]
        return pending

    def check(self) -> None:
        """Invariant: every producer with pending offsets is open in each of their groups."""
        for pid, offsets in self.by_producer.items():
            for group, _, _ in offsets:
                assert pid in self.open_by_group.get(group, ()), (pid, group)


class ShardTransactions:
    """The GroupShard's transactional side (a mixin of ``shard.GroupShard``: its
    ``offsets``, ``pending``, ``classic``, ``consumer`` and ``config``)."""

    def transaction_completed(self, now_ms: int, producer_id: int, commit: bool) -> Result:
        """The producer's marker landed on this partition (committed): its pending
        offsets become the committed ones (COMMIT) or are dropped (ABORT)."""
        if self.is_loaded:          # while loading, the load replays the marker
            self._end_transaction(producer_id, commit)
        return self._result(Effects())

    def _pend(self, producer_id: int, gid: str, topic: str, partition: int,
              committed: Committed) -> None:
        self.pending.put(producer_id, gid, topic, partition, committed)
        if self.classic.get(gid) is None and not self.consumer.has(gid):
            self.classic.create(gid)               # a simple group, as Kafka's replay

    def _end_transaction(self, producer_id: int, commit: bool) -> None:
        for (gid, topic, partition), committed in self.pending.complete(producer_id).items():
            if commit:
                self.offsets.materialize(gid, topic, partition, committed)

    def _validate_txn_commit(self, version, gid, generation, member_id, instance_id) -> int:
        """Kafka's validateTransactionalOffsetCommit: as OffsetCommit's, except that a
        stale member epoch is ILLEGAL_GENERATION, an unknown group with a generation is
        ILLEGAL_GENERATION, and neither a non-empty group without a member nor a
        rebalance refuses it."""
        if self.consumer.has(gid):
            error = self.consumer.validate_commit(gid, member_id, generation, version,
                                                  transactional=True)[0]
            return E.ILLEGAL_GENERATION if error == E.STALE_MEMBER_EPOCH else error
        group = self.classic.get(gid)
        if group is None:
            if generation < 0:
                self.classic.create(gid)        # a simple group
                return E.NONE
            return E.ILLEGAL_GENERATION
        if group.state is State.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and group.state is State.EMPTY:
            return E.NONE
        if generation >= 0 or member_id or instance_id is not None:
            error = group.validate_member(member_id, instance_id)
            if error:
                return error
            if generation != group.generation:
                return E.ILLEGAL_GENERATION
        return E.NONE

    def _txn_commit(self, now, version, body, fx) -> dict:
        gid = body["group_id"]
        pid, epoch = body.get("producer_id", -1), body.get("producer_epoch", -1)
        if not gid:
            error = E.INVALID_GROUP_ID
        elif pid < 0 or epoch < 0:
            error = E.INVALID_REQUEST           # its records must be a producer's
        else:
            error = self._validate_txn_commit(version, gid, body.get("generation_id", -1),
                                              body.get("member_id") or "",
                                              body.get("group_instance_id"))
        reply = records.defaults_of(m.TxnOffsetCommitResponse)
        for topic in body.get("topics", []):
            parts = []
            for p in topic.get("partitions", []):
                code = error
                metadata = p.get("committed_metadata")
                if not code and metadata is not None and \
                        len(metadata) > self.config.offset_metadata_max_bytes:
                    code = E.OFFSET_METADATA_TOO_LARGE
                if not code:
                    committed = Committed(p["committed_offset"],
                                          p.get("committed_leader_epoch", -1),
                                          metadata or "", now, -1, self._order())
                    self._pend(pid, gid, topic["name"], p["partition_index"], committed)
                    fx.records.append(record_of(gid, topic["name"], p["partition_index"],
                                                committed))
                parts.append({"partition_index": p["partition_index"], "error_code": code})
            reply["topics"].append({"name": topic["name"], "partitions": parts})
        if fx.records:
            fx.producer = (pid, epoch)
        return reply

    def _delete_offset(self, gid: str, topic: str, partition: int) -> Rec | None:
        """A tombstone for the partition's committed offset, or for its pending
        transactional ones (Kafka writes one when either exists); both go."""
        rec = self.offsets.delete(gid, topic, partition)
        if rec is None and self.pending.has(gid, topic, partition):
            rec = records.offset_tombstone(gid, topic, partition)
        self.pending.discard(gid, topic, partition)
        return rec

    def _delete_all_offsets(self, gid: str) -> list[Rec]:
        tps = set(self.offsets.of_group(gid)) | self.pending.partitions(gid)
        return [rec for rec in (self._delete_offset(gid, t, p) for t, p in sorted(tps))
                if rec is not None]

