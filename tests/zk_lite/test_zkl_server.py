"""Smoke tests of the real ``python -m zk_lite`` process through kazoo and raw sockets."""
from __future__ import annotations

import os
import socket
import struct
import threading
import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError, NodeExistsError

from zk_lite import jute
from .zkl_helpers import wait_for

pytestmark = [pytest.mark.process, pytest.mark.slow]


@pytest.fixture
def server(zk_process):
    return zk_process()


@pytest.fixture
def zk(server):
    client = KazooClient(hosts=server.hosts, timeout=10)
    client.start(timeout=15)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def _raw(server, timeout_s=5.0) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", server.port), timeout=timeout_s)
    return s


def _read_all(s: socket.socket) -> bytes:
    chunks = []
    while True:
        try:
            data = s.recv(65536)
        except ConnectionResetError:
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks)


def _handshake(s: socket.socket) -> None:
    s.sendall(jute.encode_connect_request(jute.ConnectRequest(0, 0, 10000, 0, b"\0" * 16)))
    reader = jute.FrameReader()
    while (frame := reader.next_frame()) is None:
        reader.feed(s.recv(4096))
    assert jute.decode_connect_response(frame)[0].timeOut == 10000


def test_readiness_line_reports_the_picked_port(server):
    assert server.port > 0
    with _raw(server) as s:
        s.sendall(b"ruok")
        assert _read_all(s) == b"imok"


def test_kazoo_crud_versions_and_watch(zk):
    assert zk.create("/smoke", b"v0") == "/smoke"
    with pytest.raises(NodeExistsError):
        zk.create("/smoke")
    assert zk.get("/smoke")[0] == b"v0"
    fired = threading.Event()
    events = []

    def on_change(event):
        events.append((event.type, event.path))
        fired.set()

    zk.get("/smoke", watch=on_change)
    stat = zk.set("/smoke", b"v1", version=0)
    assert stat.version == 1
    assert fired.wait(10)
    assert events == [("CHANGED", "/smoke")]
    with pytest.raises(BadVersionError):
        zk.set("/smoke", b"v2", version=0)
    zk.delete("/smoke", version=1)
    with pytest.raises(NoNodeError):
        zk.get("/smoke")
    assert zk.server_version()[:2] == (3, 8)


@pytest.mark.parametrize("word,expect", [(b"srvr", b"Mode: standalone"), (b"stat", b"Clients:"),
                                         (b"mntr", b"zk_server_state\tstandalone"),
                                         (b"cons", b"/127.0.0.1"), (b"isro", b"rw"),
                                         (b"envi", b"zookeeper.version=3.8")])
def test_four_letter_words(server, word, expect):
    with _raw(server) as s:
        s.sendall(word)
        assert expect in _read_all(s)


@pytest.mark.parametrize("bad", [
    struct.pack("!i", jute.MAX_BUFFER_BYTES + 4096) + b"x" * 100,  # over jute.maxbuffer
    struct.pack("!i", -5),                                        # negative length
    struct.pack("!i", 4) + b"abcd",                                # no request header
    struct.pack("!i", 8) + struct.pack("!ii", 1, 77),              # unknown opcode
])
def test_bad_input_closes_only_that_connection(server, zk, bad):
    with _raw(server) as s:
        _handshake(s)
        s.sendall(bad)
        _read_all(s)  # returns once the server has closed the connection
    zk.create("/survivor", b"")
    assert zk.exists("/survivor") is not None
    wait_for(lambda: any("closing" in line for line in server.stderr_lines))


def test_garbage_before_handshake_and_truncated_packet(server, zk):
    with _raw(server) as s:
        s.sendall(b"\x7f\xff\xff\xff garbage")
        assert _read_all(s) == b"", "garbage was answered"   # closed, nothing sent
    wait_for(lambda: any("bad input" in line and "closing connection" in line
                         for line in server.stderr_lines))
    with _raw(server) as s:
        s.sendall(jute.encode_connect_request(jute.ConnectRequest(0, 0, 10000, 0, b"\0" * 16))[:20])
    # The server lives on and serves the session it had.
    zk.create("/after-garbage", b"still here")
    assert zk.get("/after-garbage")[0] == b"still here"
    assert server.proc.poll() is None


