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
"""
from __future__ import annotations

import hashlib
import hmac

from . import errors, jute
from . import txn
from .jute import OpCode
from .errors import ZkError
from .watches import PERSISTENT, RECURSIVE, WatchTable
from .tree import (ADMIN, CONTAINER_OWNER, CREATE, DELETE, NODE_CHILDREN_CHANGED,
                   NODE_CREATED, NODE_DATA_CHANGED, NODE_DELETED, OPEN_ACL, READ,
                   SPECIAL_PATHS, WRITE, Tree, check_acl, digest, fixup_acl, parent_of,
                   sequence_suffix, valid_path)

ZERO_PASSWD = b"\x00" * 16
_EMPTY_ERR_BODY = b"\x00\x00\x00\x00"  # ErrorResponse(0), the addWatch reply body


class Conn:
    """Per-connection state: the bound session, auth ids and this connection's watches."""

    __slots__ = ("key", "peer", "sid", "auth", "closed")

    def __init__(self, key, peer: str):
        self.key = key
        self.peer = peer
        self.sid = 0
        self.auth: list[tuple[str, str]] = [("ip", peer)]
        self.closed = False


class Session:
    __slots__ = ("sid", "passwd", "timeout_ms", "deadline_ms", "conn", "closing")

    def __init__(self, sid: int, passwd: bytes, timeout_ms: int):
        self.sid = sid
        self.passwd = passwd
        self.timeout_ms = timeout_ms
        self.deadline_ms = 0
        self.conn: Conn | None = None
        self.closing = False


