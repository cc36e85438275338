"""The transactions that change the data tree, as named records (pure).

The core validates a request and turns it into one of these; ``Tree.apply`` applies it
under one ``(zxid, time_ms)``; the store writes it to the transaction log. Applying the
same txns in the same order to the same tree always gives the same tree.

On disk a txn is a plain tuple tagged with one letter, so that the log stays
``marshal``-able and logs written before these records existed still load:

    ===================  =================================  ===========================
    record               on disk                            meaning
    ===================  =================================  ===========================
    ``Create``           ``("c", path, data, acl, owner)``  path carries any sequence
                                                            suffix; owner: session id,
                                                            0, or CONTAINER_OWNER
    ``Delete``           ``("d", path)``
    ``SetData``          ``("s", path, data)``              version + 1
    ``SetAcl``           ``("a", path, acl)``               aversion + 1
    ``Multi``            ``("m", [sub, ...])``              every sub-op, one zxid
    ``CreateSession``    ``("S", sid, passwd, timeout)``
    ``CloseSession``     ``("X", sid)``                     deletes its ephemerals
    ===================  =================================  ===========================
"""
from __future__ import annotations

from typing import NamedTuple, Union


class Create(NamedTuple):
    path: str
    data: bytes
    acl: tuple
    owner: int
    TAG = "c"


class Delete(NamedTuple):
    path: str
    TAG = "d"


class SetData(NamedTuple):
    path: str
    data: bytes
    TAG = "s"


class SetAcl(NamedTuple):
    path: str
    acl: tuple
    TAG = "a"


class Multi(NamedTuple):
    ops: tuple  # of Create | Delete | SetData
    TAG = "m"


class CreateSession(NamedTuple):
    sid: int
    passwd: bytes
    timeout_ms: int
    TAG = "S"


class CloseSession(NamedTuple):
    sid: int
    TAG = "X"


Txn = Union[Create, Delete, SetData, SetAcl, Multi, CreateSession, CloseSession]
PathTxn = (Create, Delete, SetData, SetAcl)
_BY_TAG = {cls.TAG: cls for cls in (Create, Delete, SetData, SetAcl, Multi, CreateSession,
                                     CloseSession)}


class TxnFormatError(ValueError):
    """A logged record is not a txn (the store treats it like a torn record)."""


def to_record(txn: Txn) -> tuple:
    """The on-disk tuple of ``txn`` (builtin types only)."""
    if type(txn) is Multi:
        return ("m", [to_record(sub) for sub in txn.ops])
    return (txn.TAG, *txn)


def from_record(record) -> Txn:
    """The txn an on-disk tuple holds; TxnFormatError if it holds none."""
    if not isinstance(record, tuple) or not record:
        raise TxnFormatError(f"not a txn record: {record!r:.80}")
    cls = _BY_TAG.get(record[0])
    if cls is None:
        raise TxnFormatError(f"unknown txn tag {record[0]!r:.20}")
    if cls is Multi:
        if len(record) != 2 or not isinstance(record[1], (list, tuple)):
            raise TxnFormatError("multi record without its list of sub-ops")
        subs = tuple(from_record(sub) for sub in record[1])
        if not all(type(sub) in (Create, Delete, SetData) for sub in subs):
            raise TxnFormatError("multi record with a sub-op that is not create, delete "
                                 "or setData")
        return Multi(subs)
    if len(record) != len(cls._fields) + 1:
        raise TxnFormatError(f"{cls.__name__} record with {len(record) - 1} fields, "
                             f"expected {len(cls._fields)}")
    return cls(*record[1:])
