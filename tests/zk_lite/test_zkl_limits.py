"""zk_lite's memory under connection floods (issue 10, item 5), on the real process:
ZooKeeper's maxClientCnxns per client address, a small bound on what a connection may
send before its handshake, and buffers given back when connections close."""
from __future__ import annotations

import socket
import struct
import subprocess
import sys

import pytest
from kazoo.client import KazooClient

from zk_lite import jute
from .zkl_helpers import ROOT, wait_for

pytestmark = [pytest.mark.process, pytest.mark.slow]


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def connect(server) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=5)


def handshake(s: socket.socket, timeout_ms: int = 10000) -> None:
    s.sendall(jute.encode_connect_request(jute.ConnectRequest(0, 0, timeout_ms, 0, b"\0" * 16)))
    reader = jute.FrameReader()
    while (frame := reader.next_frame()) is None:
        data = s.recv(4096)
        assert data, "closed during the handshake"
        reader.feed(data)
    assert jute.decode_connect_response(frame)[0].timeOut == timeout_ms


def closed_by_server(s: socket.socket, timeout_s: float = 5.0) -> bool:
    s.settimeout(timeout_s)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_connections_beyond_max_client_cnxns_from_one_address_are_closed(zk_process):
    server = zk_process(extra_args=["--max-client-cnxns", "5"])
    held = [connect(server) for _ in range(5)]
    try:
        for s in held:
            handshake(s)
        extra = connect(server)
        assert closed_by_server(extra), "the sixth connection was kept"
        extra.close()
        wait_for(lambda: any("Too many connections from /127.0.0.1 - max is 5" in line
                             for line in server.stderr_lines), 10)
        # The five still work, and a slot that frees up can be used again.
        client = None
        held.pop().close()

        def fifth_slot_usable():
            nonlocal client
            c = KazooClient(hosts=server.hosts, timeout=10)
            try:
                c.start(timeout=2)
            except Exception:  # noqa: BLE001 - the old connection may not be gone yet
                c.close()
                return False
            client = c
            return True
        wait_for(fifth_slot_usable, 15, interval_s=0.2)
        client.ensure_path("/still/served")
        assert client.exists("/still/served") is not None
        client.stop()
        client.close()
        conf = subprocess.run([sys.executable, "-c", (
            "import socket,sys;s=socket.create_connection(('127.0.0.1',%d));"
            "s.sendall(b'conf');sys.stdout.write(s.makefile('rb').read().decode())"
        ) % server.port], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout
        # four-letter words take a connection too: one slot is free again by now
        assert "maxClientCnxns=5" in conf
    finally:
        for s in held:
            s.close()


def test_a_large_frame_before_the_handshake_is_refused_at_once(zk_process):
    server = zk_process()
    s = connect(server)
    try:
        s.sendall(struct.pack(">i", 500_000) + b"\0" * 1000)    # a "ConnectRequest" of 500 KB
        assert closed_by_server(s)
    finally:
        s.close()
    wait_for(lambda: any("outside [0, 1024]" in line for line in server.stderr_lines), 10)
    # A session's requests may still be as large as jute.maxbuffer.
    client = KazooClient(hosts=server.hosts, timeout=10)
    client.start(timeout=15)
    try:
        client.create("/big", b"x" * 900_000)
        assert len(client.get("/big")[0]) == 900_000
    finally:
        client.stop()
        client.close()


def test_memory_of_partial_frames_is_bounded_and_given_back(zk_process):
    """60 sessions (the default maxClientCnxns) each park a 500 KB partial request; 200
    more connections are refused. After they close, the RSS comes back down at once,
    not when their sessions (30 s) expire."""
    server = zk_process()
    pid = server.proc.pid
    base = rss_kb(pid)
    socks = []
    try:
        for _ in range(60):
            s = connect(server)
            handshake(s, timeout_ms=30_000)
            s.sendall(struct.pack(">i", 600_000) + b"\1" * 500_000)
            socks.append(s)
        refused = 0
        for _ in range(200):
            s = connect(server)
            if closed_by_server(s, 2.0):
                refused += 1
            s.close()
        assert refused == 200
        wait_for(lambda: rss_kb(pid) > base + 20_000, 20)   # the partial frames are held
        peak = rss_kb(pid)
        assert peak < base + 200_000, (base, peak)            # 60 x 0.5 MB, not 260
    finally:
        for s in socks:
            s.close()
    wait_for(lambda: rss_kb(pid) < base + 15_000, 20)
