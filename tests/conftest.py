"""Suite-wide guards: unique cluster ids, and nothing may leak into /dev/shm.

Each test that touches shared memory takes the ``cluster_id`` fixture; after the test
every object of that cluster must be gone. At the end of the run the controller process
also fails the run if any ``mk-*`` object appeared during it and is still there.
"""
from __future__ import annotations

import os
import uuid

import pytest

from shm.names import PREFIX, SHM_DIR, cleanup_cluster, cluster_objects


def _shm_entries() -> set[str]:
    try:
        return {e for e in os.listdir(SHM_DIR) if e.startswith(PREFIX)}
    except FileNotFoundError:
        return set()


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # controller (or a run without xdist)
        config._mk_shm_before = _shm_entries()


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if hasattr(config, "workerinput"):
        return
    leaked = sorted(_shm_entries() - getattr(config, "_mk_shm_before", set()))
    if leaked:
        for entry in leaked:
            try:
                os.unlink(os.path.join(SHM_DIR, entry))
            except OSError:
                pass
        print(f"\nERROR: the run leaked {len(leaked)} shared-memory object(s): {leaked[:10]}")
        session.exitstatus = 1


@pytest.fixture
def cluster_id() -> str:
    """A cluster id unique to this test; fails the test if its shm objects outlive it."""
    cid = "t" + uuid.uuid4().hex[:12]
    yield cid
    leaked = cluster_objects(cid)
    if leaked:
        cleanup_cluster(cid)
        pytest.fail(f"test leaked shared-memory objects: {leaked}")
