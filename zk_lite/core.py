"""The zk_lite server core: sessions, connections, requests, watches (pure).

Theory of operation
-------------------
The shell feeds events in and drains effects out; the core never touches sockets,
clocks, files or randomness (time arrives as ``now_ms``; session passwords come from
``secret``).

Inputs::

    connect(conn, body, now_ms, peer)       # the first frame of a connection
    receive(conn, xid, opcode, body, now_ms) # every later frame, header already split
    disconnect(conn, now_ms)                # the socket went away
    tick(now_ms)                            # at every multiple of tick_ms

Effects (lists the shell drains after every input, in this order of meaning):

* ``txns``: ``(zxid, time_ms, op)`` records that must be durable BEFORE any frame
  queued after them is sent (fsync, then release the frames).
* ``out``: ``(conn, frame_bytes)`` in the exact order to send; ``(conn, None)`` means
  "close this connection after the frames before it".
* ``logs``: human log lines (session opened/closed/expired, bad connections).

Rules that make this ZooKeeper (ZK_PROTOCOL.md §6):
* Everything is applied synchronously in one global order; each connection's requests
  are handled in arrival order and answered in that order (FIFO).
* Watch notifications are queued while the change is applied, so they precede the reply
  to the change on every connection (watch-before-data).
* Reply headers carry the last committed zxid.
* A session is touched by every packet; its deadline is rounded up to the next multiple
  of tick_ms and it expires at the first tick at or after the deadline.

The requests themselves (validation, then apply and reply) are ``requests.Requests``, a
mixin of ``Core``; connections and sessions are ``session``'s.
"""
from __future__ import annotations

import hashlib
import hmac

from . import errors, jute
from . import txn
from .jute import OpCode
from .errors import ZkError
from .requests import Requests
from .session import ZERO_PASSWD, Conn, Session
from .watches import WatchTable
from .tree import NODE_CHILDREN_CHANGED, NODE_DELETED, OPEN_ACL, READ, Tree, check_acl


