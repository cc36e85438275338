"""Fixtures for zk_lite's own tests (helpers live in zkl_helpers.py)."""
from __future__ import annotations

import pytest

from zkl_helpers import Driver, ZkProcess


@pytest.fixture
def driver():
    return Driver()


@pytest.fixture
def zk_process(tmp_path):
    """Factory: ``zk_process()`` starts a server on a free port; all are killed at the end."""
    started: list[ZkProcess] = []

    def start(data_dir=None, extra_args=()):
        proc = ZkProcess(str(data_dir or tmp_path / "data"), extra_args)
        started.append(proc)
        return proc.start()

    try:
        yield start
    finally:
        for proc in started:
            proc.kill()
