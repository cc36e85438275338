"""CRUD through kazoo: stat maintenance, versions, sequential names and every error code.

Each test runs against zk_lite and a real ZooKeeper 3.8 (the reference); see ZK_PROTOCOL.md
§5 (error codes and check order) and §6.3 (stat maintenance, cversion, sequence suffix).
"""
from __future__ import annotations

import pytest
from kazoo.exceptions import (
    BadArgumentsError,
    BadVersionError,
    InvalidACLError,
    NoAuthError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    ReconfigDisabledError,
)
from kazoo.security import CREATOR_ALL_ACL, make_acl

pytestmark = pytest.mark.process


def test_create_then_get_returns_data_and_fresh_stat(zk):
    assert zk.create("/a", b"hello") == "/a"
    data, stat = zk.get("/a")
    assert data == b"hello"
    assert stat.version == 0 and stat.cversion == 0 and stat.aversion == 0
    assert stat.dataLength == 5 and stat.numChildren == 0
    assert stat.czxid == stat.mzxid == stat.pzxid > 0
    assert stat.ephemeralOwner == 0
    assert stat.ctime == stat.mtime > 0


def test_empty_and_null_data_have_zero_length(zk):
    zk.create("/empty", b"")
    zk.create("/null", None)
    assert zk.get("/empty")[0] == b""
    assert zk.get("/null")[0] is None
    assert zk.exists("/empty").dataLength == 0
    assert zk.exists("/null").dataLength == 0


def test_set_bumps_version_and_mzxid_only(zk):
    zk.create("/a", b"x")
    before = zk.exists("/a")
    after = zk.set("/a", b"yy")
    assert after.version == 1
    assert after.dataLength == 2
    assert after.czxid == before.czxid
    assert after.mzxid > before.mzxid
    assert after.pzxid == before.pzxid  # data changes are not child changes
    assert after.cversion == before.cversion
    assert zk.get("/a") == (b"yy", after)
    assert zk.set("/a", b"z", version=1).version == 2


def test_children_change_cversion_numchildren_and_pzxid(zk):
    zk.create("/p")
    child = zk.create("/p/c1", include_data=True)[1]
    parent = zk.exists("/p")
    assert parent.numChildren == 1 and parent.cversion == 1
    assert parent.pzxid == child.czxid
    assert parent.version == 0  # children do not touch the parent's data version
    zk.create("/p/c2")
    zk.delete("/p/c1")
    parent_after = zk.exists("/p")
    assert parent_after.numChildren == 1
    assert parent_after.cversion == 3  # creates plus deletes
    assert parent_after.pzxid > parent.pzxid
    children, stat = zk.get_children("/p", include_data=True)
    assert children == ["c2"] and stat == parent_after


def test_zxids_increase_with_each_write(zk):
    zxids = [zk.create(f"/n{i}", include_data=True)[1].czxid for i in range(5)]
    assert zxids == sorted(set(zxids))


def test_get_children_lists_names_not_paths(zk):
    zk.create("/d")
    for name in ("x", "y", "z"):
        zk.create(f"/d/{name}")
    assert sorted(zk.get_children("/d")) == ["x", "y", "z"]
    assert zk.get_children("/d/x") == []


def test_wrong_version_is_bad_version_and_changes_nothing(zk):
    zk.create("/v", b"1")
    zk.set("/v", b"2", version=0)
    with pytest.raises(BadVersionError):
        zk.set("/v", b"3", version=0)
    with pytest.raises(BadVersionError):
        zk.delete("/v", version=7)
    assert zk.get("/v")[0] == b"2"
    zk.delete("/v", version=1)
    assert zk.exists("/v") is None


def test_set_acls_checks_aversion(zk):
    zk.create("/acl")
    acl = [make_acl("world", "anyone", all=True)]
    with pytest.raises(BadVersionError):
        zk.set_acls("/acl", acl, version=3)
    assert zk.set_acls("/acl", acl, version=0).aversion == 1


def test_exists_on_missing_node_returns_none(zk):
    assert zk.exists("/missing") is None


def test_missing_node_is_no_node(zk):
    with pytest.raises(NoNodeError):
        zk.get("/missing")
    with pytest.raises(NoNodeError):
        zk.set("/missing", b"x")
    with pytest.raises(NoNodeError):
        zk.delete("/missing")
    with pytest.raises(NoNodeError):
        zk.get_children("/missing")
    with pytest.raises(NoNodeError):
        zk.create("/missing/child")  # missing parent


def test_existing_node_is_node_exists(zk):
    zk.create("/e", b"first")
    with pytest.raises(NodeExistsError):
        zk.create("/e", b"second")
    assert zk.get("/e")[0] == b"first"


def test_delete_with_children_is_not_empty(zk):
    zk.create("/full/child", makepath=True)
    with pytest.raises(NotEmptyError):
        zk.delete("/full")
    assert zk.exists("/full/child") is not None


def test_child_of_ephemeral_is_refused(zk):
    zk.create("/eph", ephemeral=True)
    with pytest.raises(NoChildrenForEphemeralsError):
        zk.create("/eph/child")
    with pytest.raises(NoChildrenForEphemeralsError):
        zk.create("/eph/seq-", sequence=True)


