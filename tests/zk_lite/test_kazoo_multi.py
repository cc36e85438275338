"""kazoo transactions (opcode 14 multi): all or nothing, per-op results (ZK_PROTOCOL.md §4.7)."""
from __future__ import annotations

from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.protocol.states import EventType

from .util import EventLog, drain_callbacks

import pytest

pytestmark = pytest.mark.process


def test_successful_transaction_applies_every_op_under_one_zxid(zk):
    zk.create("/old", b"v0")
    zk.create("/gone")
    transaction = zk.transaction()
    transaction.create("/m1", b"one")
    transaction.create("/m1/child", b"two")  # sees the create before it
    transaction.set_data("/old", b"v1", version=0)
    transaction.check("/old", 1)  # sees the set before it
    transaction.delete("/gone")
    transaction.create("/s-", sequence=True)
    results = transaction.commit()
    assert results[0] == "/m1" and results[1] == "/m1/child"
    set_stat = results[2]
    assert set_stat.version == 1
    assert results[3] is True and results[4] is True
    assert results[5].startswith("/s-") and len(results[5]) == len("/s-") + 10
    m1, child = zk.exists("/m1"), zk.exists("/m1/child")
    assert m1.czxid == child.czxid == set_stat.mzxid == zk.exists(results[5]).czxid
    assert zk.get("/old")[0] == b"v1"
    assert zk.exists("/gone") is None


def test_failed_check_rolls_back_everything(zk):
    zk.create("/kept", b"v0")
    transaction = zk.transaction()
    transaction.create("/new", b"x")
    transaction.set_data("/kept", b"v1")
    transaction.check("/kept", 5)
    transaction.create("/after")
    results = transaction.commit()
    assert [type(r) for r in results] == [
        RolledBackError, RolledBackError, BadVersionError, RuntimeInconsistency]
    assert zk.exists("/new") is None and zk.exists("/after") is None
    data, stat = zk.get("/kept")
    assert data == b"v0" and stat.version == 0


def test_failure_reports_the_real_error_of_the_failing_op(zk):
    zk.create("/exists")
    transaction = zk.transaction()
    transaction.create("/a")
    transaction.create("/exists")
    results = transaction.commit()
    assert [type(r) for r in results] == [RolledBackError, NodeExistsError]
    transaction = zk.transaction()
    transaction.delete("/no/such")
    transaction.create("/b")
    results = transaction.commit()
    assert [type(r) for r in results] == [NoNodeError, RuntimeInconsistency]
    assert zk.exists("/a") is None and zk.exists("/b") is None


def test_failed_transaction_fires_no_watch_and_spends_no_sequence_number(zk, make_client):
    observer = make_client()
    zk.create("/seq")
    log = EventLog()
    assert observer.exists("/never", watch=log) is None
    observer.get_children("/seq", watch=log)
    transaction = zk.transaction()
    transaction.create("/never")
    transaction.create("/seq/n-", sequence=True)
    transaction.check("/seq", 99)
    assert isinstance(transaction.commit()[-1], BadVersionError)
    drain_callbacks(observer)
    assert log.kinds() == []
    assert zk.create("/seq/n-", sequence=True) == "/seq/n-0000000000"
    log.wait(1)
    assert log.kinds() == [(EventType.CHILD, "/seq")]


def test_successful_transaction_fires_each_watch(zk, make_client):
    observer = make_client()
    zk.create("/d", b"0")
    created, changed = EventLog(), EventLog()
    observer.exists("/c", watch=created)
    observer.get("/d", watch=changed)
    transaction = zk.transaction()
    transaction.create("/c")
    transaction.set_data("/d", b"1")
    transaction.commit()
    created.wait(1)
    changed.wait(1)
    drain_callbacks(observer)
    assert created.kinds() == [(EventType.CREATED, "/c")]
    assert changed.kinds() == [(EventType.CHANGED, "/d")]


def test_delete_then_recreate_in_one_transaction(zk):
    zk.create("/x", b"old")
    old = zk.exists("/x")
    transaction = zk.transaction()
    transaction.delete("/x")
    transaction.create("/x", b"new")
    assert transaction.commit() == [True, "/x"]
    data, stat = zk.get("/x")
    assert data == b"new" and stat.czxid > old.czxid


def test_empty_transaction_succeeds(zk):
    assert zk.transaction().commit() == []
