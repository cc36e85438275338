"""The broker process: ``python -m node.broker --config server.properties``.

A thin shell around the pure replication cores (``node.core.replication``). One thread runs
an event loop (``node.broker.loop``) that owns every piece of state:

    Broker (this module)          lifecycle, coordinator session, request dispatch
      ReplicaManager              hosted replicas: logs, cores, effects, ISR writes,
        (node.broker.replica_manager)    the shared-memory board
      ReplicaFetcherManager       follower fetch sessions, one per leader
        (node.broker.fetcher)
      FetchPurgatory,             fetches waiting for bytes, produce requests waiting
        ProduceRequest            for acks
        (node.broker.purgatory)
      MetadataCache               what the controller last told (UpdateMetadata)
      ControllerRunner            when this broker holds /controller
        (node.broker.controller_runner)

Kazoo callbacks, signals and timers are posted to the loop as events.

Start-up, as Kafka: connect to the coordinator, ensure the persistent paths, read (or
create) ``/cluster/id``, bind the listener, create the board, register
``/brokers/ids/N`` (ephemeral; waiting for a previous session's registration to expire;
registering again after a session expiry), then compete for ``/controller``. Partition
logs are opened when a LeaderAndIsr names them.

Requests (``node.wire.protocol``): Produce, Fetch (long poll), ListOffsets, Metadata,
OffsetForLeaderEpoch, LeaderAndIsr, UpdateMetadata and StopReplica are handled here;
ControlledShutdown goes to the controller runner when this broker is the controller
(else ErrorCode.NOT_CONTROLLER); admin requests go to ``node.broker.admin_manager.handle_admin_request``. A
request that does not decode gets ErrorCode.INVALID_REQUEST when its correlation id can be read
(and is dropped otherwise); a handler error never stops the broker. LeaderAndIsr,
UpdateMetadata and StopReplica from a controller epoch older than the highest seen get
ErrorCode.STALE_CONTROLLER_EPOCH.

Shutdown on SIGTERM/SIGINT: controlled shutdown first if ``controlled.shutdown.enable``
(ask the controller in ``/controller`` to move leaderships away, retrying
``controlled.shutdown.max.retries`` times), keep serving meanwhile, then stop the
controller, close the logs (HW checkpoint), the board (unlinked) and the coordinator
session, and exit 0.
"""
from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import signal
import sys
import time
import threading
import uuid

import zmq
from kazoo.client import KazooState
from kazoo.exceptions import NodeExistsError, NoNodeError

from node.broker import limits as L
from node.wire import errors as E
from node.wire.errors import ErrorCode
from node.wire import protocol as P
from node.wire import zkdata as Z
from node.broker import failures
from node.broker import coordinator
from node.broker.failures import (COORDINATOR_ERRORS, EXPECTED_ERRORS, STORAGE_ERRORS,
                                  LogLimiter)
from node.broker.loop import EventLoop, Outbound, now_ms
from node.wire.control import (LeaderAndIsrPartition, StopReplicaPartition,
                               UpdateMetadataPartition)
from node.broker.purgatory import FetchPurgatory, FetchRead, ParkedFetch, ProduceRequest
from node.broker.replica_manager import Partition, ReplicaManager
from node.config import BrokerConfig, ConfigError, parse_key_values
from node.broker.fetcher import ReplicaFetcherManager
from node.broker.metadata_cache import MetadataCache
from node.broker.lost_replicas import (LostReplicas, find_lost, take_clean_shutdown_marker,
                                       write_clean_shutdown_marker)
from node.net import context
from node import local_link
from node.local_link import LinkClosed, LocalConnection
from node.core.replication import CompleteProduce, Role
from shm import batch as B
from shm.batch import CorruptRecordError
from shm.producer_state import Verdict, check_frame
from shm.errors import OffsetOutOfRangeError
from shm import faults
from shm.names import check_cluster_id, cluster_objects, topic_name_error, unlink

from node.broker.admin_manager import ADMIN_API_KEYS, handle_admin_request
from node.broker.controller_runner import ControllerRunner

logger = logging.getLogger("node.broker.server")

CLUSTER_ID_PATH = "/cluster/id"
# Exit status when every log directory failed (Kafka halts with 1).
EXIT_LOG_DIRS_FAILED = 1

