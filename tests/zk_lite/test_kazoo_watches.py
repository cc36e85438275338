"""One-shot watches through kazoo: each type fires exactly once, with the right type and path.

ZK_PROTOCOL.md §6.7: exists/getData register a data watch, getChildren a child watch;
standard watches are removed when they fire; a connection sees the event before any
later reply. "Exactly once" is checked with ``drain_callbacks``: after a round trip
every event the server sent earlier has been dispatched, so a missing second event is
really missing and not just late.
"""
from __future__ import annotations

import threading

import pytest
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import EventType
from kazoo.security import make_acl

from .util import EventLog, drain_callbacks

pytestmark = pytest.mark.process


def test_data_watch_fires_once_on_change(zk, make_client):
    writer = make_client()
    zk.create("/w", b"0")
    log = EventLog()
    zk.get("/w", watch=log)
    writer.set("/w", b"1")
    log.wait(1)
    writer.set("/w", b"2")  # not re-registered: must not fire again
    drain_callbacks(zk)
    assert log.kinds() == [(EventType.CHANGED, "/w")]


def test_data_watch_fires_on_delete(zk, make_client):
    writer = make_client()
    zk.create("/w")
    log = EventLog()
    zk.get("/w", watch=log)
    writer.delete("/w")
    log.wait(1)
    drain_callbacks(zk)
    assert log.kinds() == [(EventType.DELETED, "/w")]


def test_exists_watch_on_missing_node_fires_created(zk, make_client):
    writer = make_client()
    log = EventLog()
    assert zk.exists("/later", watch=log) is None
    writer.create("/later")
    log.wait(1)
    writer.set("/later", b"x")
    writer.delete("/later")
    drain_callbacks(zk)
    assert log.kinds() == [(EventType.CREATED, "/later")]


def test_exists_watch_on_present_node_fires_changed_then_needs_rearming(zk, make_client):
    writer = make_client()
    zk.create("/here")
    log = EventLog()
    assert zk.exists("/here", watch=log) is not None
    writer.set("/here", b"x")
    log.wait(1)
    zk.exists("/here", watch=log)  # re-register
    writer.delete("/here")
    log.wait(2)
    drain_callbacks(zk)
    assert log.kinds() == [(EventType.CHANGED, "/here"), (EventType.DELETED, "/here")]


def test_child_watch_fires_once_on_child_created(zk, make_client):
    writer = make_client()
    zk.create("/parent")
    log = EventLog()
    assert zk.get_children("/parent", watch=log) == []
    writer.create("/parent/a")
    log.wait(1)
    writer.create("/parent/b")
    writer.delete("/parent/a")
    drain_callbacks(zk)
    assert log.kinds() == [(EventType.CHILD, "/parent")]


def test_child_watch_fires_on_child_deleted(zk, make_client):
    writer = make_client()
    zk.create("/parent/a", makepath=True)
    log = EventLog()
    zk.get_children("/parent", watch=log)
    writer.delete("/parent/a")
    log.wait(1)
    drain_callbacks(zk)
    assert log.kinds() == [(EventType.CHILD, "/parent")]


def test_child_watch_fires_deleted_when_parent_is_deleted(zk, make_client):
    writer = make_client()
    zk.create("/parent")
    log = EventLog()
    zk.get_children("/parent", watch=log)
    writer.delete("/parent")
    log.wait(1)
    drain_callbacks(zk)
    assert log.kinds() == [(EventType.DELETED, "/parent")]


def test_child_watch_ignores_data_changes(zk, make_client):
    writer = make_client()
    zk.create("/parent/a", makepath=True)
    log = EventLog()
    zk.get_children("/parent", watch=log)
    writer.set("/parent", b"parent data")
    writer.set("/parent/a", b"child data")
    writer.create("/parent/a/grandchild")  # not a child of /parent
    drain_callbacks(zk)
    assert log.kinds() == []
    writer.create("/parent/b")
    log.wait(1)
    assert log.kinds() == [(EventType.CHILD, "/parent")]


def test_data_watch_ignores_child_changes(zk, make_client):
    writer = make_client()
    zk.create("/node")
    log = EventLog()
    zk.get("/node", watch=log)
    writer.create("/node/child")
    drain_callbacks(zk)
    assert log.kinds() == []


def test_watch_on_own_write_arrives_before_the_write_returns(zk):
    zk.create("/mine")
    log = EventLog()
    zk.get("/mine", watch=log)
    zk.set("/mine", b"changed")
    drain_callbacks(zk)  # no round trip needed in theory; the set's reply came after the event
    assert log.kinds() == [(EventType.CHANGED, "/mine")]


