"""The zk_lite process: an asyncio TCP shell around the pure core.

Per event-loop turn: every readable connection's frames go through the core
synchronously (FIFO per connection). If the core produced txns, one flush at the end
of the turn writes them all with one write + one fdatasync (group commit) and only then
releases the frames of that turn; frames that depend on no txn go out at once. So no
client ever sees state that is not durable, and replies stay in order on every
connection. Snapshots are serialized on the loop and written by a background thread.
"""
from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import ctypes
import ctypes.util
import logging
import os
import signal
import sys
import time
import traceback

from . import jute, persist
from .core import Core

log = logging.getLogger("zk_lite")

VERSION = "3.8.6-zk_lite, built on 2026-01-01 00:00 UTC"
#: ZooKeeper's zookeeper.nio.sessionlessCnxnTimeout: a connection that has not completed
#: its handshake by then is closed.
SESSIONLESS_CONNECTION_TIMEOUT_S = 10.0
#: ZooKeeper's maxClientCnxns default: connections one client address may hold at once.
MAX_CLIENT_CNXNS = 60
#: Largest frame before the handshake: a ConnectRequest is 45 bytes (ZooKeeper's clients
#: send at most a few more); a connection that announces more is closed at once rather
#: than buffered up to jute.maxbuffer.
CONNECT_FRAME_BYTES_MAX = 1024
#: A closed connection that had buffered at least this much asks the allocator to give
#: freed memory back to the system (at most once per TRIM_INTERVAL_S).
TRIM_AFTER_BYTES = 64 * 1024
TRIM_INTERVAL_S = 1.0
FOUR_LETTER_WORDS = {b"ruok", b"isro", b"srvr", b"stat", b"mntr", b"cons", b"envi", b"conf",
                     b"wchs", b"dirs"}
_HEADER = jute.REQUEST_HEADER


_BOOT_WALL_MS = int(time.time() * 1000)
_BOOT_MONOTONIC_NS = time.monotonic_ns()


def _now_ms() -> int:
    """Wall-clock ms at startup advanced by the monotonic clock: ctime/mtime look like
    wall time, and a clock step (NTP, suspend) cannot expire every session at once."""
    return _BOOT_WALL_MS + (time.monotonic_ns() - _BOOT_MONOTONIC_NS) // 1_000_000


