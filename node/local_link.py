"""Local links: the broker protocol over a Unix-domain stream socket, for peers on one host.

Why: a ZeroMQ message crosses two I/O threads (sender's and receiver's) on its way, and
on this 2-core machine that costs about 100 µs per one-way hop at low load, against
about 15 µs for a Unix socket read straight by the receiving loop (measured: a
DEALER/ROUTER round trip p50 ≈ 250 µs, a Unix socket one ≈ 30 µs). An acks=all write
makes four such hops (client → leader → follower → leader → client), so they are most
of its latency (``python -m bench.perf.latency --breakdown``).

What: every broker also listens on a Linux *abstract* Unix socket named after its TCP
listener, ``\\0minikafka:<host>:<port>``. A peer that would connect to
``tcp://<host>:<port>`` tries that name first and falls back to ZeroMQ when nothing
answers. The messages are exactly the ZeroMQ ones (``node.wire.protocol`` frames),
length-prefixed:

    u32 frame count, then per frame u32 length, then the frames back to back

Abstract names live in a network namespace, not on disk: nothing to clean up, a dead
broker's name disappears with it, and processes in different namespaces (the chaos
runs' ``--netns``) cannot see each other's, so they use TCP, which partitions cut.

Limits: ``FRAMES_MAX`` frames and ``MESSAGE_BYTES_MAX`` bytes per message (more is a
protocol error: the connection is closed); at most ``OUTPUT_BYTES_MAX`` queued for a
peer that does not read (then the connection is dropped, as a ZeroMQ ROUTER drops at
its HWM).

``LocalChannel`` is a ``node.net.RequestChannel``, as ``node.net.Channel`` is (``send``,
``receive_ready``, ``request``, ``forget``, ``close``; ``socket`` is a file descriptor a
``zmq.Poller`` can watch). ``LocalConnection`` is one accepted peer inside a broker's loop.
"""
from __future__ import annotations

import collections
import itertools
import os
import select
import socket
import struct
import threading
import time

from node.net import IN_FLIGHT_MAX, Channel, ChannelError, RequestChannel, RequestTimedOut
from node.wire import protocol

FRAMES_MAX = protocol.FRAMES_PER_MESSAGE_MAX + 1
MESSAGE_BYTES_MAX = 128 * 1024 * 1024
OUTPUT_BYTES_MAX = 256 * 1024 * 1024
RECEIVE_CHUNK_BYTES = 256 * 1024
SOCKET_BUFFER_BYTES = 4 * 1024 * 1024
IOV_MAX = 1024
CONNECT_TIMEOUT_S = 0.5
_U32 = struct.Struct("<I")


class LinkClosed(Exception):
    """The peer went away, or sent something that is not a framed message."""


def address(host: str, port: int) -> str:
    """The abstract socket name of the broker listening on ``host:port``."""
    return f"\0minikafka:{host}:{port}"


def tcp_host_port(endpoint: str) -> tuple[str, int] | None:
    if not endpoint.startswith("tcp://"):
        return None
    host, _, port = endpoint[len("tcp://"):].rpartition(":")
    return (host, int(port)) if port.isdigit() else None


def encode(frames) -> list:
    """The buffers of one framed message (for ``sendmsg``)."""
    views = [f.buffer if hasattr(f, "buffer") else f for f in frames]
    if len(views) > FRAMES_MAX:
        raise ValueError(f"{len(views)} frames exceed {FRAMES_MAX}")
    header = bytearray(_U32.pack(len(views)))
    for view in views:
        header += _U32.pack(len(view))
    return [header, *views]


class Decoder:
    """Bytes in, whole messages (lists of writable memoryviews) out.

    Small messages are cut out of the bytes fed; a message whose body is at least
    ``DIRECT_BYTES`` gets a buffer of its own once its header is known, and the rest of
    it is received straight into that buffer (``direct_target``/``direct_filled``), so
    a large produce or fetch frame is copied once, by the kernel."""

    DIRECT_BYTES = 64 * 1024

    def __init__(self) -> None:
        self.buffer = bytearray()
        self._body: bytearray | None = None   # a large message being received in place
        self._lengths: tuple = ()
        self._filled = 0

    def direct_target(self) -> memoryview | None:
        """Where the next bytes go while a large message is being received."""
        if self._body is None:
            return None
        return memoryview(self._body)[self._filled:]

    def direct_filled(self, count: int) -> list | None:
        """``count`` bytes were received into ``direct_target()``; the message if whole."""
        self._filled += count
        if self._filled < len(self._body):
            return None
        return self._finish()

    def _finish(self) -> list:
        body, lengths = memoryview(self._body), self._lengths
        self._body, self._lengths, self._filled = None, (), 0
        frames, position = [], 0
        for length in lengths:
            frames.append(body[position:position + length])
            position += length
        return frames

    def feed(self, data) -> list[list]:
        assert self._body is None, "a large message is being received in place"
        self.buffer += data
        out = []
        buffer = self.buffer
        start = 0
        while True:
            message, end = self._one(buffer, start)
            if message is None:
                break
            start = end
            if self._body is not None:     # a large message continues in place
                break
            out.append(message)
        if start:
            del buffer[:start]
        return out

    def _one(self, buffer: bytearray, start: int):
        available = len(buffer) - start
        if available < 4:
            return None, start
        count = _U32.unpack_from(buffer, start)[0]
        if count == 0 or count > FRAMES_MAX:
            raise LinkClosed(f"a message of {count} frames")
        header = 4 + 4 * count
        if available < header:
            return None, start
        lengths = struct.unpack_from(f"<{count}I", buffer, start + 4)
        size = sum(lengths)
        if header + size > MESSAGE_BYTES_MAX:
            raise LinkClosed(f"a message of {header + size} bytes exceeds "
                             f"{MESSAGE_BYTES_MAX}")
        have = available - header
        if have < size and size < self.DIRECT_BYTES:
            return None, start
        # One copy per message: the frames must outlive the receive buffer, and a
        # produce frame is stamped in place by the leader (writable).
        first = start + header
        self._body = bytearray(size)
        self._lengths = lengths
        present = min(have, size)
        with memoryview(buffer) as view:   # released before the buffer is resized
            self._body[:present] = view[first:first + present]
        self._filled = present
        if present < size:
            return [], first + present      # the rest goes straight into the body
        return self._finish(), first + size


