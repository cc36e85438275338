"""Log compaction in shm.log: the kept records against a model, batch splitting, the
plan's refusals, a clean under concurrent appends and reads."""
from __future__ import annotations

import os
import tempfile
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from shm import batch as codec
from shm.config import LogConfig
from shm.log import Log
from shm.log.cleaner_batches import kept_batches
from shm.names import cleanup_cluster

R = 1000  # delete.retention.ms of these tests
CONFIG = LogConfig(segment_bytes=64 * 1024, index_interval_bytes=128,
                   cleanup_policy="compact", min_cleanable_dirty_ratio=0.0,
                   delete_retention_ms=R, retention_ms=-1)


def all_records(log: Log) -> list[tuple]:
    """(offset, timestamp, key, value) of every record, reading batch after batch."""
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        view = log.read(offset, 1 << 20)
        assert len(view), offset
        for position, header in codec.iter_batches(view):  # CRCs checked
            assert header.base_offset >= offset, "offsets increase"
            out += codec.parse_batch(view, position).records()
            offset = header.next_offset
    return out


def append(log: Log, records: list[tuple[bytes, bytes | None, int]]) -> None:
    keys, values, stamps = zip(*records)
    log.append_as_leader(codec.build_batch(list(values), keys=list(keys),
                                           timestamps_ms=list(stamps)), leader_epoch=1)


def expected(written: list[tuple], cleans: list[tuple[int, int]]) -> list[tuple]:
    """The model: ``written`` (offset, ts, key, value); ``cleans``: (end, time) of each
    clean. Below the last clean's end a record survives iff it is its key's last
    record below that end, and, if a tombstone, no clean ran at or after its horizon
    (the first clean covering it + R). At and above the end, everything survives."""
    if not cleans:
        return written
    end = cleans[-1][0]
    last = {}
    for offset, _, key, _ in written:
        if offset < end:
            last[key] = offset
    out = []
    for record in written:
        offset, _, key, value = record
        if offset >= end:
            out.append(record)
            continue
        if last[key] != offset:
            continue
        if value is None:
            first = next(t for e, t in cleans if e > offset)
            if any(t >= first + R for _, t in cleans):
                continue
        out.append(record)
    return out


rounds = st.lists(st.lists(st.lists(st.tuples(st.integers(0, 6), st.booleans()),
                                    min_size=1, max_size=4), min_size=1, max_size=6),
                  min_size=1, max_size=4)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(rounds=rounds, gaps=st.lists(st.integers(0, 2 * R), min_size=4, max_size=4))
def test_kept_records_match_the_model_last_value_per_key_and_tombstones_after_retention(
        rounds, gaps):
    cluster_id = "clm" + format(abs(hash((str(rounds), str(gaps)))) % 10**9, "09d")
    log = Log.open(tempfile.mkdtemp(prefix="mk-clean-"), "t", 0, CONFIG,
                   cluster_id=cluster_id)
    try:
        written, cleans, now = [], [], 10_000
        for number, batches in enumerate(rounds):
            for batch in batches:
                records = [(b"k%d" % k, None if tomb else b"v%d" % (len(written) + i), now)
                           for i, (k, tomb) in enumerate(batch)]
                first = log.log_end_offset
                append(log, records)
                written += [(first + i, now, k, v) for i, (k, v, _) in enumerate(records)]
            log.roll(now_ms=now)
            log.update_high_watermark(log.log_end_offset)
            now += gaps[number]
            plan = log.cleanable(now)
            if plan is not None:
                cleaned = plan.build(now_ms=now)
                assert cleaned.stats.groups_skipped == 0
                assert log.swap_cleaned(cleaned)
                cleans.append((plan.end, now))
            model = expected(written, cleans)
            assert all_records(log) == model, (cleans, number)
            for stamp in sorted({r[1] for r in written}) + [now + 1]:
                # ListOffsets by time: the first remaining record at or after it.
                want = next((r[0] for r in model if r[1] >= stamp), None)
                assert log.offset_for_timestamp(stamp) == want, (stamp, want)
        log.close()
        log = Log.open(log.data_dir, "t", 0, CONFIG, cluster_id=cluster_id)
        assert all_records(log) == expected(written, cleans)
    finally:
        log.delete()
        cleanup_cluster(cluster_id)


