"""The pure core, driven directly (no sockets, manual clock): ZK_PROTOCOL.md §5, §6."""
from __future__ import annotations

import pytest

from zk_lite import errors, jute
from zk_lite.tree import digest
from .zkl_helpers import Driver

OPEN = [(31, "world", "anyone")]
CREATED, DELETED, CHANGED, CHILD = 1, 2, 3, 4


# ---------------------------------------------------------------------- initial tree, stats

def test_initial_tree_matches_a_fresh_zookeeper(driver):
    c = driver.connect()
    root = c.children("/")
    assert root.children == ["zookeeper"]
    assert root.stat.cversion == -1 and root.stat.czxid == 0
    assert c.children("/zookeeper").stat.cversion == -2
    assert sorted(c.children("/zookeeper").children) == ["config", "quota"]
    assert c.exists("/zookeeper/config").aversion == -1
    assert c.get("/").data == b""


def test_cversion_counts_creates_and_deletes_and_sequence_uses_creation_counter(driver):
    c = driver.connect()
    assert c.create("/p") == "/p"
    assert c.create("/p/lock-", flags=2) == "/p/lock-0000000000"
    assert c.create("/p/plain") == "/p/plain"
    assert c.create("/p/lock-", flags=2) == "/p/lock-0000000002"
    assert c.exists("/p").cversion == 3
    assert c.delete("/p/plain") == 0
    st = c.exists("/p")
    assert (st.cversion, st.numChildren) == (4, 2)
    assert c.create("/p/", flags=2) == "/p/0000000003"


def test_stat_fields_follow_the_txn_that_changed_them(driver):
    c = driver.connect()
    c.create("/s", b"abc")
    st0 = c.exists("/s")
    assert st0.czxid == st0.mzxid == st0.pzxid and st0.dataLength == 3 and st0.version == 0
    st1 = c.set("/s", b"")
    assert st1.version == 1 and st1.mzxid > st0.mzxid and st1.czxid == st0.czxid
    assert st1.dataLength == 0
    c.create("/s/k")
    assert c.exists("/s").pzxid > st1.mzxid
    assert c.get("/s").data == b""
    c.create("/n", None)
    assert c.get("/n").data is None and c.exists("/n").dataLength == 0


def test_reply_zxid_is_last_committed_and_each_write_takes_one(driver):
    c = driver.connect()
    _, _, z1 = c.call(1, jute.CreateRequest("/z", b"", OPEN, 0))
    _, _, z2 = c.call(4, jute.GetDataRequest("/z", False))
    _, _, z3 = c.call(5, jute.SetDataRequest("/z", b"1", -1))
    assert z1 == z2 and z3 == z1 + 1


# ---------------------------------------------------------------------- errors and check order

def test_create_error_codes_in_zookeepers_order(driver):
    c = driver.connect()
    assert c.create("/x/y", flags=7) == errors.BADARGUMENTS  # flags before anything
    assert c.create("/x/y", flags=5) == errors.UNIMPLEMENTED  # TTL disabled
    ttl = jute.CreateTTLRequest("/x/y", b"", OPEN, 5, 1000)
    assert c.call(21, ttl)[0] == errors.UNIMPLEMENTED
    assert c.create("noslash") == errors.BADARGUMENTS
    assert c.create("/x/y", acl=[]) == errors.INVALIDACL  # ACL fix-up before parent lookup
    assert c.create("/x/y", acl=[(31, "world", "nobody")]) == errors.INVALIDACL
    assert c.create("/x/y", acl=[(31, "auth", "")]) == errors.INVALIDACL
    assert c.create("/x/y", acl=[(31, "digest", "nocolon")]) == errors.INVALIDACL
    assert c.create("/x/y", acl=[(31, "bogus", "id")]) == errors.INVALIDACL
    assert c.create("/x/y") == errors.NONODE
    assert c.create("/x/") == errors.NONODE  # parent "/x" missing comes first
    assert c.create("/") == errors.NODEEXISTS
    assert c.create("/a/") is not None
    c.create("/x")
    assert c.create("/x/") == errors.BADARGUMENTS  # full validation after the parent check
    assert c.create("/x/.") == errors.BADARGUMENTS
    assert c.create("/x/./y") == errors.NONODE  # parent "/x/." is looked up first
    assert c.create("/x") == errors.NODEEXISTS
    assert c.create("/e", flags=1) == "/e"
    assert c.create("/e/child") == errors.NOCHILDRENFOREPHEMERALS
    assert c.create("/bad\u0001") == errors.BADARGUMENTS
    assert c.create("/\U0001F600") == errors.BADARGUMENTS