class _Stream:
    """A non-blocking Unix stream socket with framed output queued while the peer is slow."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            try:
                sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER_BYTES)
            except OSError:
                pass
        self.sock = sock
        self.socket = sock.fileno()   # what a poller watches
        self.decoder = Decoder()
        self.output: collections.deque = collections.deque()
        self.output_bytes = 0
        self.broken = False   # the peer went away or misbehaved: close() it
        self.closed = False
        self.violation: str | None = None   # why the peer was cut off, if it misbehaved

    def _fail(self, reason: str) -> LinkClosed:
        """Mark the link dead. The owner unregisters ``socket`` and calls close()."""
        self.broken = True
        self.output.clear()
        self.output_bytes = 0
        return LinkClosed(reason)

    def send_frames(self, frames) -> None:
        """Queue one message and write as much as the socket takes now."""
        if self.broken or self.closed:
            raise LinkClosed("link closed")
        buffers = encode(frames)
        if not self.output:
            sent = self._write(buffers)
            buffers = _drop_sent(buffers, sent)
            if not buffers:
                return
        size = sum(len(b) for b in buffers)
        if self.output_bytes + size > OUTPUT_BYTES_MAX:
            raise self._fail(f"peer does not read: {self.output_bytes} bytes queued")
        self.output.extend(memoryview(b).cast("B") for b in buffers)
        self.output_bytes += size

    def flush(self) -> bool:
        """Write queued output; True when nothing is left."""
        while self.output:
            buffers = [self.output[i] for i in range(min(len(self.output), IOV_MAX))]
            sent = self._write(buffers)
            if sent == 0:
                return False
            self.output_bytes -= sent
            while sent:
                head = self.output[0]
                if len(head) <= sent:
                    sent -= len(head)
                    self.output.popleft()
                else:
                    self.output[0] = head[sent:]
                    sent = 0
        return True

    def _write(self, buffers) -> int:
        total = 0
        while buffers:
            try:
                sent = self.sock.sendmsg(buffers[:IOV_MAX])
            except (BlockingIOError, InterruptedError):
                return total
            except OSError as e:
                raise self._fail(f"send: {e}") from None
            total += sent
            buffers = _drop_sent(buffers, sent)
        return total

    def receive(self) -> list[list]:
        """Every whole message readable now; LinkClosed at EOF or on garbage."""
        if self.broken or self.closed:
            raise LinkClosed("link closed")
        messages = []
        decoder = self.decoder
        while True:
            target = decoder.direct_target()
            try:
                if target is not None:
                    count = self.sock.recv_into(target)
                    if count:
                        message = decoder.direct_filled(count)
                        if message is not None:
                            messages.append(message)
                        continue
                    data = b""
                else:
                    data = _receive_chunk(self.sock)
            except (BlockingIOError, InterruptedError):
                return messages
            except OSError as e:
                raise self._fail(f"receive: {e}") from None
            if not data:
                self.broken = True
                if messages:
                    return messages   # LinkClosed on the next call
                raise self._fail("peer closed the link")
            try:
                messages.extend(decoder.feed(data))
            except LinkClosed as e:
                self.violation = str(e)
                raise self._fail(str(e)) from None
            if len(data) < RECEIVE_CHUNK_BYTES and decoder.direct_target() is None:
                return messages

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.broken = True
            self.output.clear()
            self.output_bytes = 0
            self.sock.close()


_scratch = threading.local()


def _receive_chunk(sock: socket.socket) -> memoryview:
    """Up to ``RECEIVE_CHUNK_BYTES`` read into this thread's scratch buffer: a view that
    is good until the thread's next read (the decoder copies what it keeps).

    Why: ``sock.recv(n)`` allocates n bytes before it reads and shrinks them after.
    When that 256 KiB block comes from the kernel and goes back every call, a read costs
    ~11 µs more even when 300 bytes arrive (a socket pair in one process, min of 7
    rounds: recv(256 KiB) of 300 bytes 13.2 µs, recv_into a kept buffer 2.4 µs; of
    200,000 bytes 108 µs and 18 µs). A long-running broker's allocator mostly reuses the
    block instead: its read of a produce request went from 19.9 to 18.8 µs (medians,
    traced in place); this takes the allocation out of both."""
    buffer = getattr(_scratch, "buffer", None)
    if buffer is None:
        buffer = _scratch.buffer = memoryview(bytearray(RECEIVE_CHUNK_BYTES))
    return buffer[:sock.recv_into(buffer)]


def _drop_sent(buffers: list, sent: int) -> list:
    while buffers and sent >= len(buffers[0]):
        sent -= len(buffers[0])
        buffers = buffers[1:]
    if sent:
        buffers = [memoryview(buffers[0]).cast("B")[sent:], *buffers[1:]]
    return buffers


class LocalConnection(_Stream):
    """One peer accepted by a broker's local listener; the identity its requests carry."""

    _ids = itertools.count()

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(sock)
        self.id = next(self._ids)

    def __repr__(self) -> str:
        return f"LocalConnection({self.id})"


