"""Durability: the txn log and snapshots, in-process and across a kill -9 of the server."""
from __future__ import annotations

import os
import threading

import pytest
from kazoo.client import KazooClient

from zk_lite import persist, txn
from zk_lite.tree import OPEN_ACL, Tree
from tests.powercut import PowerCut
from .zkl_helpers import Driver, wait_for

pytestmark = pytest.mark.process


def _logs(data_dir):
    return sorted(n for n in os.listdir(data_dir) if n.startswith("log."))


def _tree_dump(tree: Tree):
    return {p: (n.data, n.acl, n.czxid, n.mzxid, n.version, n.cc, n.aversion, n.owner, n.pzxid,
                sorted(n.children)) for p, n in tree.nodes.items()}


def _run_some_txns():
    d = Driver()
    c = d.connect()
    c.create("/a", b"1")
    c.create("/a/s-", flags=2)
    c.create("/e", flags=1)
    c.set("/a", b"2")
    c.delete("/a/s-0000000000")
    return d


def test_log_replay_rebuilds_the_same_tree(tmp_path):
    d = _run_some_txns()
    store = persist.Store(str(tmp_path), log=lambda m: None)
    store.open_log(1)
    store.append(persist.encode_txns(d.txns))
    store.close()
    restored = persist.Store(str(tmp_path), log=lambda m: None).load()
    restored.check_invariants()
    assert _tree_dump(restored) == _tree_dump(d.core.tree)
    assert restored.zxid == d.core.tree.zxid
    assert restored.sessions == d.core.tree.sessions
    assert restored.ephemerals == d.core.tree.ephemerals


@pytest.mark.parametrize("preallocate_bytes", [0, 4096])
def test_a_power_cut_keeps_every_appended_txn(tmp_path, monkeypatch, preallocate_bytes):
    """Each append is a group commit: once it returns, its txns survive a power cut
    (tests.powercut keeps only what the real fdatasync/fsync calls made durable)."""
    d = _run_some_txns()
    power = PowerCut(str(tmp_path), monkeypatch)
    store = persist.Store(str(tmp_path), log=lambda m: None,
                          preallocate_bytes=preallocate_bytes)
    store.open_log(1)
    for record in d.txns:
        store.append(persist.encode_txns([record]))
    os.close(store._fd)  # as the power goes: no close, so no last fsync
    store._fd = None
    assert list(power.cut()) == _logs(tmp_path)
    restored = persist.Store(str(tmp_path), log=lambda m: None).load()
    assert restored.zxid == d.core.tree.zxid
    assert _tree_dump(restored) == _tree_dump(d.core.tree)


@pytest.mark.parametrize("damage", ["cut-header", "cut-payload", "bad-crc"])
def test_torn_tail_record_is_truncated_and_logged(tmp_path, damage):
    d = _run_some_txns()
    good, last = d.txns[:-1], d.txns[-1:]
    store = persist.Store(str(tmp_path), log=lambda m: None, preallocate_bytes=0)
    store.open_log(1)
    store.append(persist.encode_txns(good))
    store.close()
    path = os.path.join(tmp_path, _logs(tmp_path)[0])
    good_size = os.path.getsize(path)
    tail = persist.encode_txns(last)
    if damage == "cut-header":
        tail = tail[:5]
    elif damage == "cut-payload":
        tail = tail[:-3]
    else:
        tail = tail[:-1] + bytes([tail[-1] ^ 0xFF])
    with open(path, "ab") as f:
        f.write(tail)
    messages = []
    tree = persist.Store(str(tmp_path), log=messages.append).load()
    assert os.path.getsize(path) == good_size
    assert any("torn tail" in m for m in messages)
    assert tree.zxid == good[-1][0]
    assert "/a/s-0000000000" in tree.nodes  # the lost txn was the delete


