"""Shared fixtures for the controller shell and admin tests: one zk_lite per module,
one chroot namespace per test, real kazoo clients, and a loop that runs posted work."""
from __future__ import annotations

import queue
import threading
import time
import uuid
from dataclasses import dataclass

import pytest
from kazoo.client import KazooClient

from bench.perf.zkservers import KINDS, missing_reason
from bench.perf.zkservers import start as start_zk
from node.wire import zkdata
from tests.waiting import poll_until

CLIENT_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 15.0
WAIT_S = 15.0


@dataclass
class StandInConfig:
    """The attribute names of node.config.BrokerConfig the controller and admin read."""

    broker_id: int = 0
    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = False
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    request_timeout_ms: int = 30_000
    num_partitions: int = 1
    default_replication_factor: int = 1
    min_insync_replicas: int = 1


@pytest.fixture(scope="module", params=KINDS)
def zk_server(request):
    """zk_lite, and a real Apache ZooKeeper 3.8 (the reference) when installed."""
    reason = missing_reason(request.param)
    if reason:
        pytest.skip(reason)
    handle = start_zk(request.param, tick_time_ms=500)
    try:
        yield handle
    finally:
        handle.close()


@pytest.fixture
def zk_hosts(zk_server):
    root = f"/t_{uuid.uuid4().hex[:12]}"
    admin = KazooClient(hosts=zk_server.hosts, timeout=CLIENT_TIMEOUT_S)
    admin.start(timeout=CONNECT_TIMEOUT_S)
    try:
        admin.create(root)
        yield zk_server.hosts + root
    finally:
        try:
            admin.delete(root, recursive=True)
        except Exception:
            pass
        admin.stop()
        admin.close()


@pytest.fixture
def make_client(zk_hosts):
    clients: list[KazooClient] = []

    def make(**kwargs) -> KazooClient:
        kwargs.setdefault("timeout", CLIENT_TIMEOUT_S)
        client = KazooClient(hosts=zk_hosts, **kwargs)
        client.start(timeout=CONNECT_TIMEOUT_S)
        clients.append(client)
        return client

    yield make
    for client in clients:
        try:
            client.stop()
        finally:
            client.close()


def ensure_layout(zk: KazooClient) -> None:
    for path in zkdata.PERSISTENT_PATHS:
        zk.ensure_path(path)


def register_broker(zk: KazooClient, broker_id: int, rack: str | None = None) -> None:
    ensure_layout(zk)
    zk.create(zkdata.broker_path(broker_id), zkdata.encode_broker(
        zkdata.BrokerInfo(broker_id, "127.0.0.1", 19000 + broker_id, rack)), ephemeral=True)


class Loop:
    """The broker's event loop as far as the controller can tell: posted callables run
    on the thread that pumps."""

    def __init__(self) -> None:
        self._queue: queue.Queue = queue.Queue()
        self.thread = threading.current_thread()

    def post(self, fn) -> None:
        self._queue.put(fn)

    def pump(self) -> int:
        ran = 0
        while True:
            try:
                fn = self._queue.get_nowait()
            except queue.Empty:
                return ran
            assert threading.current_thread() is self.thread
            fn()
            ran += 1


def wait_for(predicate, pumps=(), timeout_s: float = WAIT_S, what: str = "condition"):
    return poll_until(predicate, timeout_s, what, interval_s=0.01, each=pumps)


def now_ms() -> int:
    return int(time.monotonic() * 1000)


def expire_session(hosts: str, client: KazooClient) -> None:
    """Expire ``client``'s session the classic way: attach to it and close it."""
    session_id, password = client.client_id
    thief = KazooClient(hosts=hosts, client_id=(session_id, password), timeout=CLIENT_TIMEOUT_S)
    thief.start(timeout=CONNECT_TIMEOUT_S)
    thief.stop()
    thief.close()
