"""The client library: ``Producer``, ``Consumer`` and ``Admin`` (kafka-python-like).

    from node.client import Producer, Consumer, Admin, TopicPartition

This module holds what the three share: record and metadata types, the parsing of a
Metadata response into a ``ClusterMetadata`` snapshot, and ``Network`` — the channels
of one client thread to every broker it talks to, with request timeouts and fast
detection of a dead connection. The classes themselves live in ``node.producer``,
``node.consumer`` and ``node.admin_client`` and are re-exported here.

Threading: a ``Network`` (like the ZeroMQ sockets under it) belongs to one thread. The
producer's I/O thread owns its own; a consumer or an admin client is used from one
thread at a time.

Dead connections: ZeroMQ hides TCP, so every channel has a socket monitor. When a
connection with requests in flight drops (the broker died) or cannot be made (nobody
listens), those requests fail at once with NETWORK_EXCEPTION (retriable) and the
channel is closed and made anew — a broker that is restarted later never sees the
stale requests that were queued for it. A broker that is alive but silent (SIGSTOP)
is only noticed by the request timeout.
"""
from __future__ import annotations

import time
from collections import namedtuple
from dataclasses import dataclass, field

import zmq
from zmq.utils.monitor import recv_monitor_message

from node import errors as E
from node import protocol as P
from node.net import Channel, context

__all__ = ["Producer", "Consumer", "Admin", "TopicPartition", "RecordMetadata",
           "BatchMetadata", "ConsumerRecord", "PartitionMetadata", "BrokerMetadata",
           "ClusterMetadata", "KafkaTimeoutError", "KafkaError"]

KafkaError = E.KafkaError
TopicPartition = namedtuple("TopicPartition", "topic partition")
RecordMetadata = namedtuple("RecordMetadata", "topic partition offset timestamp")
BatchMetadata = namedtuple("BatchMetadata", "topic partition base_offset record_count timestamp")
ConsumerRecord = namedtuple("ConsumerRecord", "topic partition offset timestamp key value")
BrokerMetadata = namedtuple("BrokerMetadata", "broker_id host port rack")

# Errors after which the client's view of leadership is stale: refresh metadata.
METADATA_STALE_CODES = frozenset(E.code_of(n) for n in (
    "NOT_LEADER_OR_FOLLOWER", "LEADER_NOT_AVAILABLE", "UNKNOWN_TOPIC_OR_PARTITION",
    "FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH", "NETWORK_EXCEPTION",
    "REQUEST_TIMED_OUT", "REPLICA_NOT_AVAILABLE", "KAFKA_STORAGE_ERROR"))
NETWORK_EXCEPTION = E.code_of("NETWORK_EXCEPTION")
REQUEST_TIMED_OUT = E.code_of("REQUEST_TIMED_OUT")

MONITOR_EVENTS = zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED | zmq.EVENT_CONNECTED
RECEIVE_EVENTS_MAX = 64


class KafkaTimeoutError(TimeoutError):
    """The client gave up waiting (a future's ``get``, metadata, a delivery timeout)."""


def error(code: int, message: str | None = None) -> E.KafkaError:
    """The exception instance for a broker error code."""
    return E.error_for(code)(message)


# ----------------------------------------------------------------- metadata

