"""Sans-I/O codec for the ZooKeeper client wire protocol (jute binary encoding).

Theory of operation
-------------------
* Every message is ``int32 length`` + payload; :class:`FrameReader` splits a byte
  stream into payloads and refuses lengths outside ``[0, max_frame_bytes]``.
* A record is a fixed sequence of jute fields. Each record class below carries a
  ``SPEC`` string, one character per field, and is encoded and decoded by the same
  two generic routines, so a layout is written down exactly once:

  ====  ==========================================================
  ``i``  int32            ``q``  int64            ``b``  boolean
  ``s``  ustring (-1 = None)                      ``B``  buffer (-1 = None)
  ``S``  vector<ustring>  ``a``  vector<ACL>      ``t``  Stat
  ``c``  vector<ClientInfo>
  ====  ==========================================================

* Decoding never raises anything but :class:`ProtocolError` (or its subclass
  :class:`IncompleteError` when the input ends early). Trailing bytes after a
  record are ignored, as the Java server does.
* Nothing here touches sockets, clocks or files.
"""
from __future__ import annotations

import enum
import struct
from typing import NamedTuple

__all__ = [
    "ProtocolError", "IncompleteError", "FrameReader", "Reader", "MAX_BUFFER_BYTES",
    "Stat", "decode_record", "encode_record", "decode_request", "encode_request",
    "decode_connect_request", "encode_connect_request", "decode_connect_response",
    "encode_connect_response", "decode_multi", "encode_multi", "encode_multi_response",
    "decode_multi_response", "reply_frame", "notification_frame", "frame",
    "REQUEST_RECORDS",
]

#: ZooKeeper's default ``jute.maxbuffer`` (0xfffff bytes).
MAX_BUFFER_BYTES = 0xFFFFF


class ProtocolError(Exception):
    """The peer sent bytes that are not a valid ZooKeeper message."""


class IncompleteError(ProtocolError):
    """The input ended in the middle of a record."""


_I = struct.Struct("!i")
_Q = struct.Struct("!q")
_II = struct.Struct("!ii")
_IQI = struct.Struct("!iqi")
_LEN_IQI = struct.Struct("!iiqi")  # frame length + ReplyHeader
_MULTI_HDR = struct.Struct("!iBi")
_STAT = struct.Struct("!qqqqiiiqiiq")
_CONNECT_REQ = struct.Struct("!iqiq")
_CONNECT_RESP = struct.Struct("!iiq")
_ACL_PERMS = _I
_EVENT = struct.Struct("!iiqiii")  # len, xid, zxid, err, type, state

REQUEST_HEADER = _II
REPLY_HEADER = _IQI


class OpCode(enum.IntEnum):
    """ZooDefs.OpCode: the request types of the wire (ZK_PROTOCOL.md §3.3)."""
    NOTIFICATION = 0
    CREATE = 1
    DELETE = 2
    EXISTS = 3
    GET_DATA = 4
    SET_DATA = 5
    GET_ACL = 6
    SET_ACL = 7
    GET_CHILDREN = 8
    SYNC = 9
    PING = 11
    GET_CHILDREN2 = 12
    CHECK = 13
    MULTI = 14
    CREATE2 = 15
    RECONFIG = 16
    CHECK_WATCHES = 17
    REMOVE_WATCHES = 18
    CREATE_CONTAINER = 19
    DELETE_CONTAINER = 20
    CREATE_TTL = 21
    MULTI_READ = 22
    AUTH = 100
    SET_WATCHES = 101
    SASL = 102
    GET_EPHEMERALS = 103
    GET_ALL_CHILDREN_NUMBER = 104
    SET_WATCHES2 = 105
    ADD_WATCH = 106
    WHO_AM_I = 107
    CREATE_SESSION = -10
    CLOSE_SESSION = -11
    ERROR = -1


CREATE_OPS = frozenset({OpCode.CREATE, OpCode.CREATE2, OpCode.CREATE_CONTAINER,
                        OpCode.CREATE_TTL})


class Stat(NamedTuple):
    czxid: int
    mzxid: int
    ctime: int
    mtime: int
    version: int
    cversion: int
    aversion: int
    ephemeralOwner: int
    dataLength: int
    numChildren: int
    pzxid: int