OTHERS_WAIT_MAX_S = 3.0   # measured: under 0.6 s with the 2-core box loaded (load 7)


def test_stalled_reader_does_not_block_others(zk_process, tmp_path):
    server = zk_process(extra_args=["--max-output-bytes", str(1 << 20)])
    zk = KazooClient(hosts=server.hosts, timeout=10)
    zk.start(timeout=15)
    try:
        zk.create("/big", b"x" * 500_000)
        s = _raw(server)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        _handshake(s)
        request = jute.encode_request(1, 4, jute.GetDataRequest("/big", False))
        s.sendall(request * 200)  # ~100 MB of replies that nobody reads
        waits = []
        for i in range(50):
            started = time.monotonic()
            zk.set("/big", b"y" * 10, version=-1) if i == 25 else zk.exists("/big")
            waits.append(time.monotonic() - started)
        # Served while the stalled reader's replies pile up: a server that blocked on
        # it would hold these for seconds (kazoo itself waits up to its 10 s timeout).
        assert max(waits) < OTHERS_WAIT_MAX_S, sorted(waits)[-5:]
        wait_for(lambda: any("not reading" in line for line in server.stderr_lines), timeout_s=20)
        s.close()
    finally:
        zk.stop()
        zk.close()


def test_session_log_lines_and_sigterm_shutdown(zk_process):
    server = zk_process()
    zk = KazooClient(hosts=server.hosts, timeout=10)
    zk.start(timeout=15)
    zk.stop()
    zk.close()
    wait_for(lambda: any("opened" in l for l in server.stderr_lines)
             and any("closed" in l for l in server.stderr_lines))
    assert server.terminate() == 0


def test_random_and_mutated_frames_never_stop_the_server(server, zk):
    import random

    rng = random.Random(1234)
    valid = [jute.encode_request(1, op, rec)[4:] for op, rec in [
        (1, jute.CreateRequest("/f", b"x", [(31, "world", "anyone")], 3)),
        (5, jute.SetDataRequest("/f", b"y", -1)),
        (14, [(1, jute.CreateRequest("/g", b"", [(31, "world", "anyone")], 0)),
              (2, jute.DeleteRequest("/g", -1))]),
        (101, jute.SetWatches(0, ["/a"], ["/b"], ["/c"])),
        (7, jute.SetACLRequest("/f", [(31, "ip", "127.0.0.1")], -1)),
        (100, jute.AuthPacket(0, "digest", b"a:b")),
    ]]
    for round_ in range(int(os.environ.get("ZKL_FUZZ_ROUNDS", "30"))):
        with _raw(server) as s:
            _handshake(s)
            for _ in range(20):
                body = bytearray(rng.choice(valid))
                for _ in range(rng.randint(0, 3)):
                    body[rng.randrange(len(body))] = rng.randrange(256)
                if rng.random() < 0.2:
                    body = bytearray(rng.randbytes(rng.randint(0, 40)))
                try:
                    s.sendall(struct.pack("!i", len(body)) + bytes(body))
                except OSError:  # the server closed this connection: allowed
                    break
        assert zk.exists("/") is not None  # the well-behaved client keeps working
    assert not any("internal error" in line for line in server.stderr_lines), \
        [l for l in server.stderr_lines if "Traceback" in l or "Error" in l][:5]


def test_cons_lists_the_connection_with_its_port_and_session(zk):
    local_port = zk._connection._socket.getsockname()[1]
    text = zk.command(b"cons")
    lines = [line for line in text.splitlines() if f"/127.0.0.1:{local_port}[" in line]
    assert len(lines) == 1 and f"sid=0x{zk.client_id[0]:x}" in lines[0], text