def test_a_split_batch_keeps_offsets_timestamps_headers_sequence_and_attributes():
    values = [b"a", None, b"c", b"d", None, b"f"]
    keys = [b"1", b"2", b"3", b"4", b"5", b"6"]
    headers = [[("h", b"%d" % i)] for i in range(6)]
    buf = codec.build_batch(values, keys=keys, timestamps_ms=[50, 10, 30, 20, 60, 40],
                            base_offset=100, partition_leader_epoch=7, producer_id=9,
                            producer_epoch=2, base_sequence=2**31 - 3, headers=headers,
                            codec_hint=codec.CODEC_LZ4)
    keep = np.array([True, False, True, True, False, True])
    pieces = kept_batches(buf, 0, keep)
    assert len(pieces) == 3
    original = codec.parse_batch(buf).records(with_headers=True)
    got = []
    for piece in pieces:
        parsed = codec.parse_batch(piece)  # CRC checked
        h = parsed.header
        assert (h.partition_leader_epoch, h.producer_id, h.producer_epoch) == (7, 9, 2)
        assert parsed.codec_hint == codec.CODEC_LZ4
        assert h.base_sequence == (2**31 - 3 + h.base_offset - 100) % 2**31
        got += parsed.records(with_headers=True)
    assert got == [r for r, k in zip(original, keep) if k]
    assert kept_batches(buf, 0, np.ones(6, bool)) == [bytes(buf)]
    assert kept_batches(buf, 0, np.zeros(6, bool)) == []
    lat = codec.build_batch(values, keys=keys, timestamps_ms=77, log_append_time=True)
    for piece in kept_batches(lat, 0, keep):
        parsed = codec.parse_batch(piece)
        assert parsed.log_append_time and parsed.header.max_timestamp == 77
        assert set(parsed.timestamps.tolist()) == {77}


def test_swap_is_refused_and_files_removed_when_the_log_changed(tmp_path, cluster_id):
    log = Log.open(str(tmp_path), "t", 0, CONFIG, cluster_id=cluster_id)
    try:
        for i in range(30):
            append(log, [(b"k%d" % (i % 3), b"v%d" % i, 1)])
            if i % 10 == 9:
                log.roll(now_ms=1)
        log.update_high_watermark(log.log_end_offset)
        before = all_records(log)
        cleaned = log.cleanable(5).build(now_ms=5)
        log.truncate_to(25)
        assert not log.swap_cleaned(cleaned)
        assert not [n for n in __import__("os").listdir(log.directory) if ".cleaned" in n]
        assert all_records(log) == [r for r in before if r[0] < 20] + \
            [r for r in before if 20 <= r[0] < 25]
        log.update_high_watermark(log.log_end_offset)
        assert LogConfig().compact is False
        delete_only = Log.open(str(tmp_path / "d"), "t", 0, LogConfig(), cluster_id=cluster_id)
        try:
            assert delete_only.cleanable(5) is None
        finally:
            delete_only.delete()
    finally:
        log.delete()


def test_reads_during_a_clean_see_each_keys_latest_value_and_nothing_unwritten(
        tmp_path, cluster_id):
    """A thread builds while the owner appends and reads; then the owner swaps. Every
    read returns records that were written (same offset, key, value), and reading
    from any position to the end sees, per key, the latest value at or after it."""
    config = LogConfig(segment_bytes=8 * 1024, index_interval_bytes=256,
                       cleanup_policy="compact", min_cleanable_dirty_ratio=0.0)
    log = Log.open(str(tmp_path), "t", 0, config, cluster_id=cluster_id)
    written: dict[int, tuple] = {}

    def produce(count: int) -> None:
        for _ in range(count):
            offset = log.log_end_offset
            recs = [(b"k%d" % ((offset + i) * 7 % 23), b"v%d" % (offset + i), 1)
                    for i in range(3)]
            append(log, recs)
            for i, (k, v, _) in enumerate(recs):
                written[offset + i] = (k, v)
        log.update_high_watermark(log.log_end_offset)

    def check_read(start: int) -> None:
        records = [r for r in all_records(log) if r[0] >= start]
        for offset, _, key, value in records:
            assert written[offset] == (key, value), f"offset {offset} was never {key, value}"
        latest = {}
        for offset, (key, value) in written.items():
            if offset >= start:
                latest[key] = value
        seen = {}
        for _, _, key, value in records:
            seen[key] = value
        assert seen == latest

    try:
        produce(400)
        plan = log.cleanable(1)
        assert plan is not None
        result = {}
        builder = threading.Thread(target=lambda: result.update(c=plan.build(now_ms=1)))
        builder.start()
        while builder.is_alive():
            produce(5)
            check_read(log.log_start_offset)
        builder.join()
        produce(5)
        check_read(0)
        cleaned = result["c"]
        assert cleaned.stats.records_kept < cleaned.stats.records_read
        size = log.size_bytes
        assert log.swap_cleaned(cleaned)
        assert log.size_bytes < size
        for start in (0, 17, plan.end - 1, plan.end, log.log_end_offset - 4):
            check_read(start)
    finally:
        log.delete()


