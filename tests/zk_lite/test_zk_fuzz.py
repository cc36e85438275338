"""Malformed input from many raw sockets never kills the server or starves a good client.

Issue 3 "Bad input": a length over jute.maxbuffer, garbage, a truncated packet or an
unknown opcode closes that one connection (or gets ZooKeeper's error reply); everyone
else keeps being served, and a client that never reads does not block the others.
Runs against both kinds: the real ZooKeeper shows the expectations are fair.
"""
from __future__ import annotations

import os
import random
import socket
import struct
import threading
import time

from kazoo.exceptions import KazooException

from tests.waiting import poll_until

from .jute_client import OP_GET_DATA, RawSession, connect_request, frame, path_and_watch

import pytest

pytestmark = pytest.mark.process

SEED = int(os.environ.get("ZK_FUZZ_SEED", "0")) or random.randrange(1, 2**31)
ROUNDS_MAX = 40
SOCKETS_PER_ROUND = 8
READY_AGAIN_S = 10.0
FUZZ_TIME_MAX_S = 20.0
SOCKET_TIMEOUT_S = 2.0
GOOD_OP_LATENCY_MAX_S = 3.0
JUTE_MAXBUFFER = 0xFFFFF


class GoodClient(threading.Thread):
    """A well-behaved kazoo client doing create/set/get/delete until told to stop."""

    def __init__(self, client):
        super().__init__(daemon=True)
        self.client = client
        self.ops = 0
        self.failures: list[str] = []
        self.latency_max_s = 0.0
        self.stop_requested = threading.Event()

    def run(self) -> None:
        for i in range(1_000_000):
            if self.stop_requested.is_set():
                return
            path = f"/good-{i % 16}"
            start = time.monotonic()
            try:
                self.client.create(path, b"v")
                self.client.set(path, b"w")
                assert self.client.get(path)[0] == b"w"
                self.client.delete(path)
            except (KazooException, AssertionError) as error:
                self.failures.append(f"op {i}: {error!r}")
                return
            self.latency_max_s = max(self.latency_max_s, time.monotonic() - start)
            self.ops += 1


def _address(zk_server) -> tuple[str, int]:
    host, port = zk_server.hosts.split(":")
    return host, int(port)


def _valid_connect() -> bytes:
    return frame(connect_request(timeout_ms=500))  # clamped up to the minimum: expires fast


def _request(xid: int, opcode: int, body: bytes = b"") -> bytes:
    return frame(struct.pack("!ii", xid, opcode) + body)


def malformed_payloads(rng: random.Random) -> list[bytes]:
    """One of each kind of bad input, with random sizes and contents."""
    garbage = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
    truncated = _valid_connect()[: rng.randrange(1, 40)]
    return [
        struct.pack("!i", JUTE_MAXBUFFER + 1 + rng.randrange(1 << 20)) + garbage,  # over maxbuffer
        struct.pack("!i", 0x7FFFFFFF) + garbage,
        struct.pack("!i", -rng.randrange(1, 1 << 31)) + garbage,  # negative length
        b"\x00\x00\x00\x00",  # an empty connect frame
        garbage,
        truncated,
        _valid_connect() + _request(1, rng.choice([10, 23, 99, 999, 0x7FFF, -77])),  # unknown opcode
        _valid_connect() + garbage,  # garbage after a good connect
        _valid_connect() + frame(garbage),  # a framed but meaningless request
        _valid_connect() + _request(1, OP_GET_DATA, struct.pack("!i", 5000) + b"/x"),  # string past the end
        _valid_connect() + _request(1, OP_GET_DATA, path_and_watch("/", False))[:-3],  # truncated request
        _valid_connect() + struct.pack("!i", JUTE_MAXBUFFER + 1000) + garbage,  # oversized request
        frame(connect_request(timeout_ms=500, session_id=rng.randrange(1, 1 << 62))),  # unknown session
    ]


def _throw(address, payload: bytes) -> socket.socket | None:
    try:
        sock = socket.create_connection(address, timeout=SOCKET_TIMEOUT_S)
        sock.sendall(payload)
        return sock
    except OSError:  # the server may close mid-send: fine
        return None


