"""The zk_lite request processors (pure): each request checked against the tree and its
ACLs (ZooKeeper's PrepRequestProcessor), then applied and answered (its
FinalRequestProcessor). ``Requests`` is a mixin of ``core.Core``, which dispatches to
its ``_op_*`` methods by opcode.

Rules (ZK_PROTOCOL.md §6):
* A handler returns the reply body (None: it replied itself) or raises ``ZkError``
  with the error code; a write is one txn with one zxid (``Core._commit``; a multi is
  one txn of all its ops), queued before its reply.
* A multi is all or nothing: the first failing op fails it, later ops answer
  RUNTIMEINCONSISTENCY, and a failed multi commits nothing.
* ACLs are checked on the node (its parent's for create and delete) with the
  connection's auth ids; an id authenticated with the super digest passes every check.
"""
from __future__ import annotations

from . import errors, jute
from . import txn
from .errors import ZkError
from .jute import OpCode
from .session import Conn, Session
from .tree import (ADMIN, CONTAINER_OWNER, CREATE, DELETE, NODE_CHILDREN_CHANGED,
                   NODE_CREATED, NODE_DATA_CHANGED, NODE_DELETED, OPEN_ACL, READ,
                   SPECIAL_PATHS, WRITE, check_acl, digest, fixup_acl, parent_of,
                   sequence_suffix, valid_path)
from .watches import PERSISTENT, RECURSIVE

_EMPTY_ERR_BODY = b"\x00\x00\x00\x00"  # ErrorResponse(0), the addWatch reply body


class Requests:
    """The request handlers of ``core.Core`` (rules above; state: ``core.Core``)."""

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
