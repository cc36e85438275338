"""The broker's scrubber (``ReplicaManager.scrub``) over a real log that the real cleaner
compacts between two of its runs. The manager around it is a stand-in: its partitions,
its offline test and its ``replica_corrupt`` (recorded, not acted on)."""
from __future__ import annotations

import types

from node.broker.replica_manager import ReplicaManager
from shm import batch as codec
from shm.config import LogConfig
from shm.log import Log

CONFIG = LogConfig(segment_bytes=64 * 1024, index_interval_bytes=128, cleanup_policy="compact",
                   min_cleanable_dirty_ratio=0.0, delete_retention_ms=1000, retention_ms=-1)


def _manager(log: Log) -> types.SimpleNamespace:
    part = types.SimpleNamespace(key=("t", 0), topic="t", partition=0, log=log)
    manager = types.SimpleNamespace(partitions={part.key: part}, _scrub_cursor=None, corrupt=[])
    manager.is_offline = lambda p: False
    manager.replica_corrupt = lambda p, why: manager.corrupt.append(why)
    manager._scrub_target = lambda: ReplicaManager._scrub_target(manager)
    return manager


def test_the_scrubber_goes_on_from_the_start_of_a_segment_the_cleaner_replaced(tmp_path,
                                                                              cluster_id):
    """CI (test_tombstones_vanish_after_delete_retention): the scrubber's cursor rested
    at a batch boundary inside segment 0; the cleaner swapped in a new segment 0 (the same
    base offset, its batches thinned), and the next run went on from that position,
    inside a batch of the new file: "corrupt data (found by the scrubber)", and a healthy
    leader went offline."""
    log = Log.open(str(tmp_path), "t", 0, CONFIG, cluster_id=cluster_id)
    try:
        for i in range(40):         # each batch: a key of its own and the shared one
            log.append_as_leader(codec.build_batch([b"u%d" % i, b"s%d" % i],
                                                   keys=[b"u%d" % i, b"shared"],
                                                   timestamps_ms=1), leader_epoch=1)
            if i % 20 == 19:
                log.roll(now_ms=1)
        log.update_high_watermark(log.log_end_offset)
        manager = _manager(log)
        ReplicaManager.scrub(manager, 1)                     # one batch: the cursor rests
        key, base, position = manager._scrub_cursor[:3]
        assert (key, base) == (("t", 0), 0) and 0 < position < log.segments[0].size_bytes
        assert log.swap_cleaned(log.cleanable(5).build(now_ms=5))
        first = log.segments[0]
        new_first = codec.read_header(first.view(0, first.size_bytes)).size_bytes
        assert new_first != position and position < log.segments[0].size_bytes  # misaligned
        ReplicaManager.scrub(manager, 1 << 20)
        assert manager.corrupt == []
        assert manager._scrub_cursor[:2] == (("t", 0), log.segments[-2].base_offset)
    finally:
        log.delete()