def test_the_benchmark_hook_cleans_to_one_record_per_key(tmp_path):
    from shm.log.cleaner_bench import bench_clean
    figures = bench_clean(5000, 50, value_bytes=20, directory=str(tmp_path))
    assert figures["kept_records"] == 50 and figures["mb_per_s"] > 0
    assert figures["written_mb"] < figures["log_mb"]


def test_a_compacted_log_refuses_a_record_without_a_key_and_the_cleaner_drops_old_ones(
        tmp_path, cluster_id):
    from shm.log import InvalidRecordError
    log = Log.open(str(tmp_path), "t", 0, CONFIG, cluster_id=cluster_id)
    try:
        with pytest.raises(InvalidRecordError):
            log.append_as_leader(codec.build_batch([b"a", b"b"], keys=[b"k", None]), 1)
        assert log.log_end_offset == 0
        # A follower takes what its leader has (a log compacted after keyless records).
        log.append_as_follower(bytes(codec.build_batch([b"a", b"b"], keys=[None, b"k"],
                                                       partition_leader_epoch=1)))
        log.roll(now_ms=1)
        log.update_high_watermark(log.log_end_offset)
        assert log.swap_cleaned(log.cleanable(2).build(now_ms=2))
        assert [(r[0], r[2]) for r in all_records(log)] == [(1, b"k")]
    finally:
        log.delete()


def test_dirty_ratio_and_compaction_lags_decide_when_a_log_is_cleaned(tmp_path, cluster_id):
    import dataclasses
    config = dataclasses.replace(CONFIG, min_cleanable_dirty_ratio=0.5,
                                 min_compaction_lag_ms=100, max_compaction_lag_ms=10_000)
    log = Log.open(str(tmp_path), "t", 0, config, cluster_id=cluster_id)
    try:
        for i in range(40):
            append(log, [(b"k%d" % (i % 2), b"v%d" % i, 1000)])
            if i % 10 == 9:
                log.roll(now_ms=1000)
        assert log.cleanable(1050) is None, "below the HW only"
        log.update_high_watermark(log.log_end_offset)
        assert log.cleanable(1050) is None, "newer than min.compaction.lag.ms"
        plan = log.cleanable(1200)
        assert plan is not None and plan.range.dirty_ratio == 1.0 and plan.end == 40
        assert log.swap_cleaned(plan.build(now_ms=1200))
        append(log, [(b"k0", b"v40", 2000)])  # dirty: 1 record against 2 clean ones
        log.roll(now_ms=2000)
        log.update_high_watermark(log.log_end_offset)
        assert log.cleanable(2200) is None, "dirty ratio under min.cleanable.dirty.ratio"
        plan = log.cleanable(2000 + 10_001)   # max.compaction.lag.ms passed: clean anyway
        assert plan is not None and plan.range.must_clean and plan.range.dirty_ratio < 0.5
        plan.abort()
    finally:
        log.delete()


def test_compact_delete_keeps_retention_and_compact_alone_does_not(tmp_path, cluster_id):
    import dataclasses
    for policy, deletes in (("compact,delete", True), ("compact", False)):
        config = dataclasses.replace(CONFIG, cleanup_policy=policy, retention_ms=1000)
        log = Log.open(str(tmp_path / policy), "t", 0, config, cluster_id=cluster_id)
        try:
            for i in range(20):
                append(log, [(b"k%d" % i, b"v", 1000)])
                if i % 5 == 4:
                    log.roll(now_ms=1000)
            log.update_high_watermark(log.log_end_offset)
            assert (log.delete_old_segments(now_ms=5000) > 0) == deletes
        finally:
            log.delete()


def test_an_idempotent_producers_last_batch_keeps_its_last_record_and_sequence(
        tmp_path, cluster_id):
    log = Log.open(str(tmp_path), "t", 0, CONFIG, cluster_id=cluster_id)
    try:
        for seq in range(0, 12, 3):   # producer 5: 4 batches of 3 records
            log.append_as_leader(codec.build_batch(
                [b"p%d" % (seq + i) for i in range(3)], keys=[b"a", b"b", b"c"],
                timestamps_ms=1, producer_id=5, producer_epoch=0, base_sequence=seq), 1)
        append(log, [(b"c", b"newer", 1)])   # supersedes the producer's last record
        log.roll(now_ms=1)
        log.update_high_watermark(log.log_end_offset)
        assert log.swap_cleaned(log.cleanable(2).build(now_ms=2))
        got = [(r[0], r[2], r[3]) for r in all_records(log)]
        assert got == [(9, b"a", b"p9"), (10, b"b", b"p10"), (11, b"c", b"p11"),
                       (12, b"c", b"newer")]
        log.close()
        log = Log.open(str(tmp_path), "t", 0, CONFIG, cluster_id=cluster_id)
        import os
        for name in os.listdir(log.directory):   # rebuild the state from the batches
            if name.endswith(".snapshot"):
                os.unlink(os.path.join(log.directory, name))
        assert log.producer_states().entries[5].last_seq == 11
    finally:
        log.delete()


