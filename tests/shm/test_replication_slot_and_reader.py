"""The replication slot (shm.replication_slot) and the follower's segment reader
(shm.replication_reader), in one process: a real Log as the leader, a second Log as the
follower appending what the reader copied."""
from __future__ import annotations

import os
import random

import pytest

from shm.batch import build_batch, parse_batch
from shm.config import LogConfig
from shm.log import Log
from shm.names import SharedMemoryError, exists
from shm.replication_reader import ReplicaSegmentReader
from shm.replication_slot import ROWS, ReplicationSlot, slot_name

TOPIC = "events"


def value_at(offset: int) -> bytes:
    return (str(offset) + ":").encode() * (1 + offset % 5)


@pytest.fixture
def slot(cluster_id, tmp_path):
    s = ReplicationSlot.create(cluster_id, 0, TOPIC, 0, str(tmp_path / "leader"))
    yield s
    s.close(unlink=True)
    assert not exists(slot_name(cluster_id, 0, TOPIC, 0))


def test_the_leader_publishes_and_a_follower_reads_its_state_and_log_dir(slot, cluster_id,
                                                                         tmp_path):
    follower = ReplicationSlot.attach(cluster_id, 0, TOPIC, 0)
    try:
        assert follower.leader_state().leader_epoch == -1      # not leading yet
        assert follower.log_dir() == str(tmp_path / "leader")
        slot.publish(leader_epoch=3, log_end_offset=10, high_watermark=7, log_start_offset=2)
        state = follower.leader_state()
        assert (state.leader_epoch, state.log_end_offset, state.high_watermark,
                state.log_start_offset, state.pid) == (3, 10, 7, 2, os.getpid())
        slot.publish_end(12, 9)             # an append: its LEO, the HW as it is then
        assert follower.leader_state()[1:3] == (12, 9)
        slot.retire()
        assert follower.leader_epoch() == -1
        assert not follower.replaced()
    finally:
        follower.close()


def test_follower_reports_are_read_once_per_write_and_a_half_written_row_is_skipped(slot):
    slot.report(1, broker_id=1, leader_epoch=3, log_end_offset=5)
    slot.report(2, broker_id=2, leader_epoch=3, log_end_offset=4)
    reports = {r.broker_id: r for r in slot.reports()}
    assert {b: (r.leader_epoch, r.log_end_offset) for b, r in reports.items()} == \
        {1: (3, 5), 2: (3, 4)}
    seq = reports[1].seq
    slot.report(1, broker_id=1, leader_epoch=3, log_end_offset=9)
    again = {r.broker_id: r for r in slot.reports()}
    assert again[1].seq == seq + 2 and again[1].log_end_offset == 9
    # A writer that died mid-write leaves an odd seq: the row is not read ...
    at = 8 + 1 * 8
    slot.words[at + 1] += 1
    assert [r.broker_id for r in slot.reports()] == [2]
    # ... until the next write by that follower, which completes it.
    slot.report(1, broker_id=1, leader_epoch=4, log_end_offset=11)
    fixed = {r.broker_id: r for r in slot.reports()}
    assert (fixed[1].leader_epoch, fixed[1].log_end_offset) == (4, 11)
    assert fixed[1].seq % 2 == 0
    with pytest.raises(ValueError):
        slot.report(ROWS, broker_id=9, leader_epoch=4, log_end_offset=0)


def test_reports_and_marks_read_while_followers_write_are_never_torn(slot, cluster_id):
    """Two follower processes rewrite their rows as fast as they can, every word of a
    row the same number and the broker word alternating with its parity; the leader's
    reads see whole rows only (not one torn: some words of one write and some of
    another, which a read that skipped the seqlock's second look returns within a few
    thousand reads)."""
    import multiprocessing
    context = multiprocessing.get_context("fork")
    stop = context.Event()

    def write(row: int) -> None:
        follower = ReplicationSlot.attach(cluster_id, 0, TOPIC, 0)
        n = 0
        while not stop.is_set():
            n += 1
            follower.report(row, broker_id=row + 10 * (n % 2), leader_epoch=n,
                            log_end_offset=n, stamps=(n, n, n, n))
        follower.close()

    writers = [context.Process(target=write, args=(row,)) for row in (1, 2)]
    for writer in writers:
        writer.start()
    try:
        seen = {1: 0, 2: 0}
        reads = 0
        while reads < 20_000 or min(seen.values()) < 100:
            reads += 1
            marks = slot.report_marks()
            assert len(marks) == ROWS and marks[0] == 0
            for report in slot.reports():
                assert report.seq % 2 == 0
                assert (report.leader_epoch, *report.stamps) == (report.log_end_offset,) * 5
                row = report.broker_id % 10
                assert report.broker_id == row + 10 * (report.log_end_offset % 2)
                assert report.log_end_offset >= seen[row]   # never older
                seen[row] = report.log_end_offset
            assert reads < 2_000_000, f"the writers did not get going: {seen}"
    finally:
        stop.set()
        for writer in writers:
            writer.join(10)