def parse_bootstrap(servers) -> list[str]:
    """"h1:p1,h2:p2" (or a list; PLAINTEXT:// and tcp:// prefixes allowed) -> endpoints."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    endpoints = []
    for item in items:
        text = str(item).strip()
        for prefix in ("PLAINTEXT://", "tcp://"):
            text = text.removeprefix(prefix)
        host, sep, port = text.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"bootstrap server {item!r} is not HOST:PORT")
        endpoints.append(f"tcp://{host}:{int(port)}")
    if not endpoints:
        raise ValueError("bootstrap_servers is empty")
    return endpoints


@dataclass(frozen=True)
class PartitionMetadata:
    topic: str
    partition: int
    leader: int  # -1 = none
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    error: int = 0

    @property
    def offline(self) -> bool:
        return self.leader < 0


@dataclass(frozen=True)
class ClusterMetadata:
    """One Metadata response, indexed. Immutable: a refresh builds a new one."""

    brokers: dict[int, BrokerMetadata] = field(default_factory=dict)
    controller_id: int = -1
    topics: dict[str, dict[int, PartitionMetadata]] = field(default_factory=dict)
    topic_errors: dict[str, int] = field(default_factory=dict)
    created_s: float = 0.0

    def endpoint(self, broker_id: int) -> str | None:
        b = self.brokers.get(broker_id)
        return None if b is None else f"tcp://{b.host}:{b.port}"

    def partition(self, topic: str, partition: int) -> PartitionMetadata | None:
        return self.topics.get(topic, {}).get(partition)

    def leader_endpoint(self, topic: str, partition: int) -> str | None:
        p = self.partition(topic, partition)
        return None if p is None or p.leader < 0 else self.endpoint(p.leader)

    def partition_count(self, topic: str) -> int | None:
        parts = self.topics.get(topic)
        return len(parts) if parts else None

    def available_partitions(self, topic: str) -> list[int]:
        return sorted(p for p, m in self.topics.get(topic, {}).items()
                      if m.leader >= 0 and m.leader in self.brokers)

    def merged(self, newer: "ClusterMetadata") -> "ClusterMetadata":
        """``newer`` for the topics it covers, this snapshot's for the others."""
        topics = {**self.topics, **newer.topics}
        errors = {t: c for t, c in {**self.topic_errors, **newer.topic_errors}.items()
                  if t not in newer.topics or t in newer.topic_errors}
        return ClusterMetadata(newer.brokers, newer.controller_id, topics, errors,
                               newer.created_s)


def parse_metadata(body: dict, now_s: float = 0.0) -> ClusterMetadata:
    """A Metadata response body (node.protocol) -> ClusterMetadata; ProtocolError if malformed."""
    try:
        brokers = {int(b[0]): BrokerMetadata(int(b[0]), str(b[1]), int(b[2]), b[3])
                   for b in body["brokers"]}
        topics: dict[str, dict[int, PartitionMetadata]] = {}
        topic_errors: dict[str, int] = {}
        for name, code, partitions in body["topics"]:
            if code:
                topic_errors[name] = int(code)
                continue
            topics[name] = {
                int(p[0]): PartitionMetadata(name, int(p[0]), int(p[2]), int(p[3]),
                                             tuple(p[4]), tuple(p[5]), tuple(p[6]), int(p[1]))
                for p in partitions}
        controller = int(body.get("controller_id", -1))
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise P.ProtocolError(f"malformed Metadata response: {e!r}") from None
    return ClusterMetadata(brokers, controller, topics, topic_errors, now_s)


# ----------------------------------------------------------------- network

@dataclass
class _InFlight:
    endpoint: str
    correlation_id: int
    deadline_s: float
    context: object


@dataclass
class Completion:
    """What ``Network.poll`` hands back: a response, or the failure of a request."""

    endpoint: str
    context: object
    response: P.Response | None = None
    error_code: int = 0
    error_message: str = ""


class _Connection:
    def __init__(self, endpoint: str, client_id: str):
        self.endpoint = endpoint
        self.channel = Channel(endpoint, client_id=client_id)
        self.monitor = self.channel.socket.get_monitor_socket(MONITOR_EVENTS)
        self.connected = False
        self.failures = 0

    def close(self) -> None:
        try:
            self.channel.socket.disable_monitor()
        except zmq.ZMQError:
            pass
        self.monitor.close(linger=0)
        self.channel.close()


