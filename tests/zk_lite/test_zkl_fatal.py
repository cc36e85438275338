"""A broken invariant stops zk_lite: the server shell (zk_lite/server.py) logs one line
naming it, cuts every connection, acknowledges nothing more and exits non-zero, where it
used to log, drop one connection and serve on from a tree that may be half-changed.

The server runs in this process on its real asyncio loop and real sockets; the core's
``receive`` is wrapped to fail an assertion on one path, which is the only double."""
from __future__ import annotations

import asyncio
import logging
import socket
import struct
import threading

from zk_lite import jute
from zk_lite.server import ZkServer, build_parser


def _client(port: int, out: dict) -> None:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(jute.encode_connect_request(
                jute.ConnectRequest(0, 0, 10000, 0, b"\0" * 16)))
            reader = jute.FrameReader()
            while reader.next_frame() is None:  # the handshake's answer
                reader.feed(s.recv(4096))
            body = jute.encode_request(1, 1, jute.CreateRequest(
                "/boom", b"x", [(31, "world", "anyone")], 0))
            s.sendall(body)
            data = b""
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
            out["reply"] = data
    except OSError as e:
        out["error"] = e


def test_an_assertion_in_the_core_stops_the_server(tmp_path, caplog):
    args = build_parser().parse_args(["--port", "0", "--data-dir", str(tmp_path)])
    server = ZkServer(args)
    receive = server.core.receive

    def broken(conn, xid, opcode, body, now):
        if b"/boom" in bytes(body):
            raise AssertionError("the tree disagrees with itself")
        return receive(conn, xid, opcode, body, now)

    server.core.receive = broken
    out: dict = {}

    async def main() -> int:
        task = asyncio.create_task(server.run())
        while getattr(server, "port", None) is None:
            await asyncio.sleep(0.01)
        client = threading.Thread(target=_client, args=(server.port, out))
        client.start()
        code = await asyncio.wait_for(task, 30)
        await asyncio.to_thread(client.join, 10)
        return code

    with caplog.at_level(logging.INFO, logger="zk_lite"):
        code = asyncio.run(main())
    assert code == 1
    critical = [r.getMessage() for r in caplog.records if r.levelno == logging.CRITICAL]
    assert len(critical) == 1, critical
    assert critical[0].startswith("broken invariant on a request from 127.0.0.1: "
                                  "the tree disagrees with itself at test_zkl_fatal.py:")
    assert "shutting down" in critical[0]
    # The create was never acknowledged: the connection was cut with no reply to it.
    reader = jute.FrameReader()
    reader.feed(out.get("reply", b""))
    xids = []
    while (frame := reader.next_frame()) is not None:
        xids.append(struct.unpack_from("!i", frame)[0])
    assert 1 not in xids, xids