class Core(Requests):
    def __init__(self, tree: Tree | None = None, *, secret: bytes = b"zk_lite",
                 tick_ms: int = 2000, min_session_timeout_ms: int | None = None,
                 max_session_timeout_ms: int | None = None, super_digest: str | None = None,
                 server_id: int = 1, container_check_ms: int = 60000):
        assert tick_ms > 0
        self.tree = tree if tree is not None else Tree()
        self.secret = secret
        self.tick_ms = tick_ms
        self.min_timeout_ms = min_session_timeout_ms or 2 * tick_ms
        self.max_timeout_ms = max_session_timeout_ms or 20 * tick_ms
        assert self.min_timeout_ms <= self.max_timeout_ms
        self.super_digest = super_digest
        self.server_id = server_id
        self.container_check_ms = container_check_ms
        self._next_container_check_ms = None
        self._next_sid = 0
        # effects
        self.out: list = []
        self.txns: list = []
        self.logs: list[str] = []
        # state
        self.conns: dict = {}
        self.sessions: dict[int, Session] = {}
        self.data_watches = WatchTable()
        self.child_watches = WatchTable()
        self.packets_received = 0
        self.packets_sent = 0
        for sid, (passwd, timeout_ms) in self.tree.sessions.items():
            self.sessions[sid] = Session(sid, passwd, timeout_ms)
        self._handlers = {
            OpCode.CREATE: self._op_create, OpCode.CREATE2: self._op_create,
            OpCode.CREATE_CONTAINER: self._op_create, OpCode.CREATE_TTL: self._op_create,
            OpCode.DELETE: self._op_delete, OpCode.EXISTS: self._op_exists,
            OpCode.GET_DATA: self._op_get_data, OpCode.SET_DATA: self._op_set_data,
            OpCode.GET_ACL: self._op_get_acl, OpCode.SET_ACL: self._op_set_acl,
            OpCode.GET_CHILDREN: self._op_get_children, OpCode.SYNC: self._op_sync,
            OpCode.GET_CHILDREN2: self._op_get_children2, OpCode.CHECK: self._op_check,
            OpCode.MULTI: self._op_multi, OpCode.RECONFIG: self._op_reconfig,
            OpCode.CHECK_WATCHES: self._op_check_watches,
            OpCode.REMOVE_WATCHES: self._op_remove_watches, OpCode.MULTI_READ: self._op_multi_read,
            OpCode.AUTH: self._op_auth, OpCode.SET_WATCHES: self._op_set_watches,
            OpCode.SASL: self._op_sasl, OpCode.GET_EPHEMERALS: self._op_get_ephemerals,
            OpCode.GET_ALL_CHILDREN_NUMBER: self._op_get_all_children_number,
            OpCode.SET_WATCHES2: self._op_set_watches, OpCode.ADD_WATCH: self._op_add_watch,
            OpCode.WHO_AM_I: self._op_who_am_i, OpCode.CLOSE_SESSION: self._op_close_session,
        }

    # ------------------------------------------------------------------ lifecycle
    def start(self, now_ms: int, epoch: int | None = None) -> None:
        """After construction or restore: give restored sessions a fresh deadline and
        move the zxid into a new epoch so clients that saw older zxids are never refused."""
        for sess in self.sessions.values():
            self._touch(sess, now_ms)
        if epoch is not None and (self.tree.zxid >> 32) < epoch:
            self.tree.zxid = epoch << 32
        self._next_container_check_ms = now_ms + self.container_check_ms

    def take(self):
        """Drain and return (txns, out, logs)."""
        txns, out, logs = self.txns, self.out, self.logs
        self.txns, self.out, self.logs = [], [], []
        return txns, out, logs

    # ------------------------------------------------------------------ inputs
    def connect(self, key, body: bytes, now_ms: int, peer: str = "127.0.0.1") -> None:
        conn = Conn(key, peer)
        self.conns[key] = conn
        try:
            req, read_only = jute.decode_connect_request(body)
        except jute.ProtocolError as exc:
            self.logs.append(f"bad connect request from {peer}: {exc}; closing")
            self._close_conn(conn)
            return
        timeout_ms = min(max(req.timeOut, self.min_timeout_ms), self.max_timeout_ms)
        if req.sessionId == 0:
            sid = self._new_session_id(now_ms)
            passwd = hmac.new(self.secret, sid.to_bytes(8, "big", signed=True),
                              hashlib.sha256).digest()[:16]
            self._commit(now_ms, txn.CreateSession(sid, passwd, timeout_ms))
            sess = Session(sid, passwd, timeout_ms)
            self.sessions[sid] = sess
            self._bind(conn, sess, now_ms)
            self._send(key, jute.encode_connect_response(timeout_ms, sid, passwd, read_only))
            self.logs.append(f"session 0x{sid:x} opened (timeout {timeout_ms} ms) from {peer}")
            return
        sess = self.sessions.get(req.sessionId)
        passwd = req.passwd or b""
        if sess is None or sess.closing or not hmac.compare_digest(sess.passwd, passwd):
            self._send(key, jute.encode_connect_response(0, 0, ZERO_PASSWD, read_only))
            self._close_conn(conn)
            self.logs.append(f"session 0x{req.sessionId & 0xFFFFFFFFFFFFFFFF:x} refused "
                             f"(expired, unknown or bad password) from {peer}")
            return
        old = sess.conn
        if old is not None and old is not conn:
            self._close_conn(old)
        sess.timeout_ms = timeout_ms
        self._bind(conn, sess, now_ms)
        self._send(key, jute.encode_connect_response(timeout_ms, sess.sid, sess.passwd, read_only))
        self.logs.append(f"session 0x{sess.sid:x} resumed (timeout {timeout_ms} ms) from {peer}")

    def receive(self, key, xid: int, opcode: int, body: bytes, now_ms: int) -> None:
        conn = self.conns.get(key)
        if conn is None or conn.closed:
            return
        self.packets_received += 1
        sess = self.sessions.get(conn.sid)
        if sess is None or sess.closing:
            self._reply(key, xid, errors.SESSIONEXPIRED)
            return
        sess.deadline_ms = (now_ms + sess.timeout_ms) // self.tick_ms * self.tick_ms + self.tick_ms
        if opcode == OpCode.PING:
            self._reply(key, -2, 0)
            return
        handler = self._handlers.get(opcode)
        if handler is None:
            self._reply(key, xid, errors.UNIMPLEMENTED)
            self.logs.append(f"unknown opcode {opcode} from {conn.peer} "
                             f"(session 0x{sess.sid:x}); closing connection")
            self._close_conn(conn)
            return
        try:
            record = jute.decode_request(opcode, body)
        except jute.ProtocolError as exc:
            self.logs.append(f"malformed opcode {opcode} request from {conn.peer} "
                             f"(session 0x{sess.sid:x}): {exc}")
            self._reply(key, xid, errors.MARSHALLINGERROR)
            return
        try:
            reply_body = handler(conn, sess, xid, opcode, record, now_ms)
        except ZkError as exc:
            self._reply(key, xid, exc.code)
            return
        if reply_body is not None:
            self._reply(key, xid, 0, reply_body)

    def disconnect(self, key, now_ms: int) -> None:
        conn = self.conns.pop(key, None)
        if conn is not None and not conn.closed:
            self._drop_conn_state(conn)

    def tick(self, now_ms: int) -> None:
        expired = [s for s in self.sessions.values()
                   if s.deadline_ms <= now_ms and not s.closing]
        for sess in sorted(expired, key=lambda s: s.sid):
            self._end_session(sess, now_ms, "expired")
        if self._next_container_check_ms is not None and now_ms >= self._next_container_check_ms:
            self._next_container_check_ms = now_ms + self.container_check_ms
            self.check_containers(now_ms)

    def check_containers(self, now_ms: int) -> None:
        """Delete containers that have had children and now have none (as ContainerManager)."""
        tree = self.tree
        for path in sorted(tree.containers):
            node = tree.nodes.get(path)
            if node is not None and not node.children and node.cc > 0:
                self._commit(now_ms, txn.Delete(path))

    # ------------------------------------------------------------------ helpers
    def _new_session_id(self, now_ms: int) -> int:
        if self._next_sid == 0:
            base = ((now_ms << 24) & 0xFFFFFFFFFFFFFFFF) >> 8 | (self.server_id << 56)
            self._next_sid = max([base] + [sid + 1 for sid in self.sessions])
        sid = self._next_sid
        self._next_sid += 1
        return sid

    def _touch(self, sess: Session, now_ms: int) -> None:
        tick = self.tick_ms
        sess.deadline_ms = (now_ms + sess.timeout_ms) // tick * tick + tick

    def _bind(self, conn: Conn, sess: Session, now_ms: int) -> None:
        conn.sid = sess.sid
        sess.conn = conn
        self._touch(sess, now_ms)

    def _send(self, key, frame: bytes) -> None:
        self.packets_sent += 1
        self.out.append((key, frame))

    def _reply(self, key, xid: int, err: int, body: bytes = b"") -> None:
        self.packets_sent += 1
        self.out.append((key, jute.reply_frame(xid, self.tree.zxid, err, body)))

    def close_conn(self, conn: Conn) -> None:
        """Drop a connection (its session lives on): e.g. the shell saw bad framing."""
        self._close_conn(conn)

    def _close_conn(self, conn: Conn) -> None:
        if not conn.closed:
            self._drop_conn_state(conn)
            self.out.append((conn.key, None))

    def _drop_conn_state(self, conn: Conn) -> None:
        conn.closed = True
        self.data_watches.remove_watcher(conn)
        self.child_watches.remove_watcher(conn)
        sess = self.sessions.get(conn.sid)
        if sess is not None and sess.conn is conn:
            sess.conn = None

    def _end_session(self, sess: Session, now_ms: int, how: str, xid: int | None = None) -> None:
        sess.closing = True
        self._commit(now_ms, txn.CloseSession(sess.sid))
        conn = sess.conn
        if conn is not None:
            if xid is not None:
                self._reply(conn.key, xid, 0)
            self._close_conn(conn)
        self.sessions.pop(sess.sid, None)
        self.logs.append(f"session 0x{sess.sid:x} {how}")

    def _commit(self, now_ms: int, op: txn.Txn) -> int:
        tree = self.tree
        zxid = tree.zxid + 1
        events: list = []
        tree.apply(zxid, now_ms, op, events)
        self.txns.append((zxid, now_ms, op))
        if events:
            self._fire(events)
        return zxid

    # ------------------------------------------------------------------ watches
    def _fire(self, events) -> None:
        out = self.out
        for etype, path, acl in events:
            if etype == NODE_CHILDREN_CHANGED:
                targets = self.child_watches.trigger(path, etype)
            elif etype == NODE_DELETED:
                targets = self.data_watches.trigger(path, etype)
                targets.update(self.child_watches.trigger(path, etype, targets))
            else:
                targets = self.data_watches.trigger(path, etype)
            if not targets:
                continue
            frame = jute.notification_frame(etype, path)
            open_acl = acl is OPEN_ACL or not acl
            for c in targets:
                if c.closed:
                    continue
                if open_acl or check_acl(acl, READ, c.auth):
                    self.packets_sent += 1
                    out.append((c.key, frame))

    def _notify(self, conn: Conn, etype: int, path: str) -> None:
        self._send(conn.key, jute.notification_frame(etype, path))

    # ------------------------------------------------------------------ introspection
    def node_count(self) -> int:
        return len(self.tree.nodes)

    def watch_count(self) -> int:
        return self.data_watches.count() + self.child_watches.count()

    def watched_path_count(self) -> int:
        return len(self.data_watches.by_path) + len(self.child_watches.by_path)
