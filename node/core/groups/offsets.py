"""Committed offsets of one shard's groups: group -> (topic, partition) -> Committed.

Pure data and Kafka's rules for what a commit stores and when an offset expires; which
commits are allowed (generation, member epoch) is the shard's, which knows the groups.

- A commit stores the offset, the leader epoch (-1: none), the metadata ("" for null) and
  the commit timestamp (the coordinator's clock); OffsetCommit v2-v4's retention time gives an
  expire timestamp (value version 1), as Kafka.
- Expiry (KIP-211, Kafka 2.1+): an offset expires at its expire timestamp if it has one,
  else when ``offsets.retention.minutes`` have passed since its base timestamp: for an Empty
  classic group the time it became Empty (its current state timestamp), for a simple group
  (no protocol) or a Stable consumer-protocol group (only topics it is not subscribed to)
  or a KIP-848 group the commit timestamp. The shard picks the base.
- Deletes (OffsetDelete, DeleteGroups, expiry) write tombstones.
- ``Committed.order`` is the commit's place in the partition's log (its record's offset at
  load, the shard's count of records since): a transaction's pending offset replaces a
  committed one only if written after it (``materialize``; ``txn_offsets``).
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from . import records
from .records import Rec

INVALID_OFFSET = -1
NO_LEADER_EPOCH = -1


@dataclass(frozen=True)
class Committed:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int = -1    # -1: none (expires by retention)
    # Its record's place in the log (-1: unknown). Only its order against other commits of
    # the same shard means anything (a replay numbers by log offset, a live shard by its
    # count), so two commits of the same values are equal whatever their order numbers.
    order: int = field(default=-1, compare=False)


class Offsets:
    def __init__(self):
        self.by_group: dict[str, dict[tuple[str, int], Committed]] = {}

    # ---- reads ---------------------------------------------------------------------------

    def group_ids(self) -> list[str]:
        return list(self.by_group)

    def has_group(self, group: str) -> bool:
        return group in self.by_group

    def get(self, group: str, topic: str, partition: int) -> Committed | None:
        return self.by_group.get(group, {}).get((topic, partition))

    def of_group(self, group: str) -> dict[tuple[str, int], Committed]:
        return dict(self.by_group.get(group, {}))

    # ---- writes (each returns the records written; state changes at once) --------------

    def commit(self, group: str, topic: str, partition: int, offset: int, leader_epoch: int,
               metadata: str | None, now_ms: int, expire_timestamp_ms: int = -1,
               order: int = -1) -> Rec:
        committed = Committed(offset, leader_epoch, "" if metadata is None else metadata,
                              now_ms, expire_timestamp_ms, order)
        self._put(group, topic, partition, committed)
        return record_of(group, topic, partition, committed)

    def materialize(self, group: str, topic: str, partition: int, committed: Committed) -> bool:
        """A committed transaction's offset becomes the committed one unless a commit
        written after it is there (Kafka's recordOffset rule); True if it did."""
        current = self.get(group, topic, partition)
        if current is not None and current.order > committed.order:
            return False
        self._put(group, topic, partition, committed)
        return True

    def delete(self, group: str, topic: str, partition: int) -> Rec | None:
        """A tombstone if the offset exists (Kafka writes none otherwise)."""
        if self.get(group, topic, partition) is None:
            return None
        self._remove(group, topic, partition)
        return records.offset_tombstone(group, topic, partition)

    def delete_all(self, group: str) -> list[Rec]:
        return [self.delete(group, topic, partition)
                for topic, partition in list(self.by_group.get(group, {}))]

    def expire(self, group: str, now_ms: int, retention_ms: int,
               base_ms: Callable[[Committed], int], keep_topics: Iterable[str] = (),
               keep_partitions: Iterable[tuple[str, int]] = ()) -> tuple[list[Rec], bool]:
        """Tombstones for the group's offsets that expired at ``now_ms`` (topics in
        ``keep_topics`` and partitions in ``keep_partitions`` never do), and whether none
        is left."""
        keep = set(keep_topics)
        keep_tps = set(keep_partitions)
        out = []
        for (topic, partition), c in list(self.by_group.get(group, {}).items()):
            if topic in keep or (topic, partition) in keep_tps:
                continue
            if c.expire_timestamp_ms != -1:
                expired = now_ms >= c.expire_timestamp_ms
            else:
                expired = now_ms - base_ms(c) >= retention_ms
            if expired:
                out.append(self.delete(group, topic, partition))
        return out, not self.by_group.get(group)

    # ---- loading ---------------------------------------------------------------------------

    def replay(self, rec: Rec, order: int = -1) -> None:
        assert rec.key_version in (0, 1), rec
        key = rec.key
        if rec.value is None:
            self._remove(key["group"], key["topic"], key["partition"])
            return
        self._put(key["group"], key["topic"], key["partition"], committed_of(rec, order))

    def _put(self, group: str, topic: str, partition: int, committed: Committed) -> None:
        self.by_group.setdefault(group, {})[(topic, partition)] = committed

    def _remove(self, group: str, topic: str, partition: int) -> None:
        offsets = self.by_group.get(group)
        if offsets is not None:
            offsets.pop((topic, partition), None)
            if not offsets:
                del self.by_group[group]


def committed_of(rec: Rec, order: int = -1) -> Committed:
    """The Committed an offset commit record's value holds."""
    v = rec.value
    return Committed(v["offset"], v.get("leader_epoch", NO_LEADER_EPOCH), v["metadata"],
                     v["commit_timestamp"], v.get("expire_timestamp", -1), order)


def record_of(group: str, topic: str, partition: int, committed: Committed) -> Rec:
    return records.offset_commit(group, topic, partition, committed.offset,
                                 committed.leader_epoch, committed.metadata,
                                 committed.commit_timestamp_ms, committed.expire_timestamp_ms)
