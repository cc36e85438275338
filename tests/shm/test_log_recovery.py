"""Recovery, index reattach and the on-disk/shared-memory contract readers rely on."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from shm import batch as batch_codec
from shm.config import LogConfig
from shm.index import OffsetIndex, TimeIndex, index_name, KIND_OFFSET
from shm.log import Log, OffsetOutOfRangeError, RecordTooLargeError
from shm.names import cluster_objects, exists

pytestmark = pytest.mark.process

CONFIG = LogConfig(segment_bytes=8192, index_interval_bytes=256)


def open_log(tmp_path, cluster_id, config=CONFIG, **kwargs) -> Log:
    return Log.open(str(tmp_path), "orders", 2, config, cluster_id=cluster_id, **kwargs)


def fill(log: Log, batches: int, records: int = 5) -> list[int]:
    """Append batches whose values name their offset; returns each batch's base offset."""
    bases = []
    for _ in range(batches):
        leo = log.log_end_offset
        info = log.append_as_leader(
            batch_codec.build_batch([b"v%d" % (leo + i) for i in range(records)],
                                    timestamps_ms=leo), 3)
        bases.append(info.first_offset)
    return bases


def all_values(log: Log) -> list[bytes]:
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        for batch in batch_codec.parse_batches(log.read(offset, 1 << 20)):
            out += batch.values.to_pylist()
            offset = batch.header.next_offset
    return out


def test_byte_flip_in_the_middle_truncates_at_that_batch_and_says_so(tmp_path, cluster_id):
    log = open_log(tmp_path, cluster_id)
    bases = fill(log, 40)
    segment = log.active_segment
    # The middle batch of the active segment (unflushed: after the recovery point).
    positions = [p for p, _ in batch_codec.iter_batches(segment.view(0, segment.size_bytes))]
    victim_position = positions[len(positions) // 2]
    victim_offset = batch_codec.read_header(segment._map, victim_position).base_offset
    victim_end = victim_position + \
        batch_codec.read_header(segment._map, victim_position).size_bytes
    nonzero_cut = len(bytes(segment.view(victim_position, segment.size_bytes)).rstrip(b"\0"))
    path = segment.path
    log.abandon()  # as SIGKILL
    with open(path, "r+b") as f:
        f.seek(victim_position + (victim_end - victim_position) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x5A]))
    log = open_log(tmp_path, cluster_id)
    try:
        (cut,) = log.recovery.truncations
        assert (cut.file, cut.position, cut.offset) == (path, victim_position, victim_offset)
        assert cut.bytes == nonzero_cut  # trailing zero bytes look like preallocation
        assert "CRC" in cut.reason
        assert log.log_end_offset == victim_offset
        assert all_values(log) == [b"v%d" % o for o in range(victim_offset)]
        with pytest.raises(OffsetOutOfRangeError):
            log.read(victim_offset + 1, 100)
        # The log goes on from the cut: new data lands where the corrupt batch was.
        fill(log, 3)
        assert all_values(log) == [b"v%d" % o for o in range(log.log_end_offset)]
        assert victim_offset in bases
    finally:
        log.delete()


def test_a_cut_zeroes_stale_bytes_past_a_zero_gap_in_a_large_preallocated_segment(
        tmp_path, cluster_id):
    # Recovery only scans the extents that hold data (SEEK_DATA); bytes written far past
    # the end of the valid batches, after a run of zeros, must still be found and zeroed,
    # or they would later be read as a batch.
    config = LogConfig(segment_bytes=64 * 1024 * 1024, index_interval_bytes=256)
    log = open_log(tmp_path, cluster_id, config)
    fill(log, 10)
    end = log.active_segment.size_bytes
    path = log.active_segment.path
    log.abandon()  # as SIGKILL
    stale_at = 40 * 1024 * 1024
    with open(path, "r+b") as f:
        f.seek(end)
        f.write(b"\x07" * 100)  # a torn batch right after the last good one
        f.seek(stale_at)
        f.write(b"stale bytes from a torn write")
    log = open_log(tmp_path, cluster_id, config)
    try:
        (cut,) = log.recovery.truncations
        assert cut.position == end
        assert cut.bytes == stale_at + len(b"stale bytes from a torn write") - end
        with open(path, "rb") as f:
            f.seek(end)
            assert f.read(stale_at + 4096 - end).count(0) == stale_at + 4096 - end
        fill(log, 2)
        assert all_values(log) == [b"v%d" % o for o in range(log.log_end_offset)]
    finally:
        log.delete()