NONE = 0
class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.loop = EventLoop()
        self.zk = coordinator.new_client(config.zookeeper_connect,
                                         config.zookeeper_session_timeout_ms / 1000)
        self.cluster_id: str | None = None
        self.router = None
        self.local_listener = None
        self.local_connections: dict[int, LocalConnection] = {}
        self.port = config.port
        self.broker_epoch = -1
        self.metadata = MetadataCache()
        self.replicas = ReplicaManager(
            broker_id=self.broker_id, config=config, loop=self.loop, zk=self.zk,
            metadata=self.metadata, on_produce_complete=self._on_produce_complete,
            on_high_watermark=lambda part: self.purgatory.wake(part.key, leo_moved=False),
            on_all_log_dirs_offline=self._all_log_dirs_offline)
        self.fetch_outbound = Outbound(self.loop, f"broker-{self.broker_id}-fetcher",
                                       config.request_timeout_ms, local=True)
        self.controller_outbound = Outbound(self.loop, f"broker-{self.broker_id}-controller",
                                            config.request_timeout_ms)
        self.fetchers = ReplicaFetcherManager(self.replicas, self.fetch_outbound)
        self.replicas.fetchers = self.fetchers
        self.purgatory = FetchPurgatory(self.loop, self._read_fetch, self._answer_fetch)
        self.controller = None
        self._pending_produces = 0
        # Traced acks=all writes waiting for their followers: partition key ->
        # (last offset, the request's trace). Empty unless a client asked for a trace.
        self._traces: dict[tuple[str, int], tuple[int, dict]] = {}
        self._trace_replica = -1  # the follower whose fetch is being applied
        self._shutting_down = False
        self._stop = False
        self._halt = False               # every log dir failed: stop without closing logs
        self._session_lost = False
        self._startup_deadline = 0.0
        # Partitions whose committed data this broker lost, durable until it is back in
        # an ISR (node.broker.lost_replicas); never led meanwhile.
        self.lost = LostReplicas(config.log_dirs)
        self.replicas.lost = self.lost
        self.replicas.on_lost_cleared = self._update_registration
        self.clean_shutdown = True
        self._link_violations = LogLimiter(1.0)
        self.loop.after_iteration = self.fetchers.maybe_fetch
        self._handlers = {
            P.ApiKey.PRODUCE: self._handle_produce,
            P.ApiKey.FETCH: self._handle_fetch,
            P.ApiKey.LIST_OFFSETS: self._handle_list_offsets,
            P.ApiKey.METADATA: self._handle_metadata,
            P.ApiKey.LEADER_AND_ISR: self._handle_leader_and_isr,
            P.ApiKey.STOP_REPLICA: self._handle_stop_replica,
            P.ApiKey.UPDATE_METADATA: self._handle_update_metadata,
            P.ApiKey.CONTROLLED_SHUTDOWN: self._handle_controlled_shutdown,
            P.ApiKey.OFFSET_FOR_LEADER_EPOCH: self._handle_offset_for_leader_epoch,
            P.ApiKey.GET_REPLICA_LOG_INFO: self._handle_get_replica_log_info,
        }

    @property
    def partitions(self) -> dict[tuple[str, int], Partition]:
        return self.replicas.partitions

    # ================================================================ start-up

    def start(self) -> None:
        config = self.config
        signal.signal(signal.SIGTERM, lambda *_: self.loop.post(self.begin_shutdown))
        signal.signal(signal.SIGINT, lambda *_: self.loop.post(self.begin_shutdown))
        self._startup_deadline = time.monotonic() + config.zookeeper_connection_timeout_ms / 1000
        self.zk.start(timeout=min(L.ZK_START_TIMEOUT_S,
                                  config.zookeeper_connection_timeout_ms / 1000))
        self.zk.add_listener(self._on_zk_state)

        def ensure_paths():
            for path in Z.PERSISTENT_PATHS:
                self.zk.ensure_path(path)

        self._until_coordinator_answers("create the cluster's paths", ensure_paths)
        self.cluster_id = self._until_coordinator_answers("read the cluster id",
                                                          self._read_cluster_id)
        for d in config.log_dirs:
            os.makedirs(d, exist_ok=True)
        self._bind()
        self.replicas.open_board(self.cluster_id, L.BOARD_CAPACITY)
        self.clean_shutdown = take_clean_shutdown_marker(config.log_dirs)
        if not self.clean_shutdown:
            logger.warning("the previous run of broker %d did not shut down cleanly",
                           self.broker_id)
        self.lost.load()
        self._until_coordinator_answers("look for replicas that lost data",
                                        lambda: self.lost.mark(self._find_lost_replicas()))
        self._until_coordinator_answers("register", self._register)
        self.loop.every(L.TICK_INTERVAL_MS, self._tick)
        self.loop.every(config.replica_high_watermark_checkpoint_interval_ms,
                        self.replicas.checkpoint_high_watermarks)
        self.loop.every(config.log_retention_check_interval_ms, self.replicas.retention)
        if config.log_scrub_bytes_per_second > 0:
            budget = max(1, config.log_scrub_bytes_per_second * L.SCRUB_INTERVAL_MS // 1000)
            self.loop.every(L.SCRUB_INTERVAL_MS, lambda: self.replicas.scrub(budget))
        self.loop.every(L.FLUSH_CHECK_INTERVAL_MS, self.replicas.flush_due)
        self.controller = ControllerRunner(
            broker_id=self.broker_id, zk=self.zk, config=config, post=self.loop.post,
            send=self.send_to_broker, now_ms=now_ms)
        self.controller.start()
        # Everything made so far (modules, the coordinator session, the controller) lives
        # as long as the process: keep it out of the collector, so a full collection
        # scans only what requests made (~15 ms on the import graph, a latency spike).
        gc.freeze()
        print(f"broker {self.broker_id} started, listening on {config.host}:{self.port} "
              f"(cluster {self.cluster_id})", flush=True)

    def _until_coordinator_answers(self, what: str, step):
        """Run a start-up step that needs the coordinator, again while it does not
        answer, until zookeeper.connection.timeout.ms after start-up began (Kafka's
        brokers wait that long for ZooKeeper). A coordinator that is down or paused when
        a broker starts is common in a chaos run; exiting at once left brokers down."""
        said = False
        while True:
            try:
                return step()
            except COORDINATOR_ERRORS as e:
                if time.monotonic() >= self._startup_deadline:
                    raise
                if not said:
                    logger.warning("waiting for the coordinator to %s (%s); giving up after "
                                   "zookeeper.connection.timeout.ms = %d ms", what, e,
                                   self.config.zookeeper_connection_timeout_ms)
                    said = True
                time.sleep(L.STARTUP_COORDINATOR_RETRY_S)

    def _read_cluster_id(self) -> str:
        if self.config.cluster_id is not None:
            return self.config.cluster_id
        for _ in range(10):
            try:
                data, _ = self.zk.get(CLUSTER_ID_PATH)
                return check_cluster_id(json.loads(data.decode())["id"])
            except NoNodeError:
                new_id = "c" + uuid.uuid4().hex[:16]
                try:
                    self.zk.create(CLUSTER_ID_PATH, json.dumps(
                        {"version": "1", "id": new_id}).encode(), makepath=True)
                    return new_id
                except NodeExistsError:
                    continue
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                raise ConfigError(f"{CLUSTER_ID_PATH} holds no usable cluster id: {e}") from None
        raise RuntimeError(f"could not read or create {CLUSTER_ID_PATH}")

    def _bind(self) -> None:
        router = context().socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        router.setsockopt(zmq.SNDHWM, L.LISTENER_SEND_HWM)
        router.setsockopt(zmq.RCVHWM, L.LISTENER_RECEIVE_HWM)
        router.setsockopt(zmq.MAXMSGSIZE, L.SOCKET_REQUEST_BYTES_MAX)
        # ZeroMQ does not tell a ROUTER which peer went away (ZMQ_ROUTER_NOTIFY is a
        # draft option this libzmq refuses): a TCP client's parked fetches live out their
        # wait; a local link's are dropped when it closes (_drop_local).
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

    def _registration(self) -> bytes:
        return Z.encode_broker(Z.BrokerInfo(self.broker_id, self.config.host, self.port,
                                            self.config.broker_rack,
                                            lost_replicas=tuple(sorted(self.lost.marked)),
                                            clean_shutdown=self.clean_shutdown))

    def _find_lost_replicas(self) -> dict[tuple[str, int], int]:
        """Partitions whose ISR (as the coordinator holds it) names this broker although
        its copy lost committed data (``node.broker.lost_replicas.find_lost``)."""
        in_isr = []
        topics = self.zk.get_children(Z.BROKER_TOPICS)
        for topic in sorted(topics):
            try:
                assignment = Z.decode_assignment(topic, self.zk.get(Z.topic_path(topic))[0])
            except (NoNodeError, Z.ZkDataError):
                continue
            for partition, replicas in sorted(assignment.items()):
                if self.broker_id not in replicas:
                    continue
                try:
                    data, stat = self.zk.get(Z.partition_state_path(topic, partition))
                    state = Z.decode_partition_state(data, stat.version)
                except (NoNodeError, Z.ZkDataError):
                    continue
                if self.broker_id in state.isr or self.broker_id in state.elr:
                    in_isr.append((topic, partition))

        def log_end(tp):
            try:
                return self.replicas.open_partition(*tp).log.log_end_offset
            except STORAGE_ERRORS as e:  # the replica manager reports it later
                logger.warning("%s-%d: cannot open the log: %s", tp[0], tp[1], e)
                return None

        lost = find_lost(in_isr, self.config.log_dirs, log_end)
        if lost:
            logger.warning("broker %d was in the ISR of %d partitions it lost committed "
                           "data of (a new or wiped log dir, or a power failure): %s; they "
                           "will not lead until they have caught up", self.broker_id, len(lost),
                           ", ".join(f"{t}-{p}" for t, p in sorted(lost)[:20]))
        return lost

    def _register(self) -> None:
        """Create /brokers/ids/N; if a previous session still holds it, wait for it to
        expire (Kafka's checkedEphemeralCreate). The znode's czxid is the broker epoch."""
        path = Z.broker_path(self.broker_id)
        wait_s = L.OLD_REGISTRATION_WAIT_SESSIONS * self.config.zookeeper_session_timeout_ms / 1000
        deadline = time.monotonic() + wait_s
        said = False
        while True:
            try:
                _, stat = self.zk.create(path, self._registration(), ephemeral=True,
                                         include_data=True)
                self.broker_epoch = stat.czxid
                return
            except NodeExistsError:
                try:
                    _, stat = self.zk.get(path)
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == self.zk.client_id[0]:
                    self.broker_epoch = stat.czxid
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{path} is still held by another session after "
                                       f"{wait_s:.0f} s: is broker {self.broker_id} running?")
                if not said:
                    logger.warning("%s exists from a previous session; waiting for it to "
                                   "expire", path)
                    said = True
                time.sleep(L.OLD_REGISTRATION_POLL_S)

    def _update_registration(self) -> None:
        """Rewrite /brokers/ids/N (same znode, same broker epoch) once a lost replica is
        back, so a controller elected later does not count it lost again."""
        try:
            self.zk.set(Z.broker_path(self.broker_id), self._registration())
        except COORDINATOR_ERRORS as e:   # the next controller waits for an ISR change
            logger.warning("cannot update the registration: %s", e)

    def _on_zk_state(self, state) -> None:  # kazoo thread
        if state == KazooState.LOST:
            self.loop.post(lambda: self._zk_session_changed(lost=True))
        elif state == KazooState.CONNECTED:
            self.loop.post(lambda: self._zk_session_changed(lost=False))

    def _zk_session_changed(self, lost: bool) -> None:
        if lost:
            logger.warning("coordinator session lost")
            self._session_lost = True
            return
        if self._session_lost and not self._shutting_down:
            self._session_lost = False
            logger.warning("new coordinator session: registering again")
            try:
                self._register()
            except COORDINATOR_ERRORS as e:  # retried on the next reconnect
                logger.error("re-registration failed: %s", e)
                self._session_lost = True

    # ================================================================ the loop

    def run(self) -> int:
        try:
            while not self._stop:
                self.loop.run_once()
        except Exception as e:  # expected failures are handled where they happen: a bug
            return self.die(e)
        if self._halt:
            self._abandon()
            return EXIT_LOG_DIRS_FAILED
        self._close()
        return 0

    def _all_log_dirs_offline(self) -> None:
        """Kafka halts a broker whose every log dir failed; the controller then moves
        its leaderships (our session is ended at once, not left to time out)."""
        self._halt = True
        self._stop = True

    def die(self, e: BaseException) -> int:
        """A broken invariant (or another bug): one log line, then stop without flushing
        or checkpointing what may be wrong. Ending the coordinator session (bounded)
        lets the controller move our leaderships now instead of after the session
        timeout; our shared-memory objects go, the files stay for recovery."""
        code = failures.fatal(e)
        self._abandon()
        return code

    def _abandon(self) -> None:
        """Stop without touching the logs: end the session (bounded), drop our shared
        memory objects; the files stay for recovery."""
        self._end_session_bounded()
        if self.cluster_id is not None:
            head = f"/mk-{self.cluster_id}-b{self.broker_id}-"
            for name in cluster_objects(self.cluster_id):
                if name.startswith(head):
                    unlink(name)

    def _end_session(self) -> None:
        try:
            self.zk.stop()
            self.zk.close()
        except COORDINATOR_ERRORS:
            pass  # the session then ends by timing out

    def _end_session_bounded(self) -> None:
        """End the coordinator session, waiting at most ZK_CLOSE_TIMEOUT_S: kazoo's stop
        waits for the server to answer the close, and an absent (or paused) coordinator
        never does; the session then ends by timing out."""
        closer = threading.Thread(target=self._end_session, daemon=True,
                                  name="coordinator-close")
        closer.start()
        closer.join(L.ZK_CLOSE_TIMEOUT_S)
        if closer.is_alive():
            logger.warning("the coordinator did not answer the session close within %g s; "
                           "the session will expire", L.ZK_CLOSE_TIMEOUT_S)

    def _tick(self) -> None:
        now = now_ms()
        self.replicas.tick(now)
        self.fetch_outbound.expire(now)
        self.controller_outbound.expire(now)
        if self.controller is not None:
            self.controller.tick(now)

    # ================================================================ requests

    def _on_listener_readable(self) -> None:
        router = self.router
        for _ in range(L.RECEIVE_BATCH_MAX):
            # Ask before receiving: ending the batch on zmq.Again costs an exception per
            # wake-up, and a wake-up usually brings one request.
            if not router.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                return
            try:
                frames = router.recv_multipart(flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            if len(frames) >= 2:
                self._handle(frames[0].bytes, frames[1:])

    def _on_local_accept(self) -> None:
        for _ in range(L.RECEIVE_BATCH_MAX):
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
            self._handle(conn, frames)
        if conn.broken:
            self._drop_local(conn)

    def _drop_local(self, conn: LocalConnection) -> None:
        # By identity: once closed, its fd number may belong to a newer connection.
        if self.local_connections.get(conn.socket) is conn:
            del self.local_connections[conn.socket]
            self.loop.remove_socket(conn.socket)
            self.purgatory.forget_peer(conn)   # nobody is left to answer
        conn.close()

    def _handle(self, identity: bytes | LocalConnection, frames) -> None:
        try:
            request = P.decode_request(frames)
        except P.ProtocolError as e:
            correlation_id = P.peek_correlation_id(frames)
            logger.warning("malformed request (correlation id %s): %s", correlation_id, e)
            if correlation_id is not None:
                api_key = P.peek_api_key(frames)
                self._reply(identity, correlation_id, api_key if api_key is not None else -1,
                            {"error": ErrorCode.INVALID_REQUEST, "error_message": str(e)})
            return
        if request.api_key == P.ApiKey.API_VERSIONS:
            self._handle_api_versions(identity, request)
            return
        if request.api_version != P.API_VERSION:
            name = _api_name(request.api_key)
            self._reply(identity, request.correlation_id, request.api_key,
                        {"error": ErrorCode.UNSUPPORTED_VERSION,
                         "error_message": f"{name} version {request.api_version} is not "
                                          f"supported (versions {P.API_VERSION} to "
                                          f"{P.API_VERSION}; see ApiVersions)"})
            return
        try:
            handler = self._handlers.get(request.api_key)
            if handler is not None:
                handler(identity, request)
            elif request.api_key in ADMIN_API_KEYS:
                self._handle_admin(identity, request)
            else:
                self._reply(identity, request.correlation_id, request.api_key,
                            {"error": ErrorCode.INVALID_REQUEST,
                             "error_message": f"unsupported api key {request.api_key}"})
        except P.ProtocolError as e:
            logger.warning("invalid %s request from %s: %s", _api_name(request.api_key),
                           request.client_id, e)
            self._reply(identity, request.correlation_id, request.api_key,
                        {"error": ErrorCode.INVALID_REQUEST, "error_message": str(e)})
        except EXPECTED_ERRORS as e:
            # A disk or coordinator failure costs this request; anything else is a bug
            # and stops the broker (node.broker.failures).
            code = E.code_for_exception(e)
            logger.error("%s request failed: %s", _api_name(request.api_key), e)
            self._reply(identity, request.correlation_id, request.api_key,
                        {"error": code, "error_message": str(e)})

    def _handle_api_versions(self, identity, request: P.Request) -> None:
        """Kafka's ApiVersions: every API this broker answers, with its version range.
        Answered in any version (a client learns the ranges from it)."""
        keys = [[int(k), P.API_VERSION, P.API_VERSION] for k in sorted(P.ApiKey)
                if k in self._handlers or k in ADMIN_API_KEYS or k == P.ApiKey.API_VERSIONS]
        error = ErrorCode.NONE if request.api_version == P.API_VERSION else \
            ErrorCode.UNSUPPORTED_VERSION
        self._reply(identity, request.correlation_id, request.api_key,
                    {"error": error, "api_keys": keys})

    def _reply(self, identity: bytes, correlation_id: int, api_key: int, body: dict,
               frames=()) -> None:
        if type(identity) is LocalConnection:
            if not identity.closed:
                try:
                    identity.send_frames(P.encode_response(correlation_id, api_key, body,
                                                           frames))
                except LinkClosed as e:
                    logger.warning("cannot answer correlation id %d: %s", correlation_id, e)
                    self._drop_local(identity)
                    return
                if identity.output:
                    self.loop.watch_writable(identity.socket, True)
            return
        message = [identity, *P.encode_response(correlation_id, api_key, body, frames)]
        try:
            # Batch frames are zero-copy views of the log.
            self.router.send_multipart(message, copy=not frames, flags=zmq.NOBLOCK)
        except zmq.ZMQError as e:
            logger.warning("cannot answer correlation id %d: %s", correlation_id, e)

    def _not_hosted_error(self, topic: str, partition: int) -> int:
        if self.metadata.partition(topic, partition) is not None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    # ---------------------------------------------------------------- Produce

    def _handle_produce(self, identity: bytes, request: P.Request) -> None:
        body = request.body
        acks = P.field(body, "acks", int)
        if acks not in (-1, 0, 1):
            raise P.ProtocolError(f"acks must be -1, 0 or 1, got {acks}")
        timeout_ms = min(max(P.field(body, "timeout_ms", int), 0), L.PRODUCE_TIMEOUT_MS_MAX)
        entries = P.entries(body, "partitions", 2)
        if len(request.frames) != len(entries):
            raise P.ProtocolError(f"{len(entries)} partitions but {len(request.frames)} "
                                  f"batch frames")
        produce = ProduceRequest(identity, request.correlation_id, acks,
                                 [[t, p, None, -1, -1, None] for t, p in entries], len(entries))
        if "trace" in body:
            produce.trace = _start_trace(body["trace"])
        now = now_ms()
        appended = []
        for i, ((topic, partition), frame) in enumerate(zip(entries, request.frames)):
            part = self._produce_partition(produce, i, topic, partition, frame, timeout_ms,
                                           now)
            if part is not None:
                appended.append(part)
        produce.in_handler = False
        self._answer_produce(produce)
        if acks != -1:
            # The producer's answer first; then the parked fetches get the new bytes.
            for part in appended:
                self.purgatory.wake(part.key, leo_moved=True)

    def _produce_partition(self, produce: ProduceRequest, index: int, topic: str,
                           partition: int, frame, timeout_ms: int, now: int
                           ) -> Partition | None:
        """Append one partition's batches (one frame, whole batches, never re-encoded);
        the partition if they were appended. With acks=all the parked follower fetches
        get them at once (their next fetch is what completes the request); with acks 0
        and 1 the caller wakes them after answering the producer."""
        part = self.partitions.get((topic, partition))
        if part is None:
            produce.complete(index, self._not_hosted_error(topic, partition), -1, -1)
            return None
        log = part.log
        if self.replicas.is_offline(part):
            produce.complete(index, ErrorCode.KAFKA_STORAGE_ERROR, -1, -1,
                             f"the replica of {topic}-{partition} is offline")
            return None
        error = part.core.check_produce(produce.acks)
        if error:
            produce.complete(index, error, -1, log.log_start_offset)
            return None
        if produce.acks == -1 and self._pending_produces >= L.PENDING_PRODUCE_REQUESTS_MAX:
            produce.complete(index, ErrorCode.REQUEST_TIMED_OUT, -1, log.log_start_offset,
                             "too many produce requests waiting for acks")
            return None
        # The leader stamps offsets and its epoch in place: a zmq frame is writable.
        data = frame.buffer if hasattr(frame, "buffer") else bytearray(frame)
        try:
            verdict = _producer_verdict(log, data)
        except STORAGE_ERRORS as e:     # building the producers' state read the log
            produce.complete(index, E.code_for_exception(e), -1, log.log_start_offset, str(e))
            return None
        if verdict is not None:
            code, first, last = verdict
            if code:
                produce.complete(index, code, -1, log.log_start_offset)
                return None
            # A retry of batches already appended (their answer was lost): the original
            # offsets, once committed (acks=all), and nothing appended twice.
            if produce.acks != -1 or last < log.high_watermark:
                produce.complete(index, ErrorCode.NONE, first, log.log_start_offset)
                return None
            self._pending_produces += 1
            effects = part.core.on_leader_append((produce, index), produce.acks, first, last,
                                                 timeout_ms, now, part.view)
            self.replicas.apply_effects(part, effects)
            return None
        try:
            info = log.append_as_leader(data, part.core.leader_epoch)
        except STORAGE_ERRORS as e:  # CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, KAFKA_STORAGE_ERROR
            code = E.code_for_exception(e)
            if isinstance(e, OSError):      # a full or failing disk: the dir goes offline
                code = ErrorCode.KAFKA_STORAGE_ERROR
                self.replicas.storage_failed(part, e)
            elif code == ErrorCode.UNKNOWN_SERVER_ERROR:
                self.replicas.log_storage_error(part, "append", e)
            produce.complete(index, code, -1, log.log_start_offset, str(e))
            return None
        if produce.trace is not None:
            produce.trace["append"] = time.monotonic_ns()
            if produce.acks == -1 and len(self._traces) < L.TRACED_WRITES_MAX:
                self._traces[part.key] = (info.last_offset, produce.trace)
        if produce.acks == -1:
            self._pending_produces += 1
            self.purgatory.wake(part.key, leo_moved=True)
        effects = part.core.on_leader_append((produce, index), produce.acks, info.first_offset,
                                             info.last_offset, timeout_ms, now, part.view)
        self.replicas.apply_effects(part, effects)
        return part

    def _on_produce_complete(self, part: Partition, effect: CompleteProduce) -> None:
        produce, index = effect.request_id
        if produce.acks == -1:
            self._pending_produces -= 1
        if produce.trace is not None:
            produce.trace["high_watermark"] = time.monotonic_ns()
            produce.trace["by"] = self._trace_replica
            self._traces.pop(part.key, None)
        produce.complete(index, effect.error, effect.base_offset, part.log.log_start_offset)
        self._answer_produce(produce)

    def _answer_produce(self, produce: ProduceRequest) -> None:
        if produce.ready() and produce.acks != 0:  # Kafka sends nothing for acks=0
            body = {"partitions": produce.results}
            if produce.trace is not None:
                produce.trace["answer"] = time.monotonic_ns()
                body["trace"] = produce.trace
            self._reply(produce.identity, produce.correlation_id, P.ApiKey.PRODUCE, body)

    # ---------------------------------------------------------------- Fetch

    def _handle_fetch(self, identity: bytes, request: P.Request) -> None:
        body = request.body
        replica_id = P.field(body, "replica_id", int)
        max_wait_ms = min(max(P.field(body, "max_wait_ms", int), 0), L.FETCH_WAIT_MS_MAX)
        min_bytes = P.field(body, "min_bytes", int)
        max_bytes = P.field(body, "max_bytes", int)
        entries = P.entries(body, "partitions", 5)
        for entry in entries:
            if not all(isinstance(x, int) and not isinstance(x, bool) for x in entry[2:]):
                raise P.ProtocolError("fetch entries are [topic, partition, offset, epoch, "
                                      "max_bytes] with int fields")
        fetch = ParkedFetch(identity, request.correlation_id, replica_id, min_bytes,
                            max(max_bytes, 0), entries)
        if "trace" in body and self._traces:
            self._follower_traced(replica_id, body["trace"])
        if fetch.from_follower:
            self._trace_replica = replica_id
            try:
                self._follower_fetched(fetch)
            finally:
                self._trace_replica = -1
        read = self._read_fetch(fetch)
        if max_wait_ms == 0 or read[2] >= min_bytes or read[3] or not entries or \
                not self.purgatory.may_park(identity):
            self._answer_fetch(fetch, read)
        else:
            self.purgatory.park(fetch, max_wait_ms)

    def _follower_fetched(self, fetch: ParkedFetch) -> None:
        """A follower's fetch offset is its LEO: tell the leader cores (before reading:
        it may advance the HW)."""
        now = now_ms()
        for topic, partition, offset, epoch, _ in fetch.entries:
            part = self.partitions.get((topic, partition))
            if part is not None and part.core.role is Role.LEADER and \
                    part.core.check_fetch_epoch(epoch) == 0:
                effects = part.core.on_follower_fetch(fetch.replica_id, offset, now, part.view)
                self.replicas.apply_effects(part, effects)

    def _read_fetch(self, fetch: ParkedFetch) -> FetchRead:
        """Read every partition of a fetch: zero-copy views, whole batches, at least one
        batch in all, below the HW for consumers and up to the LEO for followers."""
        results, frames, size, errors = [], [], 0, False
        follower = fetch.from_follower
        for topic, partition, offset, epoch, partition_max_bytes in fetch.entries:
            part = self.partitions.get((topic, partition))
            if part is None:
                error = self._not_hosted_error(topic, partition)
            elif self.replicas.is_offline(part):
                error = ErrorCode.KAFKA_STORAGE_ERROR
            else:
                error = part.core.check_fetch_epoch(epoch)
                if not error and part.core.role is not Role.LEADER:
                    error = ErrorCode.NOT_LEADER_OR_FOLLOWER
            if error:
                results.append([topic, partition, error, -1, -1, -1])
                frames.append(b"")
                errors = True
                continue
            log = part.log
            data = b""
            budget = min(partition_max_bytes, fetch.max_bytes - size)
            if budget > 0 or size == 0:
                try:
                    data = log.read(offset, max(budget, 0),
                                    max_offset=None if follower else log.high_watermark)
                except OffsetOutOfRangeError:
                    error, errors = ErrorCode.OFFSET_OUT_OF_RANGE, True
                except CorruptRecordError as e:     # a damaged segment
                    # Offline: clients retry at the new leader; the last in-sync replica
                    # serves on and says where the damage is.
                    error = ErrorCode.KAFKA_STORAGE_ERROR \
                        if self.replicas.replica_corrupt(part, e) else ErrorCode.CORRUPT_MESSAGE
                    errors = True
            results.append([topic, partition, error, log.high_watermark, log.log_start_offset,
                            log.log_end_offset])
            frames.append(data)
            size += len(data)
        return results, frames, size, errors

    def _answer_fetch(self, fetch: ParkedFetch, read: FetchRead) -> None:
        body = {"partitions": read[0]}
        if self._traces and fetch.from_follower:
            marks = self._trace_marks(fetch, read)
            if marks:
                body["trace"] = marks
        self._reply(fetch.identity, fetch.correlation_id, P.ApiKey.FETCH, body, read[1])

    # ---------------------------------------------------------------- tracing
    # bench.perf.latency --breakdown: a Produce with "trace": [client send ns] is followed
    # through the leader, each follower's fetch and the HW advance; its answer carries
    # every stamp (time.monotonic_ns: CLOCK_MONOTONIC, one clock for every process of a
    # host). Nothing here runs unless such a request is pending.

    def _trace_marks(self, fetch: ParkedFetch, read: FetchRead) -> list:
        """[topic, partition, traced offset, answered ns] for every traced write this
        follower fetch carries."""
        marks = []
        for (topic, partition, offset, *_), frame in zip(fetch.entries, read[1]):
            traced = self._traces.get((topic, partition))
            if traced is not None and len(frame) and offset <= traced[0]:
                marks.append([topic, partition, traced[0], time.monotonic_ns()])
        return marks

    def _follower_traced(self, replica_id: int, marks) -> None:
        """A follower's next fetch echoes the marks with its own stamps: [topic,
        partition, offset, answered, received, appended, sent]."""
        now = time.monotonic_ns()
        if not isinstance(marks, list):
            return
        for mark in marks:
            if not (isinstance(mark, list) and len(mark) == 7):
                continue
            traced = self._traces.get((mark[0], mark[1]))
            if traced is not None and traced[0] == mark[2]:
                traced[1].setdefault("followers", {})[str(replica_id)] = [*mark[3:], now]

    # ---------------------------------------------------------------- ListOffsets

    def _handle_list_offsets(self, identity: bytes, request: P.Request) -> None:
        replica_id = P.field(request.body, "replica_id", int)
        out = []
        for topic, partition, timestamp in P.entries(request.body, "partitions", 3):
            if not isinstance(timestamp, int):
                raise P.ProtocolError("timestamp must be an int")
            part = self.partitions.get((topic, partition))
            if part is None:
                out.append([topic, partition, self._not_hosted_error(topic, partition), -1, -1])
                continue
            if part.core.role is not Role.LEADER:
                out.append([topic, partition, ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1])
                continue
            log = part.log
            limit = log.log_end_offset if replica_id >= 0 else log.high_watermark
            if timestamp == P.LATEST_TIMESTAMP:
                out.append([topic, partition, NONE, -1, limit])
            elif timestamp == P.EARLIEST_TIMESTAMP:
                out.append([topic, partition, NONE, -1, log.log_start_offset])
            else:
                if timestamp < 0:
                    out.append([topic, partition, ErrorCode.INVALID_REQUEST, -1, -1])
                    continue
                found = log.entry_for_timestamp(timestamp)
                if found is None or found[0] >= limit:
                    out.append([topic, partition, NONE, -1, -1])
                else:   # the record's own timestamp, as Kafka
                    out.append([topic, partition, NONE, found[1], found[0]])
        self._reply(identity, request.correlation_id, request.api_key, {"partitions": out})

    # ---------------------------------------------------------------- Metadata

    def _handle_metadata(self, identity: bytes, request: P.Request) -> None:
        topics = P.field(request.body, "topics", list, optional=True)
        if topics is not None and not all(isinstance(t, str) for t in topics):
            raise P.ProtocolError("topics must be a list of names")
        self._reply(identity, request.correlation_id, request.api_key,
                    self.metadata.metadata_response(topics))

    # ---------------------------------------------------------------- OffsetForLeaderEpoch

    def _handle_offset_for_leader_epoch(self, identity: bytes, request: P.Request) -> None:
        out = []
        for topic, partition, current_epoch, epoch in P.entries(request.body, "partitions", 4):
            if not isinstance(current_epoch, int) or not isinstance(epoch, int):
                raise P.ProtocolError("epochs must be ints")
            part = self.partitions.get((topic, partition))
            if part is None:
                out.append([topic, partition, self._not_hosted_error(topic, partition),
                            P.UNDEFINED_EPOCH, P.UNDEFINED_EPOCH_OFFSET])
                continue
            error, leader_epoch, end_offset = part.core.answer_offset_for_leader_epoch(
                current_epoch, epoch, part.view)
            out.append([topic, partition, error, leader_epoch, end_offset])
        self._reply(identity, request.correlation_id, request.api_key, {"partitions": out})

    # ---------------------------------------------------------------- controller requests

    def _handle_get_replica_log_info(self, identity: bytes, request: P.Request) -> None:
        """KIP-966's unclean recovery asks each replica how far its log goes: the last
        leader epoch in its epoch cache and its log end offset."""
        entries = P.entries(request.body, "partitions", 2)
        fenced = self._fenced(request)
        if fenced:
            self._reply(identity, request.correlation_id, request.api_key,
                        {"error": fenced, "partitions": []})
            return
        out = []
        for topic, partition in entries:
            if not isinstance(topic, str) or not isinstance(partition, int):
                raise P.ProtocolError("partitions are [topic, partition]")
            try:
                part = self.replicas.open_partition(topic, partition)
                out.append([topic, partition, NONE, part.view.latest_epoch(),
                            part.log.log_end_offset])
            except STORAGE_ERRORS + COORDINATOR_ERRORS as e:
                logger.warning("%s-%d: cannot tell the log's end: %s", topic, partition, e)
                out.append([topic, partition, ErrorCode.KAFKA_STORAGE_ERROR, -1, -1])
        self._reply(identity, request.correlation_id, request.api_key,
                    {"error": NONE, "partitions": out})

    def _fenced(self, request: P.Request) -> int:
        """The error (logged) if the request comes from a stale controller
        (STALE_CONTROLLER_EPOCH) or is meant for another incarnation of this broker
        (STALE_BROKER_EPOCH, KIP-380: the controller read a registration this process
        did not make); else NONE."""
        controller_id = P.field(request.body, "controller_id", int)
        epoch = P.field(request.body, "controller_epoch", int)
        broker_epoch = P.field(request.body, "broker_epoch", int, optional=True, default=-1)
        if broker_epoch >= 0 and broker_epoch != self.broker_epoch:
            logger.warning("refusing %s from controller %d: it is meant for broker epoch %d, "
                           "this incarnation's is %d (STALE_BROKER_EPOCH)",
                           _api_name(request.api_key), controller_id, broker_epoch,
                           self.broker_epoch)
            return ErrorCode.STALE_BROKER_EPOCH
        if self.replicas.check_controller_epoch(epoch):
            return NONE
        logger.warning("refusing %s from controller %d with epoch %d: the latest controller "
                       "epoch seen is %d (STALE_CONTROLLER_EPOCH)", _api_name(request.api_key),
                       controller_id, epoch, self.replicas.controller_epoch)
        return ErrorCode.STALE_CONTROLLER_EPOCH

    def _handle_leader_and_isr(self, identity: bytes, request: P.Request) -> None:
        body = request.body
        entries = LeaderAndIsrPartition.list_from_wire(P.field(body, "partitions", list))
        _check_partitions(entries)
        live = P.field(body, "live_leaders", list, optional=True, default=[])
        for item in live:
            if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], int)
                    and isinstance(item[1], str) and isinstance(item[2], int)):
                raise P.ProtocolError("live_leaders entries are [id, host, port]")
        fenced = self._fenced(request)
        if fenced:
            self._reply(identity, request.correlation_id, request.api_key,
                        {"error": fenced, "partitions": []})
            return
        for broker_id, host, port in live:
            self.replicas.leader_endpoints[broker_id] = f"tcp://{host}:{port}"
        controller_epoch = body["controller_epoch"]
        out = []
        for e in entries:
            error = self.replicas.become_leader_or_follower(controller_epoch, e)
            if error == NONE:
                self.purgatory.release((e.topic, e.partition))
            out.append([e.topic, e.partition, error])
        self._reply(identity, request.correlation_id, request.api_key,
                    {"error": NONE, "partitions": out})

    def _handle_update_metadata(self, identity: bytes, request: P.Request) -> None:
        body = request.body
        brokers = P.field(body, "brokers", list)
        for b in brokers:
            if not (isinstance(b, list) and len(b) == 4 and isinstance(b[0], int) and
                    isinstance(b[1], str) and isinstance(b[2], int) and
                    (b[3] is None or isinstance(b[3], str))):
                raise P.ProtocolError("brokers entries are [id, host, port, rack|None]")
        entries = UpdateMetadataPartition.list_from_wire(P.field(body, "partitions", list))
        _check_partitions(entries)
        fenced = self._fenced(request)
        if fenced:
            self._reply(identity, request.correlation_id, request.api_key, {"error": fenced})
            return
        self.metadata.update(body["controller_id"], brokers, entries)
        self._reply(identity, request.correlation_id, request.api_key, {"error": NONE})

    def _handle_stop_replica(self, identity: bytes, request: P.Request) -> None:
        body = request.body
        delete = P.field(body, "delete_partitions", bool)
        entries = StopReplicaPartition.list_from_wire(P.field(body, "partitions", list))
        _check_partitions(entries)
        fenced = self._fenced(request)
        if fenced:
            self._reply(identity, request.correlation_id, request.api_key,
                        {"error": fenced, "partitions": []})
            return
        out = []
        for e in entries:
            error = self.replicas.stop_replica(e.topic, e.partition, e.leader_epoch, delete)
            self.purgatory.release((e.topic, e.partition))
            out.append([e.topic, e.partition, error])
        self._reply(identity, request.correlation_id, request.api_key,
                    {"error": NONE, "partitions": out})

    def _handle_controlled_shutdown(self, identity: bytes, request: P.Request) -> None:
        P.field(request.body, "broker_id", int)
        if self.controller is None or not self.controller.active:
            self._reply(identity, request.correlation_id, request.api_key,
                        {"error": ErrorCode.NOT_CONTROLLER, "remaining_partitions": []})
            return
        self.controller.handle_controlled_shutdown(
            request.body, lambda body: self._reply(identity, request.correlation_id,
                                                   request.api_key, body))

    def _handle_admin(self, identity: bytes, request: P.Request) -> None:
        body = handle_admin_request(request.api_key, request.body, zk=self.zk,
                                    config=self.config)
        self._reply(identity, request.correlation_id, request.api_key, body)

    # ================================================================ to other brokers

    def send_to_broker(self, endpoint: str, api_key: int, body: dict, on_response) -> None:
        """For the controller runner: non-blocking, ``on_response(Response | None)`` on
        the loop (None after request.timeout.ms or when it could not be sent)."""
        self.controller_outbound.send(endpoint, api_key, body, on_response)

    # ================================================================ shutdown

    def begin_shutdown(self) -> None:
        if self._shutting_down:
            return
        self._shutting_down = True
        logger.info("broker %d shutting down", self.broker_id)
        attempts = self.config.controlled_shutdown_max_retries  # Kafka: attempts in all
        if self.config.controlled_shutdown_enable and attempts > 0 and self.router is not None:
            self._controlled_shutdown(attempts - 1)
        else:
            self._stop = True

    def _controlled_shutdown(self, retries_left: int) -> None:
        """Ask the controller to move our leaderships away; keep serving meanwhile."""
        endpoint = None
        try:
            # Bounded: the loop keeps serving while the coordinator is slow or away.
            data, _ = self.zk.get(Z.CONTROLLER)
            controller_id = Z.decode_controller(data)
            info, _ = self.zk.get(Z.broker_path(controller_id))
            endpoint = Z.decode_broker(controller_id, info).endpoint
        except COORDINATOR_ERRORS as e:
            logger.warning("controlled shutdown: no controller found (%s)", e)

        def answered(response: P.Response | None) -> None:
            error = ErrorCode.REQUEST_TIMED_OUT if response is None else response.body.get("error", -1)
            remaining = [] if response is None else response.body.get(
                "remaining_partitions", [])
            if error == NONE and not remaining:
                logger.info("controlled shutdown succeeded")
                self._stop = True
                return
            logger.warning("controlled shutdown attempt failed: %s, %d partitions remaining",
                           E.name_of(error) if isinstance(error, int) else error,
                           len(remaining) if isinstance(remaining, list) else -1)
            retry()

        def retry() -> None:
            if retries_left <= 0:
                logger.warning("controlled shutdown failed; proceeding to unclean shutdown")
                self._stop = True
                return
            self.loop.call_later(self.config.controlled_shutdown_retry_backoff_ms,
                                 lambda: self._controlled_shutdown(retries_left - 1))

        if endpoint is None:
            retry()
            return
        self.controller_outbound.send(endpoint, P.ApiKey.CONTROLLED_SHUTDOWN,
                                      {"broker_id": self.broker_id,
                                       "broker_epoch": self.broker_epoch}, answered)

    def _close(self) -> None:
        if self.controller is not None:
            try:
                self.controller.stop()
            except COORDINATOR_ERRORS as e:
                logger.error("stopping the controller failed: %s", e)
        self.fetchers.close()
        self.fetch_outbound.close()
        self.controller_outbound.close()
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
        self.replicas.close()
        if not self.replicas.offline_dirs:
            write_clean_shutdown_marker(self.config.log_dirs)
        if self.cluster_id is not None:
            # Index objects of logs a SIGKILLed incarnation left and no LeaderAndIsr reopened.
            head = f"/mk-{self.cluster_id}-b{self.broker_id}-"
            for name in cluster_objects(self.cluster_id):
                if name.startswith(head):
                    unlink(name)
        self._end_session_bounded()
        self.loop.close()
        logger.info("broker %d stopped", self.broker_id)


