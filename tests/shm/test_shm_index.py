"""The shared-memory index objects: layout, publication of count, files, validation."""
from __future__ import annotations

import numpy as np
import pytest

from shm.index import (KIND_OFFSET, KIND_TIME, S_COUNT, IndexCorruptError, OffsetIndex,
                       TimeIndex, index_name, write_index_file)
from shm.names import cluster_objects


def test_names_carry_cluster_broker_topic_partition_base(cluster_id):
    assert index_name(cluster_id, 3, "my-topic", 7, 4711, KIND_OFFSET) == \
        f"/mk-{cluster_id}-b3-my-topic-7-4711-idx"
    assert index_name(cluster_id, 3, "my-topic", 7, 4711, KIND_TIME).endswith("-tidx")


def test_lookup_is_the_floor_entry_and_readers_see_the_published_count(cluster_id, tmp_path):
    name = index_name(cluster_id, 0, "t", 0, 100, KIND_OFFSET)
    index = OffsetIndex.create(name, 100, entries_max=8)
    try:
        assert index.lookup(150) == (100, 0)  # empty: scan from the start
        for relative, position in [(0, 0), (10, 400), (25, 900)]:
            index.append(relative, position)
        reader = OffsetIndex.attach_readonly(cluster_id, 0, "t", 0, 100)
        assert reader.count == 3
        assert [reader.lookup(o) for o in (100, 109, 110, 124, 125, 10**6)] == \
            [(100, 0), (100, 0), (110, 400), (110, 400), (125, 900), (125, 900)]
        index.truncate_to_count(1)
        assert reader.lookup(130) == (100, 0)
        with pytest.raises(AssertionError):
            index.append(0, 5)  # keys must strictly increase
        reader.close()
        index.append(10, 400)
        write_index_file(*index.file_args(str(tmp_path / "x.index")))
        keys, values = OffsetIndex.read_file(str(tmp_path / "x.index"), 100)
        assert keys.tolist() == [0, 10] and values.tolist() == [0, 400]
        with pytest.raises(IndexCorruptError):
            OffsetIndex.read_file(str(tmp_path / "x.index"), 101)  # another segment's
        with pytest.raises(IndexCorruptError):
            TimeIndex.read_file(str(tmp_path / "x.index"), 100)  # another kind
    finally:
        index.close()
        index.unlink()
    assert cluster_objects(cluster_id) == []


def test_attach_refuses_a_corrupt_object(cluster_id):
    name = index_name(cluster_id, 0, "t", 0, 0, KIND_OFFSET)
    index = OffsetIndex.create(name, 0, entries_max=4)
    try:
        index.append(0, 0)
        index.append(5, 100)
        index._values[1] = 0  # not increasing
        with pytest.raises(IndexCorruptError):
            OffsetIndex.attach(name, 0)
        index._values[1] = 100
        index._header[S_COUNT] = 99  # count beyond entries_max
        with pytest.raises(IndexCorruptError):
            OffsetIndex.attach(name, 0)
        with pytest.raises(IndexCorruptError):
            TimeIndex.attach(name, 0)
        with pytest.raises(IndexCorruptError):
            OffsetIndex.attach(index_name(cluster_id, 0, "t", 0, 1, KIND_OFFSET), 1)  # missing
    finally:
        index.close()
        index.unlink()


def test_time_index_scan_start(cluster_id):
    name = index_name(cluster_id, 0, "t", 0, 50, KIND_TIME)
    index = TimeIndex.create(name, 50, entries_max=4)
    try:
        index.append(1000, 0)
        index.append(2000, 10)
        assert index.scan_start(500) == 50
        assert index.scan_start(1000) == 50
        assert index.scan_start(1001) == 51  # everything up to relative 0 is older
        assert index.scan_start(5000) == 61
        assert np.array_equal(index.keys, [1000, 2000])
    finally:
        index.close()
        index.unlink()


def test_log_open_unlinks_indexes_of_segments_that_are_gone(cluster_id, tmp_path):
    from shm.log import Log
    orphan = OffsetIndex.create(index_name(cluster_id, 0, "t", 0, 999, KIND_OFFSET), 999, 4)
    orphan.close()
    other = OffsetIndex.create(index_name(cluster_id, 0, "t-0", 1, 999, KIND_OFFSET), 999, 4)
    other.close()
    log = Log.open(str(tmp_path), "t", 0, cluster_id=cluster_id)
    try:
        names = cluster_objects(cluster_id)
        assert index_name(cluster_id, 0, "t", 0, 999, KIND_OFFSET) not in names
        assert index_name(cluster_id, 0, "t-0", 1, 999, KIND_OFFSET) in names  # not ours
    finally:
        log.delete()
        other.unlink()