def test_delete_set_check_error_codes(driver):
    c = driver.connect()
    for special in ("/", "/zookeeper", "/zookeeper/quota", "/zookeeper/config"):
        assert c.delete(special) == errors.BADARGUMENTS
    assert c.delete("/nope/child") == errors.NONODE
    assert c.delete("/nope") == errors.NONODE
    c.create("/d")
    c.create("/d/k")
    assert c.delete("/d", version=5) == errors.BADVERSION  # version before emptiness
    assert c.delete("/d") == errors.NOTEMPTY
    assert c.set("/d/", b"") == errors.BADARGUMENTS
    assert c.set("/missing", b"") == errors.NONODE
    assert c.set("/d", b"", version=3) == errors.BADVERSION
    assert c.set("/d", b"v", version=0).version == 1
    err, _, _ = c.call(13, jute.CheckVersionRequest("/d", 0))
    assert err == errors.BADVERSION
    assert c.get("/missing") == errors.NONODE
    assert c.children("/missing") == errors.NONODE
    assert c.call(3, jute.ExistsRequest("/a\0b", False))[0] == errors.BADARGUMENTS
    assert c.call(16, jute.ReconfigRequest(None, None, None, -1))[0] == errors.RECONFIGDISABLED


def test_unknown_opcode_gets_unimplemented_then_the_connection_closes(driver):
    c = driver.connect()
    err, _, _ = c.call(55, None)
    assert err == errors.UNIMPLEMENTED and c.closed
    assert any("unknown opcode 55" in line for line in driver.logs)
    other = driver.connect()
    assert other.create("/still-works") == "/still-works"


def test_malformed_body_gets_marshalling_error_and_connection_survives(driver):
    c = driver.connect()
    driver.core.receive(c.key, 9, 4, b"\x00\x00", driver.now)
    driver.drain()
    assert c.reply(9)[0] == errors.MARSHALLINGERROR
    assert c.create("/ok") == "/ok"


def test_acl_permission_checks_come_before_existence(driver):
    owner = driver.connect()
    owner.add_auth("digest", b"alice:secret")
    owner.create("/locked", acl=[(31, "auth", "")])
    stranger = driver.connect()
    assert stranger.delete("/locked/missing") == errors.NOAUTH  # DELETE on parent first
    assert stranger.create("/locked/x") == errors.NOAUTH
    assert stranger.get("/locked") == errors.NOAUTH
    assert stranger.set("/locked", b"x") == errors.NOAUTH
    assert stranger.exists("/locked") == errors.NOAUTH
    assert owner.get("/locked").data == b""


# ---------------------------------------------------------------------- ACLs and auth

def test_digest_auth_creator_acl_getacl_masking_and_whoami(driver):
    alice = driver.connect()
    assert alice.add_auth("digest", b"alice:secret") == 0
    alice.create("/a", acl=[(31, "auth", ""), (1, "world", "anyone")])
    err, body, _ = alice.call(6, jute.GetACLRequest("/a"))
    acl = jute.decode_record(jute.GetACLResponse, body).acl
    assert acl == [(31, "digest", digest("alice:secret")), (1, "world", "anyone")]
    reader = driver.connect()
    err, body, _ = reader.call(6, jute.GetACLRequest("/a"))
    assert jute.decode_record(jute.GetACLResponse, body).acl[0] == (31, "digest", "alice:x")
    assert reader.get("/a").data == b""
    assert reader.set("/a", b"no") == errors.NOAUTH
    err, body, _ = alice.call(107, None)
    assert jute.decode_record(jute.WhoAmIResponse, body).clientInfo == [
        ("ip", "127.0.0.1"), ("digest", "alice")]


def test_setacl_checks_admin_and_aversion(driver):
    c = driver.connect()
    c.create("/n")
    err, _, _ = c.call(7, jute.SetACLRequest("/n", [(1, "world", "anyone")], 3))
    assert err == errors.BADVERSION
    err, body, _ = c.call(7, jute.SetACLRequest("/n", [(1, "world", "anyone")], 0))
    assert err == 0 and jute.decode_record(jute.StatResponse, body).stat.aversion == 1
    assert c.set("/n", b"x") == errors.NOAUTH
    err, _, _ = c.call(7, jute.SetACLRequest("/n", OPEN, -1))
    assert err == errors.NOAUTH  # no ADMIN any more
    assert c.call(7, jute.SetACLRequest("/zz", [], -1))[0] == errors.INVALIDACL