def test_throttle_is_told_every_byte_read_and_written_in_bounded_chunks(tmp_path, cluster_id):
    log = Log.open(str(tmp_path), "t", 0, CONFIG, cluster_id=cluster_id)
    try:
        for i in range(200):
            append(log, [(b"k%d" % (i % 7), b"v" * 500, 1)])
            if i % 50 == 49:
                log.roll(now_ms=1)
        log.update_high_watermark(log.log_end_offset)
        plan = log.cleanable(2)
        calls = []
        cleaned = plan.build(calls.append, now_ms=2)
        stats = cleaned.stats
        dirty = sum(s.size for s in plan.sources if s.end > plan.first_dirty)
        # The key map reads the dirty segments, the clean reads everything, once each.
        assert sum(calls) == dirty + stats.bytes_read + stats.bytes_written
        assert all(0 < n <= 2 << 20 for n in calls)
        assert log.swap_cleaned(cleaned)
    finally:
        log.delete()


def test_one_clean_maps_at_most_dirty_bytes_max_then_the_next_goes_on():
    from shm.log.cleaner_core import SegmentFacts, choose_range
    facts = [SegmentFacts(b, b + 10, 100, 1, 1) for b in range(0, 50, 10)] + \
        [SegmentFacts(50, 50, 0, -1, -1)]
    chosen = choose_range(facts, 0, 50, 10, min_compaction_lag_ms=0,
                          max_compaction_lag_ms=10**12, dirty_bytes_max=250)
    assert (chosen.count, chosen.end, chosen.dirty_bytes) == (2, 20, 200)
    chosen = choose_range(facts, 20, 50, 10, min_compaction_lag_ms=0,
                          max_compaction_lag_ms=10**12, dirty_bytes_max=250)
    assert (chosen.count, chosen.end, chosen.clean_bytes) == (4, 40, 200)
    assert choose_range(facts, 0, 50, 10, min_compaction_lag_ms=0,
                        max_compaction_lag_ms=10**12, dirty_bytes_max=50).count == 1


def _deleted_files_held(directory: str) -> list[str]:
    """Files of ``directory`` this process still holds open after they were unlinked."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(directory) and target.endswith("(deleted)"):
            held.append(target)
    return held


def test_a_swap_renames_the_index_files_the_build_wrote_and_releases_the_old_files(
        tmp_path, cluster_id):
    """The build writes each new segment's index files (so the swap only renames them);
    the old segments' files are unlinked by the swap and closed by the releaser thread;
    a reopen loads the renamed index files as they are (nothing rebuilt)."""
    log = Log.open(str(tmp_path), "t", 0, CONFIG, cluster_id=cluster_id)
    try:
        for i in range(600):
            append(log, [(b"k%d" % (i % 40), b"v%d" % i * 20, 1)])
            if i % 150 == 149:
                log.roll(now_ms=1)
        log.update_high_watermark(log.log_end_offset)
        before = all_records(log)
        cleaned = log.cleanable(5).build(now_ms=5)
        kept = [o.base for o in cleaned.outputs if o.kept]
        assert kept
        names = set(os.listdir(log.directory))
        for base in kept:
            assert {f"{base:020d}.index.cleaned", f"{base:020d}.timeindex.cleaned"} <= names
        assert log.swap_cleaned(cleaned)
        assert not [n for n in os.listdir(log.directory) if n.endswith((".cleaned", ".swap",
                                                                          ".deleted"))]
        log._wait_for_releases()   # the releaser thread's closes, done
        assert _deleted_files_held(log.directory) == []
        after = all_records(log)
        assert len(after) < len(before) and after == [r for r in before if r in after]
        indexes = {s.base_offset: ([s.offset_index.entry(i) for i in range(s.offset_index.count)],
                                   [s.time_index.entry(i) for i in range(s.time_index.count)])
                   for s in log.segments if s.base_offset in kept}
        assert any(len(offsets) > 1 for offsets, _ in indexes.values())
        log.close()
        log = Log.open(str(tmp_path), "t", 0, CONFIG, cluster_id=cluster_id)
        # every segment's two index files read whole; only the active one is scanned
        assert log.recovery.indexes_loaded == 2 * len(log.segments)
        assert log.recovery.segments_scanned == 1
        assert {s.base_offset: ([s.offset_index.entry(i) for i in range(s.offset_index.count)],
                                [s.time_index.entry(i) for i in range(s.time_index.count)])
                for s in log.segments if s.base_offset in kept} == indexes
        assert all_records(log) == after
    finally:
        log.delete()
