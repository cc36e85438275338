"""The Kafka listener: Kafka's binary protocol over TCP on the broker's event loop.

Kafka's SocketServer for the listener named KAFKA (``node.config``): a non-blocking TCP
server socket and one ``KafkaConnection`` per client, all on the broker's loop
(``node.broker.loop``). Requests are decoded by the generated codec
(``node.kafka.protocol``), translated (``node.kafka.translate``) and run through the
native handler table (``KafkaApis.dispatch``): one handler per API for both wires.

Rules (Kafka's):
- A connection may pipeline requests; they are answered strictly in the order they came
  (each request is an ``Exchange`` in the connection's queue; a parked Fetch or an
  acks=all Produce holds the answers behind it back). A Produce with acks=0 gets no
  answer and holds nothing back.
- Output is buffered and written when the socket is writable. A connection with
  ``IN_FLIGHT_REQUESTS_PER_CONNECTION_MAX`` unanswered requests, or more than
  ``OUTPUT_BYTES_PER_CONNECTION_MAX`` of unsent answers, is not read until that drains.
- A frame larger than ``socket.request.max.bytes``, a negative size, a header or body
  that does not parse, an unknown API key or a version outside the schema's: the
  connection is closed with one log line naming the peer (rate-limited: a flood of bad
  clients costs one line per ``VIOLATION_LOG_INTERVAL_S``). ApiVersions in a version
  too new is answered in version 0 with UNSUPPORTED_VERSION and the API list (KIP-511).
- A request that parses but whose API or version this broker does not advertise gets
  the API's error response with UNSUPPORTED_VERSION (``Translation.error``).
- Nothing a client sends stops the broker: malformed input only ever raises the codec's
  ``KafkaProtocolError``; an answer that cannot be encoded closes that connection.

The native handlers answer through ``apis.send_response(peer, ...)``; for a Kafka request
the peer is its ``Exchange`` (``route_responses`` sends it there), whose translation
builds the Kafka response.
"""
from __future__ import annotations

import collections
import errno
import logging
import socket
import time

from node.broker.failures import LogLimiter
from node.broker.loop import EventLoop
from node.config import KAFKA_LISTENER, BrokerConfig
from node.kafka.protocol import (API_NAMES, FrameDecoder, KafkaProtocolError, RequestHeader,
                                 UnsupportedVersion, decode_request)
from node.kafka.protocol.codec import encode_response_pieces
from node.kafka.translate import CLOSE_CONNECTION, TRANSLATIONS, NativeCall, top_level_error
from node.kafka.translate.api_versions import api_versions_response
from node.kafka.translate.context import KafkaContext
from node.wire import protocol
from node.wire.errors import ErrorCode, name_of

logger = logging.getLogger("node.broker.server")
# Kafka's request log (log4j's kafka.request.logger at DEBUG): a line per answered request
# with its time and top-level error, and per request a closed connection left unanswered.
# Off unless that logger is enabled (a broker's MINIKAFKA_LOG_LEVELS, node.broker.server).
request_logger = logging.getLogger("kafka.request.logger")

# ------------------------------------------------------------------ limits
CONNECTIONS_MAX = 10_000
ACCEPTS_PER_WAKEUP_MAX = 64
RECEIVE_BYTES = 256 * 1024            # one recv
RECEIVES_PER_WAKEUP_MAX = 16          # then other connections get their turn
IN_FLIGHT_REQUESTS_PER_CONNECTION_MAX = 256
OUTPUT_BYTES_PER_CONNECTION_MAX = 64 * 1024 * 1024
SEND_BUFFERS_PER_CALL_MAX = 64        # buffers handed to one sendmsg (below IOV_MAX)
# An answer's pieces at least this large (records) are sent as they are; the small ones
# between them are joined (one sendmsg buffer per field would cost more than the copy).
LARGE_PIECE_BYTES = 16 * 1024
LISTEN_BACKLOG = 128
# Incomplete request frames buffered across every connection (each at most
# socket.request.max.bytes): a connection that takes the total over this is closed, so
# many slow senders of huge frames cannot exhaust the broker's memory.
PARTIAL_FRAME_BYTES_MAX = 256 * 1024 * 1024
VIOLATION_LOG_INTERVAL_S = 1.0