def test_ip_acl_and_super_digest():
    d = Driver(super_digest=digest("super:pw"))
    local = d.connect(peer="127.0.0.1")
    local.create("/ip", acl=[(31, "ip", "127.0.0.0/8")])
    assert local.get("/ip").data == b""
    remote = d.connect(peer="10.1.2.3")
    assert remote.get("/ip") == errors.NOAUTH
    assert remote.add_auth("digest", b"super:pw") == 0
    assert remote.get("/ip").data == b""


def test_unknown_auth_scheme_fails_with_authfailed_and_closes(driver):
    c = driver.connect()
    assert c.add_auth("kerberos", b"x") == errors.AUTHFAILED
    assert c.closed


# ---------------------------------------------------------------------- watches

def test_data_watch_fires_once_and_before_the_reply(driver):
    watcher = driver.connect()
    writer = driver.connect()
    writer.create("/w", b"1")
    watcher.get("/w", watch=True)
    writer.set("/w", b"2")
    writer.set("/w", b"3")
    assert watcher.take_events() == [(CHANGED, "/w")]
    # own write: the event is queued ahead of the reply
    watcher.get("/w", watch=True)
    xid = watcher.send(5, jute.SetDataRequest("/w", b"4", -1))
    first = watcher.inbox[0]
    assert jute.REPLY_HEADER.unpack_from(first)[0] == -1
    assert watcher.reply(xid)[0] == 0
    assert watcher.take_events() == [(CHANGED, "/w")]


def test_exists_watch_on_missing_node_fires_created(driver):
    c = driver.connect()
    assert c.exists("/later", watch=True) == errors.NONODE
    c.create("/later")
    assert c.take_events() == [(CREATED, "/later")]


def test_child_watch_create_and_delete_and_one_event_per_connection(driver):
    c = driver.connect()
    c.create("/p")
    c.children("/p", watch=True)
    c.create("/p/a")
    assert c.take_events() == [(CHILD, "/p")]
    c.children("/p", watch=True)
    c.get("/p/a", watch=True)
    c.children("/p/a", watch=True)
    c.delete("/p/a")
    assert c.take_events() == [(DELETED, "/p/a"), (CHILD, "/p")]
    c.set("/p", b"x")
    assert c.take_events() == []


def test_setacl_fires_nothing_and_failed_ops_fire_nothing(driver):
    c = driver.connect()
    c.create("/q")
    c.get("/q", watch=True)
    c.call(7, jute.SetACLRequest("/q", OPEN, -1))
    assert c.set("/q", b"", version=9) == errors.BADVERSION
    assert c.take_events() == []


def test_watches_are_filtered_by_read_permission(driver):
    alice = driver.connect()
    alice.add_auth("digest", b"alice:pw")
    alice.create("/secret", acl=[(31, "auth", "")])
    spy = driver.connect()
    assert spy.exists("/secret", watch=True) == errors.NOAUTH
    assert spy.exists("/secret/x", watch=True) == errors.NONODE
    alice.set("/secret", b"x")
    alice.create("/secret/x", acl=[(31, "auth", "")])
    assert spy.take_events() == []


def test_persistent_and_recursive_watches(driver):
    c = driver.connect()
    c.create("/r")
    assert c.call(106, jute.AddWatchRequest("/r", 0))[1] == b"\x00\x00\x00\x00"
    other = driver.connect()
    other.call(106, jute.AddWatchRequest("/r", 1))
    c.set("/r", b"1")
    c.set("/r", b"2")
    c.create("/r/k")
    c.set("/r/k", b"x")
    assert c.take_events() == [(CHANGED, "/r"), (CHANGED, "/r"), (CHILD, "/r")]
    assert other.take_events() == [(CHANGED, "/r"), (CHANGED, "/r"), (CREATED, "/r/k"),
                                   (CHANGED, "/r/k")]
    assert other.call(18, jute.RemoveWatchesRequest("/r", 5))[0] == 0
    assert other.call(17, jute.CheckWatchesRequest("/r", 5))[0] == errors.NOWATCHER
    c.set("/r/k", b"y")
    assert other.take_events() == []


