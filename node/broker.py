"""The broker process: ``python -m node.broker --config server.properties``.

A thin shell around the pure replication cores (``node.replication``): one thread runs
an event loop (``node.broker_loop``) that owns every piece of state: the ROUTER
listener, the partition logs (``shm.log.Log``), one ``ReplicaCore`` per hosted
partition, the follower fetchers (``node.fetcher``), the metadata cache
(``node.metadata_cache``), the replica-state board (``shm.board``) and, when this broker
holds ``/controller``, the controller (``node.controller_shell``). Kazoo callbacks,
signals and timers are posted to the loop as events.

Start-up, as Kafka: connect to the coordinator, ensure the persistent paths, read (or
create) ``/cluster/id``, bind the listener, create the board, register
``/brokers/ids/N`` (ephemeral; waiting for a previous session's registration to expire),
then compete for ``/controller``. Partition logs are opened when a LeaderAndIsr names
them.

Requests (``node.protocol``): Produce, Fetch (long poll), ListOffsets, Metadata,
OffsetForLeaderEpoch, LeaderAndIsr, UpdateMetadata and StopReplica are handled here;
ControlledShutdown goes to the controller runner when this broker is the controller
(else NOT_CONTROLLER); admin requests go to ``node.admin.handle_admin_request``. A
request that does not decode gets INVALID_REQUEST when its correlation id can be read
(and is dropped otherwise); a handler error never stops the broker.

Effects of a core are performed in the order it returns them (``apply_effects``):
truncations, epoch assignments and HW moves on the local log first; ``WriteIsr`` as a
conditional ``set`` of the partition-state znode at ``zk_version`` (then an
``/isr_change_notification/isr_change_`` sequential node), reported back with
``on_isr_written``; ``SendOffsetForLeaderEpoch`` through the fetcher;
``CompleteProduce`` answers the producer once all partitions of its request completed.

Long poll (Kafka's DelayedFetch): a fetch with fewer than ``min_bytes`` available is
parked until an append brings bytes, the wait expires, or a partition of it changes
leadership. Followers count bytes up to the LEO and consumers up to the HW, so an HW
move alone completes a parked consumer fetch but never a parked follower fetch, as in
Kafka (which is what makes the pre-KIP-101 HW-truncation loss reproducible).

Shutdown on SIGTERM/SIGINT: controlled shutdown first if ``controlled.shutdown.enable``
(ask the controller in ``/controller`` to move leaderships away, retrying
``controlled.shutdown.max.retries`` times), keep serving meanwhile, then stop the
controller, close the logs (HW checkpoint), the board (unlinked) and the coordinator
session, and exit 0.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
import traceback
import uuid
from dataclasses import dataclass

import zmq
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from node import broker_limits as L
from node import errors as E
from node import protocol as P
from node import zkdata as Z
from node.broker_loop import EventLoop, Outbound, now_ms
from node.config import BrokerConfig, ConfigError, topic_log_config, topic_setting
from node.fetcher import ReplicaFetcherManager
from node.metadata_cache import MetadataCache
from node.net import context
from node.replication import (AssignEpoch, CompleteProduce, ReplicaCore, ReplicationConfig,
                              Role, SendOffsetForLeaderEpoch, SetHighWatermark, Truncate,
                              TruncateFully, TruncationMode, WriteIsr)
from shm import board as SB
from shm.errors import OffsetOutOfRangeError
from shm.log import Log
from shm.names import check_cluster_id, cluster_objects, unlink

try:  # owned by the controller engineer; a broker without it never becomes controller
    from node.controller_shell import ControllerRunner
except ImportError:  # pragma: no cover - until it lands on main
    ControllerRunner = None

try:
    from node.admin import handle_admin_request
except ImportError:  # pragma: no cover - until it lands on main
    handle_admin_request = None

logger = logging.getLogger("node.broker")

CLUSTER_ID_PATH = "/cluster/id"
_ADMIN_APIS = frozenset({P.ApiKey.CREATE_TOPICS, P.ApiKey.DELETE_TOPICS,
                         P.ApiKey.CREATE_PARTITIONS, P.ApiKey.ELECT_LEADERS,
                         P.ApiKey.ALTER_PARTITION_REASSIGNMENTS,
                         P.ApiKey.LIST_PARTITION_REASSIGNMENTS, P.ApiKey.DESCRIBE_CONFIGS})

NONE = 0
INVALID_REQUEST = E.code_of("INVALID_REQUEST")
UNKNOWN_SERVER_ERROR = E.code_of("UNKNOWN_SERVER_ERROR")
UNKNOWN_TOPIC_OR_PARTITION = E.code_of("UNKNOWN_TOPIC_OR_PARTITION")
NOT_LEADER_OR_FOLLOWER = E.code_of("NOT_LEADER_OR_FOLLOWER")
OFFSET_OUT_OF_RANGE = E.code_of("OFFSET_OUT_OF_RANGE")
STALE_CONTROLLER_EPOCH = E.code_of("STALE_CONTROLLER_EPOCH")
NOT_CONTROLLER = E.code_of("NOT_CONTROLLER")
KAFKA_STORAGE_ERROR = E.code_of("KAFKA_STORAGE_ERROR")
FENCED_LEADER_EPOCH = E.code_of("FENCED_LEADER_EPOCH")
REQUEST_TIMED_OUT = E.code_of("REQUEST_TIMED_OUT")

_BOARD_ROLE = {Role.LEADER: SB.Role.LEADER, Role.FOLLOWER: SB.Role.FOLLOWER,
               Role.NONE: SB.Role.OFFLINE}


class LogView:
    """``shm.log.Log`` as the core's ``LogView``."""

    __slots__ = ("log",)

    def __init__(self, log: Log) -> None:
        self.log = log

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def latest_epoch(self) -> int:
        return self.log.leader_epoch_cache.latest_epoch

    def end_offset_for(self, epoch: int) -> tuple[int, int]:
        return self.log.leader_epoch_cache.end_offset_for(epoch)