API_VERSIONS_KEY = 18
# A translation only reads the broker's state and builds objects; if one fails on what a
# client sent, that is a bug of the translation (logged, the connection closed), never a
# reason to stop the broker. Assertions still stop it (node.broker.failures).
TRANSLATION_BUGS = (AttributeError, KeyError, IndexError, TypeError, ValueError,
                    LookupError, ArithmeticError)


def route_responses(native_send):
    """``KafkaApis.send_response`` for a broker with a Kafka listener: an answer for an
    ``Exchange`` goes to its Kafka connection, any other to the native listener."""
    def send_response(peer, correlation_id: int, api_key: int, body: dict, frames=()) -> None:
        if type(peer) is Exchange:
            peer.answer(body, frames)
        else:
            native_send(peer, correlation_id, api_key, body, frames)
    return send_response


class Exchange:
    """One Kafka request on one connection, until its answer is queued: the peer the
    native handler answers (``answer``)."""

    __slots__ = ("connection", "header", "request", "translation", "state", "done", "data",
                 "received_ns")

    def __init__(self, connection: "KafkaConnection", header: RequestHeader, request) -> None:
        self.connection = connection
        self.header = header
        self.request = request
        self.translation = None
        self.state = None
        self.done = False
        self.data: list | None = None        # the encoded answer's buffers; None = none
        self.received_ns = time.monotonic_ns()

    def describe(self) -> str:
        """For the request log: what, from whom, for how long."""
        h = self.header
        return (f"{_name(h)} v{h.api_version} (correlation id {h.correlation_id}, client id "
                f"{h.client_id!r}) from {self.connection.peer}, "
                f"{(time.monotonic_ns() - self.received_ns) / 1e6:.1f} ms")

    def answer(self, body: dict, frames=()) -> None:
        """The native handler's answer: translated, encoded, queued in order."""
        if self.done:
            return
        conn = self.connection
        if conn.closed:
            self.done = True
            return
        ctx = conn.listener.ctx
        translation = self.translation
        try:
            if body.get("error") and set(body) <= {"error", "error_message"}:
                response = translation.error(ctx, self.header, self.request, body["error"],
                                             body.get("error_message"))
            elif self.state is not None:
                response = translation.response(ctx, self.header, self.request, body,
                                                list(frames), state=self.state)
            else:
                response = translation.response(ctx, self.header, self.request, body,
                                                list(frames))
        except TRANSLATION_BUGS as e:
            self.done = True
            conn.listener.translation_failed(conn, self.header, e)
            return
        self.finish(response)

    def finish(self, response) -> None:
        """Queue ``response`` (None: nothing to send) and send what is in order."""
        assert not self.done, "a request is answered once"
        self.done = True
        conn = self.connection
        if request_logger.isEnabledFor(logging.DEBUG):
            code = getattr(response, "error_code", 0)
            request_logger.debug("Completed request: %s%s", self.describe(),
                                 f", error {name_of(code)}" if code else "")
        if conn.closed:
            return
        if response is CLOSE_CONNECTION:
            self.data = CLOSE_CONNECTION
        elif response is not None:
            try:
                self.data = _coalesced(encode_response_pieces(self.header, response))
            except (KafkaProtocolError, ValueError, TypeError, OverflowError) as e:
                conn.listener.violation(conn, f"cannot encode the answer to {_name(self.header)} "
                                              f"(correlation id {self.header.correlation_id}): {e}")
                return
        conn.listener.answered(conn)


