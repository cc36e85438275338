"""The one registry of ZooKeeper error codes zk_lite may send (ZK_PROTOCOL.md §5.1).

kazoo turns an unknown code into an unhandled exception that kills its connection
thread, so nothing outside this table may ever reach the wire.
"""
from __future__ import annotations

OK = 0
SYSTEMERROR = -1
RUNTIMEINCONSISTENCY = -2
DATAINCONSISTENCY = -3
CONNECTIONLOSS = -4
MARSHALLINGERROR = -5
UNIMPLEMENTED = -6
OPERATIONTIMEOUT = -7
BADARGUMENTS = -8
UNKNOWNSESSION = -12
NEWCONFIGNOQUORUM = -13
RECONFIGINPROGRESS = -14
APIERROR = -100
NONODE = -101
NOAUTH = -102
BADVERSION = -103
NOCHILDRENFOREPHEMERALS = -108
NODEEXISTS = -110
NOTEMPTY = -111
SESSIONEXPIRED = -112
INVALIDCALLBACK = -113
INVALIDACL = -114
AUTHFAILED = -115
SESSIONMOVED = -118
NOTREADONLY = -119
EPHEMERALONLOCALSESSION = -120
NOWATCHER = -121
REQUESTTIMEOUT = -122
RECONFIGDISABLED = -123
SESSIONCLOSEDREQUIRESASLAUTH = -124
QUOTAEXCEEDED = -125
THROTTLEDOP = -127

NAMES: dict[int, str] = {
    value: name
    for name, value in list(globals().items())
    if name.isupper() and isinstance(value, int)
}


class ZkError(Exception):
    """A request failed with a ZooKeeper error code (always one of NAMES)."""

    __slots__ = ("code",)

    def __init__(self, code: int):
        assert code in NAMES and code != OK, code
        super().__init__(code)
        self.code = code

    def __str__(self) -> str:
        return f"{NAMES[self.code]} ({self.code})"