def listen(host: str, port: int) -> socket.socket | None:
    """The broker side: a listening abstract socket, or None when the name is taken."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(address(host, port))
    except OSError:
        sock.close()
        return None
    sock.listen(128)
    sock.setblocking(False)
    return sock


def connect(endpoint: str) -> socket.socket | None:
    """A connected socket to the broker behind ``tcp://host:port`` on this host, or None."""
    host_port = tcp_host_port(endpoint)
    if host_port is None:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # A Unix-socket connect waits while the listener's backlog is full (a stopped or
    # stalled broker): bounded, then the caller falls back to ZeroMQ.
    sock.settimeout(CONNECT_TIMEOUT_S)
    try:
        sock.connect(address(*host_port))
    except OSError:
        sock.close()
        return None
    return sock


class LocalChannel(_Stream):
    """A ``node.net.RequestChannel`` over a local link (see the module docstring)."""

    def __init__(self, endpoint: str, sock: socket.socket, *,
                 client_id: str = "minikafka") -> None:
        super().__init__(sock)
        self.endpoint = endpoint
        self.client_id = client_id
        self._ids = itertools.count(1)
        self.in_flight: dict[int, int] = {}

    def send(self, api_key: int, body: dict, frames=(), *, expect_response: bool = True
             ) -> int:
        if len(self.in_flight) >= IN_FLIGHT_MAX:
            raise ChannelError(f"{self.endpoint}: {IN_FLIGHT_MAX} requests in flight")
        correlation_id = next(self._ids)
        try:
            self.send_frames(protocol.encode_request(api_key, correlation_id, self.client_id,
                                                     body, frames))
        except (LinkClosed, ValueError) as e:
            raise ChannelError(f"{self.endpoint}: {e}") from None
        if expect_response:
            self.in_flight[correlation_id] = int(api_key)
        return correlation_id

    def forget(self, correlation_id: int) -> None:
        self.in_flight.pop(correlation_id, None)

    def receive_ready(self) -> list[protocol.Response]:
        """Responses received so far (non-blocking). A closed link raises LinkClosed once
        its last responses were returned."""
        if self.output:
            self.flush()
        out = []
        for frames in self.receive():
            try:
                response = protocol.decode_response(frames)
            except protocol.ProtocolError:
                continue
            if self.in_flight.pop(response.correlation_id, None) is not None:
                out.append(response)
        return out

    def request(self, api_key: int, body: dict, frames=(), *, timeout_ms: int = 30_000
                ) -> protocol.Response:
        correlation_id = self.send(api_key, body, frames)
        deadline = time.monotonic() + timeout_ms / 1000
        poller = select.poll()
        while True:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                self.forget(correlation_id)
                raise RequestTimedOut(f"no response from {self.endpoint} to api "
                                      f"{int(api_key)} in {timeout_ms} ms")
            poller.register(self.socket, select.POLLIN | (select.POLLOUT if self.output
                                                            else 0))
            if not poller.poll(remaining_ms):
                continue
            try:
                responses = self.receive_ready()
            except LinkClosed as e:
                self.close()
                raise ChannelError(f"{self.endpoint}: {e}") from None
            for response in responses:
                if response.correlation_id == correlation_id:
                    return response

    def close(self) -> None:
        super().close()
        self.in_flight.clear()


def enabled() -> bool:
    """Local links are used unless ``MINIKAFKA_LOCAL_LINKS=0`` (to measure or test the
    ZeroMQ path alone)."""
    return os.environ.get("MINIKAFKA_LOCAL_LINKS", "1") != "0"


def open_channel(endpoint: str, *, client_id: str = "minikafka",
                 local: bool = True) -> RequestChannel:
    """A local link to the broker behind ``endpoint`` when one answers on this host,
    else a ZeroMQ ``Channel``."""
    if local and enabled():
        sock = connect(endpoint)
        if sock is not None:
            return LocalChannel(endpoint, sock, client_id=client_id)
    return Channel(endpoint, client_id=client_id)
