"""Fixtures for zk_lite's tests.

Unit tests of the cores and the server process: ``driver`` and ``zk_process``
(helpers in zkl_helpers.py).

The kazoo-level tests: one server per (xdist worker, kind, tick time),
one chroot namespace per test, every client and process stopped at teardown.

Tests that take ``zk_server`` (or anything built on it) run once per server kind:
``zk_lite`` and ``zookeeper`` (a real Apache ZooKeeper 3.8, the reference). A kind that
is not available here is skipped with the reason.
"""
from __future__ import annotations

import uuid

import pytest
from kazoo.client import KazooClient

from .servers import KINDS, ServerPool, missing_reason
from .zkl_helpers import Driver, ZkProcess

DEFAULT_TICK_TIME_MS = 500  # session timeouts may then be 1 s .. 10 s
# The largest the tick allows: kazoo drops a connection whose ping is not answered
# within about a third of this, which a loaded 2-core CI box must never cause.
CLIENT_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 15.0


@pytest.fixture(scope="session")
def zk_pool():
    pool = ServerPool()
    try:
        yield pool
    finally:
        pool.close_all()


@pytest.fixture(params=KINDS)
def kind(request) -> str:
    reason = missing_reason(request.param)
    if reason:
        pytest.skip(reason)
    return request.param


@pytest.fixture
def zk_server(kind, zk_pool):
    handle = zk_pool.get(kind, DEFAULT_TICK_TIME_MS)
    yield handle
    assert handle.alive(), f"{handle!r} died during the test:\n{handle.log_tail()}"


def started_client(hosts: str, **kwargs) -> KazooClient:
    kwargs.setdefault("timeout", CLIENT_TIMEOUT_S)
    client = KazooClient(hosts=hosts, **kwargs)
    client.start(timeout=CONNECT_TIMEOUT_S)
    return client


@pytest.fixture
def chroot_hosts(zk_server) -> str:
    """``host:port/t_<uuid>``: a namespace of this test's own, removed afterwards."""
    root = f"/t_{uuid.uuid4().hex[:12]}"
    admin = started_client(zk_server.hosts)
    try:
        admin.create(root)
        yield zk_server.hosts + root
    finally:
        try:
            if zk_server.alive():
                admin.delete(root, recursive=True)
        except Exception:  # a test may leave an unreadable ACL behind; the namespace is unique
            pass
        admin.stop()
        admin.close()


@pytest.fixture
def make_client(chroot_hosts):
    """``make_client(**kazoo_kwargs)`` -> a started client in this test's namespace."""
    clients: list[KazooClient] = []

    def make(chroot: bool = True, **kwargs) -> KazooClient:
        hosts = chroot_hosts if chroot else chroot_hosts.split("/", 1)[0]
        client = started_client(hosts, **kwargs)
        clients.append(client)
        return client

    yield make
    for client in clients:
        try:
            client.stop()
        finally:
            client.close()


@pytest.fixture
def zk(make_client) -> KazooClient:
    return make_client()


@pytest.fixture
def spawn_worker(chroot_hosts):
    """``spawn_worker(role, **args)`` -> a zkworker process in this test's namespace."""
    from .workers import Worker

    started: list[Worker] = []

    def spawn(role: str, **args) -> Worker:
        args.setdefault("hosts", chroot_hosts)
        worker = Worker(role, **args)
        started.append(worker)
        return worker

    yield spawn
    for worker in started:
        worker.kill()


# ----------------------------------------------------------------- zk_lite's own unit tests

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