def test_recovery_scans_only_from_the_recovery_point(tmp_path, cluster_id):
    log = open_log(tmp_path, cluster_id, LogConfig(segment_bytes=1 << 20,
                                                   index_interval_bytes=4096))
    fill(log, 2000)
    log.flush()
    fill(log, 10)
    unflushed_bytes = log.active_segment.size_bytes - log.active_segment.flushed_bytes
    log.abandon()
    log = open_log(tmp_path, cluster_id, LogConfig(segment_bytes=1 << 20,
                                                   index_interval_bytes=4096))
    try:
        report = log.recovery
        assert report.indexes_reattached == 2 and report.indexes_rebuilt == 0
        assert report.batches_scanned <= 10 + 4096 // 100
        assert report.bytes_scanned <= unflushed_bytes + 4096 + 200
        assert log.log_end_offset == 2010 * 5
    finally:
        log.delete()


@pytest.mark.parametrize("reattach", [True, False])
def test_reopen_after_kill_rebuilds_or_reattaches_identical_indexes(tmp_path, cluster_id, reattach):
    log = open_log(tmp_path, cluster_id)
    fill(log, 150)
    before = [(s.base_offset, s.offset_index.keys.copy(), s.offset_index.values.copy(),
               s.time_index.keys.copy()) for s in log.segments]
    log.abandon()
    log = open_log(tmp_path, cluster_id, reattach_indexes=reattach)
    try:
        after = [(s.base_offset, s.offset_index.keys.copy(), s.offset_index.values.copy(),
                  s.time_index.keys.copy()) for s in log.segments]
        assert len(before) == len(after) > 2
        for (b0, k0, v0, t0), (b1, k1, v1, t1) in zip(before, after):
            assert b0 == b1 and np.array_equal(k0, k1) and np.array_equal(v0, v1)
            assert np.array_equal(t0, t1)
        if not reattach:
            assert log.recovery.indexes_reattached == 0
    finally:
        log.delete()


