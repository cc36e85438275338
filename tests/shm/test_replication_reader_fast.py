"""The follower reader's fast path (``ReplicaSegmentReader._copy_hinted``): a copy that
goes on from where the last one ended, in one process with real Logs. Whatever the hint
points at after the leader rolled, cleaned, truncated or left a hole, the copy is the
leader's bytes or the general path's answer, never something else."""
from __future__ import annotations

import mmap
import os

import pytest

from shm import batch
from shm.batch import build_batch, parse_batch
from shm.config import LogConfig
from shm.log import Log
from shm.replication_reader import ReplicaReadError, ReplicaSegmentReader

TOPIC = "fast"


def value_of(offset: int) -> bytes:
    return b"v%d" % offset


def key_of(offset: int) -> bytes:
    return b"k%d" % (offset % 3)


class Pair:
    def __init__(self, cluster_id, tmp_path, config: LogConfig) -> None:
        self.leader = Log.open(str(tmp_path / "leader"), TOPIC, 0, config,
                               cluster_id=cluster_id, broker_id=0)
        self.follower = Log.open(str(tmp_path / "follower"), TOPIC, 0, config,
                                 cluster_id=cluster_id, broker_id=1)
        self.reader = ReplicaSegmentReader(cluster_id, 0, str(tmp_path / "leader"), TOPIC, 0)

    def append(self, records: int = 1, value: bytes | None = None) -> None:
        base = self.leader.log_end_offset
        values = [value_of(base + i) if value is None else value for i in range(records)]
        self.leader.append_as_leader(
            build_batch(values, [key_of(base + i) for i in range(records)], 0), 0)

    def copy(self, max_bytes: int = 1 << 20) -> int:
        """One copy up to the leader's LEO, appended; the offset after it."""
        data, next_offset = self.reader.copy(
            self.follower.log_end_offset, self.leader.log_end_offset, max_bytes,
            leader_epoch=0, log_start=self.leader.log_start_offset)
        assert data, "no progress"
        self.follower.append_as_follower(data)
        assert self.follower.log_end_offset == next_offset
        return next_offset

    def close(self) -> None:
        self.reader.close()
        self.leader.close()
        self.follower.close()


@pytest.fixture
def pair(cluster_id, tmp_path):
    p = Pair(cluster_id, tmp_path, LogConfig(segment_bytes=1 << 16, index_interval_bytes=256))
    yield p
    p.close()


def records(log: Log) -> list[tuple[int, bytes]]:
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        view = memoryview(log.read(offset, 1 << 20))
        position = 0
        while position < len(view):
            parsed = parse_batch(view[position:])
            out.extend((parsed.header.base_offset + i, v)
                       for i, v in enumerate(parsed.values.to_pylist()))
            position += parsed.header.size_bytes
            offset = parsed.header.next_offset
    return out


def test_steady_copies_take_the_fast_path_and_copy_the_leaders_bytes(pair):
    pair.append()
    pair.copy()                                  # the first copy walks: no hint yet
    assert pair.reader.fast_copies == 0
    for n in range(1, 40):
        for _ in range(n % 4 + 1):
            pair.append(n % 3 + 1)
        pair.copy(max_bytes=1 if n % 5 == 0 else 1 << 20)
    assert pair.reader.fast_copies == 39
    assert pair.follower.log_end_offset == pair.leader.log_end_offset
    assert bytes(pair.follower.read(0, 1 << 20)) == bytes(pair.leader.read(0, 1 << 20))


def test_max_bytes_still_gives_one_whole_batch_and_stops_before_the_leo(pair):
    pair.append()
    pair.copy()
    for _ in range(3):
        pair.append(2)
    start = pair.follower.log_end_offset
    data, next_offset = pair.reader.copy(start, start + 2, 1, leader_epoch=0, log_start=0)
    assert next_offset == start + 2 and parse_batch(data).header.record_count == 2
    assert len(data) == parse_batch(data).header.size_bytes       # one batch only
    # An end inside the next batch: that batch is not copied (it reaches past the LEO).
    assert pair.reader.copy(next_offset, next_offset + 1, 1 << 20, leader_epoch=0,
                            log_start=0) == (b"", start + 2)
    assert pair.reader.fast_copies == 1       # the second fell back: nothing fit below end


@pytest.mark.parametrize("path", ["hinted", "general"])
def test_a_segment_trimmed_at_a_page_boundary_under_the_reader_is_not_read_past_its_end(
        cluster_id, tmp_path, path):
    """The leader rolls a segment whose data ends exactly at a page: the reader's mapping
    (made while the file was preallocated) must not be touched past the trimmed end
    (SIGBUS: the process dies, as the reader before this test did); the copy goes on in
    the next segment, by the fast path or, without a hint, the general one."""
    p = Pair(cluster_id, tmp_path, LogConfig(segment_bytes=4 * mmap.PAGESIZE))
    try:
        overhead = len(build_batch([b""], [key_of(0)], 0))
        p.append(value=b"x" * (mmap.PAGESIZE - overhead))
        assert p.leader.active_segment.size_bytes == mmap.PAGESIZE
        p.copy()
        hinted = p.reader._index.hint[0]
        assert hinted.size_bytes > mmap.PAGESIZE, "mapped while preallocated"
        p.leader.roll()
        p.append()
        if path == "general":
            p.reader._index.hint = None
        assert len(p.leader.segments) == 2
        assert p.copy() == 2                                  # from the new segment
        assert hinted.size_bytes == mmap.PAGESIZE             # the trimmed size, learnt
        p.append()
        p.copy()
        assert p.reader.fast_copies == 1
        assert records(p.follower) == records(p.leader)
    finally:
        p.close()