class ZkConnection(asyncio.Protocol):
    __slots__ = ("server", "transport", "reader", "peer", "peer_port", "bound", "started_ms",
                 "received", "sent", "counted", "peak_buffered")

    def __init__(self, server: "ZkServer"):
        self.server = server
        self.transport = None
        # Until the handshake only a ConnectRequest may arrive: a small bound.
        self.reader = jute.FrameReader(min(server.max_frame_bytes, CONNECT_FRAME_BYTES_MAX))
        self.peer = "?"
        self.counted = False           # in server.per_host
        self.peak_buffered = 0
        self.peer_port = 0
        self.sent = 0
        self.bound = False
        self.started_ms = _now_ms()
        self.received = 0

    def connection_made(self, transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = peer[0] if peer else "?"
        self.peer_port = peer[1] if peer else 0
        server = self.server
        limit = server.max_client_cnxns
        held = server.per_host.get(self.peer, 0)
        if limit and held >= limit:
            # ZooKeeper's words; the connection is closed before anything is read.
            server.refused_connections += 1
            server.log_limited("too-many", "Too many connections from /%s - max is %d",
                               self.peer, limit)
            transport.abort()
            return
        server.per_host[self.peer] = held + 1
        self.counted = True
        server.connections.add(self)
        self.server.loop.call_later(SESSIONLESS_CONNECTION_TIMEOUT_S, self._handshake_deadline)

    def _handshake_deadline(self) -> None:
        if not self.bound and not self.transport.is_closing():
            log.warning("connection from %s sent no handshake within %.0f s; closing",
                        self.peer, SESSIONLESS_CONNECTION_TIMEOUT_S)
            self.transport.abort()

    def connection_lost(self, exc) -> None:
        server = self.server
        server.connections.discard(self)
        if self.counted:
            self.counted = False
            left = server.per_host.get(self.peer, 1) - 1
            if left > 0:
                server.per_host[self.peer] = left
            else:
                server.per_host.pop(self.peer, None)
        peak = max(self.peak_buffered, self.reader.buffered_bytes)
        self.reader = jute.FrameReader(0)   # the buffer goes now, not with the protocol
        if peak >= TRIM_AFTER_BYTES:
            server.trim_memory()
        if self.bound:
            server.core.disconnect(self, _now_ms())
            server.schedule_flush()

    def data_received(self, data: bytes) -> None:
        server = self.server
        core = server.core
        reader = self.reader
        reader.feed(data)
        if reader.buffered_bytes > self.peak_buffered:
            self.peak_buffered = reader.buffered_bytes
        now = _now_ms()
        try:
            if not self.bound:
                if reader.buffered_bytes < 4:
                    return
                head = reader.peek(4)
                if head in FOUR_LETTER_WORDS:
                    self.transport.write(server.four_letter(head))
                    self.transport.close()
                    return
                body = reader.next_frame()
                if body is None:
                    return
                self.bound = True
                reader.max_frame_bytes = server.max_frame_bytes
                core.connect(self, body, now, self.peer)
            conn_state = core.conns.get(self)
            while conn_state is not None and not conn_state.closed:
                body = reader.next_frame()
                if body is None:
                    break
                if len(body) < 8:
                    raise jute.ProtocolError(f"frame of {len(body)} bytes has no request header")
                xid, opcode = _HEADER.unpack_from(body)
                self.received += 1
                core.receive(self, xid, opcode, body[8:], now)
        except jute.ProtocolError as exc:
            log.warning("bad input from %s: %s; closing connection", self.peer, exc)
            self._drop(core)
        except Exception as exc:
            # Bad input is a ProtocolError, and the core answers a failing operation
            # with its error code: anything else is a bug that may have left the tree
            # half-changed. Serving on from it could acknowledge what is not true.
            server.die(exc, f"a request from {self.peer}")
            return
        server.after_input()

    def _drop(self, core) -> None:
        state = core.conns.get(self) if self.bound else None
        if state is not None:
            core.close_conn(state)
        else:
            self.transport.abort()


class ZkServer:
    def __init__(self, args):
        self.args = args
        self.tick_ms = args.tick_time
        self.max_frame_bytes = args.jute_maxbuffer  # as the Java server: the whole frame
        self.max_output_bytes = args.max_output_bytes
        self.snap_count = args.snap_count
        self.connections: set[ZkConnection] = set()
        self.max_client_cnxns = args.max_client_cnxns
        self.per_host: dict[str, int] = {}     # client address -> connections held
        self.refused_connections = 0
        self._last_logged: dict[str, float] = {}
        self._last_trim = -TRIM_INTERVAL_S
        self._trim_pending = False
        self._malloc_trim = _find_malloc_trim()
        self.store = persist.Store(args.data_dir, log=lambda m: log.info("%s", m))
        tree = self.store.load()
        self.core = Core(tree, secret=os.urandom(32), tick_ms=self.tick_ms,
                         min_session_timeout_ms=args.min_session_timeout,
                         max_session_timeout_ms=args.max_session_timeout,
                         super_digest=args.super_digest)
        now = _now_ms()
        self.core.start(now, epoch=now // 1000)
        # Fresh snapshot at start: records the new epoch and makes the next restore fast.
        self.store.snapshot(persist.snapshot_bytes(self.core.tree), self.core.tree.zxid)
        self.executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="zk-snapshot")
        self.loop: asyncio.AbstractEventLoop | None = None
        self._flush_scheduled = False
        self._snapshot_future = None
        self._since_snapshot = 0
        self._stopping: asyncio.Event | None = None
        self._fatal: BaseException | None = None
        self.started_ms = now

    def die(self, exc: BaseException, context: str) -> None:
        """A broken invariant (or another bug): one log line, nothing more acknowledged,
        every connection cut, and the process exits non-zero."""
        frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
        where = f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" \
            if frames else ""
        kind = "broken invariant" if isinstance(exc, AssertionError) else \
            f"internal error ({type(exc).__name__})"
        log.critical("%s on %s: %s%s; shutting down", kind, context,
                     str(exc).replace("\n", " ") or "(no message)", where)
        self._fatal = exc
        for conn in list(self.connections):
            conn.transport.abort()
        self._stopping.set()

    # ------------------------------------------------------------------ pipeline
    def log_limited(self, key: str, message: str, *args) -> None:
        """A warning at most once a second per ``key`` (a flood must not flood the log)."""
        now = time.monotonic()
        if now - self._last_logged.get(key, -1e9) >= 1.0:
            self._last_logged[key] = now
            log.warning(message, *args)

    def trim_memory(self) -> None:
        """Give freed heap memory back to the system (glibc keeps it otherwise: a flood of
        large partial frames would leave the RSS at its peak for good). At most once per
        TRIM_INTERVAL_S; a request meanwhile runs once at the end of the interval."""
        if self._malloc_trim is None or self._trim_pending:
            return
        wait = self._last_trim + TRIM_INTERVAL_S - time.monotonic()
        if wait > 0 and self.loop is not None:
            self._trim_pending = True
            self.loop.call_later(wait, self._trim_now)
            return
        self._trim_now()

    def _trim_now(self) -> None:
        self._trim_pending = False
        self._last_trim = time.monotonic()
        self._malloc_trim(0)

    def schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def after_input(self) -> None:
        """Frames that wait for no txn go out now; when the core produced txns, the
        flush runs at the end of the loop turn so all txns of the turn share one fsync."""
        if self.core.txns:
            self.schedule_flush()
        else:
            self._flush()

    def _flush(self) -> None:
        """Group commit: write + fdatasync this turn's txns, then release the frames.

        The fsync runs on the loop thread: while it runs, new requests wait in the
        socket buffers and become the next turn's batch (measured faster here than a
        writer thread, which costs two thread hand-offs per batch)."""
        self._flush_scheduled = False
        txns, out, logs = self.core.take()
        for line in logs:
            log.info("%s", line)
        if txns:
            try:
                self.store.append(persist.encode_txns(txns))
            except OSError as exc:
                # Durability is gone: never acknowledge anything again.
                log.error("transaction log write failed: %r; shutting down", exc)
                self._fatal = exc
                for conn in list(self.connections):
                    conn.transport.abort()
                self._stopping.set()
                return
            self._since_snapshot += len(txns)
            if self._since_snapshot >= self.snap_count and self._snapshot_future is None:
                self._start_snapshot()
        if out:
            self._release(out)

    def _start_snapshot(self) -> None:
        """Rotate the log here, write the snapshot in a background thread."""
        self._since_snapshot = 0
        zxid = self.core.tree.zxid
        snap = persist.snapshot_bytes(self.core.tree)
        self.store.open_log(zxid + 1)
        fut = self.loop.run_in_executor(self.executor, self.store.write_snapshot, snap, zxid)
        self._snapshot_future = fut

        def done(f) -> None:
            self._snapshot_future = None
            if f.exception() is not None:
                log.error("snapshot at zxid 0x%x failed: %r", zxid, f.exception())
            else:
                log.info("snapshot at zxid 0x%x written", zxid)

        fut.add_done_callback(done)

    def _release(self, out) -> None:
        by_conn: dict = {}
        for conn, frame in out:
            frames = by_conn.get(conn)
            if frames is None:
                by_conn[conn] = [frame]
            else:
                frames.append(frame)
        for conn, frames in by_conn.items():
            transport = conn.transport
            if transport is None or transport.is_closing():
                continue
            close = None in frames
            if close:
                frames = frames[:frames.index(None)]
            if frames:
                conn.sent += len(frames)
                transport.write(frames[0] if len(frames) == 1 else b"".join(frames))
            if close:
                transport.close()
            elif transport.get_write_buffer_size() > self.max_output_bytes:
                log.warning("client %s is not reading (over %d bytes queued); dropping it",
                            conn.peer, self.max_output_bytes)
                transport.abort()

    # ------------------------------------------------------------------ ticks
    async def _ticker(self) -> None:
        tick = self.tick_ms
        while True:
            now = _now_ms()
            await asyncio.sleep(((now // tick + 1) * tick - now) / 1000)
            try:
                self.core.tick(_now_ms())
            except Exception as exc:  # the core's tick fails only on a bug
                self.die(exc, "a tick")
                return
            self.schedule_flush()

    # ------------------------------------------------------------------ 4lw
    def four_letter(self, word: bytes) -> bytes:
        core = self.core
        if word == b"ruok":
            return b"imok"
        if word == b"isro":
            return b"rw"
        stats = [
            f"Latency min/avg/max: 0/0.0/0",
            f"Received: {core.packets_received}",
            f"Sent: {core.packets_sent}",
            f"Connections: {len(self.connections)}",
            "Outstanding: 0",
            f"Zxid: 0x{core.tree.zxid:x}",
            "Mode: standalone",
            f"Node count: {core.node_count()}",
        ]
        if word == b"srvr":
            return ("\n".join([f"Zookeeper version: {VERSION}"] + stats) + "\n").encode()
        cons = [self._cons_line(c) for c in self.connections]
        if word == b"stat":
            lines = [f"Zookeeper version: {VERSION}", "Clients:"] + cons + [""] + stats
            return ("\n".join(lines) + "\n").encode()
        if word == b"cons":
            return ("\n".join(cons) + "\n\n").encode()
        if word == b"mntr":
            pairs = [
                ("zk_version", VERSION), ("zk_server_state", "standalone"),
                ("zk_avg_latency", 0), ("zk_max_latency", 0), ("zk_min_latency", 0),
                ("zk_packets_received", core.packets_received),
                ("zk_packets_sent", core.packets_sent),
                ("zk_num_alive_connections", len(self.connections)),
                ("zk_outstanding_requests", 0), ("zk_znode_count", core.node_count()),
                ("zk_watch_count", core.watch_count()),
                ("zk_ephemerals_count", sum(len(v) for v in core.tree.ephemerals.values())),
                ("zk_approximate_data_size",
                 sum(len(n.data or b"") + len(p) for p, n in core.tree.nodes.items())),
                ("zk_open_file_descriptor_count", len(os.listdir("/proc/self/fd"))
                 if os.path.isdir("/proc/self/fd") else 0),
                ("zk_global_sessions", len(core.sessions)),
            ]
            return "".join(f"{k}\t{v}\n" for k, v in pairs).encode()
        if word == b"envi":
            lines = ["Environment:", f"zookeeper.version={VERSION}",
                     f"host.name={self.args.host}", f"java.version=none (zk_lite, Python {sys.version.split()[0]})",
                     f"os.name={os.uname().sysname}", f"user.dir={os.getcwd()}"]
            return ("\n".join(lines) + "\n").encode()
        if word == b"conf":
            lines = [f"clientPort={self.port}", f"dataDir={self.args.data_dir}",
                     f"tickTime={self.tick_ms}", f"maxClientCnxns={self.max_client_cnxns}",
                     f"minSessionTimeout={core.min_timeout_ms}",
                     f"maxSessionTimeout={core.max_timeout_ms}", "serverId=0"]
            return ("\n".join(lines) + "\n").encode()
        if word == b"wchs":
            return (f"{len(self.connections)} connections watching "
                    f"{core.watched_path_count()} paths\n"
                    f"Total watches:{core.watch_count()}\n").encode()
        if word == b"dirs":
            return f"datadir_size: 0\nlogdir_size: 0\n".encode()
        return b""

    def _cons_line(self, conn: ZkConnection) -> str:
        state = self.core.conns.get(conn)
        sess = self.core.sessions.get(state.sid) if state is not None else None
        line = f" /{conn.peer}:{conn.peer_port}[1](queued=0,recved={conn.received},sent={conn.sent}"
        if sess is not None:
            line += (f",sid=0x{sess.sid:x},lop=NA,est={conn.started_ms},to={sess.timeout_ms}"
                     f",lzxid=0x{self.core.tree.zxid:x},llat=0,minlat=0,avglat=0,maxlat=0")
        return line + ")"

    # ------------------------------------------------------------------ run
    async def run(self) -> int:
        self.loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        server = await self.loop.create_server(lambda: ZkConnection(self), self.args.host,
                                               self.args.port, reuse_address=True)
        self.port = server.sockets[0].getsockname()[1]
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(sig, self._stopping.set)
        ticker = asyncio.create_task(self._ticker())
        print(f"zk_lite listening on {self.args.host}:{self.port}", flush=True)
        log.info("serving %s with data dir %s (tickTime %d ms, zxid 0x%x)",
                 f"{self.args.host}:{self.port}", self.args.data_dir, self.tick_ms,
                 self.core.tree.zxid)
        await self._stopping.wait()
        log.info("shutting down")
        ticker.cancel()
        server.close()
        if self._fatal is None:
            self._flush()  # pending txns reach the log before their replies go out
        for conn in list(self.connections):
            conn.transport.close()
        await asyncio.sleep(0)
        self.executor.shutdown(wait=True)
        self.store.close()
        log.info("stopped")
        return 1 if self._fatal is not None else 0


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (no limit) or more, not {value}")
    return value


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(
        prog="python -m zk_lite",
        description="single-node ZooKeeper-wire-compatible coordinator")
    parser.add_argument("--port", type=int, default=2181, help="client port (0 = pick a free one)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (loopback by default)")
    parser.add_argument("--data-dir", required=True, help="directory for txn logs and snapshots")
    parser.add_argument("--tick-time", type=int, default=2000, help="tickTime in ms")
    parser.add_argument("--min-session-timeout", type=int, default=None,
                        help="ms; default 2 x tickTime")
    parser.add_argument("--max-session-timeout", type=int, default=None,
                        help="ms; default 20 x tickTime")
    parser.add_argument("--snap-count", type=int, default=100000,
                        help="txns between snapshots (ZooKeeper's snapCount)")
    parser.add_argument("--jute-maxbuffer", type=int, default=jute.MAX_BUFFER_BYTES,
                        help="largest request payload in bytes (jute.maxbuffer)")
    parser.add_argument("--max-client-cnxns", type=_non_negative, default=MAX_CLIENT_CNXNS,
                        help="connections one client address may hold (ZooKeeper's "
                             "maxClientCnxns; 0 = no limit)")
    parser.add_argument("--max-output-bytes", type=int, default=16 * 1024 * 1024,
                        help="drop a client that lets this many reply bytes pile up")
    parser.add_argument("--super-digest", default=None,
                        help="user:base64(sha1(user:password)) that authenticates as super")
    return parser


def _find_malloc_trim():
    """glibc's malloc_trim, or None (another libc)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s zk_lite %(levelname)s %(message)s")
    server = ZkServer(args)
    return asyncio.run(server.run())


def main(argv: list[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))
