"""The broker's listener (Kafka's SocketServer and RequestChannel): where requests come
in and the one path their responses go out by.

One ZeroMQ ROUTER bound to ``host:port`` and, when local links are enabled, a local
listener on the same address for peers on this host (``node.local_link``, without
ZeroMQ's I/O threads). Every request's frames go to ``on_request(peer, frames)``; the
peer is a ZeroMQ identity (bytes) or a ``LocalConnection``, and ``send_response(peer,
correlation_id, api_key, body, frames)`` answers it on the link it came by. A request
handler knows nothing else of the transport, so another wire can call the same handlers.

ZeroMQ does not tell a ROUTER which peer went away (ZMQ_ROUTER_NOTIFY is a draft option
this libzmq refuses): a TCP client's parked fetches live out their wait; a local link's
are dropped when it closes (``on_peer_closed``).
"""
from __future__ import annotations

import logging
from typing import Callable

import zmq

from node import local_link
from node.broker import limits
from node.broker.failures import LogLimiter
from node.broker.loop import EventLoop
from node.config import BrokerConfig
from node.local_link import LinkClosed, LocalConnection
from node.net import context
from node.wire import protocol

logger = logging.getLogger("node.broker.server")

# A peer to answer: a ZeroMQ identity, or a local link.
Peer = bytes | LocalConnection


class SocketServer:
    def __init__(self, loop: EventLoop, config: BrokerConfig) -> None:
        self.loop = loop
        self.config = config
        self.port = config.port
        self.router = None
        self.local_listener = None
        self.local_connections: dict[int, LocalConnection] = {}
        self.on_request: Callable[[Peer, list], None] = lambda peer, frames: None
        self.on_peer_closed: Callable[[LocalConnection], None] = lambda conn: None
        self._link_violations = LogLimiter(1.0)

    def bind(self, on_request: Callable[[Peer, list], None],
             on_peer_closed: Callable[[LocalConnection], None]) -> int:
        """Bind the listeners (port 0: a free one); the port bound."""
        self.on_request = on_request
        self.on_peer_closed = on_peer_closed
        router = context().socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        router.setsockopt(zmq.SNDHWM, limits.LISTENER_SEND_HWM)
        router.setsockopt(zmq.RCVHWM, limits.LISTENER_RECEIVE_HWM)
        router.setsockopt(zmq.MAXMSGSIZE, limits.SOCKET_REQUEST_BYTES_MAX)
        if self.config.port == 0:
            self.port = router.bind_to_random_port(f"tcp://{self.config.host}")
        else:
            router.bind(self.config.bind_endpoint)
        self.router = router
        self.loop.add_socket(router, self._on_listener_readable)
        if local_link.enabled():
            # The same listener for peers on this host, without ZeroMQ's I/O threads.
            self.local_listener = local_link.listen(self.config.host, self.port)
            if self.local_listener is None:
                logger.warning("local link %r taken: peers on this host use TCP",
                               local_link.address(self.config.host, self.port)[1:])
            else:
                self.loop.add_socket(self.local_listener.fileno(), self._on_local_accept)
        return self.port

    @property
    def bound(self) -> bool:
        return self.router is not None

    def close(self) -> None:
        if self.router is not None:
            self.loop.remove_socket(self.router)
            self.router.close(linger=0)
            self.router = None
        for conn in list(self.local_connections.values()):
            self._drop_local(conn)
        if self.local_listener is not None:
            self.loop.remove_socket(self.local_listener.fileno())
            self.local_listener.close()
            self.local_listener = None

    # ---------------------------------------------------------------- requests in

    def _on_listener_readable(self) -> None:
        router = self.router
        for _ in range(limits.RECEIVE_BATCH_MAX):
            # Ask before receiving: ending the batch on zmq.Again costs an exception per
            # wake-up, and a wake-up usually brings one request.
            if not router.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                return
            try:
                frames = router.recv_multipart(flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            if len(frames) >= 2:
                self.on_request(frames[0].bytes, frames[1:])

    def _on_local_accept(self) -> None:
        for _ in range(limits.RECEIVE_BATCH_MAX):
            try:
                sock, _ = self.local_listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                logger.warning("local link accept failed: %s", e)
                return
            conn = LocalConnection(sock)
            self.local_connections[conn.socket] = conn
            self.loop.add_socket(conn.socket, lambda c=conn: self._on_local_readable(c))

    def _on_local_readable(self, conn: LocalConnection) -> None:
        try:
            if conn.output and conn.flush():
                self.loop.watch_writable(conn.socket, False)
            messages = conn.receive()
        except LinkClosed as e:
            if conn.violation is not None:
                # Kafka's InvalidReceiveException: say why the client was cut off (a
                # ZeroMQ peer over socket.request.max.bytes is cut off by libzmq, which
                # gives no reason we could log).
                if self._link_violations.allow("local-link"):
                    logger.warning("closing a local link: %s", e)
            self._drop_local(conn)
            return
        for frames in messages:
            self.on_request(conn, frames)
        if conn.broken:
            self._drop_local(conn)

    def _drop_local(self, conn: LocalConnection) -> None:
        # By identity: once closed, its fd number may belong to a newer connection.
        if self.local_connections.get(conn.socket) is conn:
            del self.local_connections[conn.socket]
            self.loop.remove_socket(conn.socket)
            self.on_peer_closed(conn)   # nobody is left to answer
        conn.close()

    # ---------------------------------------------------------------- responses out

    def send_response(self, identity: Peer, correlation_id: int, api_key: int, body: dict,
                      frames=()) -> None:
        if type(identity) is LocalConnection:
            if not identity.closed:
                try:
                    identity.send_frames(protocol.encode_response(correlation_id, api_key, body,
                                                           frames))
                except LinkClosed as e:
                    logger.warning("cannot answer correlation id %d: %s", correlation_id, e)
                    self._drop_local(identity)
                    return
                if identity.output:
                    self.loop.watch_writable(identity.socket, True)
            return
        message = [identity, *protocol.encode_response(correlation_id, api_key, body, frames)]
        try:
            # Batch frames are zero-copy views of the log.
            self.router.send_multipart(message, copy=not frames, flags=zmq.NOBLOCK)
        except zmq.ZMQError as e:
            logger.warning("cannot answer correlation id %d: %s", correlation_id, e)