class Partition:
    """One hosted partition replica: its log, its core, and the loop's bookkeeping."""

    def __init__(self, topic: str, partition: int, log: Log, core: ReplicaCore) -> None:
        self.topic = topic
        self.partition = partition
        self.key = (topic, partition)
        self.log = log
        self.view = LogView(log)
        self.core = core
        self.controller_epoch = -1       # of the LeaderAndIsr that set the current state
        self.fetch_backoff_until_ms = 0  # follower: after a fetch error


@dataclass(eq=False)
class _ProduceRequest:
    """One Produce request: answered once every partition entry has completed."""
    identity: bytes
    correlation_id: int
    acks: int
    results: list           # [topic, partition, error, base_offset, log_start, message]
    remaining: int
    in_handler: bool = True  # completions during the handler wait for its end
    answered: bool = False

    def complete(self, index: int, error: int, base_offset: int, log_start: int,
                 message: str | None = None) -> None:
        entry = self.results[index]
        assert entry[2] is None, ("completed twice", entry)
        entry[2], entry[3], entry[4], entry[5] = error, -1 if error else base_offset, \
            log_start, message
        self.remaining -= 1
        assert self.remaining >= 0


@dataclass(eq=False)
class _ParkedFetch:
    identity: bytes
    correlation_id: int
    replica_id: int
    min_bytes: int
    max_bytes: int
    entries: list
    timer: int | None = None
    done: bool = False


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.loop = EventLoop()
        self.loop.after_iteration = self._after_iteration
        self.loop.has_idle_work = lambda: bool(self._dirty)
        self.loop.idle = self._publish_dirty
        self.zk: KazooClient | None = None
        self.cluster_id: str | None = None
        self.router = None
        self.port = config.port
        self.board: SB.ReplicaStateBoard | None = None
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.metadata = MetadataCache()
        self.controller_epoch = -1
        self.leader_endpoints: dict[int, str] = {}   # from LeaderAndIsr live_leaders
        self.broker_epoch = -1
        self.fetch_outbound = Outbound(self.loop, f"broker-{self.broker_id}-fetcher",
                                       config.request_timeout_ms)
        self.controller_outbound = Outbound(self.loop, f"broker-{self.broker_id}-controller",
                                            config.request_timeout_ms)
        self.fetchers = ReplicaFetcherManager(self, self.fetch_outbound)
        self.controller = None
        # Partitions whose board row is out of date: published when the loop is idle, or
        # after BOARD_PUBLISH_DELAY_MS_MAX under load (a row costs tens of microseconds).
        self._dirty: set[Partition] = set()
        self._dirty_since_ms = 0
        self._parked: dict[tuple[str, int], set[_ParkedFetch]] = {}
        self._parked_count = 0
        self._pending_produces = 0
        self._wall_offset_ms = int(time.time() * 1000) - now_ms()
        self._shutting_down = False
        self._stop = False
        self._exit_code = 0
        self._session_lost = False
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
        }

    # ================================================================ start-up

    def start(self) -> None:
        config = self.config
        self.zk = KazooClient(hosts=config.zookeeper_connect,
                              timeout=config.zookeeper_session_timeout_ms / 1000)
        self.zk.start(timeout=min(L.ZK_START_TIMEOUT_S,
                                  config.zookeeper_connection_timeout_ms / 1000))
        self.zk.add_listener(self._on_zk_state)
        for path in Z.PERSISTENT_PATHS:
            self.zk.ensure_path(path)
        self.cluster_id = self._read_cluster_id()
        for d in config.log_dirs:
            os.makedirs(d, exist_ok=True)
        self._bind()
        self.board = SB.ReplicaStateBoard.create(self.cluster_id, self.broker_id,
                                                 capacity=L.BOARD_CAPACITY)
        self._register()
        self.loop.every(L.TICK_INTERVAL_MS, self._tick)
        self.loop.every(config.replica_high_watermark_checkpoint_interval_ms,
                        self._checkpoint_high_watermarks)
        self.loop.every(config.log_retention_check_interval_ms, self._retention)
        self.loop.every(L.FLUSH_CHECK_INTERVAL_MS, self._flush_due)
        signal.signal(signal.SIGTERM, lambda *_: self.loop.post(self.begin_shutdown))
        signal.signal(signal.SIGINT, lambda *_: self.loop.post(self.begin_shutdown))
        if ControllerRunner is not None:
            self.controller = ControllerRunner(
                broker_id=self.broker_id, zk=self.zk, config=config, post=self.loop.post,
                send=self.send_to_broker, now_ms=now_ms)
            self.controller.start()
        print(f"broker {self.broker_id} started, listening on {config.host}:{self.port} "
              f"(cluster {self.cluster_id})", flush=True)

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
        if self.config.port == 0:
            self.port = router.bind_to_random_port(f"tcp://{self.config.host}")
        else:
            router.bind(self.config.bind_endpoint)
        self.router = router
        self.loop.add_socket(router, self._on_listener_readable)

    def _registration(self) -> bytes:
        return Z.encode_broker(Z.BrokerInfo(self.broker_id, self.config.host, self.port,
                                            self.config.broker_rack))

    def _register(self) -> None:
        """Create /brokers/ids/N; if a previous session still holds it, wait for it to
        expire (Kafka's checkedEphemeralCreate)."""
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
                time.sleep(0.1)

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
            except Exception as e:  # retried on the next reconnect
                logger.error("re-registration failed: %s", e)
                self._session_lost = True

    # ================================================================ the loop

    def run(self) -> int:
        while not self._stop:
            self.loop.run_once()
        self._close()
        return self._exit_code

    def _after_iteration(self) -> None:
        # Fetch first: the next follower fetch is what lets the leader acknowledge. Board
        # rows trail the log until the loop is idle (at most BOARD_PUBLISH_DELAY_MS_MAX).
        self.fetchers.maybe_fetch()
        if self._dirty and now_ms() - self._dirty_since_ms >= L.BOARD_PUBLISH_DELAY_MS_MAX:
            self._publish_dirty()

    def _publish_dirty(self) -> None:
        for part in self._dirty:
            self._publish(part)
        self._dirty.clear()

    def mark_dirty(self, part: Partition) -> None:
        if not self._dirty:
            self._dirty_since_ms = now_ms()
        self._dirty.add(part)

    def _publish(self, part: Partition) -> None:
        if self.board is None or self.partitions.get(part.key) is not part:
            return
        core, log = part.core, part.log
        caught_up = {}
        if core.role is Role.LEADER:
            caught_up = {r: f.last_caught_up_ms + self._wall_offset_ms
                         for r, f in list(core.followers.items())[:SB.REPLICAS_MAX]}
        try:
            self.board.publish(part.topic, part.partition, role=_BOARD_ROLE[core.role],
                               leader_epoch=core.leader_epoch, leader_id=core.leader,
                               log_end_offset=log.log_end_offset,
                               high_watermark=log.high_watermark,
                               log_start_offset=log.log_start_offset,
                               isr=core.isr[:SB.REPLICAS_MAX], last_caught_up_ms=caught_up)
        except (SB.BoardError, ValueError) as e:
            logger.error("%s-%d: cannot publish on the board: %s", part.topic,
                         part.partition, e)

    def _tick(self) -> None:
        now = now_ms()
        for part in list(self.partitions.values()):
            effects = part.core.tick(now, part.view)
            if effects:
                self.apply_effects(part, effects)
                self.mark_dirty(part)
        self.fetch_outbound.expire(now)
        self.controller_outbound.expire(now)
        if self.controller is not None:
            self.controller.tick(now)

    def _checkpoint_high_watermarks(self) -> None:
        for part in list(self.partitions.values()):
            try:
                part.log.checkpoint_high_watermark()
            except Exception as e:
                logger.error("%s-%d: HW checkpoint failed: %s", part.topic, part.partition, e)

    def _retention(self) -> None:
        for part in list(self.partitions.values()):
            try:
                if part.log.delete_old_segments():
                    self.mark_dirty(part)
            except Exception as e:
                logger.error("%s-%d: retention failed: %s", part.topic, part.partition, e)

    def _flush_due(self) -> None:
        for part in list(self.partitions.values()):
            try:
                part.log.flush_if_due()
            except Exception as e:
                logger.error("%s-%d: flush failed: %s", part.topic, part.partition, e)

    # ================================================================ requests

    def _on_listener_readable(self) -> None:
        for _ in range(L.RECEIVE_BATCH_MAX):
            try:
                frames = self.router.recv_multipart(flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            if len(frames) < 2:
                continue
            self._handle(frames[0].bytes, frames[1:])

    def _handle(self, identity: bytes, frames) -> None:
        try:
            request = P.decode_request(frames)
        except P.ProtocolError as e:
            correlation_id = P.peek_correlation_id(frames)
            logger.warning("malformed request (correlation id %s): %s", correlation_id, e)
            if correlation_id is not None:
                api_key = P.peek_api_key(frames)
                self._reply(identity, correlation_id, api_key if api_key is not None else -1,
                            {"error": INVALID_REQUEST, "error_message": str(e)})
            return
        try:
            handler = self._handlers.get(request.api_key)
            if handler is not None:
                handler(identity, request)
            elif request.api_key in _ADMIN_APIS:
                self._handle_admin(identity, request)
            else:
                self._reply(identity, request.correlation_id, request.api_key,
                            {"error": INVALID_REQUEST,
                             "error_message": f"unsupported api key {request.api_key}"})
        except P.ProtocolError as e:
            logger.warning("invalid %s request from %s: %s", _api_name(request.api_key),
                           request.client_id, e)
            self._reply(identity, request.correlation_id, request.api_key,
                        {"error": INVALID_REQUEST, "error_message": str(e)})
        except AssertionError:
            raise  # a broken invariant is a bug: stop loudly
        except Exception as e:
            logger.error("%s request failed: %s\n%s", _api_name(request.api_key), e,
                         traceback.format_exc())
            self._reply(identity, request.correlation_id, request.api_key,
                        {"error": UNKNOWN_SERVER_ERROR, "error_message": str(e)})

    def _reply(self, identity: bytes, correlation_id: int, api_key: int, body: dict,
               frames=()) -> None:
        message = [identity, *P.encode_response(correlation_id, api_key, body, frames)]
        try:
            self.router.send_multipart(message, copy=not frames, flags=zmq.NOBLOCK)
        except zmq.ZMQError as e:
            logger.warning("cannot answer correlation id %d: %s", correlation_id, e)

    def _not_hosted_error(self, topic: str, partition: int) -> int:
        if self.metadata.partition(topic, partition) is not None:
            return NOT_LEADER_OR_FOLLOWER
        return UNKNOWN_TOPIC_OR_PARTITION

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
        results = [[topic, partition, None, -1, -1, None] for topic, partition in entries]
        produce = _ProduceRequest(identity, request.correlation_id, acks, results,
                                  len(entries))
        now = now_ms()
        for i, ((topic, partition), frame) in enumerate(zip(entries, request.frames)):
            self._produce_partition(produce, i, topic, partition, frame, timeout_ms, now)
        produce.in_handler = False
        self._maybe_answer_produce(produce)

    def _produce_partition(self, produce: _ProduceRequest, index: int, topic: str,
                           partition: int, frame, timeout_ms: int, now: int) -> None:
        part = self.partitions.get((topic, partition))
        if part is None:
            produce.complete(index, self._not_hosted_error(topic, partition), -1, -1)
            return
        error = part.core.check_produce(produce.acks)
        if error:
            produce.complete(index, error, -1, part.log.log_start_offset)
            return
        if produce.acks == -1 and self._pending_produces >= L.PENDING_PRODUCE_REQUESTS_MAX:
            produce.complete(index, REQUEST_TIMED_OUT, -1, part.log.log_start_offset,
                             "too many produce requests waiting for acks")
            return
        data = frame.buffer if hasattr(frame, "buffer") else bytearray(frame)
        try:
            info = part.log.append_as_leader(data, part.core.leader_epoch)
        except Exception as e:
            code = E.code_for_exception(e)
            if code == UNKNOWN_SERVER_ERROR:
                logger.error("%s-%d: append failed: %s", topic, partition, e)
            produce.complete(index, code, -1, part.log.log_start_offset, str(e))
            return
        if produce.acks == -1:
            self._pending_produces += 1
        effects = part.core.on_leader_append((produce, index), produce.acks, info.first_offset,
                                             info.last_offset, timeout_ms, now, part.view)
        self.apply_effects(part, effects)
        self._wake_parked(part, leo_moved=True)

    def _complete_produce(self, part: Partition, effect: CompleteProduce) -> None:
        produce, index = effect.request_id
        if produce.acks == -1:
            self._pending_produces -= 1
        produce.complete(index, effect.error, effect.base_offset, part.log.log_start_offset)
        self._maybe_answer_produce(produce)

    def _maybe_answer_produce(self, produce: _ProduceRequest) -> None:
        if produce.remaining or produce.in_handler or produce.answered:
            return
        produce.answered = True
        if produce.acks == 0:
            return  # Kafka sends nothing for acks=0
        self._reply(produce.identity, produce.correlation_id, P.ApiKey.PRODUCE,
                    {"partitions": produce.results})

    # ---------------------------------------------------------------- effects

    def apply_effects(self, part: Partition, effects) -> None:
        """Perform a core's effects in the order it returned them."""
        log = part.log
        for effect in effects:
            kind = type(effect)
            if kind is CompleteProduce:
                self._complete_produce(part, effect)
            elif kind is SetHighWatermark:
                log.update_high_watermark(effect.offset)
                self._wake_parked(part, leo_moved=False)
            elif kind is Truncate:
                logger.info("%s-%d: truncating to %d (LEO %d)", part.topic, part.partition,
                            effect.offset, log.log_end_offset)
                log.truncate_to(effect.offset)
            elif kind is TruncateFully:
                logger.info("%s-%d: truncating fully, restarting at %d", part.topic,
                            part.partition, effect.offset)
                log.truncate_fully_and_start_at(effect.offset)
            elif kind is AssignEpoch:
                log.leader_epoch_cache.assign(effect.leader_epoch, effect.start_offset)
            elif kind is WriteIsr:
                self._write_isr(part, effect)
            elif kind is SendOffsetForLeaderEpoch:
                self.fetchers.send_offset_for_leader_epoch(part, effect)
            else:
                raise AssertionError(f"unknown effect {effect!r}")
        self.mark_dirty(part)

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
        fetch = _ParkedFetch(identity, request.correlation_id, replica_id, min_bytes,
                             max(max_bytes, 0), entries)
        now = now_ms()
        if replica_id >= 0:
            for topic, partition, offset, epoch, _ in entries:
                part = self.partitions.get((topic, partition))
                if part is not None and part.core.role is Role.LEADER and \
                        part.core.check_fetch_epoch(epoch) == 0:
                    effects = part.core.on_follower_fetch(replica_id, offset, now, part.view)
                    if effects:
                        self.apply_effects(part, effects)
                    self.mark_dirty(part)
        results, frames, size, errors = self._read_fetch(fetch)
        if max_wait_ms == 0 or size >= min_bytes or errors or not entries or \
                self._parked_count >= L.PARKED_FETCHES_MAX:
            self._reply(identity, request.correlation_id, P.ApiKey.FETCH,
                        {"partitions": results}, frames)
            return
        self._park(fetch, max_wait_ms)

    def _read_fetch(self, fetch: _ParkedFetch):
        results, frames, size, errors = [], [], 0, False
        follower = fetch.replica_id >= 0
        for topic, partition, offset, epoch, partition_max_bytes in fetch.entries:
            part = self.partitions.get((topic, partition))
            if part is None:
                error = self._not_hosted_error(topic, partition)
            else:
                error = part.core.check_fetch_epoch(epoch)
                if not error and part.core.role is not Role.LEADER:
                    error = NOT_LEADER_OR_FOLLOWER
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
                    error, errors = OFFSET_OUT_OF_RANGE, True
            results.append([topic, partition, error, log.high_watermark, log.log_start_offset,
                            log.log_end_offset])
            frames.append(data)
            size += len(data)
        return results, frames, size, errors

    def _park(self, fetch: _ParkedFetch, max_wait_ms: int) -> None:
        for topic, partition, *_ in fetch.entries:
            self._parked.setdefault((topic, partition), set()).add(fetch)
        self._parked_count += 1
        fetch.timer = self.loop.call_later(max_wait_ms, lambda: self._complete_parked(fetch))

    def _complete_parked(self, fetch: _ParkedFetch, read=None) -> None:
        """Answer a parked fetch (with ``read``, a ``_read_fetch`` result just made)."""
        if fetch.done:
            return
        fetch.done = True
        self._parked_count -= 1
        self.loop.cancel(fetch.timer)
        for topic, partition, *_ in fetch.entries:
            waiting = self._parked.get((topic, partition))
            if waiting is not None:
                waiting.discard(fetch)
                if not waiting:
                    del self._parked[(topic, partition)]
        results, frames, _, _ = read if read is not None else self._read_fetch(fetch)
        self._reply(fetch.identity, fetch.correlation_id, P.ApiKey.FETCH,
                    {"partitions": results}, frames)

    def _wake_parked(self, part: Partition, *, leo_moved: bool) -> None:
        """New bytes (LEO moved: followers and consumers) or a new HW (consumers only)."""
        waiting = self._parked.get(part.key)
        if not waiting:
            return
        for fetch in list(waiting):
            if fetch.replica_id >= 0 and not leo_moved:
                continue  # as Kafka's DelayedFetch: an HW move alone brings a follower nothing
            read = self._read_fetch(fetch)
            if read[2] >= fetch.min_bytes or read[3]:
                self._complete_parked(fetch, read)

    def _release_parked(self, key: tuple[str, int]) -> None:
        """A partition changed leadership: answer every fetch parked on it now."""
        for fetch in list(self._parked.get(key, ())):
            self._complete_parked(fetch)

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
                out.append([topic, partition, NOT_LEADER_OR_FOLLOWER, -1, -1])
                continue
            log = part.log
            limit = log.log_end_offset if replica_id >= 0 else log.high_watermark
            if timestamp == P.LATEST_TIMESTAMP:
                out.append([topic, partition, NONE, -1, limit])
            elif timestamp == P.EARLIEST_TIMESTAMP:
                out.append([topic, partition, NONE, -1, log.log_start_offset])
            else:
                offset = log.offset_for_timestamp(timestamp)
                if offset is None or offset >= limit:
                    out.append([topic, partition, NONE, -1, -1])
                else:
                    out.append([topic, partition, NONE, timestamp, offset])
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

    def _check_controller_epoch(self, request: P.Request) -> bool:
        """Fence a stale controller (Kafka: STALE_CONTROLLER_EPOCH)."""
        controller_id = P.field(request.body, "controller_id", int)
        epoch = P.field(request.body, "controller_epoch", int)
        if epoch < self.controller_epoch:
            logger.warning("refusing %s from controller %d with epoch %d: the latest "
                           "controller epoch seen is %d (STALE_CONTROLLER_EPOCH)",
                           _api_name(request.api_key), controller_id, epoch,
                           self.controller_epoch)
            return False
        self.controller_epoch = epoch
        return True

    def _handle_leader_and_isr(self, identity: bytes, request: P.Request) -> None:
        body = request.body
        entries = P.entries(body, "partitions", 8)
        live = P.field(body, "live_leaders", list, optional=True, default=[])
        for entry in entries:
            _check_partition_state(entry[2:8])
        for item in live:
            if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], int)
                    and isinstance(item[1], str) and isinstance(item[2], int)):
                raise P.ProtocolError("live_leaders entries are [id, host, port]")
        if not self._check_controller_epoch(request):
            self._reply(identity, request.correlation_id, request.api_key,
                        {"error": STALE_CONTROLLER_EPOCH, "partitions": []})
            return
        for broker_id, host, port in live:
            self.leader_endpoints[broker_id] = f"tcp://{host}:{port}"
        out = []
        for topic, partition, leader, leader_epoch, isr, zk_version, replicas, _ in entries:
            error = self._become(request, topic, partition, leader, leader_epoch, isr,
                                 zk_version, replicas)
            out.append([topic, partition, error])
        self._reply(identity, request.correlation_id, request.api_key,
                    {"error": NONE, "partitions": out})

    def _become(self, request: P.Request, topic: str, partition: int, leader: int,
                leader_epoch: int, isr: list, zk_version: int, replicas: list) -> int:
        if self.broker_id not in replicas:
            logger.warning("ignoring LeaderAndIsr for %s-%d: broker %d is not a replica (%s)",
                           topic, partition, self.broker_id, replicas)
            return UNKNOWN_TOPIC_OR_PARTITION
        if not set(isr) <= set(replicas) or (leader >= 0 and isr and leader not in isr) or \
                (leader == self.broker_id and self.broker_id not in isr):
            logger.warning("invalid LeaderAndIsr for %s-%d: leader %d isr %s replicas %s",
                           topic, partition, leader, isr, replicas)
            return INVALID_REQUEST
        try:
            part = self._partition(topic, partition)
        except Exception as e:
            logger.error("%s-%d: cannot open the log: %s", topic, partition, e)
            return KAFKA_STORAGE_ERROR
        error = part.core.check_leader_and_isr(leader_epoch)
        if error:
            logger.info("%s-%d: ignoring LeaderAndIsr with leader epoch %d (current %d)",
                        topic, partition, leader_epoch, part.core.leader_epoch)
            return error
        part.controller_epoch = P.field(request.body, "controller_epoch", int)
        now = now_ms()
        if leader == self.broker_id:
            self.fetchers.unfollow(part.key)
            effects = part.core.become_leader(leader_epoch=leader_epoch, isr=isr,
                                              replicas=replicas, zk_version=zk_version,
                                              now_ms=now, log=part.view)
            logger.info("%s-%d: leader in epoch %d, isr %s", topic, partition, leader_epoch,
                        isr)
        else:
            effects = part.core.become_follower(leader=leader, leader_epoch=leader_epoch,
                                                isr=isr, replicas=replicas,
                                                zk_version=zk_version, now_ms=now,
                                                log=part.view)
            self.fetchers.follow(part.key, leader)
            part.fetch_backoff_until_ms = 0
            logger.info("%s-%d: follower of %d in epoch %d", topic, partition, leader,
                        leader_epoch)
        self.apply_effects(part, effects)
        self._release_parked(part.key)
        return NONE

    def _partition(self, topic: str, partition: int) -> Partition:
        part = self.partitions.get((topic, partition))
        if part is not None:
            return part
        overrides = self._topic_overrides(topic)
        log_config = topic_log_config(self.config, overrides)
        log = Log.open(self._log_dir_for(topic, partition), topic, partition, log_config,
                       cluster_id=self.cluster_id, broker_id=self.broker_id)
        if log.recovery.truncated:
            logger.warning("%s-%d: recovery cut the log: %s", topic, partition,
                           log.recovery.truncations)
        core = ReplicaCore(topic, partition, self.broker_id, ReplicationConfig(
            replica_lag_time_max_ms=self.config.replica_lag_time_max_ms,
            min_insync_replicas=topic_setting(self.config, overrides, "min.insync.replicas"),
            truncation_mode=TruncationMode(self.config.replication_truncation_mode)))
        part = Partition(topic, partition, log, core)
        self.partitions[part.key] = part
        return part

    def _topic_overrides(self, topic: str) -> dict[str, str]:
        try:
            data, _ = self.zk.get(Z.topic_config_path(topic))
            return Z.decode_topic_config(topic, data)
        except NoNodeError:
            return {}
        except Z.ZkDataError as e:
            logger.error("ignoring the topic config of %s: %s", topic, e)
            return {}
        except Exception as e:
            logger.error("cannot read the topic config of %s: %s", topic, e)
            return {}

    def _log_dir_for(self, topic: str, partition: int) -> str:
        name = f"{topic}-{partition}"
        dirs = self.config.log_dirs
        for d in dirs:
            if os.path.isdir(os.path.join(d, name)):
                return d
        return min(dirs, key=lambda d: len(os.listdir(d)) if os.path.isdir(d) else 0)

    def _handle_update_metadata(self, identity: bytes, request: P.Request) -> None:
        body = request.body
        brokers = P.field(body, "brokers", list)
        for b in brokers:
            if not (isinstance(b, list) and len(b) == 4 and isinstance(b[0], int) and
                    isinstance(b[1], str) and isinstance(b[2], int) and
                    (b[3] is None or isinstance(b[3], str))):
                raise P.ProtocolError("brokers entries are [id, host, port, rack|None]")
        entries = P.entries(body, "partitions", 8)
        for entry in entries:
            _check_partition_state(entry[2:8])
            if not isinstance(entry[7], list) or not all(isinstance(x, int) for x in entry[7]):
                raise P.ProtocolError("offline_replicas must be a list of ints")
        if not self._check_controller_epoch(request):
            self._reply(identity, request.correlation_id, request.api_key,
                        {"error": STALE_CONTROLLER_EPOCH})
            return
        self.metadata.update(P.field(body, "controller_id", int), brokers, entries)
        self._reply(identity, request.correlation_id, request.api_key, {"error": NONE})

    def _handle_stop_replica(self, identity: bytes, request: P.Request) -> None:
        body = request.body
        delete = P.field(body, "delete_partitions", bool)
        entries = P.entries(body, "partitions", 3)
        if not self._check_controller_epoch(request):
            self._reply(identity, request.correlation_id, request.api_key,
                        {"error": STALE_CONTROLLER_EPOCH, "partitions": []})
            return
        out = []
        for topic, partition, leader_epoch in entries:
            out.append([topic, partition, self._stop_replica(topic, partition, leader_epoch,
                                                             delete)])
        self._reply(identity, request.correlation_id, request.api_key,
                    {"error": NONE, "partitions": out})

    def _stop_replica(self, topic: str, partition: int, leader_epoch, delete: bool) -> int:
        if not isinstance(leader_epoch, int):
            return INVALID_REQUEST
        part = self.partitions.get((topic, partition))
        if part is None:
            return NONE
        if leader_epoch >= 0 and leader_epoch < part.core.leader_epoch:
            return FENCED_LEADER_EPOCH
        self.fetchers.unfollow(part.key)
        self.apply_effects(part, part.core.stop(now_ms()))
        self._release_parked(part.key)
        logger.info("%s-%d: replica stopped%s", topic, partition,
                    " and deleted" if delete else "")
        if delete:
            del self.partitions[part.key]
            self._dirty.discard(part)
            part.log.delete()
            if self.board is not None:
                self.board.remove(topic, partition)
        return NONE

    def _handle_controlled_shutdown(self, identity: bytes, request: P.Request) -> None:
        P.field(request.body, "broker_id", int)
        if self.controller is None or not self.controller.active:
            self._reply(identity, request.correlation_id, request.api_key,
                        {"error": NOT_CONTROLLER, "remaining_partitions": []})
            return
        self.controller.handle_controlled_shutdown(
            request.body, lambda body: self._reply(identity, request.correlation_id,
                                                   request.api_key, body))

    def _handle_admin(self, identity: bytes, request: P.Request) -> None:
        if handle_admin_request is None:
            body = {"error": INVALID_REQUEST, "error_message": "not supported yet"}
        else:
            body = handle_admin_request(request.api_key, request.body, zk=self.zk,
                                        config=self.config)
        self._reply(identity, request.correlation_id, request.api_key, body)

    # ================================================================ ISR writes

    def _write_isr(self, part: Partition, effect: WriteIsr) -> None:
        state = Z.PartitionState(self.broker_id, effect.leader_epoch, tuple(effect.isr),
                                 part.controller_epoch)
        path = Z.partition_state_path(part.topic, part.partition)
        logger.info("%s-%d: writing ISR %s (leader epoch %d, zk version %d)", part.topic,
                    part.partition, list(effect.isr), effect.leader_epoch, effect.zk_version)
        try:
            result = self.zk.set_async(path, Z.encode_partition_state(state),
                                       version=effect.zk_version)
        except Exception as e:
            logger.warning("%s-%d: ISR write failed: %s", part.topic, part.partition, e)
            self.loop.post(lambda: self._isr_written(part, ok=False))
            return

        def done(async_result) -> None:  # kazoo thread
            try:
                stat = async_result.get()
                self.loop.post(lambda: self._isr_written(part, ok=True, zk_version=stat.version))
            except BadVersionError:
                self.loop.post(lambda: self._isr_conflict(part))
            except Exception as e:
                logger.warning("%s-%d: ISR write failed: %s", part.topic, part.partition, e)
                self.loop.post(lambda: self._isr_written(part, ok=False))

        result.rawlink(done)

    def _isr_conflict(self, part: Partition) -> None:
        path = Z.partition_state_path(part.topic, part.partition)
        try:
            result = self.zk.get_async(path)
        except Exception:
            self._isr_written(part, ok=False)
            return

        def done(async_result) -> None:  # kazoo thread
            try:
                data, stat = async_result.get()
                state = Z.decode_partition_state(data, stat.version, path)
            except Exception as e:
                logger.warning("%s: cannot read after a conflict: %s", path, e)
                self.loop.post(lambda: self._isr_written(part, ok=False))
                return
            self.loop.post(lambda: self._isr_written(
                part, ok=False, isr=state.isr, leader_epoch=state.leader_epoch,
                zk_version=state.zk_version))

        result.rawlink(done)

    def _isr_written(self, part: Partition, *, ok: bool, isr=None, leader_epoch=None,
                     zk_version=None) -> None:
        if self.partitions.get(part.key) is not part:
            return
        pending = part.core.pending_isr
        if ok:
            logger.info("%s-%d: ISR is now %s (zk version %d)", part.topic, part.partition,
                        list(pending or ()), zk_version)
            self._notify_isr_change(part)
        else:
            logger.warning("%s-%d: ISR write refused (znode: isr %s, leader epoch %s, "
                           "version %s)", part.topic, part.partition, isr, leader_epoch,
                           zk_version)
        effects = part.core.on_isr_written(ok, isr=isr, leader_epoch=leader_epoch,
                                           zk_version=zk_version, now_ms=now_ms(),
                                           log=part.view)
        self.apply_effects(part, effects)

    def _notify_isr_change(self, part: Partition) -> None:
        try:
            self.zk.create_async(Z.ISR_CHANGE_PREFIX,
                                 Z.encode_partition_list([part.key]), sequence=True)
        except Exception as e:
            logger.warning("cannot create an ISR change notification: %s", e)

    # ================================================================ to other brokers

    def endpoint_of(self, broker_id: int) -> str | None:
        return self.leader_endpoints.get(broker_id) or self.metadata.endpoint(broker_id)

    def send_to_broker(self, endpoint: str, api_key: int, body: dict, on_response) -> None:
        """For the controller runner: non-blocking, callback on the loop."""
        self.controller_outbound.send(endpoint, api_key, body, on_response)

    # ================================================================ shutdown

    def begin_shutdown(self) -> None:
        if self._shutting_down:
            return
        self._shutting_down = True
        logger.info("broker %d shutting down", self.broker_id)
        if self.config.controlled_shutdown_enable:
            self._controlled_shutdown(self.config.controlled_shutdown_max_retries)
        else:
            self._stop = True

    def _controlled_shutdown(self, retries_left: int) -> None:
        """Ask the controller to move our leaderships away; keep serving meanwhile."""
        endpoint = None
        try:
            data, _ = self.zk.get(Z.CONTROLLER)
            controller_id = Z.decode_controller(data)
            info, _ = self.zk.get(Z.broker_path(controller_id))
            endpoint = Z.decode_broker(controller_id, info).endpoint
        except Exception as e:
            logger.warning("controlled shutdown: no controller found (%s)", e)

        def answered(response: P.Response | None) -> None:
            error = REQUEST_TIMED_OUT if response is None else response.body.get("error", -1)
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
            except Exception as e:
                logger.error("stopping the controller failed: %s", e)
        self.fetchers.close()
        self.fetch_outbound.close()
        self.controller_outbound.close()
        if self.router is not None:
            self.loop.remove_socket(self.router)
            self.router.close(linger=0)
            self.router = None
        for part in list(self.partitions.values()):
            try:
                part.log.close()
            except Exception as e:
                logger.error("%s-%d: close failed: %s", part.topic, part.partition, e)
        self.partitions.clear()
        if self.board is not None:
            self.board.close(unlink=True)
            self.board = None
        if self.cluster_id is not None:
            # Index objects of logs a SIGKILLed incarnation left and no LeaderAndIsr reopened.
            head = f"/mk-{self.cluster_id}-b{self.broker_id}-"
            for name in cluster_objects(self.cluster_id):
                if name.startswith(head):
                    unlink(name)
        if self.zk is not None:
            try:
                self.zk.stop()
                self.zk.close()
            except Exception as e:
                logger.warning("closing the coordinator session: %s", e)
        self.loop.close()
        logger.info("broker %d stopped", self.broker_id)