# --------------------------------------------------------------------------- reading

class Reader:
    """Cursor over a bytes-like object; every method raises only ProtocolError."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf, pos: int = 0):
        self.buf = buf
        self.pos = pos
        self.end = len(buf)

    def _need(self, n: int) -> int:
        p = self.pos
        if p + n > self.end:
            raise IncompleteError(f"need {n} bytes at offset {p}, have {self.end - p}")
        self.pos = p + n
        return p

    def int(self) -> int:
        return _I.unpack_from(self.buf, self._need(4))[0]

    def long(self) -> int:
        return _Q.unpack_from(self.buf, self._need(8))[0]

    def bool(self) -> bool:
        return self.buf[self._need(1)] != 0

    def buffer(self) -> bytes | None:
        n = self.int()
        if n == -1:
            return None
        if n < -1:
            raise ProtocolError(f"negative buffer length {n}")
        p = self._need(n)
        return bytes(self.buf[p:p + n])

    def string(self) -> str | None:
        raw = self.buffer()
        if raw is None:
            return None
        # Java decodes with replacement characters; so do we (and path checks then reject).
        return raw.decode("utf-8", "replace")

    def _count(self, min_elem_bytes: int) -> int:
        n = self.int()
        if n == -1:
            return -1
        if n < -1:
            raise ProtocolError(f"negative vector length {n}")
        if n * min_elem_bytes > self.end - self.pos:
            raise IncompleteError(f"vector of {n} elements cannot fit")
        return n

    def strings(self) -> list[str]:
        n = self._count(4)
        return [] if n < 0 else [self.string() for _ in range(n)]

    def acls(self) -> list[tuple[int, str, str]] | None:
        n = self._count(12)
        if n < 0:
            return None
        return [(self.int(), self.string(), self.string()) for _ in range(n)]

    def client_infos(self) -> list[tuple[str, str]]:
        n = self._count(8)
        return [] if n < 0 else [(self.string(), self.string()) for _ in range(n)]

    def stat(self) -> Stat:
        return Stat._make(_STAT.unpack_from(self.buf, self._need(68)))


_READERS = {
    "i": Reader.int, "q": Reader.long, "b": Reader.bool, "s": Reader.string,
    "B": Reader.buffer, "S": Reader.strings, "a": Reader.acls, "t": Reader.stat,
    "c": Reader.client_infos,
}


# --------------------------------------------------------------------------- writing

def _w_int(out: list, v: int) -> None:
    out.append(_I.pack(v))


def _w_long(out: list, v: int) -> None:
    out.append(_Q.pack(v))


def _w_bool(out: list, v: bool) -> None:
    out.append(b"\x01" if v else b"\x00")


def _w_buffer(out: list, v: bytes | None) -> None:
    if v is None:
        out.append(b"\xff\xff\xff\xff")
    else:
        out.append(_I.pack(len(v)))
        out.append(v)


def _w_string(out: list, v: str | None) -> None:
    _w_buffer(out, None if v is None else v.encode("utf-8"))


def _w_strings(out: list, v) -> None:
    v = v or ()
    out.append(_I.pack(len(v)))
    for s in v:
        _w_string(out, s)


def _w_acls(out: list, v) -> None:
    if v is None:
        out.append(b"\xff\xff\xff\xff")
        return
    out.append(_I.pack(len(v)))
    for perms, scheme, ident in v:
        out.append(_I.pack(perms))
        _w_string(out, scheme)
        _w_string(out, ident)


def _w_client_infos(out: list, v) -> None:
    out.append(_I.pack(len(v)))
    for scheme, user in v:
        _w_string(out, scheme)
        _w_string(out, user)


def _w_stat(out: list, v) -> None:
    out.append(_STAT.pack(*v))


_WRITERS = {
    "i": _w_int, "q": _w_long, "b": _w_bool, "s": _w_string, "B": _w_buffer,
    "S": _w_strings, "a": _w_acls, "t": _w_stat, "c": _w_client_infos,
}


def decode_record(cls, buf, pos: int = 0):
    """Decode one ``cls`` record from ``buf`` at ``pos``; trailing bytes are ignored."""
    r = Reader(buf, pos)
    return cls._make([_READERS[ch](r) for ch in cls.SPEC])


def decode_record_at(cls, r: Reader):
    return cls._make([_READERS[ch](r) for ch in cls.SPEC])


def encode_record(record) -> bytes:
    out: list = []
    for ch, value in zip(record.SPEC, record):
        _WRITERS[ch](out, value)
    return b"".join(out)


# --------------------------------------------------------------------------- records

def _record(name: str, spec: str, fields: str):
    names = fields.split()
    assert len(names) == len(spec), name
    cls = NamedTuple(name, [(n, object) for n in names])
    cls.SPEC = spec
    return cls


ConnectRequest = _record("ConnectRequest", "iqiqB", "protocolVersion lastZxidSeen timeOut sessionId passwd")
ConnectResponse = _record("ConnectResponse", "iiqB", "protocolVersion timeOut sessionId passwd")
CreateRequest = _record("CreateRequest", "sBai", "path data acl flags")
CreateTTLRequest = _record("CreateTTLRequest", "sBaiq", "path data acl flags ttl")
DeleteRequest = _record("DeleteRequest", "si", "path version")
ExistsRequest = _record("ExistsRequest", "sb", "path watch")
GetDataRequest = _record("GetDataRequest", "sb", "path watch")
SetDataRequest = _record("SetDataRequest", "sBi", "path data version")
GetACLRequest = _record("GetACLRequest", "s", "path")
SetACLRequest = _record("SetACLRequest", "sai", "path acl version")
GetChildrenRequest = _record("GetChildrenRequest", "sb", "path watch")
SyncRequest = _record("SyncRequest", "s", "path")
GetChildren2Request = _record("GetChildren2Request", "sb", "path watch")
CheckVersionRequest = _record("CheckVersionRequest", "si", "path version")
ReconfigRequest = _record("ReconfigRequest", "sssq", "joiningServers leavingServers newMembers curConfigId")
CheckWatchesRequest = _record("CheckWatchesRequest", "si", "path type")
RemoveWatchesRequest = _record("RemoveWatchesRequest", "si", "path type")
AuthPacket = _record("AuthPacket", "isB", "type scheme auth")
SetWatches = _record("SetWatches", "qSSS", "relativeZxid dataWatches existWatches childWatches")
SetWatches2 = _record(
    "SetWatches2", "qSSSSS",
    "relativeZxid dataWatches existWatches childWatches persistentWatches persistentRecursiveWatches")
GetSASLRequest = _record("GetSASLRequest", "B", "token")
GetEphemeralsRequest = _record("GetEphemeralsRequest", "s", "prefixPath")
GetAllChildrenNumberRequest = _record("GetAllChildrenNumberRequest", "s", "path")
AddWatchRequest = _record("AddWatchRequest", "si", "path mode")
Empty = _record("Empty", "", "")

CreateResponse = _record("CreateResponse", "s", "path")
Create2Response = _record("Create2Response", "st", "path stat")
StatResponse = _record("StatResponse", "t", "stat")
GetDataResponse = _record("GetDataResponse", "Bt", "data stat")
GetACLResponse = _record("GetACLResponse", "at", "acl stat")
GetChildrenResponse = _record("GetChildrenResponse", "S", "children")
GetChildren2Response = _record("GetChildren2Response", "St", "children stat")
SyncResponse = _record("SyncResponse", "s", "path")
ErrorResponse = _record("ErrorResponse", "i", "err")
GetEphemeralsResponse = _record("GetEphemeralsResponse", "S", "ephemerals")
GetAllChildrenNumberResponse = _record("GetAllChildrenNumberResponse", "i", "totalNumber")
WhoAmIResponse = _record("WhoAmIResponse", "c", "clientInfo")
WatcherEvent = _record("WatcherEvent", "iis", "type state path")

#: opcode -> request record class (ZK_PROTOCOL.md §3.3). Multi and multiRead are separate.
REQUEST_RECORDS = {
    OpCode.CREATE: CreateRequest, OpCode.DELETE: DeleteRequest,
    OpCode.EXISTS: ExistsRequest, OpCode.GET_DATA: GetDataRequest,
    OpCode.SET_DATA: SetDataRequest, OpCode.GET_ACL: GetACLRequest,
    OpCode.SET_ACL: SetACLRequest, OpCode.GET_CHILDREN: GetChildrenRequest,
    OpCode.SYNC: SyncRequest, OpCode.PING: Empty, OpCode.GET_CHILDREN2: GetChildren2Request,
    OpCode.CHECK: CheckVersionRequest, OpCode.CREATE2: CreateRequest,
    OpCode.RECONFIG: ReconfigRequest, OpCode.CHECK_WATCHES: CheckWatchesRequest,
    OpCode.REMOVE_WATCHES: RemoveWatchesRequest, OpCode.CREATE_CONTAINER: CreateRequest,
    OpCode.CREATE_TTL: CreateTTLRequest, OpCode.AUTH: AuthPacket,
    OpCode.SET_WATCHES: SetWatches, OpCode.SASL: GetSASLRequest,
    OpCode.GET_EPHEMERALS: GetEphemeralsRequest,
    OpCode.GET_ALL_CHILDREN_NUMBER: GetAllChildrenNumberRequest,
    OpCode.SET_WATCHES2: SetWatches2, OpCode.ADD_WATCH: AddWatchRequest,
    OpCode.WHO_AM_I: Empty, OpCode.CLOSE_SESSION: Empty,
}

MULTI_OPS = CREATE_OPS | {OpCode.DELETE, OpCode.SET_DATA, OpCode.CHECK}
MULTI_READ_OPS = frozenset({OpCode.GET_DATA, OpCode.GET_CHILDREN})
_MULTIS = (OpCode.MULTI, OpCode.MULTI_READ)


def decode_request(opcode: int, body):
    """Decode the record after the RequestHeader; multi returns a list of (op, record)."""
    if opcode in _MULTIS:
        return decode_multi(body)
    cls = REQUEST_RECORDS.get(opcode)
    if cls is None:
        raise ProtocolError(f"unknown opcode {opcode}")
    return decode_record(cls, body)


def encode_request(xid: int, opcode: int, record=None) -> bytes:
    """A whole client frame (length + header + record); used by tests and tools."""
    if opcode in _MULTIS:
        body = encode_multi(record)
    else:
        body = b"" if record is None else encode_record(record)
    return frame(REQUEST_HEADER.pack(xid, opcode) + body)


def decode_multi(body) -> list:
    r = Reader(body)
    ops = []
    while True:
        op_type, done, err = _MULTI_HDR.unpack_from(body, r._need(9))
        if done:
            return ops
        cls = REQUEST_RECORDS.get(op_type) if (op_type in MULTI_OPS or op_type in MULTI_READ_OPS) else None
        if cls is None:
            raise ProtocolError(f"opcode {op_type} is not allowed inside multi")
        ops.append((OpCode(op_type), decode_record_at(cls, r)))


def encode_multi(ops) -> bytes:
    out = []
    for op_type, record in ops:
        out.append(_MULTI_HDR.pack(op_type, 0, -1))
        out.append(encode_record(record))
    out.append(_MULTI_HDR.pack(-1, 1, -1))
    return b"".join(out)


def encode_multi_response(results) -> bytes:
    """``results``: list of (type, err, record-or-None); error results use type -1."""
    out = []
    for op_type, err, record in results:
        out.append(_MULTI_HDR.pack(op_type, 0, err))
        if op_type == OpCode.ERROR:
            out.append(_I.pack(err))
        elif record is not None:
            out.append(encode_record(record))
    out.append(_MULTI_HDR.pack(-1, 1, -1))
    return b"".join(out)


_MULTI_RESULT_RECORDS = {OpCode.CREATE: CreateResponse, OpCode.CREATE2: Create2Response,
                         OpCode.SET_DATA: StatResponse, OpCode.GET_DATA: GetDataResponse,
                         OpCode.GET_CHILDREN: GetChildrenResponse}


def decode_multi_response(body) -> list:
    r = Reader(body)
    results = []
    while True:
        op_type, done, err = _MULTI_HDR.unpack_from(body, r._need(9))
        if done:
            return results
        if op_type == OpCode.ERROR:
            results.append((OpCode.ERROR, err, ErrorResponse(r.int())))
        elif op_type in (OpCode.DELETE, OpCode.CHECK):
            results.append((op_type, err, None))
        elif op_type in _MULTI_RESULT_RECORDS:
            results.append((op_type, err, decode_record_at(_MULTI_RESULT_RECORDS[op_type], r)))
        else:
            raise ProtocolError(f"unknown multi result type {op_type}")


# --------------------------------------------------------------------------- handshake

def decode_connect_request(body):
    """Returns (ConnectRequest, read_only_flag or None when the byte is absent)."""
    r = Reader(body)
    req = decode_record_at(ConnectRequest, r)
    read_only = r.bool() if r.pos < r.end else None
    return req, read_only


def encode_connect_request(req, read_only: bool | None = False) -> bytes:
    body = encode_record(req) + (b"" if read_only is None else (b"\x01" if read_only else b"\x00"))
    return frame(body)


def encode_connect_response(timeout_ms: int, session_id: int, passwd: bytes,
                            read_only: bool | None) -> bytes:
    """A whole server frame; the readOnly byte is sent only when the client sent one."""
    body = _CONNECT_RESP.pack(0, timeout_ms, session_id) + _I.pack(len(passwd)) + passwd
    if read_only is not None:
        body += b"\x00"
    return frame(body)


def decode_connect_response(body):
    r = Reader(body)
    resp = decode_record_at(ConnectResponse, r)
    read_only = r.bool() if r.pos < r.end else None
    return resp, read_only


# --------------------------------------------------------------------------- frames

def frame(payload: bytes) -> bytes:
    return _I.pack(len(payload)) + payload


def reply_frame(xid: int, zxid: int, err: int, body: bytes = b"") -> bytes:
    """``ReplyHeader`` + body as one length-prefixed frame."""
    return _LEN_IQI.pack(16 + len(body), xid, zxid, err) + body


def notification_frame(event_type: int, path: str) -> bytes:
    """A watch notification: ReplyHeader(-1, -1, 0) + WatcherEvent(type, SyncConnected, path)."""
    raw = path.encode("utf-8")
    return _EVENT.pack(28 + len(raw), -1, -1, 0, event_type, 3) + _I.pack(len(raw)) + raw


def encode_stat(stat) -> bytes:
    return _STAT.pack(*stat)


def encode_string(value: str | None) -> bytes:
    out: list = []
    _w_string(out, value)
    return b"".join(out)


def encode_buffer(value: bytes | None) -> bytes:
    if value is None:
        return b"\xff\xff\xff\xff"
    return _I.pack(len(value)) + value


class FrameReader:
    """Splits a byte stream into frame payloads (sans-I/O, like h11's receive buffer).

    ``feed(data)`` then call ``next_frame()`` until it returns None. A length below 0
    or above ``max_frame_bytes`` raises ProtocolError; the connection is then unusable.
    """

    __slots__ = ("_buf", "_pos", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int = MAX_BUFFER_BYTES):
        self._buf = bytearray()
        self._pos = 0
        self.max_frame_bytes = max_frame_bytes

    def feed(self, data: bytes) -> None:
        if self._pos and self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        self._buf += data

    def peek(self, n: int) -> bytes:
        return bytes(self._buf[self._pos:self._pos + n])

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf) - self._pos

    def next_frame(self) -> bytes | None:
        buf, pos = self._buf, self._pos
        if len(buf) - pos < 4:
            return None
        n = _I.unpack_from(buf, pos)[0]
        if n < 0 or n > self.max_frame_bytes:
            raise ProtocolError(f"frame length {n} outside [0, {self.max_frame_bytes}]")
        end = pos + 4 + n
        if end > len(buf):
            return None
        payload = bytes(buf[pos + 4:end])
        if end == len(buf):
            buf.clear()
            self._pos = 0
        elif end > 65536:
            del buf[:end]
            self._pos = 0
        else:
            self._pos = end
        return payload