def test_garbage_in_a_reattached_index_is_detected_and_rebuilt(tmp_path, cluster_id):
    log = open_log(tmp_path, cluster_id)
    fill(log, 150)
    first = log.segments[0]
    good = first.offset_index.values.copy()
    log.abandon()
    name = index_name(cluster_id, 0, "orders", 2, first.base_offset, KIND_OFFSET)
    index = OffsetIndex.attach(name, first.base_offset)
    index._values[index.count // 2] += 3  # a middle entry points inside a batch now
    index.close()
    log = open_log(tmp_path, cluster_id)
    try:
        assert log.recovery.indexes_rebuilt >= 1
        assert np.array_equal(log.segments[0].offset_index.values, good)
        assert all_values(log) == [b"v%d" % o for o in range(log.log_end_offset)]
    finally:
        log.delete()


def test_clean_close_persists_index_files_and_unlinks_shared_memory(tmp_path, cluster_id):
    log = open_log(tmp_path, cluster_id)
    fill(log, 150)
    directory = log.directory
    log.close()
    assert cluster_objects(cluster_id) == []
    names = sorted(os.listdir(directory))
    assert "leader-epoch-checkpoint" in names
    logs = [n for n in names if n.endswith(".log")]
    assert len(logs) > 2 and all(len(n) == 24 for n in logs)
    for n in logs:
        assert n[:-4] + ".index" in names and n[:-4] + ".timeindex" in names
    assert os.path.getsize(os.path.join(directory, logs[-1])) < CONFIG.segment_bytes  # trimmed
    log = open_log(tmp_path, cluster_id)
    try:
        assert not log.recovery.truncated and log.recovery.indexes_loaded > 0
        assert all_values(log) == [b"v%d" % o for o in range(log.log_end_offset)]
        assert os.path.getsize(log.active_segment.path) == CONFIG.segment_bytes  # preallocated
    finally:
        log.delete()
    assert cluster_objects(cluster_id) == []
    assert not os.path.exists(directory)


READER = r"""
import sys, mmap, os, struct
from shm.index import OffsetIndex
cluster_id, directory, base, target = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
index = OffsetIndex.attach_readonly(cluster_id, 0, "orders", 2, base)
offset, position = index.lookup(target)
with open(os.path.join(directory, "%020d.log" % base), "rb") as f:
    data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    while True:
        base_offset, length = struct.unpack_from("<qi", data, position)
        last_delta = struct.unpack_from("<i", data, position + 23)[0]
        if base_offset + last_delta >= target:
            break
        position += length + 12
    print(base_offset, position)
"""


def test_another_process_finds_a_batch_with_the_shared_index(tmp_path, cluster_id):
    log = open_log(tmp_path, cluster_id)
    try:
        fill(log, 150)
        segment = log.segments[1]
        target = segment.base_offset + 17
        expected_position = segment.position_of(target)
        out = subprocess.run([sys.executable, "-c", READER, cluster_id, log.directory,
                              str(segment.base_offset), str(target)],
                             capture_output=True, text=True, timeout=60, check=True).stdout
        base_offset, position = map(int, out.split())
        assert position == expected_position
        assert base_offset <= target < base_offset + 5
    finally:
        log.delete()


def test_retention_by_bytes_and_time_moves_log_start_by_whole_segments(tmp_path, cluster_id):
    config = LogConfig(segment_bytes=8192, index_interval_bytes=256, retention_bytes=20000,
                       retention_ms=1000)
    log = open_log(tmp_path, cluster_id, config)
    try:
        fill(log, 200)
        assert log.delete_old_segments(now_ms=0) == 0, "nothing below the HW yet"
        log.update_high_watermark(log.log_end_offset)
        assert log.delete_old_segments(now_ms=0) > 0
        assert log.size_bytes - log.segments[0].size_bytes < 20000
        assert log.log_start_offset == log.segments[0].base_offset > 0
        assert log.leader_epoch_cache.entries[0].start_offset == log.log_start_offset
        with pytest.raises(OffsetOutOfRangeError):
            log.read(log.log_start_offset - 1, 100)
        # By time: every sealed segment's newest record is older than 1 s at now_ms=10**9.
        log.delete_old_segments(now_ms=10**9)
        assert len(log.segments) == 1 and log.log_start_offset == log.active_segment.base_offset
    finally:
        log.delete()


def test_read_respects_max_bytes_max_offset_and_returns_one_big_batch(tmp_path, cluster_id):
    log = open_log(tmp_path, cluster_id)
    try:
        fill(log, 10)
        view = log.read(7, 1)
        (batch,) = batch_codec.parse_batches(view)
        assert batch.base_offset == 5, "the batch holding offset 7"
        assert view.readonly
        parsed = batch_codec.parse_batches(log.read(0, 10**6, max_offset=20))
        assert [b.base_offset for b in parsed] == [0, 5, 10, 15]
        assert len(log.read(20, 100, max_offset=20)) == 0
        with pytest.raises(RecordTooLargeError):
            log.append_as_leader(batch_codec.build_batch([b"x" * 9000]), 3)
        with pytest.raises(batch_codec.CorruptRecordError):
            bad = batch_codec.build_batch([b"abc"])
            bad[-1] ^= 1
            log.append_as_leader(bad, 3)
    finally:
        log.delete()


def test_flush_policy_by_messages_advances_and_checkpoints_the_recovery_point(tmp_path,
                                                                              cluster_id):
    log = open_log(tmp_path, cluster_id, LogConfig(segment_bytes=1 << 16,
                                                   flush_interval_messages=12))
    try:
        fill(log, 2)  # 10 records: below the interval
        assert log.recovery_point == 0
        fill(log, 1)  # 15 records
        assert log.recovery_point == 15
        text = open(os.path.join(str(tmp_path), "recovery-point-offset-checkpoint")).read()
        assert text == "0\n1\norders 2 15\n"
    finally:
        log.delete()


def test_offset_for_timestamp_finds_the_first_record_at_or_after_it(tmp_path, cluster_id):
    log = open_log(tmp_path, cluster_id)
    try:
        fill(log, 150)  # batch b holds offsets [5b, 5b+5), all with timestamp 5b
        leo = log.log_end_offset
        log.append_as_leader(batch_codec.build_batch([b"a", b"b", b"c"],
                                                     timestamps_ms=[leo + 10, leo + 30, leo + 20]),
                             3)
        assert len(log.segments) > 2
        assert log.offset_for_timestamp(0) == 0
        assert log.offset_for_timestamp(1) == 5
        assert log.offset_for_timestamp(400) == 400
        assert log.offset_for_timestamp(401) == 405
        assert log.offset_for_timestamp(leo + 11) == leo + 1
        assert log.offset_for_timestamp(leo + 21) == leo + 1
        assert log.offset_for_timestamp(leo + 31) is None
        # With the record's own timestamp (what ListOffsets answers): out of order
        # inside a batch, the first record at or after the time wins.
        assert log.entry_for_timestamp(401) == (405, 405)
        assert log.entry_for_timestamp(leo + 11) == (leo + 1, leo + 30)
        assert log.entry_for_timestamp(leo + 1) == (leo, leo + 10)
        log.close()
        log = open_log(tmp_path, cluster_id)
        assert log.offset_for_timestamp(401) == 405
    finally:
        log.delete()


def test_a_missing_segment_file_ends_the_log_at_the_gap(tmp_path, cluster_id):
    log = open_log(tmp_path, cluster_id)
    fill(log, 200)
    assert len(log.segments) >= 4
    second, third = log.segments[1], log.segments[2]
    gap_offset, gap_path = second.base_offset, second.path
    log.close()
    os.unlink(gap_path)
    log = open_log(tmp_path, cluster_id)
    try:
        (cut,) = log.recovery.truncations
        assert cut.offset == gap_offset and cut.file == third.path and "starts at" in cut.reason
        assert log.log_end_offset == gap_offset and len(log.segments) == 1
        assert all_values(log) == [b"v%d" % o for o in range(gap_offset)]
    finally:
        log.delete()


def test_roll_ms_and_flush_interval_ms_are_honoured(tmp_path, cluster_id):
    """Batches without timestamps: log.roll.ms counts from the segment's creation."""
    config = LogConfig(segment_bytes=1 << 16, roll_ms=1000, flush_interval_ms=500)
    log = Log.open(str(tmp_path), "orders", 2, config, cluster_id=cluster_id, now_ms=0)
    try:
        log.append_as_leader(batch_codec.build_batch([b"a"], timestamps_ms=-1), 1, now_ms=0)
        assert log.recovery_point == 0 and not log.flush_if_due(now_ms=499)
        assert log.flush_if_due(now_ms=500) and log.recovery_point == 1
        log.append_as_leader(batch_codec.build_batch([b"b"], timestamps_ms=-1), 1, now_ms=1000)
        assert len(log.segments) == 1
        log.append_as_leader(batch_codec.build_batch([b"c"], timestamps_ms=-1), 1, now_ms=1001)
        assert [s.base_offset for s in log.segments] == [0, 2]
    finally:
        log.delete()


def test_roll_ms_counts_from_the_first_batch_timestamp_not_the_wall_clock(tmp_path, cluster_id):
    """As Kafka: roll when a batch's max timestamp is more than log.roll.ms after the
    active segment's first batch's; the segment's age by the wall clock does not count,
    and a reopen (new creation time) does not restart the count."""
    config = LogConfig(segment_bytes=1 << 16, roll_ms=1000)
    log = Log.open(str(tmp_path), "orders", 2, config, cluster_id=cluster_id, now_ms=0)
    log.append_as_leader(batch_codec.build_batch([b"a"], timestamps_ms=50_000), 1, now_ms=0)
    log.append_as_leader(batch_codec.build_batch([b"b"], timestamps_ms=51_000), 1, now_ms=10**9)
    assert len(log.segments) == 1, "1000 ms apart is not more than log.roll.ms"
    log.close()
    log = Log.open(str(tmp_path), "orders", 2, config, cluster_id=cluster_id, now_ms=10**9)
    try:
        log.append_as_leader(batch_codec.build_batch([b"c", b"c"], timestamps_ms=[51_000, 51_001]),
                             1, now_ms=10**9)
        assert [s.base_offset for s in log.segments] == [0, 2]
        log.append_as_leader(batch_codec.build_batch([b"d"], timestamps_ms=52_001), 1,
                             now_ms=10**9)
        assert len(log.segments) == 2, "the new segment counts from its own first batch"
        log.truncate_to(2)  # empties the active segment: its first batch is gone
        log.append_as_leader(batch_codec.build_batch([b"e"], timestamps_ms=60_000), 1,
                             now_ms=10**9)
        log.append_as_leader(batch_codec.build_batch([b"f"], timestamps_ms=60_500), 1,
                             now_ms=10**9)
        assert len(log.segments) == 2
    finally:
        log.delete()


def test_a_partition_directory_has_one_writer(tmp_path, cluster_id):
    from shm.log import LogError
    log = open_log(tmp_path, cluster_id)
    try:
        with pytest.raises(LogError, match="another Log"):
            open_log(tmp_path, cluster_id)
    finally:
        log.close()
    log = open_log(tmp_path, cluster_id)  # released by close
    log.delete()


def test_a_roll_flushes_in_the_background_then_moves_the_recovery_point(tmp_path, cluster_id):
    import time
    log = open_log(tmp_path, cluster_id, LogConfig(segment_bytes=1 << 16))
    try:
        fill(log, 20)
        log.roll()
        new_base = log.active_segment.base_offset
        assert new_base == 100 and log.recovery_point == 0
        deadline = time.monotonic() + 30
        while log.recovery_point != new_base:  # applied when the log next looks
            assert time.monotonic() < deadline, "the roll flush never completed"
            log.flush_if_due()
            time.sleep(0.001)
        path = os.path.join(str(tmp_path), "recovery-point-offset-checkpoint")
        # In memory only: the file follows at the broker's periodic checkpoint (Kafka's
        # log.flush.offset.checkpoint.interval.ms), not on the append that saw the flush.
        assert not (os.path.exists(path) and open(path).read().endswith("orders 2 100\n"))
        assert log.checkpointed_recovery_point != 100
        log.checkpoint_recovery_point()
        assert open(path).read().endswith("orders 2 100\n")
        assert log.checkpointed_recovery_point == 100
        assert log.segments[0].flushed_bytes == log.segments[0].size_bytes
    finally:
        log.delete()


def test_a_roll_leaves_its_index_files_and_directory_fsync_to_the_flusher(tmp_path, cluster_id,
                                                                          monkeypatch):
    """The disk steps of a roll (the sealed segment's index files, the fsyncs of the
    segment and of the directory) run on the flusher thread: a roll returns while they
    are held, the recovery point stays below the sealed segment until they are done,
    then the files hold the shared indexes' entries. (On the broker's loop they stalled
    every partition of the broker for 40-260 ms under a loaded disk.)"""
    import threading
    import time
    from shm.index import write_index_file as real_write
    from shm.log import core
    held = threading.Event()
    release = threading.Event()

    def slow_write(*args):
        held.set()
        assert release.wait(30), "never released"
        real_write(*args)
    monkeypatch.setattr(core, "write_index_file", slow_write, raising=False)
    log = open_log(tmp_path, cluster_id, LogConfig(segment_bytes=1 << 16))
    try:
        fill(log, 20)
        sealed = log.active_segment
        keys = np.array(sealed.offset_index._keys[:sealed.offset_index.count])
        roller = threading.Thread(target=log.roll)
        roller.start()
        roller.join(10)
        assert not roller.is_alive(), "roll waited for its index files"
        assert held.wait(10), "the flusher never wrote the index files"
        stem = os.path.join(log.directory, f"{sealed.base_offset:020d}")
        assert not os.path.exists(stem + ".index")
        log.flush_if_due()
        assert log.recovery_point == 0      # nothing durable yet: recovery scans it
        release.set()
        deadline = time.monotonic() + 30
        while log.recovery_point != log.active_segment.base_offset:
            assert time.monotonic() < deadline, "the roll flush never completed"
            log.flush_if_due()
            time.sleep(0.001)
        on_disk, _ = OffsetIndex.read_file(stem + ".index", sealed.base_offset)
        assert len(keys) > 0 and np.array_equal(on_disk, keys)
        assert os.path.exists(stem + ".timeindex")
    finally:
        release.set()
        log.delete()