def _check_partition_state(fields: list) -> None:
    leader, leader_epoch, isr, zk_version, replicas = fields[:5]
    if not all(isinstance(x, int) and not isinstance(x, bool)
               for x in (leader, leader_epoch, zk_version)):
        raise P.ProtocolError("leader, leader_epoch and zk_version must be ints")
    for name, value in (("isr", isr), ("replicas", replicas)):
        if not isinstance(value, list) or not all(
                isinstance(x, int) and not isinstance(x, bool) for x in value) or \
                len(value) > SB.REPLICAS_MAX or len(set(value)) != len(value):
            raise P.ProtocolError(f"{name} must be a list of distinct broker ids "
                                  f"(at most {SB.REPLICAS_MAX})")


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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        from node.config import load_properties
        props = load_properties(args.config)
        for item in args.override:
            key, sep, value = item.partition("=")
            if not sep:
                raise ConfigError(f"--override {item!r}: expected KEY=VALUE")
            props[key.strip()] = value
        config = BrokerConfig.from_props(props)
    except ConfigError as e:
        print(f"error: invalid configuration: {e}", file=sys.stderr, flush=True)
        return 2
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr,
        format=f"%(asctime)s broker {config.broker_id} %(levelname)s %(message)s")
    broker = Broker(config)
    try:
        broker.start()
    except Exception as e:
        logger.error("start-up failed: %s", e)
        broker._close()
        return 1
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
