import numpy as np
import pytest

from shm.names import (SharedArray, SharedMemoryError, cleanup_cluster, cluster_objects,
                       shm_name)


def test_names_carry_the_cluster_id_and_reject_separators():
    assert shm_name("c1", "b0", "idx", 7) == "/mk-c1-b0-idx-7"
    with pytest.raises(ValueError):
        shm_name("c-1", "x")
    with pytest.raises(ValueError):
        shm_name("c1", "a/b")
    assert shm_name("c1", "my-topic", 0) == "/mk-c1-my-topic-0"


def test_create_attach_and_cleanup_roundtrip(cluster_id):
    name = shm_name(cluster_id, "arr")
    a = SharedArray.create(name, 16, np.int64)
    a.array[:] = np.arange(16)
    with pytest.raises(SharedMemoryError):
        SharedArray.create(name, 16, np.int64)
    b = SharedArray.attach(name, np.int64, readonly=True)
    assert list(b.array) == list(range(16))
    assert cluster_objects(cluster_id) == [name]
    a.close()
    b.close()
    assert cleanup_cluster(cluster_id) == 1
    assert cluster_objects(cluster_id) == []
    with pytest.raises(SharedMemoryError):
        SharedArray.attach(name, np.int64)


def test_cleanup_does_not_touch_a_cluster_whose_id_extends_ours(cluster_id):
    mine = SharedArray.create(shm_name(cluster_id, "x"), 1, np.int64)
    other = SharedArray.create(shm_name(cluster_id + "0", "x"), 1, np.int64)
    try:
        assert cleanup_cluster(cluster_id) == 1
        assert cluster_objects(cluster_id + "0") == [other.name]
    finally:
        mine.close()
        other.close()
        cleanup_cluster(cluster_id + "0")