class Network:
    """One thread's channels to the brokers, keyed by endpoint ("tcp://host:port")."""

    def __init__(self, client_id: str, request_timeout_ms: int):
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connections: dict[str, _Connection] = {}
        self.in_flight: dict[tuple[str, int], _InFlight] = {}
        self.poller = zmq.Poller()
        self.extra_fds: list[int] = []
        self.backlog: list[Completion] = []  # completions a blocking call set aside
        self.closed = False
        context()  # make sure the process-wide context exists in this thread too

    # -- connections
    def connection(self, endpoint: str) -> _Connection:
        conn = self.connections.get(endpoint)
        if conn is None:
            conn = _Connection(endpoint, self.client_id)
            self.connections[endpoint] = conn
            self.poller.register(conn.channel.socket, zmq.POLLIN)
            self.poller.register(conn.monitor, zmq.POLLIN)
        return conn

    def in_flight_count(self, endpoint: str) -> int:
        conn = self.connections.get(endpoint)
        return 0 if conn is None else len(conn.channel.in_flight)

    def register_fd(self, fd: int) -> None:
        self.poller.register(fd, zmq.POLLIN)
        self.extra_fds.append(fd)

    def _drop(self, conn: _Connection, code: int, message: str, out: list) -> None:
        """Fail every request in flight on ``conn`` and replace it by a fresh channel."""
        for key in [k for k in self.in_flight if k[0] == conn.endpoint]:
            entry = self.in_flight.pop(key)
            out.append(Completion(conn.endpoint, entry.context, None, code, message))
        self.poller.unregister(conn.channel.socket)
        self.poller.unregister(conn.monitor)
        conn.close()
        del self.connections[conn.endpoint]

    # -- requests
    def send(self, endpoint: str, api_key: int, body: dict, frames=(), *, context=None,
             timeout_ms: int | None = None, expect_response: bool = True) -> int:
        conn = self.connection(endpoint)
        try:
            cid = conn.channel.send(api_key, body, frames, expect_response=expect_response)
        except zmq.Again:
            raise E.error_for(NETWORK_EXCEPTION)(f"{endpoint}: send queue full") from None
        if expect_response:
            timeout_s = (timeout_ms if timeout_ms is not None else self.request_timeout_ms) / 1000
            self.in_flight[(endpoint, cid)] = _InFlight(endpoint, cid,
                                                        time.monotonic() + timeout_s, context)
        return cid

    def cancel(self, endpoint: str, correlation_id: int) -> None:
        self.in_flight.pop((endpoint, correlation_id), None)
        conn = self.connections.get(endpoint)
        if conn is not None:
            conn.channel.forget(correlation_id)

    def next_deadline_s(self) -> float | None:
        return min((e.deadline_s for e in self.in_flight.values()), default=None)

    def poll(self, timeout_ms: float) -> tuple[list[Completion], set[int]]:
        """Wait up to ``timeout_ms`` for responses; returns the completions and the
        extra fds (``register_fd``) that are readable."""
        out: list[Completion] = self.backlog
        self.backlog = []
        if out:
            timeout_ms = 0
        deadline = self.next_deadline_s()
        if deadline is not None:
            timeout_ms = min(timeout_ms, max(0.0, (deadline - time.monotonic()) * 1000))
        events = dict(self.poller.poll(max(0, int(timeout_ms + 0.999)) if timeout_ms > 0 else 0))
        ready_fds = {fd for fd in self.extra_fds if fd in events}
        for conn in list(self.connections.values()):
            if conn.channel.socket in events:  # answers first: they may precede a drop
                for response in conn.channel.receive_ready():
                    entry = self.in_flight.pop((conn.endpoint, response.correlation_id), None)
                    if entry is not None:
                        out.append(Completion(conn.endpoint, entry.context, response))
            if conn.monitor in events:
                self._monitor(conn, out)
        now = time.monotonic()
        for key, entry in list(self.in_flight.items()):
            if entry.deadline_s <= now:
                self.cancel(*key)
                out.append(Completion(entry.endpoint, entry.context, None, REQUEST_TIMED_OUT,
                                      f"no response from {entry.endpoint} in time"))
        return out, ready_fds

    def _monitor(self, conn: _Connection, out: list) -> bool:
        """Handle monitor events; True if the connection was dropped."""
        for _ in range(RECEIVE_EVENTS_MAX):
            try:
                event = recv_monitor_message(conn.monitor, flags=zmq.NOBLOCK)
            except zmq.Again:
                break
            kind = event["event"]
            if kind == zmq.EVENT_CONNECTED:
                conn.connected = True
                conn.failures = 0
            elif kind in (zmq.EVENT_DISCONNECTED, zmq.EVENT_CONNECT_RETRIED):
                conn.connected = False
                conn.failures += 1
                if any(k[0] == conn.endpoint for k in self.in_flight):
                    what = "connection lost" if kind == zmq.EVENT_DISCONNECTED else \
                        "connection refused"
                    self._drop(conn, NETWORK_EXCEPTION, f"{conn.endpoint}: {what}", out)
                    return True
        return False

    def request(self, endpoint: str, api_key: int, body: dict, frames=(), *,
                timeout_ms: int | None = None) -> P.Response:
        """Blocking request; raises the KafkaError of a network failure or timeout.
        Completions of other requests that arrive meanwhile are kept for ``poll``."""
        marker = object()
        self.send(endpoint, api_key, body, frames, context=marker, timeout_ms=timeout_ms)
        while True:
            found = None
            for c in self._poll_aside(100):
                if c.context is marker:
                    found = c
                else:
                    self.backlog.append(c)
            if found is not None:
                if found.response is None:
                    raise error(found.error_code, found.error_message)
                return found.response

    def _poll_aside(self, timeout_ms: float) -> list[Completion]:
        """Poll without consuming the backlog (for the blocking calls)."""
        saved, self.backlog = self.backlog, []
        try:
            completions, _ = self.poll(timeout_ms)
        finally:
            self.backlog = saved + self.backlog
        return completions

    def request_first(self, endpoints: list[str], api_key: int, body: dict, *,
                      timeout_ms: int | None = None) -> tuple[str, P.Response]:
        """Send to every endpoint at once; the first answer wins, the rest are cancelled.
        Raises the last failure if none answers."""
        pending = {}
        for endpoint in dict.fromkeys(endpoints):
            marker = object()
            pending[marker] = (endpoint, self.send(endpoint, api_key, body, context=marker,
                                                   timeout_ms=timeout_ms))
        last: Completion | None = None
        try:
            while pending:
                for c in self._poll_aside(100):
                    if c.context not in pending:
                        self.backlog.append(c)
                        continue
                    del pending[c.context]
                    if c.response is not None:
                        return c.endpoint, c.response
                    last = c
        finally:
            for endpoint, cid in pending.values():
                self.cancel(endpoint, cid)
        raise error(last.error_code, last.error_message)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            for conn in list(self.connections.values()):
                conn.close()
            self.connections.clear()
            self.in_flight.clear()