def compacting(cluster_id, tmp_path) -> Pair:
    return Pair(cluster_id, tmp_path, LogConfig(
        segment_bytes=1 << 16, index_interval_bytes=128, cleanup_policy="compact",
        min_cleanable_dirty_ratio=0.0))


def clean(log: Log) -> None:
    log.roll(now_ms=1)
    log.update_high_watermark(log.log_end_offset)
    plan = log.cleanable(2)
    assert plan is not None and log.swap_cleaned(plan.build(now_ms=2)), "nothing cleaned"


@pytest.mark.parametrize("hint_at", ["the end", "the middle"])
def test_a_hinted_segment_the_cleaner_replaced_is_read_afresh(cluster_id, tmp_path, hint_at):
    p = compacting(cluster_id, tmp_path)
    try:
        for _ in range(12):
            p.append(3)
        p.copy(max_bytes=1)
        p.copy(max_bytes=1 if hint_at == "the middle" else 1 << 20)
        hinted = p.reader._index.hint[0]
        clean(p.leader)                     # a new file under the hinted segment's name
        p.append(2)
        fast = p.reader.fast_copies
        while p.follower.log_end_offset < p.leader.log_end_offset:
            p.copy()
        assert p.reader.fast_copies == fast, "the replaced file's hint was not used"
        assert hinted.view is None, "the old file's mapping was dropped"
        got = records(p.follower)
        # Every record copied is the leader's at its offset, in order, and the copy
        # after the clean holds exactly what the cleaned leader holds from there.
        assert all(v == value_of(o) for o, v in got)
        assert [o for o, _ in got] == sorted({o for o, _ in got})
        resumed = [r for r in got if r[0] >= 6]
        if hint_at == "the end":
            assert got[-2:] == records(p.leader)[-2:]
        else:
            assert resumed == [r for r in records(p.leader) if r[0] >= 6]
    finally:
        p.close()


def test_a_hole_after_the_hint_is_copied_by_the_fast_path(pair):
    """A leader's compacted range (replicated from an earlier leader) has holes: the
    batch at the hint starts after the offset the last copy ended at."""
    first = build_batch([value_of(0), value_of(1), value_of(2)], None, 0)
    batch.stamp(first, 0, 0)
    pair.leader.append_as_follower(first)
    pair.copy()
    later = build_batch([value_of(10)], None, 0)
    batch.stamp(later, 10, 0)
    pair.leader.append_as_follower(later)
    assert pair.leader.log_end_offset == 11
    assert pair.copy() == 11
    assert pair.reader.fast_copies == 1
    assert records(pair.follower) == [(o, value_of(o)) for o in (0, 1, 2, 10)]


def test_zeros_at_the_hint_are_never_copied(pair):
    """The leader truncated below the LEO the caller read (it must have left the epoch
    first; here the caller asks anyway): no batch at the hint, so nothing is copied and
    the general path gives up."""
    pair.append()
    pair.copy()
    pair.append()
    end = pair.leader.log_end_offset
    pair.leader.truncate_to(1)
    with pytest.raises(ReplicaReadError):
        pair.reader.copy(1, end, 1 << 20, leader_epoch=0, log_start=0)
    assert pair.reader.fast_copies == 0



def descriptors_of_segments(directory) -> int:
    """Descriptors of this process open on ``directory``'s segment files."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        count += target.startswith(str(directory)) and target.endswith(".log")
    return count


def test_the_reader_keeps_one_descriptor_across_rolls_and_none_after_close(cluster_id,
                                                                          tmp_path):
    p = Pair(cluster_id, tmp_path, LogConfig(segment_bytes=1024))
    try:
        p.append()
        for _ in range(60):                      # rolls every few batches
            p.append(2)
            p.copy()
        assert len(p.leader.segments) > 5
        assert p.reader.fast_copies > 10
        # The logs' rolls flush on a background thread, which holds duplicated segment
        # descriptors and opens index files: let it finish, so that it neither counts
        # here nor takes the number of the descriptor the reader closes.
        p.leader.flush()
        p.follower.flush()
        leader_dir = tmp_path / "leader"
        during = descriptors_of_segments(leader_dir)     # the leader's own and ours
        fd = p.reader._fd
        ours = os.fstat(fd)
        assert ours.st_ino == p.reader._index.hint[0].inode
        # Each mapping holds a descriptor (CPython's mmap keeps a dup); one more: ours.
        mapped = sum(s.map is not None for s in p.reader._segments.values())
        p.reader.close()
        assert during - descriptors_of_segments(leader_dir) == mapped + 1
        try:
            now = os.fstat(fd)
        except OSError:
            now = None                  # closed, and the number still free
        assert now is None or (now.st_dev, now.st_ino) != (ours.st_dev, ours.st_ino)
        assert records(p.follower) == records(p.leader)
    finally:
        p.close()