class KafkaConnection:
    __slots__ = ("listener", "sock", "fd", "peer", "decoder", "exchanges", "output",
                 "output_bytes", "closed", "watching")

    def __init__(self, listener: "KafkaListener", sock: socket.socket, peer: str,
                 max_bytes: int) -> None:
        self.listener = listener
        self.sock = sock
        self.fd = sock.fileno()
        self.peer = peer
        self.decoder = FrameDecoder(max_bytes)
        self.exchanges: collections.deque[Exchange] = collections.deque()
        self.output: collections.deque = collections.deque()   # bytes / memoryviews
        self.output_bytes = 0
        self.closed = False
        self.watching = (True, False)

    @property
    def readable(self) -> bool:
        return len(self.exchanges) < IN_FLIGHT_REQUESTS_PER_CONNECTION_MAX and \
            self.output_bytes < OUTPUT_BYTES_PER_CONNECTION_MAX


class KafkaListener:
    def __init__(self, loop: EventLoop, config: BrokerConfig, apis, cluster_id) -> None:
        self.loop = loop
        self.config = config
        self.apis = apis
        self.ctx = KafkaContext(apis, config.broker_id, cluster_id)
        self.server: socket.socket | None = None
        self.port = 0
        self.connections: dict[int, KafkaConnection] = {}
        self.partial_frame_bytes = 0     # sum of the connections' incomplete frames
        self._violations = LogLimiter(VIOLATION_LOG_INTERVAL_S)
        # Every read goes into this buffer, which the decoder copies from: a recv of
        # RECEIVE_BYTES would allocate 256 KiB and shrink it per call (node.local_link's
        # _receive_chunk says what that can cost).
        self._scratch = memoryview(bytearray(RECEIVE_BYTES))

    # ---------------------------------------------------------------- lifecycle

    def bind(self) -> int:
        """Bind and listen (port 0: a free one); the port bound."""
        entry = self.config.listener(KAFKA_LISTENER)
        assert entry is not None, "no KAFKA listener configured"
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            server.bind((entry.host, entry.port))
        except OSError as e:
            server.close()
            raise OSError(e.errno, f"cannot bind the Kafka listener {entry}: "
                                   f"{e.strerror}") from None
        server.listen(LISTEN_BACKLOG)
        server.setblocking(False)
        self.server = server
        self.port = server.getsockname()[1]
        self.loop.add_socket(server.fileno(), self._on_accept)
        return self.port

    def close(self) -> None:
        for conn in list(self.connections.values()):
            self._drop(conn)
        if self.server is not None:
            self.loop.remove_socket(self.server.fileno())
            self.server.close()
            self.server = None

    # ---------------------------------------------------------------- connections

    def _on_accept(self) -> None:
        for _ in range(ACCEPTS_PER_WAKEUP_MAX):
            try:
                sock, address = self.server.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                logger.warning("kafka listener: accept failed: %s", e)
                return
            peer = f"{address[0]}:{address[1]}"
            if len(self.connections) >= CONNECTIONS_MAX:
                if self._violations.allow("connections"):
                    logger.warning("kafka listener: refusing %s: %d connections open",
                                   peer, len(self.connections))
                sock.close()
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = KafkaConnection(self, sock, peer, self.config.socket_request_max_bytes)
            self.connections[conn.fd] = conn
            self.loop.add_socket(conn.fd, lambda c=conn: self._on_ready(c))

    def _drop(self, conn: KafkaConnection) -> None:
        if conn.closed:
            return
        conn.closed = True
        if self.connections.get(conn.fd) is conn:
            del self.connections[conn.fd]
            self.loop.remove_socket(conn.fd)
        for exchange in conn.exchanges:
            if not exchange.done:   # its parked fetch has nobody to answer
                self.apis.purgatory.forget_peer(exchange)
                if request_logger.isEnabledFor(logging.DEBUG):
                    request_logger.debug("Unanswered at the connection's close: %s",
                                         exchange.describe())
        conn.exchanges.clear()
        conn.output.clear()
        conn.output_bytes = 0
        self.partial_frame_bytes -= conn.decoder.buffered_bytes
        conn.decoder = None
        assert self.partial_frame_bytes >= 0, self.partial_frame_bytes
        try:
            conn.sock.close()
        except OSError:
            pass

    def translation_failed(self, conn: KafkaConnection, header, e: Exception) -> None:
        """A translation failed on what a client sent (a bug of ours): the broker's state
        is untouched (translations only build objects), so that connection is closed,
        the failure logged with its traceback, and the broker serves on."""
        if self._violations.allow(("bug", header.api_key)):
            logger.error("kafka listener: translating %s v%d from %s failed; closing the "
                         "connection", _name(header), header.api_version, conn.peer,
                         exc_info=e)
        self._drop(conn)

    def violation(self, conn: KafkaConnection, what: str) -> None:
        """Close ``conn`` for something it sent; one line per interval for all of them."""
        if self._violations.allow("violation"):
            logger.warning("kafka listener: closing the connection from %s: %s",
                           conn.peer, what)
        self._drop(conn)

    # ---------------------------------------------------------------- reading

    def _on_ready(self, conn: KafkaConnection) -> None:
        if conn.output:
            self._write(conn)
        if conn.closed:
            return
        if conn.readable:
            self._read(conn)
        if not conn.closed:
            self._watch(conn)

    def _read(self, conn: KafkaConnection) -> None:
        for _ in range(RECEIVES_PER_WAKEUP_MAX):
            try:
                data = self._scratch[:conn.sock.recv_into(self._scratch)]
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                logger.info("kafka listener: connection from %s failed: %s", conn.peer, e)
                self._drop(conn)
                return
            if not data:
                self._drop(conn)        # the client closed it
                return
            before = conn.decoder.buffered_bytes
            try:
                payloads = conn.decoder.feed(data)
            except KafkaProtocolError as e:
                self.partial_frame_bytes += conn.decoder.buffered_bytes - before
                self.violation(conn, str(e))
                return
            self.partial_frame_bytes += conn.decoder.buffered_bytes - before
            if self.partial_frame_bytes > PARTIAL_FRAME_BYTES_MAX:
                self.violation(conn, f"incomplete requests of all connections exceed "
                                     f"{PARTIAL_FRAME_BYTES_MAX} bytes")
                return
            for payload in payloads:
                self._request(conn, payload)
                if conn.closed:
                    return
            if len(data) < RECEIVE_BYTES or not conn.readable:
                return

    def _request(self, conn: KafkaConnection, payload) -> None:
        try:
            header, request = decode_request(payload)
        except UnsupportedVersion as e:
            if e.api_key == API_VERSIONS_KEY:
                self._api_versions_too_new(conn, e.correlation_id)
            else:
                self.violation(conn, f"unsupported api key {e.api_key} version "
                                     f"{e.api_version} (correlation id {e.correlation_id})")
            return
        except KafkaProtocolError as e:
            self.violation(conn, f"malformed request: {e}")
            return
        translation = TRANSLATIONS.get(header.api_key)
        served = translation is not None and \
            translation.versions[0] <= header.api_version <= translation.versions[1]
        if not served and header.api_key == API_VERSIONS_KEY:
            self._api_versions_too_new(conn, header.correlation_id)
            return
        exchange = Exchange(conn, header, request)
        conn.exchanges.append(exchange)
        if not served:
            self._refuse(conn, exchange, translation)
            return
        exchange.translation = translation
        try:
            result = translation.request(self.ctx, header, request)
        except TRANSLATION_BUGS as e:
            exchange.done = True
            self.translation_failed(conn, header, e)
            return
        except (protocol.ProtocolError, KafkaProtocolError) as e:
            self._say_no(conn, exchange, translation, ErrorCode.INVALID_REQUEST,
                         f"invalid {_name(header)}: {e}")
            return
        if not isinstance(result, NativeCall):
            exchange.finish(result)
            return
        exchange.state = result.state
        native = protocol.Request(result.api_key, protocol.API_VERSION, header.correlation_id,
                                  header.client_id or "", result.body, tuple(result.frames))
        self.apis.dispatch(exchange, native)
        if not result.answers and not exchange.done:
            exchange.finish(None)

    def _refuse(self, conn: KafkaConnection, exchange: Exchange, translation) -> None:
        """A request this broker parses but does not serve in this version: Kafka's
        error response with UNSUPPORTED_VERSION, or (no way to say it) the connection
        closed."""
        header = exchange.header
        self._say_no(conn, exchange, translation, ErrorCode.UNSUPPORTED_VERSION,
                     f"{_name(header)} version {header.api_version} is not supported")

    def _say_no(self, conn: KafkaConnection, exchange: Exchange, translation, code: int,
                message: str) -> None:
        """Answer ``exchange`` with its API's error response for ``code``; close the
        connection where the API has no way to say it."""
        header = exchange.header
        try:
            if translation is not None:
                response = translation.error(self.ctx, header, exchange.request, code, message)
            else:
                response = top_level_error(header.api_key, code, message)
        except TRANSLATION_BUGS as e:
            exchange.done = True
            self.translation_failed(conn, header, e)
            return
        if response is None:
            self.violation(conn, message)
        else:
            exchange.finish(response)

    def _api_versions_too_new(self, conn: KafkaConnection, correlation_id: int) -> None:
        """KIP-511: ApiVersions in a version this broker does not serve is answered in
        version 0 with UNSUPPORTED_VERSION and the API list, so the client retries
        with a version it finds there."""
        header = RequestHeader(API_VERSIONS_KEY, 0, correlation_id, None)
        exchange = Exchange(conn, header, None)
        conn.exchanges.append(exchange)
        exchange.finish(api_versions_response(ErrorCode.UNSUPPORTED_VERSION))

    # ---------------------------------------------------------------- writing

    def answered(self, conn: KafkaConnection) -> None:
        """An exchange is done: queue every answer now in order, and send."""
        exchanges = conn.exchanges
        while exchanges and exchanges[0].done:
            exchange = exchanges.popleft()
            data = exchange.data
            if data is CLOSE_CONNECTION:
                self._write(conn)           # what came before it, as far as it goes
                logger.info("kafka listener: closing the connection from %s after its "
                            "%s (correlation id %d) failed", conn.peer,
                            _name(exchange.header), exchange.header.correlation_id)
                self._drop(conn)
                return
            if data:
                conn.output.extend(data)
                conn.output_bytes += sum(map(len, data))
        if conn.output:
            self._write(conn)
        if not conn.closed:
            self._watch(conn)

    def _write(self, conn: KafkaConnection) -> None:
        output = conn.output
        while output:
            buffers = [output[i] for i in range(min(len(output), SEND_BUFFERS_PER_CALL_MAX))]
            try:
                sent = conn.sock.sendmsg(buffers)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno not in (errno.EPIPE, errno.ECONNRESET):
                    logger.info("kafka listener: cannot write to %s: %s", conn.peer, e)
                self._drop(conn)
                return
            conn.output_bytes -= sent
            while sent:
                head = output[0]
                if len(head) <= sent:
                    sent -= len(head)
                    output.popleft()
                else:
                    output[0] = memoryview(head)[sent:]
                    sent = 0

    def _watch(self, conn: KafkaConnection) -> None:
        wanted = (conn.readable, bool(conn.output))
        if wanted != conn.watching:
            conn.watching = wanted
            self.loop.watch(conn.fd, *wanted)


def _coalesced(pieces: list) -> list:
    """An answer's pieces as few buffers: large ones kept, runs of small ones joined."""
    out, small = [], []
    for piece in pieces:
        if len(piece) >= LARGE_PIECE_BYTES:
            if small:
                out.append(b"".join(small))
                small = []
            out.append(piece)
        else:
            small.append(piece)
    if small:
        out.append(b"".join(small))
    return out


def _name(header) -> str:
    return API_NAMES.get(header.api_key, f"api {header.api_key}")
