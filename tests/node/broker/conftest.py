"""The broker tests' cluster: zk_lite, brokers the test adds, and the test-side
controller (``tests.node.broker.harness.Cluster``); closed after the test. A test module
that needs another shape defines its own ``cluster`` fixture."""
from __future__ import annotations

import pytest

from tests.conftest import has_failed
from tests.node.broker.harness import Cluster


@pytest.fixture
def cluster(request, tmp_path, cluster_id):
    c = Cluster(tmp_path, cluster_id)
    try:
        yield c
    finally:
        if has_failed(request):
            c.print_logs()
        c.close()