def test_data_and_child_watches_on_one_node_each_fire_once_on_delete(zk, make_client):
    writer = make_client()
    zk.create("/both")
    data_log, child_log, exists_log = EventLog(), EventLog(), EventLog()
    zk.get("/both", watch=data_log)
    zk.get_children("/both", watch=child_log)
    zk.exists("/both", watch=exists_log)
    writer.delete("/both")
    data_log.wait(1)
    child_log.wait(1)
    exists_log.wait(1)
    drain_callbacks(zk)
    assert data_log.kinds() == [(EventType.DELETED, "/both")]
    assert child_log.kinds() == [(EventType.DELETED, "/both")]
    assert exists_log.kinds() == [(EventType.DELETED, "/both")]


def test_watches_of_several_clients_all_fire(zk, make_client):
    watchers = [make_client() for _ in range(3)]
    zk.create("/shared")
    logs = []
    for client in watchers:
        log = EventLog()
        client.get("/shared", watch=log)
        logs.append(log)
    zk.set("/shared", b"x")
    for client, log in zip(watchers, logs):
        log.wait(1)
        drain_callbacks(client)
        assert log.kinds() == [(EventType.CHANGED, "/shared")]


def test_ephemeral_removal_on_close_fires_watches(zk, make_client):
    owner = make_client()
    owner.create("/eph", ephemeral=True)
    zk.create("/dir")
    owner.create("/dir/eph", ephemeral=True)
    data_log, child_log = EventLog(), EventLog()
    assert zk.exists("/eph", watch=data_log) is not None
    zk.get_children("/dir", watch=child_log)
    owner.stop()
    data_log.wait(1)
    child_log.wait(1)
    assert zk.exists("/eph") is None
    assert zk.get_children("/dir") == []
    drain_callbacks(zk)
    assert data_log.kinds() == [(EventType.DELETED, "/eph")]
    assert child_log.kinds() == [(EventType.CHILD, "/dir")]


def test_failed_reads_register_no_watch(zk, make_client):
    writer = make_client()
    data_log, child_log = EventLog(), EventLog()
    with pytest.raises(NoNodeError):
        zk.get("/absent", watch=data_log)
    with pytest.raises(NoNodeError):
        zk.get_children("/absent", watch=child_log)
    writer.create("/absent/child", makepath=True)
    writer.set("/absent", b"x")
    drain_callbacks(zk)
    assert data_log.kinds() == [] and child_log.kinds() == []


def test_set_acls_fires_no_watch(zk, make_client):
    writer = make_client()
    zk.create("/acl")
    log = EventLog()
    zk.get("/acl", watch=log)
    writer.set_acls("/acl", [make_acl("world", "anyone", all=True)])
    drain_callbacks(zk)
    assert log.kinds() == []
    writer.set("/acl", b"x")  # the watch is still armed
    log.wait(1)
    assert log.kinds() == [(EventType.CHANGED, "/acl")]


def test_kazoo_data_watch_recipe_follows_every_change(zk, make_client):
    writer = make_client()
    zk.create("/dw", b"0")
    seen = []
    condition = threading.Condition()

    @zk.DataWatch("/dw")
    def on_change(data, stat):
        with condition:
            seen.append(data)
            condition.notify_all()

    for i in range(1, 6):
        writer.set("/dw", str(i).encode())
        with condition:  # wait for each value before the next change: none is skipped
            assert condition.wait_for(lambda: seen and seen[-1] == str(i).encode(), timeout=10), seen
    writer.delete("/dw")
    with condition:
        assert condition.wait_for(lambda: seen[-1] is None, timeout=10), seen
    assert seen == [b"0", b"1", b"2", b"3", b"4", b"5", None]


def test_children_watch_recipe_on_many_clients_converges(zk, make_client):
    zk.create("/fan")
    watchers = [make_client() for _ in range(8)]
    latest: dict[int, list] = {}
    condition = threading.Condition()
    for n, client in enumerate(watchers):
        def record(children, n=n):
            with condition:
                latest[n] = sorted(children)
                condition.notify_all()
        client.ChildrenWatch("/fan", record)
    transaction = zk.transaction()
    for i in range(40):
        transaction.create(f"/fan/c{i:02d}")
    transaction.commit()
    for i in range(40, 60):
        zk.create(f"/fan/c{i:02d}")
    expected = [f"c{i:02d}" for i in range(60)]
    with condition:
        assert condition.wait_for(
            lambda: len(latest) == len(watchers) and all(v == expected for v in latest.values()),
            timeout=20), {n: len(v) for n, v in latest.items()}
