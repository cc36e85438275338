"""Checkpoint files and the leader-epoch cache (Kafka's LeaderEpochFileCache semantics)."""
from __future__ import annotations

import os

import pytest

from shm.checkpoint import (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, CheckpointError,
                            EpochEntry, LeaderEpochCache, OffsetCheckpointFile)


def test_offset_checkpoint_is_kafka_text_format_and_round_trips(tmp_path):
    f = OffsetCheckpointFile(str(tmp_path / "replication-offset-checkpoint"))
    assert f.read() == {}
    f.write({("orders", 1): 42, ("orders", 0): 7})
    assert (tmp_path / "replication-offset-checkpoint").read_text() == \
        "0\n2\norders 0 7\norders 1 42\n"
    f.update("orders", 0, 9)
    f.update("orders", 1, None)
    assert f.read() == {("orders", 0): 9}
    assert not os.path.exists(f.path + ".tmp")


@pytest.mark.parametrize("text", ["", "1\n0\n", "0\n2\na 0 1\n", "0\nx\n", "0\n1\na b c\n",
                                  "0\n1\na 0\n"])
def test_malformed_checkpoint_raises_checkpoint_error(tmp_path, text):
    path = tmp_path / "recovery-point-offset-checkpoint"
    path.write_text(text)
    with pytest.raises(CheckpointError):
        OffsetCheckpointFile(str(path)).read()


def cache(tmp_path, leo=100):
    state = {"leo": leo}
    c = LeaderEpochCache(str(tmp_path / "leader-epoch-checkpoint"), lambda: state["leo"])
    return c, state


def test_assign_ignores_same_epoch_later_offset_and_persists(tmp_path):
    c, _ = cache(tmp_path)
    assert c.assign(1, 0)
    assert not c.assign(1, 5)
    assert c.assign(2, 10)
    assert c.entries == [EpochEntry(1, 0), EpochEntry(2, 10)]
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n2\n1 0\n2 10\n"
    reopened, _ = cache(tmp_path)
    assert reopened.entries == c.entries


def test_assign_of_a_lower_start_removes_conflicting_entries(tmp_path):
    c, _ = cache(tmp_path)
    c.assign(1, 0)
    c.assign(2, 10)
    c.assign(3, 20)
    c.assign(4, 15)  # a new leader's epoch starting below epoch 3: 3 conflicts
    assert c.entries == [EpochEntry(1, 0), EpochEntry(2, 10), EpochEntry(4, 15)]
    c.assign(2, 5)  # an older epoch arriving later wins only by dropping everything >= it
    assert c.entries == [EpochEntry(1, 0), EpochEntry(2, 5)]


def test_end_offset_for_kip_101_279(tmp_path):
    c, state = cache(tmp_path, leo=30)
    assert c.end_offset_for(1) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)  # empty
    c.assign(2, 5)
    c.assign(4, 12)
    c.assign(6, 20)
    assert c.end_offset_for(6) == (6, 30)  # latest epoch: LEO
    state["leo"] = 31
    assert c.end_offset_for(6) == (6, 31)
    assert c.end_offset_for(4) == (4, 20)
    assert c.end_offset_for(5) == (4, 20)  # largest epoch <= 5 is 4, ends where 6 starts
    assert c.end_offset_for(3) == (2, 12)
    assert c.end_offset_for(1) == (1, 5)  # below the first: the first start offset
    assert c.end_offset_for(7) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    assert c.end_offset_for(UNDEFINED_EPOCH) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def test_truncate_from_end_and_start(tmp_path):
    c, _ = cache(tmp_path)
    for epoch, start in [(1, 0), (2, 10), (3, 20)]:
        c.assign(epoch, start)
    c.truncate_from_end(21)
    assert [e.epoch for e in c.entries] == [1, 2, 3]
    c.truncate_from_end(20)
    assert c.entries == [EpochEntry(1, 0), EpochEntry(2, 10)]
    c.truncate_from_start(12)
    assert c.entries == [EpochEntry(2, 12)]
    c.truncate_from_start(5)
    assert c.entries == [EpochEntry(2, 12)]
    # A cut from the start is written later (Kafka's truncateFromStartAsyncFlush): the
    # file still holds what the last flush wrote until flush_if_dirty.
    reopened, _ = cache(tmp_path)
    assert reopened.entries == [EpochEntry(1, 0), EpochEntry(2, 10)]
    assert c.dirty
    c.flush_if_dirty()
    assert not c.dirty
    reopened, _ = cache(tmp_path)
    assert reopened.entries == [EpochEntry(2, 12)]

