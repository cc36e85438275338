"""``node.ports``: the ports picked for servers lie outside the kernel's ephemeral range,
so no outgoing connection takes one while its server is down (CI: a broker restarted
after SIGKILL could not bind its Kafka listener's port)."""
from __future__ import annotations

import socket

from node import ports


def test_picked_ports_are_free_distinct_and_outside_the_ephemeral_range():
    low, high = ports.ephemeral_range()
    picked = [ports.free_port() for _ in range(300)]
    assert len(set(picked)) == len(picked)
    assert all(not low <= p <= high for p in picked), [p for p in picked if low <= p <= high]
    assert all(ports.LOWEST <= p <= ports.HIGHEST for p in picked)
    for p in picked[:20]:       # free: a server binds it
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
            server.bind(("127.0.0.1", p))
            server.listen(1)


def test_a_bound_port_is_not_free_and_outgoing_connections_avoid_the_picks():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        assert not ports.is_free(server.getsockname()[1])
        picked = {ports.free_port() for _ in range(50)}
        clients = [socket.create_connection(server.getsockname()) for _ in range(50)]
        try:
            assert not picked & {c.getsockname()[1] for c in clients}
        finally:
            for c in clients:
                c.close()


def test_the_range_file_is_read_and_a_missing_one_means_linux_default(tmp_path):
    f = tmp_path / "range"
    f.write_text("20000\t40000\n")
    assert ports.ephemeral_range(str(f)) == (20000, 40000)
    assert ports.candidates((20000, 40000)) == [range(10000, 20000), range(40001, 65536)]
    assert ports.ephemeral_range(str(tmp_path / "missing")) == (32768, 60999)
    f.write_text("garbage")
    assert ports.ephemeral_range(str(f)) == (32768, 60999)
    # A range covering everything above LOWEST leaves nothing: the kernel picks then.
    assert ports.candidates((1024, 65535)) == []
