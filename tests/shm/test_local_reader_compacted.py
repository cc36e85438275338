"""LocalReader on a compacted log: reads from offsets in holes, and reads running in
another thread while the owner swaps cleaned segments in (same base offsets, new files,
new index objects under the old names)."""
from __future__ import annotations

import threading

import pytest

from shm.batch import build_batch, parse_batch
from shm.board import ReplicaStateBoard, Role
from shm.config import LogConfig
from shm.local_reader import LocalReader
from shm.log import Log

TOPIC = "compacted"
CONFIG = LogConfig(segment_bytes=2048, index_interval_bytes=128, cleanup_policy="compact",
                   min_cleanable_dirty_ratio=0.0)


def value_of(offset: int) -> bytes:
    return b"%d" % offset


def key_of(offset: int) -> bytes:
    return b"k%d" % (offset * 7 % 13)


class Owner:
    def __init__(self, cluster_id, tmp_path):
        self.log = Log.open(str(tmp_path), TOPIC, 0, CONFIG, cluster_id=cluster_id)
        self.board = ReplicaStateBoard.create(cluster_id, 0, capacity=4)

    def append(self, batches: int) -> None:
        for _ in range(batches):
            base = self.log.log_end_offset
            self.log.append_as_leader(build_batch(
                [value_of(base + i) for i in range(3)], [key_of(base + i) for i in range(3)],
                1), 0)
        self.log.roll(now_ms=1)
        self.log.update_high_watermark(self.log.log_end_offset)
        self.publish()

    def publish(self) -> None:
        log = self.log
        self.board.publish(TOPIC, 0, role=Role.LEADER, leader_epoch=0, leader_id=0,
                           log_end_offset=log.log_end_offset, high_watermark=log.high_watermark,
                           log_start_offset=log.log_start_offset, isr=(0,))

    def clean(self) -> bool:
        plan = self.log.cleanable(2)
        return plan is not None and self.log.swap_cleaned(plan.build(now_ms=2))

    def close(self) -> None:
        self.board.close()
        self.log.delete()


def read_all(reader: LocalReader, start: int, hw: int | None = None):
    """(offset, key, value) from ``start`` up to ``hw`` (None: until a read reaches the
    HW it was validated against), checked: written values, offsets increasing, no batch
    wholly before the start. Returns the records (and, with hw None, the end)."""
    out, offset, until = [], start, hw
    while until is None or offset < until:
        read = reader.read(offset, 4096)
        if hw is None and read.next_offset >= read.high_watermark:
            until = read.high_watermark
        if offset >= read.high_watermark:
            break
        assert read.batches, f"no batch from {offset} below the HW {read.high_watermark}"
        for view in read.batches:
            batch = parse_batch(view)
            assert batch.header.next_offset > offset, "a batch wholly before the start"
            for record_offset, _, key, value in batch.records():
                assert value == value_of(record_offset) and key == key_of(record_offset), \
                    (record_offset, key, value)
                if record_offset >= offset:   # a batch holding the start comes whole
                    out.append((record_offset, key, value))
        offset = read.next_offset
    return out if hw is not None else (out, offset)


@pytest.fixture
def owner(cluster_id, tmp_path):
    o = Owner(cluster_id, tmp_path)
    yield o
    o.close()


def latest_by_key(records, start: int) -> dict:
    return {key: value for offset, key, value in records if offset >= start}


def test_reads_from_every_offset_of_a_compacted_log_start_at_the_next_kept_record(
        owner, cluster_id, tmp_path):
    owner.append(60)
    hw = owner.log.high_watermark
    every = [(o, key_of(o), value_of(o)) for o in range(hw)]
    assert owner.clean()
    with LocalReader(cluster_id, 0, str(tmp_path), TOPIC, 0, verify_crc=True) as reader:
        kept = read_all(reader, 0, hw)
        assert len(kept) < hw
        kept_offsets = [o for o, _, _ in kept]
        for start in range(0, hw, 5):
            got = read_all(reader, start, hw)
            assert [o for o, _, _ in got] == [o for o in kept_offsets if o >= start]
            assert latest_by_key(got, start) == latest_by_key(every, start)


def test_a_reader_in_another_thread_during_swaps_never_fails_nor_sees_unwritten_records(
        owner, cluster_id, tmp_path):
    owner.append(40)
    stop = threading.Event()
    problems, reads = [], [0]

    def reader_loop():
        try:
            with LocalReader(cluster_id, 0, str(tmp_path), TOPIC, 0) as reader:
                start = 0
                while not stop.is_set():
                    got, end = read_all(reader, start)
                    every = [(o, key_of(o), value_of(o)) for o in range(end)]
                    assert latest_by_key(got, start) == latest_by_key(every, start)
                    reads[0] += 1
                    start = (start + 7) % max(end, 1)
        except Exception as e:  # reported to the main thread
            problems.append(e)

    thread = threading.Thread(target=reader_loop)
    thread.start()
    try:
        swaps = 0
        for _ in range(8):
            owner.append(15)
            swaps += owner.clean()
        assert swaps >= 4
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not problems, problems
    assert reads[0] > 0