def test_preallocated_log_zero_padding_is_not_a_torn_tail(tmp_path):
    d = _run_some_txns()
    store = persist.Store(str(tmp_path), log=lambda m: None, preallocate_bytes=4096)
    store.open_log(1)
    for record in d.txns:  # crosses the first 4 KiB chunk: the file is extended
        store.append(persist.encode_txns([record]))
    store.append(persist.encode_txns([(d.core.tree.zxid + 1, 0,
                                       txn.Create("/big", b"z" * 5000, OPEN_ACL, 0))]))
    store.close()
    path = os.path.join(tmp_path, _logs(tmp_path)[0])
    size = os.path.getsize(path)
    assert size > 4096  # the second append outgrew the first chunk
    messages = []
    tree = persist.Store(str(tmp_path), log=messages.append).load()
    assert not any("torn" in m for m in messages) and os.path.getsize(path) == size
    assert tree.nodes["/big"].data == b"z" * 5000
    # a record torn inside the preallocated zeros is found and cut off
    with open(path, "r+b") as f:
        data = f.read()
        end = data.rstrip(b"\0")
        f.seek(len(end) - 3)
        f.write(b"\0\0\0")
    messages = []
    tree = persist.Store(str(tmp_path), log=messages.append).load()
    assert any("torn tail" in m for m in messages) and "/big" not in tree.nodes


def test_snapshot_then_log_restores_and_prunes_old_files(tmp_path):
    d = _run_some_txns()
    half = len(d.txns) // 2
    store = persist.Store(str(tmp_path), log=lambda m: None)
    store.open_log(1)
    store.append(persist.encode_txns(d.txns[:half]))
    partial = Tree()
    for zxid, t, op in d.txns[:half]:
        partial.apply(zxid, t, op, [])
    store.snapshot(persist.snapshot_bytes(partial), partial.zxid)
    store.append(persist.encode_txns(d.txns[half:]))
    store.close()
    assert len(_logs(tmp_path)) == 1
    assert len([n for n in os.listdir(tmp_path) if n.startswith("snapshot.")]) == 1
    restored = persist.Store(str(tmp_path), log=lambda m: None).load()
    assert _tree_dump(restored) == _tree_dump(d.core.tree)
    assert restored.nodes["/"].acl is OPEN_ACL


# ---------------------------------------------------------------------- real process

def _client(hosts, **kwargs) -> KazooClient:
    zk = KazooClient(hosts=hosts, timeout=10, **kwargs)
    zk.start(timeout=15)
    return zk


@pytest.mark.slow
def test_restart_after_sigkill_keeps_acknowledged_writes_and_sessions(zk_process, tmp_path):
    data_dir = tmp_path / "data"
    server = zk_process(data_dir)
    zk = _client(server.hosts)
    owner = _client(server.hosts)
    owner.create("/lease", b"mine", ephemeral=True)
    session = owner.client_id
    zk.create("/w", b"")
    acked: list[str] = []
    stop = threading.Event()

    def writer():
        i = 0
        while not stop.is_set():
            try:
                acked.append(zk.create(f"/w/n{i:06d}", b"x" * 100))
            except Exception:
                return
            i += 1

    def pipelined_writer():  # many creates in flight: exercises group commit
        batch = 0
        while not stop.is_set():
            pending = [(f"/w/p{batch:04d}-{i:03d}", zk.create_async(f"/w/p{batch:04d}-{i:03d}", b"y"))
                       for i in range(50)]
            for path, result in pending:
                try:
                    result.get(timeout=10)
                except Exception:
                    return
                acked.append(path)
            batch += 1

    t = threading.Thread(target=writer, daemon=True)
    t2 = threading.Thread(target=pipelined_writer, daemon=True)
    t.start()
    t2.start()
    wait_for(lambda: len(acked) >= 600, timeout_s=30)
    before_kill = zk.exists("/w").pzxid
    server.kill()  # SIGKILL under load
    stop.set()
    t.join(15)
    t2.join(15)
    owner.stop()
    zk.stop()
    owner.close()
    zk.close()

    server2 = zk_process(data_dir)
    zk2 = _client(server2.hosts)
    try:
        present = set(zk2.get_children("/w"))
        missing = [p for p in acked if p.rsplit("/", 1)[1] not in present]
        assert not missing, f"{len(missing)} acknowledged creates lost, e.g. {missing[:3]}"
        # the zxid sequence moves on: new writes sort after everything seen before
        assert zk2.create("/after") and zk2.exists("/after").czxid > before_kill
        # a client that reconnects within its timeout keeps its session and ephemerals
        assert zk2.exists("/lease") is not None
        resumed = _client(server2.hosts, client_id=session)
        assert resumed.client_id[0] == session[0]
        assert resumed.get("/lease")[0] == b"mine"
        resumed.stop()
        resumed.close()
        wait_for(lambda: zk2.exists("/lease") is None, timeout_s=10)
    finally:
        zk2.stop()
        zk2.close()