def _start_trace(value) -> dict | None:
    """A Produce's "trace": [client send ns] -> the trace the broker fills in."""
    if not (isinstance(value, list) and len(value) == 1 and isinstance(value[0], int)):
        raise P.ProtocolError('"trace" must be [client send time in ns]')
    return {"send": value[0], "receive": time.monotonic_ns()}


def _check_partitions(entries) -> None:
    """Controller requests name directories and shared memory: Kafka's legal topic names
    only (a name like ``../x`` must never reach a path)."""
    for e in entries:
        if topic_name_error(e.topic) is not None:
            raise P.ProtocolError(f"illegal topic-partition {e.topic!r}-{e.partition}")


def _api_name(api_key: int) -> str:
    try:
        return P.ApiKey(api_key).name
    except ValueError:
        return f"api {api_key}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m node.broker", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="server.properties (Kafka keys)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="override one property (repeatable)")
    return parser


FAULT_POINT_ENV = "MINIKAFKA_BROKER_FAULT_POINT"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        from node.config import load_properties
        props = load_properties(args.config)
        props.update(parse_key_values(args.override, "--override"))
        config = BrokerConfig.from_props(props)
    except ConfigError as e:
        print(f"error: invalid configuration: {e}", file=sys.stderr, flush=True)
        return 2
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr,
        format=f"%(asctime)s broker {config.broker_id} %(levelname)s %(message)s")
    fault_point = os.environ.get(FAULT_POINT_ENV)
    if fault_point:  # tests only: make a storage invariant fail at this point
        faults.break_invariant_at(fault_point)
    broker = Broker(config)
    try:
        broker.start()
    except EXPECTED_ERRORS as e:
        logger.error("start-up failed: %s", e)
        broker._close()
        return 1
    except Exception as e:
        return broker.die(e)
    profile_path = os.environ.get("MINIKAFKA_BROKER_PROFILE")
    if profile_path:  # perf work: cProfile of the loop, written at exit
        import cProfile
        profiler = cProfile.Profile()
        code = profiler.runcall(broker.run)
        profiler.dump_stats(f"{profile_path}.{config.broker_id}")
        return code
    return broker.run()


