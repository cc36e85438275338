"""DeleteRecords on the storage engine: ``Log.increment_log_start_offset`` puts the log
start anywhere below the HW (inside a segment too), deletes the segments wholly below
it, never moves it down, and a reopened log (clean or SIGKILLed) keeps it."""
from __future__ import annotations

import pytest

from shm.log import OffsetOutOfRangeError
from tests.shm.test_log_recovery import all_values, fill, open_log

pytestmark = pytest.mark.process


def test_log_start_moves_inside_a_segment_and_whole_segments_go(tmp_path, cluster_id):
    log = open_log(tmp_path, cluster_id)
    try:
        fill(log, 200)
        segments = len(log.segments)
        assert segments > 3
        with pytest.raises(OffsetOutOfRangeError):
            log.increment_log_start_offset(1)      # nothing below the HW yet
        log.update_high_watermark(log.log_end_offset)
        target = log.segments[2].base_offset + 3   # inside the third segment
        assert log.increment_log_start_offset(target)
        assert log.log_start_offset == target
        assert len(log.segments) == segments - 2
        assert log.segments[0].base_offset < target
        with pytest.raises(OffsetOutOfRangeError):
            log.read(target - 1, 100)
        assert log.read(target, 100)               # the batch holding it, whole
        assert not log.increment_log_start_offset(target - 1), "never moves down"
        assert log.log_start_offset == target
        with pytest.raises(OffsetOutOfRangeError):
            log.increment_log_start_offset(log.high_watermark + 1)
        assert log.increment_log_start_offset(log.high_watermark)   # everything
        assert log.log_start_offset == log.log_end_offset == log.high_watermark
        log.check()
    finally:
        log.delete()


@pytest.mark.parametrize("how", ["close", "abandon"])
def test_reopened_log_keeps_a_log_start_inside_a_segment(tmp_path, cluster_id, how):
    log = open_log(tmp_path, cluster_id)
    fill(log, 30)
    log.update_high_watermark(log.log_end_offset)
    log.checkpoint_high_watermark()
    target = log.segments[-1].base_offset + 2
    log.increment_log_start_offset(target)
    end = log.log_end_offset
    getattr(log, how)()
    log = open_log(tmp_path, cluster_id)
    try:
        assert log.log_start_offset == target
        assert log.log_end_offset == end
        assert all_values(log)[0] == b"v%d" % (target - target % 5)  # whole first batch
    finally:
        log.delete()


def test_truncation_below_a_deleted_start_brings_the_start_down(tmp_path, cluster_id):
    log = open_log(tmp_path, cluster_id)
    try:
        fill(log, 10)                                # batches of 5: 0, 5, ..., 45
        log.update_high_watermark(log.log_end_offset)
        log.increment_log_start_offset(22)           # inside the batch 20..24
        log.truncate_to(23)                          # cuts that whole batch: LEO 20
        assert log.log_end_offset == 20 and log.log_start_offset == 20
        log.check()
    finally:
        log.delete()