@pytest.mark.slow
def test_clean_stop_flushes_and_restores(zk_process, tmp_path):
    data_dir = tmp_path / "data"
    server = zk_process(data_dir)
    zk = _client(server.hosts)
    zk.create("/kept", b"value", makepath=True)
    zk.set("/kept", b"value2")
    zk.stop()
    zk.close()
    assert server.terminate() == 0
    server2 = zk_process(data_dir, extra_args=["--snap-count", "5"])
    zk = _client(server2.hosts)
    try:
        data, stat = zk.get("/kept")
        assert (data, stat.version) == (b"value2", 1)
        for i in range(20):  # crosses several snapshots
            zk.create(f"/s{i}")
    finally:
        zk.stop()
        zk.close()
    server2.terminate()
    assert len(_logs(data_dir)) <= 2
    server3 = zk_process(data_dir)
    zk = _client(server3.hosts)
    try:
        assert all(zk.exists(f"/s{i}") for i in range(20))
    finally:
        zk.stop()
        zk.close()


def test_replies_are_released_only_after_their_txns_are_durable(tmp_path, monkeypatch):
    """The shell's ordering rule, checked without sockets: the txn log's real fdatasync,
    then the frames."""
    import asyncio

    from zk_lite import jute
    from zk_lite.server import ZkServer, build_parser

    server = ZkServer(build_parser().parse_args(["--data-dir", str(tmp_path / "d"), "--port", "0"]))
    loop = asyncio.new_event_loop()
    server.loop = loop
    trace = []
    PowerCut(str(tmp_path / "d"), monkeypatch, trace)  # traces the real syncs
    log_name = _logs(tmp_path / "d")[0]

    class Transport:
        def write(self, data):
            is_connect = len(data) == 4 + 37  # the ConnectResponse
            trace.append(("write", "connect" if is_connect else jute.REPLY_HEADER.unpack_from(data, 4)[0]))

        def is_closing(self):
            return False

        def get_write_buffer_size(self):
            return 0

        def close(self):
            trace.append("close")

    class Conn:
        transport = Transport()
        peer = "127.0.0.1"
        sent = 0

    conn = Conn()
    try:
        now = 1_000_000
        server.core.connect(conn, jute.encode_connect_request(
            jute.ConnectRequest(0, 0, 10000, 0, b"\0" * 16))[4:], now)
        server.after_input()
        assert trace == []  # createSession is not durable yet: nothing may be sent
        server._flush()
        assert trace == [("fdatasync", log_name), ("write", "connect")]
        trace.clear()
        create = jute.encode_record(jute.CreateRequest("/x", b"", [(31, "world", "anyone")], 0))
        server.core.receive(conn, 1, 1, create, now)
        server.core.receive(conn, 2, 4, jute.encode_record(jute.GetDataRequest("/x", False)), now)
        server.after_input()
        assert trace == []
        server._flush()
        assert trace == [("fdatasync", log_name), ("write", 1)]  # both replies, one write
        trace.clear()
        server.core.receive(conn, 3, 3, jute.encode_record(jute.ExistsRequest("/x", False)), now)
        server.after_input()
        assert trace == [("write", 3)]  # a read behind no txn goes out at once
    finally:
        server.executor.shutdown()
        server.store.close()
        loop.close()


def test_half_written_snapshot_is_ignored_and_removed(tmp_path):
    d = _run_some_txns()
    store = persist.Store(str(tmp_path), log=lambda m: None, preallocate_bytes=0)
    store.open_log(1)
    store.append(persist.encode_txns(d.txns))
    store.close()
    (tmp_path / "snapshot.00000000000000ff.tmp").write_bytes(b"partial")
    tree = persist.Store(str(tmp_path), log=lambda m: None).load()
    assert _tree_dump(tree) == _tree_dump(d.core.tree)
    assert not list(tmp_path.glob("*.tmp"))
