"""Directory states that a SIGKILL cannot produce but a power loss can (the file system
persists renames and unlinks in any order until a directory fsync), and leftovers of
interrupted deletions: recovery must still give a consistent log."""
from __future__ import annotations

import os

import pytest

from shm import batch as batch_codec
from shm.checkpoint import (LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_OFFSET_CHECKPOINT,
                            TRUNCATION_INTENT, OffsetCheckpointFile)
from shm.config import LogConfig
from shm.log import Log, LogError
from tests.shm.test_log_recovery import all_values as values

CONFIG = LogConfig(segment_bytes=2048, index_interval_bytes=256, retention_ms=-1)
TOPIC, PARTITION = "states", 1


def open_log(tmp_path, cluster_id) -> Log:
    return Log.open(str(tmp_path), TOPIC, PARTITION, CONFIG, cluster_id=cluster_id)


def fill_segments(log: Log, segments: int) -> None:
    while len(log.segments) < segments:
        leo = log.log_end_offset
        log.append_as_leader(batch_codec.build_batch([b"%d" % (leo + i) for i in range(8)],
                                                     timestamps_ms=1), 1)
    log.flush()


def test_retention_cut_short_with_a_gap_at_the_front_recovers_from_the_checkpointed_log_start(
        tmp_path, cluster_id):
    """Retention checkpointed log start = segment 3, then deleted segments 0..2; a power
    loss persisted only the deletion of segment 1. Without the checkpoint, recovery sees
    a gap after segment 0 and cuts everything after it: the whole live log."""
    log = open_log(tmp_path, cluster_id)
    fill_segments(log, 6)
    bases, leo = list(log._bases), log.log_end_offset
    log._log_start_file.update(TOPIC, PARTITION, bases[3])
    log.abandon()
    os.unlink(log.segments[1].path)
    log = open_log(tmp_path, cluster_id)
    try:
        assert not log.recovery.truncations, log.recovery.truncations
        assert log.recovery.completed_operations == [f"delete_old_segments({bases[3]})"]
        assert (log.log_start_offset, log.log_end_offset) == (bases[3], leo)
        assert values(log) == [b"%d" % o for o in range(bases[3], leo)]
        assert sorted(n for n in os.listdir(log.directory) if n.endswith(".log")) == \
            [f"{b:020d}.log" for b in bases[3:]]
    finally:
        log.delete()


def test_log_start_checkpoint_never_deletes_a_segment_that_reaches_past_it(tmp_path, cluster_id):
    log = open_log(tmp_path, cluster_id)
    fill_segments(log, 4)
    bases, leo = list(log._bases), log.log_end_offset
    log._log_start_file.update(TOPIC, PARTITION, bases[2] - 1)  # inside segment 1
    log.close()
    log = open_log(tmp_path, cluster_id)
    try:
        assert log.segments[0].base_offset == bases[1], "the segment reaching past it stays"
        # ... and the log starts where the checkpoint says (DeleteRecords may put it
        # inside a segment, as Kafka's logStartOffset).
        assert (log.log_start_offset, log.log_end_offset) == (bases[2] - 1, leo)
    finally:
        log.delete()


def test_leftovers_of_interrupted_deletions_are_removed_at_open_and_never_read(
        tmp_path, cluster_id):
    log = open_log(tmp_path, cluster_id)
    fill_segments(log, 3)
    directory, leo, expected = log.directory, log.log_end_offset, values(log)
    log.roll()
    log.close()
    stray = f"{leo + 1000:020d}"
    with open(os.path.join(directory, f"{leo:020d}.log.deleted"), "wb") as f:
        f.write(b"\xff" * 100)  # a deleted segment whose unlink never happened
    for suffix in (".index", ".timeindex"):
        with open(os.path.join(directory, stray + suffix), "wb") as f:
            f.write(b"\x01" * 64)  # index files whose segment is gone
    log = open_log(tmp_path, cluster_id)
    try:
        assert not log.recovery.truncations
        assert log.log_end_offset == leo and values(log) == expected
        left = os.listdir(directory)
        assert not [n for n in left if n.endswith(".deleted") or n.startswith(stray)], left
    finally:
        log.delete()


def test_a_recovery_point_checkpoint_above_the_log_end_is_lowered_at_open(tmp_path, cluster_id):
    log = open_log(tmp_path, cluster_id)
    fill_segments(log, 2)
    leo = log.log_end_offset
    log.abandon()
    checkpoint = OffsetCheckpointFile(os.path.join(str(tmp_path), RECOVERY_POINT_OFFSET_CHECKPOINT))
    checkpoint.update(TOPIC, PARTITION, leo + 500)
    log = open_log(tmp_path, cluster_id)
    try:
        assert log.recovery_point <= log.log_end_offset == leo
        assert checkpoint.read()[(TOPIC, PARTITION)] <= leo
    finally:
        log.delete()


def test_truncate_fully_leaves_no_intent_and_checkpoints_the_new_log_start(tmp_path, cluster_id):
    log = open_log(tmp_path, cluster_id)
    fill_segments(log, 3)
    log.truncate_fully_and_start_at(7)
    starts = OffsetCheckpointFile(os.path.join(str(tmp_path), LOG_START_OFFSET_CHECKPOINT))
    try:
        assert starts.read()[(TOPIC, PARTITION)] == 7
        assert not os.path.exists(os.path.join(log.directory, TRUNCATION_INTENT))
        assert sorted(n for n in os.listdir(log.directory) if n.endswith(".log")) == \
            [f"{7:020d}.log"]
    finally:
        log.delete()


def test_a_malformed_truncation_intent_refuses_to_open(tmp_path, cluster_id):
    """An intent is written atomically, so a bad one is damage, not a crash: guessing
    could bring truncated data back, so the log does not open."""
    log = open_log(tmp_path, cluster_id)
    fill_segments(log, 1)
    log.close()
    with open(os.path.join(log.directory, TRUNCATION_INTENT), "w") as f:
        f.write("0\n1\ntruncate_sideways 3\n")
    with pytest.raises(LogError, match="truncation-intent"):
        open_log(tmp_path, cluster_id)
    os.unlink(os.path.join(log.directory, TRUNCATION_INTENT))
    log = open_log(tmp_path, cluster_id)
    log.delete()


def test_truncation_below_the_high_watermark_lowers_its_checkpoint(tmp_path, cluster_id):
    """Otherwise new appends at the truncated offsets and a crash would bring back the
    old HW over records that no replica has confirmed."""
    log = open_log(tmp_path, cluster_id)
    fill_segments(log, 2)
    log.update_high_watermark(log.log_end_offset)
    log.checkpoint_high_watermark()
    cut = log.log_end_offset // 2
    log.truncate_to(cut)
    new_leo = log.log_end_offset
    assert log.high_watermark == new_leo <= cut
    fill_segments(log, 3)  # new data at the truncated offsets, never replicated
    log.abandon()
    log = open_log(tmp_path, cluster_id)
    try:
        assert log.high_watermark <= new_leo < log.log_end_offset
    finally:
        log.delete()
