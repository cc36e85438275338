"""Four-letter words that health checks and kazoo's ``command()`` use (ZK_PROTOCOL.md §6.12)."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.process


def test_ruok_answers_imok(zk):
    assert zk.command(b"ruok") == "imok"


def test_srvr_reports_standalone_mode_and_zxid(zk):
    zk.create("/x")
    lines = zk.command(b"srvr").splitlines()
    assert lines[0].startswith("Zookeeper version: ")
    assert "Mode: standalone" in lines
    zxid_lines = [line for line in lines if line.startswith("Zxid: 0x")]
    assert len(zxid_lines) == 1 and int(zxid_lines[0].split("0x")[1], 16) > 0
    assert any(line.startswith("Node count: ") for line in lines)


def test_mntr_reports_tab_separated_keys(zk):
    pairs = dict(line.split("\t", 1) for line in zk.command(b"mntr").splitlines() if "\t" in line)
    assert pairs["zk_server_state"] == "standalone"
    assert int(pairs["zk_znode_count"]) >= 5  # /, /zookeeper, quota, config, our namespace
    assert int(pairs["zk_num_alive_connections"]) >= 1


def test_stat_lists_clients(zk):
    text = zk.command(b"stat")
    assert "Clients:" in text and "Mode: standalone" in text


def test_isro_answers_rw(zk):
    assert zk.command(b"isro") == "rw"


def test_cons_lists_each_connection_with_its_peer_port_and_session(zk):
    local_port = zk._connection._socket.getsockname()[1]  # kazoo keeps no public handle
    text = zk.command(b"cons")
    lines = [line for line in text.splitlines() if f"/127.0.0.1:{local_port}[" in line]
    assert len(lines) == 1, text
    assert f"sid=0x{zk.client_id[0]:x}" in lines[0], text
