"""A power cut keeps what the log, its checkpoints and the epoch cache synced, and only
that: tests.powercut records the real fsync calls and cuts every file back to them, so
these tests fail if a sync is removed (unlike a SIGKILL, which keeps the page cache, or
the cluster's power-failure fault, which trusts the broker's own recovery point)."""
from __future__ import annotations

import os

import pytest

from shm import batch as batch_codec
from shm.checkpoint import EpochEntry, LeaderEpochCache, OffsetCheckpointFile
from shm.config import LogConfig
from shm.log import Log
from shm.names import cleanup_cluster
from tests.powercut import PowerCut
from tests.shm.test_log_recovery import all_values as values

pytestmark = pytest.mark.process

CONFIG = LogConfig(segment_bytes=4096, index_interval_bytes=256, retention_ms=-1)
TOPIC, PARTITION = "cut", 0


def open_log(data_dir, cluster_id) -> Log:
    return Log.open(str(data_dir), TOPIC, PARTITION, CONFIG, cluster_id=cluster_id)


def append(log: Log, batches: int, epoch: int) -> None:
    for _ in range(batches):
        leo = log.log_end_offset
        log.append_as_leader(batch_codec.build_batch([b"v%d" % (leo + i) for i in range(5)],
                                           timestamps_ms=leo), epoch)


def test_a_power_cut_keeps_every_flushed_record_and_checkpoint_and_nothing_else(
        tmp_path, cluster_id, monkeypatch):
    power = PowerCut(str(tmp_path), monkeypatch)
    log = open_log(tmp_path, cluster_id)
    try:
        append(log, 30, epoch=1)  # rolls: sealed segments are synced in the background
        append(log, 30, epoch=2)
        assert len(log.segments) >= 3
        log.update_high_watermark(40)
        log.checkpoint_high_watermark()
        log.flush()  # the active segment's fsync, then the recovery point's checkpoint
        flushed = log.log_end_offset
        log.update_high_watermark(flushed)
        log.checkpoint_high_watermark()  # a second version: its rename must be durable
        append(log, 3, epoch=2)  # never synced: the cut takes it
    finally:
        log.abandon()
    power.cut()
    cleanup_cluster(cluster_id)  # shared memory does not survive a power cut
    log = open_log(tmp_path, cluster_id)
    try:
        assert log.recovery.recovery_point == flushed
        assert values(log)[:flushed] == [b"v%d" % o for o in range(flushed)], \
            "flushed records were lost"
        assert log.log_end_offset == flushed, "the cut kept records that were never synced"
        assert log.high_watermark == flushed
        assert [e.epoch for e in log.leader_epoch_cache.entries] == [1, 2]
    finally:
        log.delete()


def test_a_power_cut_keeps_the_last_version_of_each_checkpoint(tmp_path, monkeypatch):
    power = PowerCut(str(tmp_path), monkeypatch)
    offsets = OffsetCheckpointFile(str(tmp_path / "replication-offset-checkpoint"))
    epochs = LeaderEpochCache(str(tmp_path / "leader-epoch-checkpoint"), lambda: 100)
    for version in range(3):
        offsets.update(TOPIC, PARTITION, 10 * version)
        epochs.assign(version, 10 * version)
    left = power.cut()
    assert sorted(left) == ["leader-epoch-checkpoint", "replication-offset-checkpoint"]
    assert OffsetCheckpointFile(offsets.path).read() == {(TOPIC, PARTITION): 20}
    assert LeaderEpochCache(epochs.path, lambda: 100).entries == [
        EpochEntry(0, 0), EpochEntry(1, 10), EpochEntry(2, 20)]


def test_the_cut_itself_takes_what_was_not_synced(tmp_path, monkeypatch):
    """The model's own check: data not synced, and a new name in a directory not synced,
    do not survive."""
    (tmp_path / "old").write_bytes(b"old")
    power = PowerCut(str(tmp_path), monkeypatch)
    (tmp_path / "new").write_bytes(b"never synced")
    (tmp_path / "old").write_bytes(b"overwritten, not synced")
    (tmp_path / "unnamed").write_bytes(b"synced, but not its directory entry")
    with open(tmp_path / "unnamed", "rb") as f:
        os.fsync(f.fileno())
    assert power.cut() == {"old": 3}
    assert (tmp_path / "old").read_bytes() == b"old"


def test_a_power_cut_keeps_the_transactions_of_the_flushed_records(
        tmp_path, cluster_id, monkeypatch):
    from shm import control
    power = PowerCut(str(tmp_path), monkeypatch)
    log = open_log(tmp_path, cluster_id)
    sequences = {}

    def data(pid):
        seq = sequences.get(pid, 0)
        sequences[pid] = seq + 1
        log.append_as_leader(batch_codec.build_batch(
            [b"t" * 200], producer_id=pid, producer_epoch=0, base_sequence=seq,
            transactional=True), 1)

    try:
        data(9)                                      # pid 9: open across everything
        for i in range(40):                          # rolls (snapshots), aborts, commits
            data(1)
            log.append_as_leader(control.build_marker(1, 0, i % 3 == 0, 0, 1), 1)
        assert len(log.segments) >= 3
        log.flush()
        flushed = log.log_end_offset
        aborted = log.aborted_transactions(0, flushed)
        assert len(aborted) == 26
        data(2)                                      # never synced: the cut takes them
        log.append_as_leader(control.build_marker(2, 0, False, 0, 1), 1)
    finally:
        log.abandon()
    power.cut()
    cleanup_cluster(cluster_id)
    log = open_log(tmp_path, cluster_id)
    try:
        assert log.log_end_offset == flushed
        assert log.aborted_transactions(0, flushed + 10) == aborted
        assert log.ongoing_transactions() == {9: 0}
    finally:
        log.delete()