def _closes_within(sock: socket.socket, timeout_s: float) -> bool:
    sock.settimeout(timeout_s)
    try:
        while sock.recv(65536):
            pass
        return True
    except socket.timeout:
        return False
    except OSError:
        return True


def test_malformed_frames_never_stop_the_server_serving_a_good_client(zk_server, zk):
    rng = random.Random(SEED)
    good = GoodClient(zk)
    good.start()
    address = _address(zk_server)
    deadline = time.monotonic() + FUZZ_TIME_MAX_S
    rounds = 0
    try:
        for rounds in range(1, ROUNDS_MAX + 1):
            if time.monotonic() > deadline:
                break
            payloads = malformed_payloads(rng)
            sockets = [_throw(address, rng.choice(payloads)) for _ in range(SOCKETS_PER_ROUND)]
            for sock in sockets:
                if sock is not None:
                    sock.close()
            assert zk_server.alive(), f"server died in round {rounds} (ZK_FUZZ_SEED={SEED})"
            assert not good.failures, f"{good.failures} (ZK_FUZZ_SEED={SEED})"
    finally:
        good.stop_requested.set()
        good.join(timeout=30)
    assert not good.is_alive()
    assert not good.failures, f"{good.failures} (ZK_FUZZ_SEED={SEED})"
    assert good.ops > 0 and rounds > 0
    # Ready again soon (a loaded machine may still be reading the last round's garbage,
    # and a readiness probe is one connection with a short timeout).
    poll_until(zk_server.is_ready, READY_AGAIN_S, "zk to answer ruok and a session")
    assert zk_server.alive()
    zk.create("/after-fuzz", b"ok")
    assert zk.get("/after-fuzz")[0] == b"ok"


def test_oversized_length_prefix_closes_that_connection(zk_server, zk):
    address = _address(zk_server)
    for payload in (struct.pack("!i", JUTE_MAXBUFFER + 100) + b"x" * 64,
                    _valid_connect() + struct.pack("!i", JUTE_MAXBUFFER + 100) + b"x" * 64):
        sock = _throw(address, payload)
        if sock is not None:
            try:
                assert _closes_within(sock, timeout_s=5), "connection left open after an oversized frame"
            finally:
                sock.close()
    zk.create("/still-fine")


def test_unknown_opcode_gets_unimplemented_or_a_closed_connection(zk_server, zk):
    host, port = _address(zk_server)
    session = RawSession(host, port, timeout_ms=500)
    try:
        xid = session.send(999)
        try:
            reply = session.read_reply()
        except (ConnectionError, OSError):
            reply = None
        if reply is not None:
            assert (reply.xid, reply.err) == (xid, -6)  # Unimplemented
    finally:
        session.sock.close()
    zk.create("/still-fine")


def test_stalled_client_does_not_block_others(zk_server, zk):
    big = os.urandom(512 * 1024)
    zk.create("/big", big)
    root = "/" + zk.chroot.lstrip("/")
    host, port = _address(zk_server)
    stalled = RawSession(host, port, timeout_ms=5000)
    try:
        request = _request(0, OP_GET_DATA, path_and_watch(f"{root}/big", False))
        stalled.sock.settimeout(0.2)
        sent = 0
        try:
            for sent in range(1, 101):  # up to 50 MB of replies it will never read
                stalled.sock.sendall(request)
        except (socket.timeout, OSError):
            pass  # the server stopped reading from it: that is allowed
        latencies = []
        for i in range(30):
            start = time.monotonic()
            zk.set("/big", big[: 1000 + i])
            assert zk.get("/big")[0] == big[: 1000 + i]
            latencies.append(time.monotonic() - start)
        assert max(latencies) < GOOD_OP_LATENCY_MAX_S, f"latencies {latencies} with {sent} stalled requests"
    finally:
        stalled.sock.close()
    assert zk_server.alive()
    poll_until(zk_server.is_ready, READY_AGAIN_S, "zk to answer ruok and a session")