def test_set_watches_catch_up_and_rearm(driver):
    c = driver.connect()
    c.create("/same")
    c.create("/changed")
    c.create("/kids")
    rel = driver.core.tree.zxid
    c.set("/changed", b"x")
    c.create("/kids/k")
    c.create("/born")
    err, _, _ = c.call(101, jute.SetWatches(rel, ["/same", "/changed", "/gone"],
                                            ["/born", "/unborn"], ["/kids", "/same"]))
    assert err == 0
    assert c.take_events() == [(CHANGED, "/changed"), (DELETED, "/gone"), (CREATED, "/born"),
                               (CHILD, "/kids")]
    c.create("/unborn")
    c.set("/same", b"1")
    c.create("/same/k")
    assert c.take_events() == [(CREATED, "/unborn"), (CHANGED, "/same"), (CHILD, "/same")]


def test_watches_die_with_their_connection(driver):
    c = driver.connect()
    c.create("/w")
    c.get("/w", watch=True)
    driver.core.disconnect(c.key, driver.now)
    other = driver.connect()
    other.set("/w", b"x")
    assert driver.core.watch_count() == 0


# ---------------------------------------------------------------------- multi

def test_multi_failure_encoding_and_nothing_applied(driver):
    c = driver.connect()
    c.create("/m")
    c.get("/m", watch=True)
    ops = [(1, jute.CreateRequest("/m/a", b"", OPEN, 0)),
           (5, jute.SetDataRequest("/m", b"x", -1)),
           (13, jute.CheckVersionRequest("/m", 7)),
           (2, jute.DeleteRequest("/m/a", -1))]
    txns_before = len(driver.txns)
    err, body, _ = c.call(14, ops)
    assert err == 0
    results = jute.decode_multi_response(body)
    assert [(t, e) for t, e, _ in results] == [(-1, 0), (-1, 0), (-1, errors.BADVERSION), (-1, -2)]
    assert c.exists("/m/a") == errors.NONODE
    assert c.exists("/m").version == 0 and c.exists("/m").cversion == 0
    assert len(driver.txns) == txns_before
    assert c.take_events() == []
    driver.core.tree.check_invariants()


def test_multi_success_is_one_txn_and_sees_earlier_ops(driver):
    c = driver.connect()
    c.create("/t")
    ops = [(1, jute.CreateRequest("/t/s-", b"", OPEN, 2)),
           (1, jute.CreateRequest("/t/s-", b"", OPEN, 2)),
           (13, jute.CheckVersionRequest("/t/s-0000000001", 0)),
           (5, jute.SetDataRequest("/t/s-0000000000", b"v", 0)),
           (15, jute.CreateRequest("/t/x", b"", OPEN, 0)),
           (2, jute.DeleteRequest("/t/s-0000000001", -1))]
    n = len(driver.txns)
    err, body, zxid = c.call(14, ops)
    results = jute.decode_multi_response(body)
    assert [t for t, _, _ in results] == [1, 1, 13, 5, 15, 2]
    assert results[0][2].path == "/t/s-0000000000"
    assert results[3][2].stat.version == 1
    assert results[4][2].stat.czxid == zxid
    assert len(driver.txns) == n + 1
    assert c.exists("/t/s-0000000000").czxid == zxid
    assert sorted(c.children("/t").children) == ["s-0000000000", "x"]


def test_empty_multi_replies_with_just_the_terminator(driver):
    c = driver.connect()
    err, body, _ = c.call(14, [])
    assert err == 0 and jute.decode_multi_response(body) == []


# ---------------------------------------------------------------------- sessions

def test_timeout_is_clamped_to_2_and_20_ticks(driver):
    assert driver.connect(timeout_ms=100).timeout_ms == 4000
    assert driver.connect(timeout_ms=10**6).timeout_ms == 40000
    assert driver.connect(timeout_ms=5000).timeout_ms == 5000


def test_read_only_byte_echoed_only_when_sent(driver):
    assert driver.connect(read_only=False).read_only_byte is False
    assert driver.connect(read_only=None).read_only_byte is None


def test_session_expires_at_tick_granularity_and_removes_ephemerals(driver):
    owner = driver.connect(timeout_ms=4000)  # now = 1_000_000, tick 2000
    owner.create("/eph", flags=1)
    watcher = driver.connect(timeout_ms=40000)
    watcher.exists("/eph", watch=True)
    driver.core.disconnect(owner.key, driver.now)  # socket gone: session lives on
    driver.tick(1_004_000)
    assert watcher.exists("/eph") is not None
    driver.tick(1_005_999)
    assert watcher.exists("/eph", watch=True) is not None
    driver.tick(1_006_000)  # deadline rounded up to the next tick after now + timeout
    assert watcher.take_events() == [(DELETED, "/eph")]
    assert watcher.exists("/eph") == errors.NONODE
    assert any("expired" in line for line in driver.logs)
    driver.core.tree.check_invariants()


