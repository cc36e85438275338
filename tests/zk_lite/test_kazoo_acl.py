"""Digest ACLs and auth through kazoo (ZK_PROTOCOL.md §6.6)."""
from __future__ import annotations

import pytest
from kazoo.exceptions import AuthFailedError, NoAuthError
from kazoo.security import (
    CREATOR_ALL_ACL,
    OPEN_ACL_UNSAFE,
    READ_ACL_UNSAFE,
    make_acl,
    make_digest_acl,
    make_digest_acl_credential,
)

from .util import EventLog, drain_callbacks

pytestmark = pytest.mark.process


def secure_acl():
    """Everything for digest user alice, read for the world."""
    return [make_digest_acl("alice", "secret", all=True), make_acl("world", "anyone", read=True)]


def test_digest_owner_may_write_others_only_read(zk, make_client):
    owner = make_client(auth_data=[("digest", "alice:secret")])
    stranger = make_client()
    impostor = make_client(auth_data=[("digest", "alice:wrong")])  # digest auth always succeeds
    owner.create("/secure", b"v0", acl=secure_acl())
    assert stranger.get("/secure")[0] == b"v0"  # world read
    for client in (stranger, impostor):
        with pytest.raises(NoAuthError):
            client.set("/secure", b"hacked")
        with pytest.raises(NoAuthError):
            client.create("/secure/child")
        with pytest.raises(NoAuthError):
            client.set_acls("/secure", OPEN_ACL_UNSAFE)
    owner.set("/secure", b"v1")
    owner.create("/secure/child")
    with pytest.raises(NoAuthError):  # delete needs DELETE on the parent
        stranger.delete("/secure/child")
    owner.delete("/secure/child")
    assert stranger.get("/secure")[0] == b"v1"


def test_add_auth_at_runtime_grants_access(zk, make_client):
    owner = make_client(auth_data=[("digest", "alice:secret")])
    owner.create("/secure", acl=secure_acl())
    with pytest.raises(NoAuthError):
        zk.set("/secure", b"x")
    zk.add_auth("digest", "alice:secret")
    assert zk.set("/secure", b"x").version == 1


def test_no_read_permission_hides_data_and_children(zk, make_client):
    owner = make_client(auth_data=[("digest", "alice:secret")])
    owner.create("/private", b"secret", acl=[make_digest_acl("alice", "secret", all=True)])
    owner.create("/private/child")
    with pytest.raises(NoAuthError):
        zk.get("/private")
    with pytest.raises(NoAuthError):
        zk.get_children("/private")
    # exists() is left out on purpose: 3.8.0 (Debian) answers it without an ACL check,
    # later 3.8.x releases check READ. Either is ZooKeeper behaviour.
    assert owner.get("/private")[0] == b"secret"


def test_creator_acl_expands_to_the_authenticated_digest(zk, make_client):
    owner = make_client(auth_data=[("digest", "bob:pw")])
    owner.create("/mine", acl=CREATOR_ALL_ACL)
    acls, stat = owner.get_acls("/mine")
    assert len(acls) == 1
    assert acls[0].perms == 31
    assert (acls[0].id.scheme, acls[0].id.id) == ("digest", make_digest_acl_credential("bob", "pw"))
    assert stat.aversion == 0
    with pytest.raises(NoAuthError):
        zk.get("/mine")


def test_get_acls_returns_what_was_set(zk):
    zk.create("/r", acl=READ_ACL_UNSAFE)
    acls, _ = zk.get_acls("/r")
    assert [(a.perms, a.id.scheme, a.id.id) for a in acls] == [(1, "world", "anyone")]
    with pytest.raises(NoAuthError):
        zk.set("/r", b"x")
    with pytest.raises(NoAuthError):  # CREATE is missing too
        zk.create("/r/child")


def test_set_acls_changes_enforcement_and_bumps_aversion(zk, make_client):
    other = make_client()
    zk.add_auth("digest", "carol:pw")
    zk.create("/n")
    stat = zk.set_acls("/n", [make_digest_acl("carol", "pw", all=True)])
    assert stat.aversion == 1 and stat.version == 0
    with pytest.raises(NoAuthError):
        other.get("/n")
    assert zk.get("/n")[0] == b""


def test_watch_events_are_not_sent_to_watchers_who_lost_read(zk, make_client):
    owner = make_client(auth_data=[("digest", "alice:secret")])
    owner.create("/w", b"0")
    log = EventLog()
    zk.get("/w", watch=log)
    owner.set_acls("/w", [make_digest_acl("alice", "secret", all=True)])  # setACL fires nothing
    owner.set("/w", b"1")  # the watcher can no longer read /w
    drain_callbacks(zk)
    assert log.kinds() == []


def test_ip_acl_matches_the_peer_address(zk):
    zk.create("/loopback", b"ok", acl=[make_acl("ip", "127.0.0.1", all=True)])
    assert zk.get("/loopback")[0] == b"ok"
    zk.create("/subnet", b"ok", acl=[make_acl("ip", "127.0.0.0/8", all=True)])
    assert zk.get("/subnet")[0] == b"ok"
    zk.create("/elsewhere", acl=[make_acl("ip", "10.1.2.3", all=True)])
    with pytest.raises(NoAuthError):
        zk.get("/elsewhere")


def test_unknown_auth_scheme_fails_auth(make_client):
    client = make_client()
    with pytest.raises(AuthFailedError):
        client.add_auth("no-such-scheme", "whatever")


def test_get_acls_needs_read_or_admin(zk, make_client):
    owner = make_client(auth_data=[("digest", "alice:secret")])
    owner.create("/admin-only", acl=[make_digest_acl("alice", "secret", admin=True)])
    owner.create("/nothing", acl=[make_digest_acl("alice", "secret", write=True)])
    assert len(owner.get_acls("/admin-only")[0]) == 1
    with pytest.raises(NoAuthError):
        zk.get_acls("/nothing")


def test_creator_acl_gets_one_entry_per_authenticated_digest(make_client):
    owner = make_client(auth_data=[("digest", "alice:secret"), ("digest", "bob:pw")])
    owner.create("/ours", acl=CREATOR_ALL_ACL)
    ids = sorted((a.perms, a.id.scheme, a.id.id) for a in owner.get_acls("/ours")[0])
    assert ids == [(31, "digest", make_digest_acl_credential("alice", "secret")),
                   (31, "digest", make_digest_acl_credential("bob", "pw"))]


def test_get_acls_without_admin_masks_digest_hashes(zk, make_client):
    owner = make_client(auth_data=[("digest", "alice:secret")])
    owner.create("/masked", acl=secure_acl())
    seen = sorted((a.perms, a.id.scheme, a.id.id) for a in zk.get_acls("/masked")[0])
    assert seen == [(1, "world", "anyone"), (31, "digest", "alice:x")]
    full = sorted((a.perms, a.id.scheme, a.id.id) for a in owner.get_acls("/masked")[0])
    assert (31, "digest", make_digest_acl_credential("alice", "secret")) in full