class Core:
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

    # ------------------------------------------------------------------ validation
    def _node_or_nonode(self, path):
        if path is None:  # the Java server fails on a null path while processing
            raise ZkError(errors.MARSHALLINGERROR)
        node = self.tree.nodes.get(path or "/")  # ZooKeeper's tree also maps "" to the root
        if node is None:
            raise ZkError(errors.NONODE)
        return node

    def _require(self, acl, perm: int, conn: Conn) -> None:
        if acl is not OPEN_ACL and not check_acl(acl, perm, conn.auth):
            raise ZkError(errors.NOAUTH)

    def _prep_create(self, conn: Conn, sess: Session, opcode: int, req) -> tuple:
        flags = req.flags
        if not 0 <= flags <= 6:
            raise ZkError(errors.BADARGUMENTS)
        if flags >= 5:  # TTL nodes: extended types are disabled, as by default in 3.8
            raise ZkError(errors.UNIMPLEMENTED)
        if opcode == OpCode.CREATE_TTL and req.ttl >= 0:  # a TTL for a mode that has none
            raise ZkError(errors.BADARGUMENTS)
        path = req.path
        if path is None:
            raise ZkError(errors.BADARGUMENTS)
        last_slash = path.rfind("/")
        if last_slash < 0 or "\0" in path:
            raise ZkError(errors.BADARGUMENTS)
        acl = fixup_acl(req.acl, conn.auth)
        ppath = path[:last_slash] or "/"
        parent = self.tree.nodes.get(ppath)
        if parent is None:
            raise ZkError(errors.NONODE)
        self._require(parent.acl, CREATE, conn)
        if flags & 2:
            path = path + sequence_suffix(parent.cc)
        if not valid_path(path):
            raise ZkError(errors.BADARGUMENTS)
        if path in self.tree.nodes:
            raise ZkError(errors.NODEEXISTS)
        if parent.owner > 0:
            raise ZkError(errors.NOCHILDRENFOREPHEMERALS)
        if flags == 1 or flags == 3:
            owner = sess.sid
        elif flags == 4 or opcode == OpCode.CREATE_CONTAINER:
            owner = CONTAINER_OWNER
        else:
            owner = 0
        return txn.Create(path, req.data, acl, owner)

    def _prep_delete(self, conn: Conn, req) -> tuple:
        path = req.path
        if path is None or path.rfind("/") < 0 or "\0" in path or path in SPECIAL_PATHS:
            raise ZkError(errors.BADARGUMENTS)
        parent = self.tree.nodes.get(parent_of(path))
        if parent is None:
            raise ZkError(errors.NONODE)
        self._require(parent.acl, DELETE, conn)
        node = self._node_or_nonode(path)
        if req.version != -1 and req.version != node.version:
            raise ZkError(errors.BADVERSION)
        if node.children:
            raise ZkError(errors.NOTEMPTY)
        return txn.Delete(path)

    def _prep_set_data(self, conn: Conn, req) -> tuple:
        self._versioned_node(conn, req.path, req.version, WRITE)
        return txn.SetData(req.path, req.data)

    def _check_version(self, conn: Conn, req) -> None:
        self._versioned_node(conn, req.path, req.version, READ)

    def _versioned_node(self, conn: Conn, path: str, version: int, perm: int):
        """setData / check: path valid (-8) -> node exists (-101) -> ``perm`` (-102) ->
        version (-103; -1 matches any), ZooKeeper's order (ZK_PROTOCOL.md 5.2)."""
        if not valid_path(path):
            raise ZkError(errors.BADARGUMENTS)
        node = self._node_or_nonode(path)
        self._require(node.acl, perm, conn)
        if version != -1 and version != node.version:
            raise ZkError(errors.BADVERSION)
        return node

    # ------------------------------------------------------------------ write ops
    def _op_create(self, conn, sess, xid, opcode, req, now_ms):
        op = self._prep_create(conn, sess, opcode, req)
        self._commit(now_ms, op)
        path = op.path
        if opcode == OpCode.CREATE:
            return jute.encode_string(path)
        return jute.encode_string(path) + jute.encode_stat(self.tree.nodes[path].stat())

    def _op_delete(self, conn, sess, xid, opcode, req, now_ms):
        self._commit(now_ms, self._prep_delete(conn, req))
        return b""

    def _op_set_data(self, conn, sess, xid, opcode, req, now_ms):
        op = self._prep_set_data(conn, req)
        self._commit(now_ms, op)
        return jute.encode_stat(self.tree.nodes[op.path].stat())

    def _op_set_acl(self, conn, sess, xid, opcode, req, now_ms):
        path = req.path
        if not valid_path(path):
            raise ZkError(errors.BADARGUMENTS)
        acl = fixup_acl(req.acl, conn.auth)
        node = self._node_or_nonode(path)
        self._require(node.acl, ADMIN, conn)
        if req.version != -1 and req.version != node.aversion:
            raise ZkError(errors.BADVERSION)
        self._commit(now_ms, txn.SetAcl(path, acl))
        return jute.encode_stat(self.tree.nodes[path].stat())

    def _op_check(self, conn, sess, xid, opcode, req, now_ms):
        self._check_version(conn, req)
        return b""

    def _op_multi(self, conn, sess, xid, opcode, ops, now_ms):
        if any(op_type in jute.MULTI_READ_OPS for op_type, _ in ops):
            raise ZkError(errors.MARSHALLINGERROR)  # ZooKeeper refuses mixed multis so
        tree = self.tree
        zxid = tree.zxid + 1
        undo: list = []
        events: list = []
        subops: list = []
        results: list = []
        for i, (op_type, req) in enumerate(ops):
            try:
                if op_type == OpCode.CHECK:
                    self._check_version(conn, req)
                    results.append((OpCode.CHECK, 0, None))
                    continue
                if op_type in jute.CREATE_OPS:
                    op = self._prep_create(conn, sess, op_type, req)
                elif op_type == OpCode.DELETE:
                    op = self._prep_delete(conn, req)
                elif op_type == OpCode.SET_DATA:
                    op = self._prep_set_data(conn, req)
                else:
                    raise AssertionError(op_type)
                tree.apply(zxid, now_ms, op, events, undo)
                subops.append(op)
                path = op.path
                if op_type == OpCode.CREATE:
                    results.append((OpCode.CREATE, 0, jute.CreateResponse(path)))
                elif op_type == OpCode.DELETE:
                    results.append((OpCode.DELETE, 0, None))
                elif op_type == OpCode.SET_DATA:
                    results.append((OpCode.SET_DATA, 0, jute.StatResponse(tree.nodes[path].stat())))
                else:
                    results.append((OpCode.CREATE2, 0,
                                    jute.Create2Response(path, tree.nodes[path].stat())))
            except ZkError as exc:
                tree.rollback(undo)
                tree.zxid = zxid - 1
                failed = ([(OpCode.ERROR, 0, None)] * i + [(OpCode.ERROR, exc.code, None)]
                          + [(OpCode.ERROR, errors.RUNTIMEINCONSISTENCY, None)]
                          * (len(ops) - i - 1))
                return jute.encode_multi_response(failed)
        if subops:
            self.txns.append((zxid, now_ms, txn.Multi(tuple(subops))))
            if events:
                self._fire(events)
        return jute.encode_multi_response(results)

    def _op_close_session(self, conn, sess, xid, opcode, req, now_ms):
        self._end_session(sess, now_ms, "closed", xid=xid)
        return None

    # ------------------------------------------------------------------ read ops
    def _op_exists(self, conn, sess, xid, opcode, req, now_ms):
        path = req.path
        if path is None:
            raise ZkError(errors.MARSHALLINGERROR)
        if "\0" in path:
            raise ZkError(errors.BADARGUMENTS)
        node = self.tree.nodes.get(path or "/")
        if node is not None:
            self._require(node.acl, READ, conn)
        if req.watch:
            self.data_watches.add(path, conn)
        if node is None:
            raise ZkError(errors.NONODE)
        return jute.encode_stat(node.stat())

    def _op_get_data(self, conn, sess, xid, opcode, req, now_ms):
        path = req.path
        node = self._node_or_nonode(path)
        self._require(node.acl, READ, conn)
        if req.watch:
            self.data_watches.add(path, conn)
        return jute.encode_buffer(node.data) + jute.encode_stat(node.stat())

    def _children(self, conn, req):
        path = req.path
        node = self._node_or_nonode(path)
        self._require(node.acl, READ, conn)
        if req.watch:
            self.child_watches.add(path, conn)
        return node

    def _op_get_children(self, conn, sess, xid, opcode, req, now_ms):
        node = self._children(conn, req)
        return jute.encode_record(jute.GetChildrenResponse(sorted(node.children)))

    def _op_get_children2(self, conn, sess, xid, opcode, req, now_ms):
        node = self._children(conn, req)
        return jute.encode_record(jute.GetChildren2Response(sorted(node.children), node.stat()))

    def _op_get_acl(self, conn, sess, xid, opcode, req, now_ms):
        node = self._node_or_nonode(req.path)
        self._require(node.acl, READ | ADMIN, conn)
        acl = node.acl
        if acl is not OPEN_ACL and not check_acl(acl, ADMIN, conn.auth):
            acl = tuple((p, s, i.split(":", 1)[0] + ":x" if s == "digest" else i)
                        for p, s, i in acl)
        return jute.encode_record(jute.GetACLResponse(list(acl), node.stat()))

    def _op_sync(self, conn, sess, xid, opcode, req, now_ms):
        return jute.encode_string(req.path)

    def _op_multi_read(self, conn, sess, xid, opcode, ops, now_ms):
        if any(op_type not in jute.MULTI_READ_OPS for op_type, _ in ops):
            raise ZkError(errors.MARSHALLINGERROR)
        results = []
        for op_type, req in ops:
            try:
                if op_type == 4:
                    node = self._node_or_nonode(req.path)
                    self._require(node.acl, READ, conn)
                    results.append((4, 0, jute.GetDataResponse(node.data, node.stat())))
                elif op_type == 8:
                    node = self._node_or_nonode(req.path)
                    self._require(node.acl, READ, conn)
                    results.append((8, 0, jute.GetChildrenResponse(sorted(node.children))))
                else:
                    raise AssertionError(op_type)
            except ZkError as exc:
                results.append((-1, exc.code, None))
        return jute.encode_multi_response(results)

    def _op_get_ephemerals(self, conn, sess, xid, opcode, req, now_ms):
        prefix = req.prefixPath
        paths = sorted(self.tree.ephemerals.get(sess.sid, ()))
        if prefix and prefix != "/":
            paths = [p for p in paths if p.startswith(prefix)]
        return jute.encode_record(jute.GetEphemeralsResponse(paths))

    def _op_get_all_children_number(self, conn, sess, xid, opcode, req, now_ms):
        node = self._node_or_nonode(req.path)
        self._require(node.acl, READ, conn)
        return jute.encode_record(
            jute.GetAllChildrenNumberResponse(self.tree.count_descendants(req.path)))

    def _op_who_am_i(self, conn, sess, xid, opcode, req, now_ms):
        infos = [(s, i.split(":", 1)[0] if s == "digest" else i) for s, i in conn.auth]
        return jute.encode_record(jute.WhoAmIResponse(infos))

    def _op_reconfig(self, conn, sess, xid, opcode, req, now_ms):
        raise ZkError(errors.RECONFIGDISABLED)

    # ------------------------------------------------------------------ auth
    def _op_auth(self, conn, sess, xid, opcode, req, now_ms):
        scheme = req.scheme
        ids = []
        if scheme == "digest":
            ident = digest((req.auth or b"").decode("utf-8", "replace"))
            ids.append(("digest", ident))
            if self.super_digest is not None and ident == self.super_digest:
                ids.append(("super", ""))
        elif scheme == "ip":
            ids.append(("ip", conn.peer))
        else:
            self.packets_sent += 1
            self.out.append((conn.key, jute.reply_frame(xid, 0, errors.AUTHFAILED)))
            self.logs.append(f"auth with unknown scheme {scheme!r} from {conn.peer} "
                             f"(session 0x{sess.sid:x}); closing connection")
            self._close_conn(conn)
            return None
        for ident in ids:
            if ident not in conn.auth:
                conn.auth.append(ident)
        self.packets_sent += 1
        self.out.append((conn.key, jute.reply_frame(xid, 0, 0)))
        return None

    def _op_sasl(self, conn, sess, xid, opcode, req, now_ms):
        # No SASL is configured: like ZooKeeper, answer with an empty (null) token.
        self.packets_sent += 1
        self.out.append((conn.key, jute.reply_frame(xid, 0, 0, b"\xff\xff\xff\xff")))
        return None

    # ------------------------------------------------------------------ watch management
    def _op_set_watches(self, conn, sess, xid, opcode, req, now_ms):
        rel = req.relativeZxid
        nodes = self.tree.nodes
        for path in req.dataWatches:
            node = nodes.get(path)
            if node is None:
                self._notify(conn, NODE_DELETED, path)
            elif node.mzxid > rel:
                self._notify(conn, NODE_DATA_CHANGED, path)
            else:
                self.data_watches.add(path, conn)
        for path in req.existWatches:
            if nodes.get(path) is None:
                self.data_watches.add(path, conn)
            else:
                self._notify(conn, NODE_CREATED, path)
        for path in req.childWatches:
            node = nodes.get(path)
            if node is None:
                self._notify(conn, NODE_DELETED, path)
            elif node.pzxid > rel:
                self._notify(conn, NODE_CHILDREN_CHANGED, path)
            else:
                self.child_watches.add(path, conn)
        if opcode == OpCode.SET_WATCHES2:
            for path in req.persistentWatches:
                self.data_watches.add(path, conn, PERSISTENT)
                self.child_watches.add(path, conn, PERSISTENT)
            for path in req.persistentRecursiveWatches:
                self.data_watches.add(path, conn, RECURSIVE)
                self.child_watches.add(path, conn, RECURSIVE)
        return b""

    def _op_add_watch(self, conn, sess, xid, opcode, req, now_ms):
        if req.path is None or "\0" in req.path:
            raise ZkError(errors.BADARGUMENTS)
        if req.mode not in (0, 1):  # ZooKeeper fails to map the mode while decoding
            raise ZkError(errors.MARSHALLINGERROR)
        mode = PERSISTENT if req.mode == 0 else RECURSIVE
        self.data_watches.add(req.path, conn, mode)
        self.child_watches.add(req.path, conn, mode)
        return _EMPTY_ERR_BODY

    def _watch_targets(self, watcher_type: int):
        """WatcherType -> [(table, mode filter)]: 1 Children, 2 Data, 3 Any,
        4 Persistent, 5 PersistentRecursive."""
        both = (self.child_watches, self.data_watches)
        if watcher_type == 1:
            return [(self.child_watches, None)]
        if watcher_type == 2:
            return [(self.data_watches, None)]
        if watcher_type == 3:
            return [(t, None) for t in both]
        if watcher_type == 4:
            return [(t, PERSISTENT) for t in both]
        if watcher_type == 5:
            return [(t, RECURSIVE) for t in both]
        raise ZkError(errors.MARSHALLINGERROR)  # ZooKeeper cannot map it while decoding

    def _op_check_watches(self, conn, sess, xid, opcode, req, now_ms):
        if any(t.contains(req.path, conn, m) for t, m in self._watch_targets(req.type)):
            return b""
        raise ZkError(errors.NOWATCHER)

    def _op_remove_watches(self, conn, sess, xid, opcode, req, now_ms):
        removed = [t.remove(req.path, conn, m) for t, m in self._watch_targets(req.type)]
        if not any(removed):
            raise ZkError(errors.NOWATCHER)
        return b""

    # ------------------------------------------------------------------ introspection
    def node_count(self) -> int:
        return len(self.tree.nodes)

    def watch_count(self) -> int:
        return self.data_watches.count() + self.child_watches.count()

    def watched_path_count(self) -> int:
        return len(self.data_watches.by_path) + len(self.child_watches.by_path)
