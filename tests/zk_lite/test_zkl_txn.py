"""zk_lite.txn: named txn records, their on-disk tuples, and the OpCode names."""
from __future__ import annotations

import marshal

import pytest

from zk_lite import jute, persist
from zk_lite import txn as zk_txn
from zk_lite.tree import OPEN_ACL

SAMPLES = [
    zk_txn.Create("/a", b"x", OPEN_ACL, 0),
    zk_txn.Create("/e-0000000001", b"", ((31, "digest", "u:h"),), 0x1234),
    zk_txn.Delete("/a"),
    zk_txn.SetData("/a", b"y" * 100),
    zk_txn.SetAcl("/a", ((1, "world", "anyone"),)),
    zk_txn.Multi((zk_txn.Create("/m", b"", OPEN_ACL, 0), zk_txn.SetData("/m", b"1"),
                  zk_txn.Delete("/m"))),
    zk_txn.CreateSession(0x1A2B, b"\0" * 16, 6000),
    zk_txn.CloseSession(0x1A2B),
]


@pytest.mark.parametrize("txn", SAMPLES, ids=lambda t: type(t).__name__)
def test_a_txn_survives_its_on_disk_form(txn):
    record = zk_txn.to_record(txn)
    assert type(record) is tuple and record[0] == txn.TAG
    assert zk_txn.from_record(marshal.loads(marshal.dumps(record))) == txn


def test_the_log_format_is_the_one_tagged_tuples_had():
    """Logs written before the records existed hold ("c", path, data, acl, owner) ..."""
    old = marshal.dumps((7, 1000, ("m", [("c", "/m", b"", OPEN_ACL, 0), ("d", "/m")])))
    new = persist.encode_txns([(7, 1000, SAMPLES[5]._replace(ops=SAMPLES[5].ops[::2]))])
    assert marshal.loads(new[8:]) == marshal.loads(old)  # the same tuples (refs may differ)
    [(_, (zxid, time_ms, txn))] = list(persist.read_log(new))
    assert (zxid, time_ms) == (7, 1000)
    assert txn == zk_txn.Multi((zk_txn.Create("/m", b"", OPEN_ACL, 0), zk_txn.Delete("/m")))


@pytest.mark.parametrize("record", [
    (), ("q", "/a"), ("d",), ("d", "/a", "extra"), ("m", "not a list"),
    ("m", [("S", 1, b"", 1)]), "c", None,
])
def test_a_record_that_is_no_txn_is_refused(record):
    with pytest.raises(zk_txn.TxnFormatError):
        zk_txn.from_record(record)


def test_a_log_record_that_is_no_txn_ends_the_valid_log():
    good = persist.encode_txns([(1, 0, zk_txn.Delete("/a"))])
    payload = marshal.dumps((2, 0, ("q", "/a")))
    import struct
    import zlib
    bad = struct.pack("!II", len(payload), zlib.crc32(payload)) + payload
    records = list(persist.read_log(good + bad))
    assert [txn for _, (_, _, txn) in records] == [zk_txn.Delete("/a")]


def test_opcodes_are_zookeepers():
    Op = jute.OpCode
    assert (Op.CREATE, Op.MULTI, Op.CREATE_TTL, Op.SET_WATCHES2, Op.CLOSE_SESSION) == \
        (1, 14, 21, 105, -11)
    assert jute.MULTI_OPS == {1, 2, 5, 13, 15, 19, 21}
    body = jute.encode_request(1, Op.MULTI, [(Op.CREATE, jute.CreateRequest(
        "/x", b"", [(31, "world", "anyone")], 0))])[8 + 4:]
    [(op, record)] = jute.decode_request(Op.MULTI, body)
    assert op is Op.CREATE and record.path == "/x"