def test_invalid_acls_are_invalid_acl(zk):
    # kazoo's create() turns an empty list into its default ACL; set_acls and
    # transactions send it as it is.
    zk.create("/open")
    with pytest.raises(InvalidACLError):
        zk.set_acls("/open", [])
    transaction = zk.transaction()
    transaction.create("/noacl", acl=[])
    assert isinstance(transaction.commit()[0], InvalidACLError)
    with pytest.raises(InvalidACLError):  # auth scheme, but this connection has no auth id
        zk.create("/creator", acl=CREATOR_ALL_ACL)
    with pytest.raises(InvalidACLError):  # a digest id must look like user:hash
        zk.create("/digest", acl=[make_acl("digest", "no-colon", all=True)])
    with pytest.raises(InvalidACLError):  # world has only the id anyone
        zk.create("/world", acl=[make_acl("world", "someone", all=True)])
    assert zk.get_children("/") == ["open"]


@pytest.mark.parametrize("name", ["bad\u0001name", "del\u007fete", "pri\ue000vate", "spe\ufff0cial"])
def test_invalid_path_characters_are_bad_arguments(zk, name):
    with pytest.raises(BadArgumentsError):
        zk.create(f"/{name}")
    with pytest.raises(BadArgumentsError):
        zk.set(f"/{name}", b"")


def test_system_nodes_cannot_be_deleted(make_client):
    root_client = make_client(chroot=False)
    for path in ("/", "/zookeeper", "/zookeeper/quota", "/zookeeper/config"):
        with pytest.raises(BadArgumentsError):
            root_client.delete(path)
    with pytest.raises(NodeExistsError):
        root_client.create("/")
    assert root_client.exists("/zookeeper") is not None


def test_sequential_suffix_is_parent_child_counter(zk):
    zk.create("/s")
    assert zk.create("/s/n-", sequence=True) == "/s/n-0000000000"
    zk.create("/s/plain")  # non-sequential creates advance the counter too
    assert zk.create("/s/n-", sequence=True) == "/s/n-0000000002"
    zk.delete("/s/plain")  # deletes do not
    assert zk.create("/s/n-", sequence=True) == "/s/n-0000000003"
    assert zk.create("/s/", sequence=True) == "/s/0000000004"  # a bare suffix
    ephemeral = zk.create("/s/e-", sequence=True, ephemeral=True)
    assert ephemeral == "/s/e-0000000005"
    assert zk.exists(ephemeral).ephemeralOwner == zk.client_id[0]
    assert sorted(zk.get_children("/s")) == [
        "0000000004", "e-0000000005", "n-0000000000", "n-0000000002", "n-0000000003"]


def test_sequential_counters_are_per_parent(zk):
    zk.create("/one")
    zk.create("/two")
    assert zk.create("/one/x", sequence=True) == "/one/x0000000000"
    assert zk.create("/one/x", sequence=True) == "/one/x0000000001"
    assert zk.create("/two/x", sequence=True) == "/two/x0000000000"


def test_large_value_round_trips(zk):
    value = bytes(range(256)) * 3900  # 998,400 bytes: under jute.maxbuffer with headers
    zk.create("/large", value)
    assert zk.get("/large") == (value, zk.exists("/large"))
    assert zk.exists("/large").dataLength == len(value)


def test_many_children_are_all_listed(zk):
    zk.create("/many")
    transaction = zk.transaction()
    for i in range(500):
        transaction.create(f"/many/c{i:04d}")
    assert len(transaction.commit()) == 500
    assert sorted(zk.get_children("/many")) == [f"c{i:04d}" for i in range(500)]
    assert zk.exists("/many").numChildren == 500


def test_check_in_transaction_on_missing_node_is_no_node(zk):
    transaction = zk.transaction()
    transaction.check("/missing", 0)
    assert isinstance(transaction.commit()[0], NoNodeError)


def test_system_tree_of_a_standalone_server(make_client):
    root_client = make_client(chroot=False)
    data, stat = root_client.get("/zookeeper/config")
    assert data == b"" and stat.aversion == -1 and stat.czxid == 0
    acls = root_client.get_acls("/zookeeper/config")[0]
    assert [(a.perms, a.id.scheme, a.id.id) for a in acls] == [(1, "world", "anyone")]
    with pytest.raises(NoAuthError):
        root_client.set("/zookeeper/config", b"x")
    assert {"config", "quota"} <= set(root_client.get_children("/zookeeper"))
    root = root_client.exists("/")
    assert root.czxid == 0 and root.ctime == 0 and root.numChildren >= 2


def test_reconfig_is_disabled_on_a_standalone_server(zk):
    with pytest.raises(ReconfigDisabledError):
        zk.reconfig(joining=None, leaving="2", new_members=None)


def test_sync_returns_the_path(zk):
    zk.create("/synced")
    assert zk.sync("/synced") == "/synced"


def test_server_version_is_a_3_x_release(zk):
    version = zk.server_version()
    assert version[0] == 3 and version >= (3, 5)
