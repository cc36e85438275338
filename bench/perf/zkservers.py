"""Start and stop ZooKeeper-protocol servers: zk_lite, or a real Apache ZooKeeper 3.8.

One interface for both kinds, shared by the test fixtures (``tests/zk``) and the
benchmark (``bench.perf.zk``)::

    handle = start("zk_lite", tick_time_ms=500)
    handle.hosts        # "127.0.0.1:PORT"
    handle.kill()       # SIGKILL, data dir kept
    handle.restart()    # same data dir, same port
    handle.close()      # stop the process and delete the temp dir

Readiness is the four-letter word ``ruok`` answered with ``imok``, then one session
opened and closed. Every process is
started in its own process group and is killed by ``close()``; callers put ``close()``
in a ``finally`` or a fixture teardown.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from node import ports
from node.paths import child_env

ZOOKEEPER_HOME = Path("/usr/share/zookeeper")
ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
KINDS = ("zk_lite", "zookeeper")

ready_timeout_s = 30.0
stop_timeout_s = 5.0
four_letter_timeout_s = 1.0
start_attempts_max = 3


def zookeeper_missing_reason() -> str | None:
    """Why a real ZooKeeper cannot be started here, or None when it can."""
    if not ZOOKEEPER_HOME.is_dir():
        return f"Apache ZooKeeper is not installed ({ZOOKEEPER_HOME} missing; apt-get install zookeeper)"
    if not ZOOKEEPER_JAR.is_file():
        return f"{ZOOKEEPER_JAR} missing"
    if shutil.which("java") is None:
        return "java is not on PATH"
    return None


def missing_reason(kind: str) -> str | None:
    """Why a server of `kind` cannot be started here, or None. zk_lite is part of
    this repository and is always expected to start."""
    assert kind in KINDS, kind
    return None if kind == "zk_lite" else zookeeper_missing_reason()


def free_port() -> int:
    """A loopback port that was free a moment ago, outside the kernel's ephemeral range
    (``node.ports``: a server restarted on it finds it free)."""
    return ports.free_port()


def four_letter(host: str, port: int, word: bytes, timeout_s: float = four_letter_timeout_s) -> bytes:
    """Send a four-letter word and return the whole reply (the server closes after it)."""
    assert len(word) == 4
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.settimeout(timeout_s)
        sock.sendall(word)
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def accepts_sessions(host: str, port: int, timeout_s: float = four_letter_timeout_s) -> bool:
    """Open and close one session with a raw handshake.

    A real ZooKeeper answers ``ruok`` before it serves sessions (it closes early
    connections with "ZooKeeperServer not running"); this is the real readiness test.
    """
    connect = struct.pack("!iqiqi", 0, 0, 10_000, 0, 16) + bytes(16) + b"\x00"
    close = struct.pack("!ii", 1, -11)
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            sock.sendall(struct.pack("!i", len(connect)) + connect)
            reply = b""
            while len(reply) < 4 + 8:
                chunk = sock.recv(64)
                if not chunk:
                    return False
                reply += chunk
            _, _, negotiated_timeout_ms = struct.unpack_from("!iii", reply)
            if negotiated_timeout_ms <= 0:
                return False
            sock.sendall(struct.pack("!i", len(close)) + close)
            return True
    except OSError:
        return False


class ServerHandle:
    """One server process of either kind, restartable on the same data dir and port."""

    def __init__(self, kind: str, tick_time_ms: int, workdir: Path, port: int):
        assert kind in KINDS
        self.kind = kind
        self.tick_time_ms = tick_time_ms
        self.workdir = Path(os.path.abspath(workdir))  # the process runs in it
        self.data_dir = workdir / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.host = "127.0.0.1"
        self.port = port
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def hosts(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def log_path(self) -> Path:
        return self.workdir / f"server-{self.starts}.log"

    def _command(self) -> list[str]:
        if self.kind == "zk_lite":
            return [sys.executable, "-m", "zk_lite", "--port", str(self.port),
                    "--data-dir", str(self.data_dir), "--tick-time", str(self.tick_time_ms),
                    "--host", self.host]
        config = self.workdir / "zoo.cfg"
        config.write_text(
            f"tickTime={self.tick_time_ms}\n"
            f"dataDir={self.data_dir}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={self.host}\n"
            "4lw.commands.whitelist=*\n"
            "admin.enableServer=false\n"
            "forceSync=yes\n"
            "maxClientCnxns=0\n"
        )
        return ["java", "-Xms64m", "-Xmx512m", "-XX:+UseSerialGC",
                "-Dzookeeper.admin.enableServer=false",
                "-cp", str(ZOOKEEPER_JAR),
                "org.apache.zookeeper.server.ZooKeeperServerMain", str(config)]

    def _spawn(self) -> None:
        assert self.proc is None or self.proc.poll() is not None
        self.starts += 1
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self._command(), cwd=self.workdir, env=child_env(), stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def is_ready(self) -> bool:
        try:
            if four_letter(self.host, self.port, b"ruok") != b"imok":
                return False
        except OSError:
            return False
        return accepts_sessions(self.host, self.port)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout_s: float = ready_timeout_s) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                raise ServerStartError(self, f"exited with {self.proc.returncode}")
            if self.is_ready():
                return
            time.sleep(0.05)
        raise ServerStartError(self, f"not ready (ruok) within {timeout_s} s")

    def start(self) -> "ServerHandle":
        self._spawn()
        self.wait_ready()
        return self

    def kill(self) -> None:
        """SIGKILL the server (no shutdown path runs); the data dir is kept."""
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=stop_timeout_s)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after stop_timeout_s."""
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=stop_timeout_s)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def restart(self) -> "ServerHandle":
        """Start again on the same data dir and port (after kill() or stop())."""
        self.stop()
        deadline = time.monotonic() + ready_timeout_s
        while True:  # the old listener may linger a moment
            self._spawn()
            try:
                self.wait_ready(max(1.0, deadline - time.monotonic()))
                return self
            except ServerStartError:
                if time.monotonic() > deadline:
                    raise
                self.stop()
                time.sleep(0.2)

    def close(self) -> None:
        """Stop the process and delete its temp dir."""
        try:
            self.stop()
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def log_tail(self, max_bytes: int = 4000) -> str:
        try:
            return self.log_path.read_bytes()[-max_bytes:].decode(errors="replace")
        except OSError:
            return ""

    def __repr__(self) -> str:
        return f"<{self.kind} {self.hosts} pid={self.pid}>"


class ServerStartError(RuntimeError):
    def __init__(self, handle: ServerHandle, why: str):
        super().__init__(f"{handle.kind} on {handle.hosts} {why}; log tail:\n{handle.log_tail()}")


def start(kind: str, tick_time_ms: int = 500) -> ServerHandle:
    """Start a fresh server of `kind` on a free port with its own temp data dir."""
    reason = missing_reason(kind)
    if reason:
        raise RuntimeError(reason)
    last_error: Exception | None = None
    for _ in range(start_attempts_max):  # another process may grab the port first
        workdir = Path(tempfile.mkdtemp(prefix=f"mk-{kind}-"))
        handle = ServerHandle(kind, tick_time_ms, workdir, free_port())
        try:
            return handle.start()
        except ServerStartError as error:
            last_error = error
            handle.close()
        except BaseException:
            handle.close()
            raise
    raise last_error