def test_a_restarted_leader_replaces_the_slot_and_followers_see_it(slot, cluster_id, tmp_path):
    follower = ReplicationSlot.attach(cluster_id, 0, TOPIC, 0)
    again = ReplicationSlot.create(cluster_id, 0, TOPIC, 0, str(tmp_path / "leader"))
    try:
        assert follower.replaced()
        with pytest.raises(SharedMemoryError):
            ReplicationSlot.attach(cluster_id, 0, TOPIC, 1)     # no such slot
    finally:
        follower.close()
        again.close(unlink=True)


class Pair:
    """A leader Log (indexes in shared memory, as a broker's) and a follower Log."""

    def __init__(self, cluster_id, tmp_path, config):
        self.leader = Log.open(str(tmp_path / "leader"), TOPIC, 0, config,
                               cluster_id=cluster_id, broker_id=0)
        self.follower = Log.open(str(tmp_path / "follower"), TOPIC, 0, config,
                                 cluster_id=cluster_id, broker_id=1)
        self.reader = ReplicaSegmentReader(cluster_id, 0, str(tmp_path / "leader"), TOPIC, 0)

    def append(self, n: int, epoch: int = 0) -> None:
        base = self.leader.log_end_offset
        self.leader.append_as_leader(build_batch([value_at(base + i) for i in range(n)],
                                                 None, 0), epoch)

    def replicate(self, max_bytes: int, epoch: int = 0) -> int:
        """Copy everything up to the leader's LEO; the number of copies."""
        copies = 0
        while self.follower.log_end_offset < self.leader.log_end_offset:
            data, next_offset = self.reader.copy(
                self.follower.log_end_offset, self.leader.log_end_offset, max_bytes,
                leader_epoch=epoch, log_start=self.leader.log_start_offset)
            assert data, "no progress"
            self.follower.append_as_follower(data)
            assert self.follower.log_end_offset == next_offset
            copies += 1
        return copies

    def close(self):
        self.reader.close()
        self.leader.close()
        self.follower.close()


@pytest.fixture
def pair(cluster_id, tmp_path):
    p = Pair(cluster_id, tmp_path, LogConfig(segment_bytes=4096, index_interval_bytes=256))
    yield p
    p.close()


def _values(log: Log) -> list[bytes]:
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        view = memoryview(data) if not isinstance(data, memoryview) else data
        position = 0
        while position < len(view):
            batch = parse_batch(view[position:])
            out.extend(batch.values.to_pylist())
            position += batch.header.size_bytes
            offset = batch.header.next_offset
    return out


def test_a_follower_copies_above_the_hw_across_rolls_in_small_and_large_reads(pair):
    rng = random.Random(29)
    for _ in range(40):
        for _ in range(rng.randint(1, 6)):
            pair.append(rng.randint(1, 4))          # nothing committed: above the HW
        pair.replicate(rng.choice([1, 200, 1 << 20]))
    assert len(pair.leader.segments) > 3, "the leader rolled under the reader"
    assert pair.follower.log_end_offset == pair.leader.log_end_offset
    assert pair.leader.high_watermark == 0
    assert _values(pair.follower) == _values(pair.leader) == \
        [value_at(o) for o in range(pair.leader.log_end_offset)]
    assert pair.reader._index.hint is not None, "reads go on from where the last one ended"


def test_a_read_after_the_leader_truncated_and_rewrote_sees_the_new_bytes(pair):
    pair.append(3)
    pair.append(3)
    pair.replicate(1 << 20)
    # A new epoch: the leader truncated (as a follower would) and appended other records.
    pair.leader.truncate_to(3)
    pair.follower.truncate_to(3)
    pair.leader.append_as_leader(build_batch([b"new-3", b"new-4"], None, 0), 1)
    pair.replicate(1 << 20, epoch=1)
    assert _values(pair.follower)[3:] == [b"new-3", b"new-4"]