def test_every_packet_touches_the_session(driver):
    c = driver.connect(timeout_ms=4000)
    driver.now = 1_003_000
    c.call(11, None, xid=-2)  # ping
    driver.tick(1_006_000)
    assert not c.closed
    driver.tick(1_008_000)
    assert c.closed


def test_resume_with_password_keeps_ephemerals_and_closes_old_connection(driver):
    c = driver.connect()
    c.create("/mine", flags=1)
    again = driver.connect(session_id=c.session_id, passwd=c.passwd)
    assert again.session_id == c.session_id and c.closed
    assert again.exists("/mine").ephemeralOwner == c.session_id
    err, body, _ = again.call(103, jute.GetEphemeralsRequest("/"))
    assert jute.decode_record(jute.GetEphemeralsResponse, body).ephemerals == ["/mine"]


def test_resume_with_bad_password_or_unknown_session_gets_timeout_zero(driver):
    c = driver.connect()
    bad = driver.connect(session_id=c.session_id, passwd=b"x" * 16)
    assert (bad.timeout_ms, bad.session_id, bad.passwd) == (0, 0, b"\0" * 16) and bad.closed
    unknown = driver.connect(session_id=12345, passwd=b"\0" * 16)
    assert unknown.timeout_ms == 0 and unknown.closed


def test_close_session_deletes_ephemerals_replies_and_closes(driver):
    c = driver.connect()
    c.create("/e1", flags=1)
    c.create("/e2", flags=3)
    watcher = driver.connect()
    watcher.children("/", watch=True)
    err, _, _ = c.call(-11, None)
    assert err == 0 and c.closed
    assert watcher.take_events() == [(CHILD, "/")]
    assert watcher.children("/").children == ["zookeeper"]
    assert any("closed" in line for line in driver.logs)
    later = driver.connect(session_id=c.session_id, passwd=c.passwd)
    assert later.timeout_ms == 0


def test_all_children_number_and_ephemerals_prefix(driver):
    c = driver.connect()
    c.create("/a")
    c.create("/a/b")
    c.create("/a/b/c", flags=1)
    c.create("/z", flags=1)
    err, body, _ = c.call(104, jute.GetAllChildrenNumberRequest("/a"))
    assert jute.decode_record(jute.GetAllChildrenNumberResponse, body).totalNumber == 2
    err, body, _ = c.call(104, jute.GetAllChildrenNumberRequest("/"))
    assert jute.decode_record(jute.GetAllChildrenNumberResponse, body).totalNumber == 7
    err, body, _ = c.call(103, jute.GetEphemeralsRequest("/a"))
    assert jute.decode_record(jute.GetEphemeralsResponse, body).ephemerals == ["/a/b/c"]


def test_containers_are_deleted_once_emptied():
    d = Driver(container_check_ms=1000)
    c = d.connect(timeout_ms=40000)
    c.create("/c", flags=4, opcode=19)
    assert c.exists("/c").ephemeralOwner == 0
    c.create("/c/x")
    d.tick(d.now + 2000)
    assert c.exists("/c") is not None
    c.delete("/c/x")
    d.tick(d.now + 2000)
    assert c.exists("/c") == errors.NONODE


def test_same_inputs_give_the_same_outputs():
    def run():
        d = Driver()
        a = d.connect()
        a.create("/x", flags=3)
        a.create("/y", b"1")
        a.get("/y", watch=True)
        a.set("/y", b"2")
        d.tick(1_100_000)
        return d.txns, d.logs

    assert run() == run()


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_SEEDS = [jute.encode_record(r) for r in (
    jute.CreateRequest("/h", b"x", OPEN, 1), jute.SetDataRequest("/h", b"", -1),
    jute.SetACLRequest("/h", [(31, "digest", "a:b")], -1), jute.SetWatches2(0, ["/h"], [], ["/"], ["/"], ["/h"]),
    jute.AuthPacket(0, "digest", b"u:p"), jute.AddWatchRequest("/", 1))]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(sorted(jute.REQUEST_RECORDS) + [14, 22, 10, 99]),
                          st.one_of(st.binary(max_size=60), st.sampled_from(_SEEDS))),
                min_size=1, max_size=12))
