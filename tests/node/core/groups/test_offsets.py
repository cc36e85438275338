"""offsets.Offsets: what a commit stores, expiry (KIP-211) and tombstones."""

from node.core.groups import records
from node.core.groups.offsets import Committed, Offsets


def test_a_commit_stores_metadata_epoch_and_the_coordinators_time():
    o = Offsets()
    rec = o.commit("g", "t", 0, 42, 7, None, 1000)
    assert o.get("g", "t", 0) == Committed(42, 7, "", 1000, -1)
    assert rec == records.offset_commit("g", "t", 0, 42, 7, "", 1000)


def test_delete_writes_a_tombstone_only_for_an_offset_that_exists():
    o = Offsets()
    assert o.delete("g", "t", 0) is None
    o.commit("g", "t", 0, 1, -1, "", 0)
    assert o.delete("g", "t", 0) == records.offset_tombstone("g", "t", 0)
    assert o.get("g", "t", 0) is None and not o.has_group("g")


def test_delete_all_tombstones_every_partition_of_the_group():
    o = Offsets()
    for p in range(3):
        o.commit("g", "t", p, p, -1, "", 0)
    o.commit("h", "t", 0, 9, -1, "", 0)
    assert sorted(r.key["partition"] for r in o.delete_all("g")) == [0, 1, 2]
    assert o.group_ids() == ["h"]


def test_expiry_by_retention_from_the_base_and_by_expire_timestamp():
    o = Offsets()
    o.commit("g", "t", 0, 1, -1, "", now_ms=100)
    o.commit("g", "t", 1, 1, -1, "", now_ms=500)
    o.commit("g", "u", 0, 1, -1, "", now_ms=100, expire_timestamp_ms=150)
    by_commit = lambda c: c.commit_timestamp_ms  # noqa: E731
    expired, none_left = o.expire("g", 149, 1000, by_commit)
    assert expired == [] and not none_left
    expired, none_left = o.expire("g", 150, 1000, by_commit)          # its expire timestamp
    assert [r.key["topic"] for r in expired] == ["u"] and not none_left
    expired, _ = o.expire("g", 1100, 1000, by_commit)
    assert [(r.key["topic"], r.key["partition"]) for r in expired] == [("t", 0)]
    # A base later than the commit (the time the group became Empty) holds them longer.
    expired, _ = o.expire("g", 1600, 1000, lambda c: 700)
    assert expired == []
    expired, none_left = o.expire("g", 1700, 1000, lambda c: 700)
    assert [r.key["partition"] for r in expired] == [1] and none_left


def test_topics_kept_never_expire():
    o = Offsets()
    o.commit("g", "kept", 0, 1, -1, "", 0)
    o.commit("g", "old", 0, 1, -1, "", 0)
    expired, none_left = o.expire("g", 10**9, 1, lambda c: 0, keep_topics={"kept"})
    assert [r.key["topic"] for r in expired] == ["old"] and not none_left


def test_replay_of_commits_and_tombstones_rebuilds_the_same_offsets():
    o = Offsets()
    recs = [o.commit("g", "t", 0, 1, -1, "a", 5), o.commit("g", "t", 0, 2, 3, "b", 6),
            o.commit("g", "t", 1, 9, -1, "", 7, 99), o.delete("g", "t", 1)]
    again = Offsets()
    for rec in recs:
        again.replay(records.decode(*records.encode(rec)))
    assert again.by_group == o.by_group == {"g": {("t", 0): Committed(2, 3, "b", 6, -1)}}