class MetadataFetcher:
    """Blocking metadata refresh for single-threaded clients (consumer, admin)."""

    def __init__(self, network: Network, bootstrap: list[str], timeout_ms: int):
        self.network = network
        self.bootstrap = bootstrap
        self.timeout_ms = timeout_ms
        self.current = ClusterMetadata()

    def endpoints(self) -> list[str]:
        known = [self.current.endpoint(b) for b in sorted(self.current.brokers)]
        return list(dict.fromkeys([e for e in known if e] + self.bootstrap))

    def refresh(self, topics: list[str] | None, timeout_ms: int | None = None,
                merge: bool = True) -> ClusterMetadata:
        _, response = self.network.request_first(
            self.endpoints(), P.ApiKey.METADATA, {"topics": topics},
            timeout_ms=timeout_ms or self.timeout_ms)
        fresh = parse_metadata(response.body, time.monotonic())
        self.current = self.current.merged(fresh) if merge and topics is not None else fresh
        return self.current


def _lazy(name: str):
    if name == "Producer":
        from node.producer import Producer
        return Producer
    if name == "Consumer":
        from node.consumer import Consumer
        return Consumer
    if name == "Admin":
        from node.admin_client import Admin
        return Admin
    raise AttributeError(f"module 'node.client' has no attribute {name!r}")


def __getattr__(name: str):
    # The client classes import this module; importing them lazily here keeps
    # ``from node.client import Producer`` working without an import cycle.
    value = _lazy(name)
    globals()[name] = value
    return value