if __name__ == "__main__":
    sys.exit(main())


_VERDICT_ERRORS = {Verdict.OUT_OF_ORDER: ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                   Verdict.UNKNOWN_PRODUCER: ErrorCode.UNKNOWN_PRODUCER_ID,
                   Verdict.FENCED: ErrorCode.INVALID_PRODUCER_EPOCH,
                   Verdict.MIXED: ErrorCode.INVALID_REQUEST}


def _producer_verdict(log, data) -> tuple[int, int, int] | None:
    """For a frame of an idempotent producer (KIP-98): None to append it; (error, -1, -1)
    to refuse it; (0, first offset, last offset) when every batch of it was appended
    before (a retry whose answer was lost). The decision is ``check_frame``'s."""
    view = memoryview(data).cast("B")
    headers, position = [], 0
    while position < len(view):
        try:
            header = B.read_header(view, position)
        except CorruptRecordError:
            return None                 # the append refuses it with CORRUPT_MESSAGE
        headers.append(header)
        position += header.size_bytes
    if not any(h.producer_id >= 0 for h in headers):
        return None                     # not idempotent: no state is needed
    found = check_frame(log.producer_states(), headers)
    if found is None or found[0] is Verdict.APPEND:
        return None
    verdict, first, last = found
    if verdict is Verdict.DUPLICATE:
        return ErrorCode.NONE, first, last
    return _VERDICT_ERRORS[verdict], -1, -1
