"""Shared helpers for zk_lite's own tests: a deterministic driver for the pure core, and a
fixture that runs the real ``python -m zk_lite`` process (always killed at the end)."""
from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import threading

from zk_lite import jute
from zk_lite.core import Core
from tests.waiting import poll_until

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_HDR = struct.Struct("!iqi")


class FakeClient:
    """One connection to the core; frames addressed to it land in ``inbox``."""

    def __init__(self, driver: "Driver", key: str):
        self.driver = driver
        self.key = key
        self.inbox: list[bytes] = []
        self.events: list[tuple[int, str]] = []
        self.closed = False
        self.session_id = 0
        self.passwd = b""
        self.timeout_ms = 0
        self._xid = 0

    def send(self, opcode: int, record=None, xid: int | None = None) -> int:
        if xid is None:
            self._xid += 1
            xid = self._xid
        if opcode in (14, 22):
            body = jute.encode_multi(record)
        else:
            body = b"" if record is None else jute.encode_record(record)
        self.driver.core.receive(self.key, xid, opcode, body, self.driver.now)
        self.driver.drain()
        return xid

    def call(self, opcode: int, record=None, xid: int | None = None):
        """Send one request; return (err, body, zxid) of its reply. Events go to .events."""
        xid = self.send(opcode, record, xid)
        return self.reply(xid)

    def reply(self, xid: int):
        while self.inbox:
            frame = self.inbox.pop(0)
            rxid, zxid, err = _HDR.unpack_from(frame)
            if rxid == -1:
                ev = jute.decode_record(jute.WatcherEvent, frame, 16)
                self.events.append((ev.type, ev.path))
                continue
            assert rxid == xid, (rxid, xid)
            return err, frame[16:], zxid
        raise AssertionError(f"no reply for xid {xid} (closed={self.closed})")

    def take_events(self):
        while self.inbox:
            frame = self.inbox[0]
            if _HDR.unpack_from(frame)[0] != -1:
                break
            self.inbox.pop(0)
            ev = jute.decode_record(jute.WatcherEvent, frame, 16)
            self.events.append((ev.type, ev.path))
        events, self.events = self.events, []
        return events

    # convenience wrappers
    def create(self, path, data=b"", acl=None, flags=0, opcode=1):
        acl = [(31, "world", "anyone")] if acl is None else acl
        err, body, _ = self.call(opcode, jute.CreateRequest(path, data, acl, flags))
        if err:
            return err
        return jute.decode_record(jute.CreateResponse, body).path

    def get(self, path, watch=False):
        err, body, _ = self.call(4, jute.GetDataRequest(path, watch))
        return err if err else jute.decode_record(jute.GetDataResponse, body)

    def exists(self, path, watch=False):
        err, body, _ = self.call(3, jute.ExistsRequest(path, watch))
        return err if err else jute.decode_record(jute.StatResponse, body).stat

    def set(self, path, data, version=-1):
        err, body, _ = self.call(5, jute.SetDataRequest(path, data, version))
        return err if err else jute.decode_record(jute.StatResponse, body).stat

    def delete(self, path, version=-1):
        return self.call(2, jute.DeleteRequest(path, version))[0]

    def children(self, path, watch=False):
        err, body, _ = self.call(12, jute.GetChildren2Request(path, watch))
        return err if err else jute.decode_record(jute.GetChildren2Response, body)

    def add_auth(self, scheme, cred: bytes):
        return self.call(100, jute.AuthPacket(0, scheme, cred), xid=-4)[0]


class Driver:
    """Runs the pure core with a manual clock and routes its frames to FakeClients."""

    def __init__(self, tick_ms: int = 2000, now_ms: int = 1_000_000, **kwargs):
        self.now = now_ms
        self.core = Core(secret=b"unit-test-secret", tick_ms=tick_ms, **kwargs)
        self.core.start(now_ms)
        self.clients: dict[str, FakeClient] = {}
        self.txns: list = []
        self.logs: list[str] = []
        self._n = 0

    def drain(self) -> None:
        txns, out, logs = self.core.take()
        self.txns.extend(txns)
        self.logs.extend(logs)
        for key, frame in out:
            client = self.clients[key]
            if client.closed:
                continue
            if frame is None:
                client.closed = True
                self.core.disconnect(key, self.now)
            else:
                assert int.from_bytes(frame[:4], "big") == len(frame) - 4
                client.inbox.append(frame[4:])  # payload without the length prefix

    def connect(self, timeout_ms: int = 10000, session_id: int = 0, passwd: bytes = b"\0" * 16,
                peer: str = "127.0.0.1", read_only: bool | None = False) -> FakeClient:
        self._n += 1
        client = FakeClient(self, f"c{self._n}")
        self.clients[client.key] = client
        req = jute.ConnectRequest(0, 0, timeout_ms, session_id, passwd)
        body = jute.encode_connect_request(req, read_only)[4:]
        self.core.connect(client.key, body, self.now, peer)
        self.drain()
        frame = client.inbox.pop(0)
        resp, ro = jute.decode_connect_response(frame)
        client.session_id, client.passwd, client.timeout_ms = resp.sessionId, resp.passwd, resp.timeOut
        client.read_only_byte = ro
        return client

    def tick(self, now_ms: int) -> None:
        self.now = now_ms
        self.core.tick(now_ms)
        self.drain()


# ---------------------------------------------------------------------- real process

class ZkProcess:
    def __init__(self, data_dir: str, extra_args=()):
        self.data_dir = data_dir
        self.extra_args = list(extra_args)
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.stderr_lines: list[str] = []

    def start(self, timeout_s: float = 20.0) -> "ZkProcess":
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "zk_lite", "--port", "0", "--data-dir", self.data_dir,
             *self.extra_args],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        threading.Thread(target=self._pump_stderr, daemon=True).start()
        ready: list[str] = []
        reader = threading.Thread(target=lambda: ready.append(self.proc.stdout.readline()),
                                  daemon=True)
        reader.start()
        reader.join(timeout_s)
        if not ready or "listening on" not in ready[0]:
            self.kill()
            raise RuntimeError(f"zk_lite did not start: {ready!r} {self.stderr_lines[-20:]}")
        self.port = int(ready[0].strip().rsplit(":", 1)[1])
        return self

    def _pump_stderr(self) -> None:
        proc = self.proc
        for line in proc.stderr:
            self.stderr_lines.append(line.rstrip("\n"))

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def terminate(self, timeout_s: float = 10.0) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise
        return self.proc.returncode


def wait_for(predicate, timeout_s: float = 10.0, interval_s: float = 0.02):
    return poll_until(predicate, timeout_s, interval_s=interval_s)
