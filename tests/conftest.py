"""Suite-wide guards: unique cluster ids, and nothing may leak into /dev/shm.

Every cluster id a test uses starts with ``t<SESSION>`` (``new_cluster_id()`` or the
``cluster_id`` fixture), where SESSION is unique to this pytest run and inherited by the
xdist workers and by child processes through ``MK_TEST_SESSION``. After a test every
object of its cluster must be gone, and at the end of the run the controller fails the
run if any object of this run's clusters is still in /dev/shm. Objects of other runs
(a concurrent pytest, a user's live cluster) are never looked at or touched.
"""
from __future__ import annotations

import os
import uuid

import pytest

from shm.names import PREFIX, SHM_DIR, cleanup_cluster, cluster_objects

SESSION = os.environ.setdefault("MK_TEST_SESSION", uuid.uuid4().hex[:8])


def new_cluster_id() -> str:
    """A cluster id unique to this call and owned by this test run."""
    return "t" + SESSION + uuid.uuid4().hex[:8]


def _shm_entries() -> set[str]:
    head = PREFIX + "t" + SESSION
    try:
        return {e for e in os.listdir(SHM_DIR) if e.startswith(head)}
    except FileNotFoundError:
        return set()


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if hasattr(config, "workerinput"):
        return
    leaked = sorted(_shm_entries())
    if leaked:
        for entry in leaked:
            try:
                os.unlink(os.path.join(SHM_DIR, entry))
            except OSError:
                pass
        print(f"\nERROR: the run leaked {len(leaked)} shared-memory object(s): {leaked[:10]}")
        session.exitstatus = 1


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the item (``item.rep_call``...), so a fixture's
    teardown can tell that its test failed (and, say, show the brokers' logs)."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, "rep_" + report.when, report)


def has_failed(request) -> bool:
    """For a fixture's teardown: whether the test's setup or call failed."""
    return any(getattr(getattr(request.node, "rep_" + when, None), "failed", False)
               for when in ("setup", "call"))


@pytest.fixture
def cluster_id() -> str:
    """A cluster id unique to this test; fails the test if its shm objects outlive it."""
    cid = new_cluster_id()
    yield cid
    leaked = cluster_objects(cid)
    if leaked:
        cleanup_cluster(cid)
        pytest.fail(f"test leaked shared-memory objects: {leaked}")