def test_fuzz_core_never_raises_and_sends_only_known_codes(requests):
    d = Driver()
    c = d.connect()
    c.create("/h")
    for xid, (opcode, body) in enumerate(requests, start=1):
        if c.closed:
            c = d.connect()
        d.core.receive(c.key, xid, opcode, body, d.now)
        d.drain()
        for frame in c.inbox:
            if len(frame) >= 16:
                assert jute.REPLY_HEADER.unpack_from(frame)[2] in errors.NAMES
        c.inbox.clear()
        d.core.tree.check_invariants()


def test_mixed_read_write_multis_and_bad_addwatch_mode_are_marshalling_errors(driver):
    c = driver.connect()
    assert c.call(14, [(4, jute.GetDataRequest("/", False))])[0] == errors.MARSHALLINGERROR
    assert c.call(22, [(2, jute.DeleteRequest("/x", -1))])[0] == errors.MARSHALLINGERROR
    assert c.call(106, jute.AddWatchRequest("/", 7))[0] == errors.MARSHALLINGERROR
    err, body, _ = c.call(22, [(4, jute.GetDataRequest("/", False)), (8, jute.GetChildrenRequest("/nope", False))])
    assert err == 0
    assert [(t, e) for t, e, _ in jute.decode_multi_response(body)] == [(4, 0), (-1, errors.NONODE)]


def test_sasl_without_configuration_answers_a_null_token(driver):
    c = driver.connect()
    err, body, zxid = c.call(102, jute.GetSASLRequest(b"tok"))
    assert (err, body, zxid) == (0, b"\xff\xff\xff\xff", 0) and not c.closed


def test_null_and_empty_paths_and_odd_arguments_as_zookeeper_3_8(driver):
    c = driver.connect()
    assert c.exists("").numChildren == 1  # "" names the root in ZooKeeper's tree
    assert c.call(3, jute.ExistsRequest(None, False))[0] == errors.MARSHALLINGERROR
    assert c.get(None) == errors.MARSHALLINGERROR
    assert c.call(21, jute.CreateTTLRequest("/t", b"", OPEN, 0, 100))[0] == errors.BADARGUMENTS
    assert c.create("/v6", acl=[(31, "ip", "::1")]) == errors.INVALIDACL
    assert c.call(18, jute.RemoveWatchesRequest("/", 9))[0] == errors.MARSHALLINGERROR


def test_a_one_shot_watch_replaces_a_persistent_one_on_the_same_path_as_in_3_8(driver):
    """ZooKeeper 3.8 keeps one mode per (table, path, watcher): `addWatch -m
    PERSISTENT_RECURSIVE /a` then `get -w /a` leaves a one-shot data watch."""
    c = driver.connect()
    writer = driver.connect()
    c.call(106, jute.AddWatchRequest("/a", 1))
    assert c.exists("/a", watch=True) == errors.NONODE
    writer.create("/a")
    writer.create("/a/b")  # the data-table entry for /a was one-shot: no NodeCreated /a/b
    assert c.take_events() == [(CREATED, "/a")]
    assert c.call(18, jute.RemoveWatchesRequest("/a", 2))[0] == errors.NOWATCHER
    assert c.call(17, jute.CheckWatchesRequest("/a", 1))[0] == 0  # child table: still recursive


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["create", "eph", "seq", "delete", "set", "multi", "close"]),
                          st.sampled_from(["/a", "/a/b", "/b", "/a/b/c", "/e"])), max_size=25))
def test_random_valid_operations_keep_the_tree_invariants(steps):
    d = Driver()
    c = d.connect()
    for action, path in steps:
        if c.closed:
            c = d.connect()
        if action == "create":
            c.create(path)
        elif action == "eph":
            c.create(path, flags=1)
        elif action == "seq":
            c.create(path, flags=3)
        elif action == "delete":
            c.delete(path)
        elif action == "set":
            c.set(path, b"x")
        elif action == "multi":
            c.call(14, [(1, jute.CreateRequest(path, b"", OPEN, 0)),
                        (1, jute.CreateRequest(path + "/k", b"", OPEN, 1)),
                        (2, jute.DeleteRequest(path + "/k", -1))])
        else:
            c.call(-11, None)
        d.core.tree.check_invariants()
