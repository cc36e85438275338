"""The broker process: ``python -m node.broker --config server.properties``.

A thin shell around the pure replication cores (``node.core.replication``). One thread runs
an event loop (``node.broker.loop``) that owns every piece of state:

    Broker (this module)          lifecycle: start-up, registration, the coordinator
                                  session, lost replicas, shutdown
      SocketServer                the listener (ZeroMQ and local links); the one path
        (node.broker.socket_server)      responses go out by
      KafkaApis                   request handling: one dispatch table, one module per
        (node.broker.apis)               request family
      ReplicaManager              hosted replicas: logs, cores, effects, ISR writes,
        (node.broker.replica_manager)    the shared-memory board
      ReplicaFetcherManager       follower fetch sessions, one per leader
        (node.broker.fetcher)
      FetchPurgatory,             fetches waiting for bytes, produce requests waiting
        ProduceRequest            for acks (owned by KafkaApis)
        (node.broker.purgatory)
      MetadataCache               what the controller last told (UpdateMetadata)
      ControllerRunner            when this broker holds /controller
        (node.broker.controller_runner)

Kazoo callbacks, signals and timers are posted to the loop as events.

Start-up, as Kafka: connect to the coordinator, ensure the persistent paths, read (or
create) ``/cluster/id`` (another cluster's id there: exit), bind the listener, create
the board, find the replicas that lost committed data (``node.broker.lost_replicas``),
register ``/brokers/ids/N`` (ephemeral; waiting for a previous session's registration
to expire; registering again after a session expiry, only where ``/cluster/id`` is
ours), then compete for ``/controller`` (only while registered in the current
session). Partition logs are opened when a LeaderAndIsr names them. A start-up step
that needs the coordinator is retried until ``zookeeper.connection.timeout.ms``.

Requests are ``node.broker.apis``'s (its docstring lists them and their errors).

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

from kazoo.client import KazooState
from kazoo.exceptions import NodeExistsError, NoNodeError

from node.broker import coordinator
from node.broker import failures
from node.broker import limits
from node.broker.apis import KafkaApis
from node.broker.controller_runner import ControllerRunner
from node.broker.failures import COORDINATOR_ERRORS, EXPECTED_ERRORS, STORAGE_ERRORS
from node.broker.fetcher import ReplicaFetcherManager
from node.broker.log_cleaner import CLEANER_STATS_FILE, LogCleaner
from node.broker.loop import EventLoop, Outbound, now_ms
from node.broker.lost_replicas import (LostReplicas, find_lost, take_clean_shutdown_marker,
                                       write_clean_shutdown_marker)
from node.broker.metadata_cache import MetadataCache
from node.broker.replica_manager import Partition, ReplicaManager
from node.broker.socket_server import SocketServer
from node.config import KAFKA_LISTENER, BrokerConfig, ConfigError, parse_key_values
from node.wire import errors
from node.wire import protocol
from node.wire import zkdata
from node.wire.errors import ErrorCode
from shm import faults
from shm.names import check_cluster_id, cluster_objects, unlink

logger = logging.getLogger("node.broker.server")

CLUSTER_ID_PATH = "/cluster/id"
# Exit status when every log directory failed (Kafka halts with 1).
EXIT_LOG_DIRS_FAILED = 1

NONE = 0


class InconsistentClusterIdError(Exception):
    """The coordinator belongs to another cluster (Kafka's InconsistentClusterIdException)."""


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.loop = EventLoop()
        self.zk = coordinator.new_client(config.zookeeper_connect,
                                         config.zookeeper_session_timeout_ms / 1000)
        self.cluster_id: str | None = None
        self.network = SocketServer(self.loop, config)     # bound in start()
        self.port = config.port
        self.broker_epoch = -1
        self.metadata = MetadataCache()
        self.replicas = ReplicaManager(
            broker_id=self.broker_id, config=config, loop=self.loop, zk=self.zk,
            metadata=self.metadata,
            on_produce_complete=lambda part, effect: self.apis.on_produce_complete(part,
                                                                                   effect),
            on_high_watermark=lambda part: self.apis.purgatory.wake(part.key,
                                                                    leo_moved=False),
            on_all_log_dirs_offline=self._all_log_dirs_offline)
        self.fetch_outbound = Outbound(self.loop, f"broker-{self.broker_id}-fetcher",
                                       config.request_timeout_ms, local=True)
        self.controller_outbound = Outbound(self.loop, f"broker-{self.broker_id}-controller",
                                            config.request_timeout_ms)
        self.fetchers = ReplicaFetcherManager(self.replicas, self.fetch_outbound)
        self.replicas.fetchers = self.fetchers
        # Kafka's LogCleaner (cleanup.policy=compact), started with the periodic duties.
        self.cleaner = LogCleaner(
            self.replicas, self.loop, threads=config.log_cleaner_threads,
            io_max_bytes_per_second=config.log_cleaner_io_max_bytes_per_second,
            backoff_ms=config.log_cleaner_backoff_ms,
            stats_path=os.path.join(config.log_dirs[0], CLEANER_STATS_FILE)) \
            if config.log_cleaner_enable else None
        self.replicas.cleaner = self.cleaner
        self.controller = None
        # Request handling (node.broker.apis): one table, answers through the listener.
        send_response = self.network.send_response
        self.kafka = None       # Kafka's protocol (node.kafka.listener), bound in start()
        if config.listener(KAFKA_LISTENER) is not None:
            from node.kafka.listener import KafkaListener, route_responses
            send_response = route_responses(send_response)
        self.apis = KafkaApis(config=config, zk=self.zk, loop=self.loop,
                              replicas=self.replicas, metadata=self.metadata,
                              send_response=send_response,
                              broker_epoch=lambda: self.broker_epoch,
                              controller=lambda: self.controller)
        # The coordinators' requests to other brokers (transaction markers).
        self.coordinator_outbound = Outbound(self.loop, f"broker-{self.broker_id}-coordinator",
                                             config.request_timeout_ms, local=True)
        self.apis.outbound = self.coordinator_outbound
        self.apis.send_to_broker = self.send_to_broker    # KIP-890's verification
        if config.listener(KAFKA_LISTENER) is not None:
            self.kafka = KafkaListener(self.loop, config, self.apis, lambda: self.cluster_id)
        self._shutting_down = False
        self._stop = False
        self._halt = False               # every log dir failed: stop without closing logs
        self._registered_session: int | None = None   # the session that registered us
        # The tick registers again whenever the connected session is not the one that
        # registered us (level-triggered: a failed attempt, or a session change whose
        # events went astray, is mended without waiting for a reconnect), at most once
        # per REREGISTER_RETRY_MS; not in a session whose coordinator refused us.
        self._reregister_at_ms = 0
        self._refused_session: int | None = None
        self.failing_reregistrations = int(os.environ.get(FAIL_REREGISTRATIONS_ENV) or 0)
        self.dropping_session_lost = int(os.environ.get(DROP_SESSION_LOST_ENV) or 0)
        self._startup_deadline = 0.0
        # Partitions whose committed data this broker lost, durable until it is back in
        # an ISR (node.broker.lost_replicas); never led meanwhile.
        self.lost = LostReplicas(config.log_dirs)
        self.replicas.lost = self.lost
        self.replicas.on_lost_cleared = self._update_registration
        self.clean_shutdown = True
        self.loop.after_iteration = self.fetchers.maybe_fetch

    @property
    def partitions(self) -> dict[tuple[str, int], Partition]:
        return self.replicas.partitions

    # ================================================================ start-up

    def start(self) -> None:
        config = self.config
        signal.signal(signal.SIGTERM, lambda *_: self.loop.post(self.begin_shutdown))
        signal.signal(signal.SIGINT, lambda *_: self.loop.post(self.begin_shutdown))
        self._startup_deadline = time.monotonic() + config.zookeeper_connection_timeout_ms / 1000
        self.zk.start(timeout=min(limits.ZK_START_TIMEOUT_S,
                                  config.zookeeper_connection_timeout_ms / 1000))
        self.zk.add_listener(self._on_zk_state)

        def ensure_paths():
            for path in zkdata.PERSISTENT_PATHS:
                self.zk.ensure_path(path)

        self._until_coordinator_answers("create the cluster's paths", ensure_paths)
        self.cluster_id = self._until_coordinator_answers("read the cluster id",
                                                          self._read_cluster_id)
        self.apis.cluster_id = self.cluster_id
        for d in config.log_dirs:
            os.makedirs(d, exist_ok=True)
        self.port = self.network.bind(self.apis.handle, self.apis.purgatory.forget_peer)
        if self.kafka is not None:
            self.kafka.bind()
        self.replicas.open_board(self.cluster_id, limits.BOARD_CAPACITY)
        if config.replica_transport == "shm":
            self._start_shm_replication()
        self.clean_shutdown = take_clean_shutdown_marker(config.log_dirs)
        if not self.clean_shutdown:
            logger.warning("the previous run of broker %d did not shut down cleanly",
                           self.broker_id)
        self.lost.load()
        self._until_coordinator_answers("look for replicas that lost data",
                                        lambda: self.lost.mark(self._find_lost_replicas()))
        self._until_coordinator_answers("register", self._register)
        self.loop.every(limits.TICK_INTERVAL_MS, self._tick)
        self.loop.every(config.replica_high_watermark_checkpoint_interval_ms,
                        self.replicas.checkpoint_high_watermarks)
        self.loop.every(config.log_flush_offset_checkpoint_interval_ms,
                        self.replicas.checkpoint_recovery_points)
        self.loop.every(config.log_retention_check_interval_ms, self.replicas.retention)
        self.loop.every(config.producer_id_expiration_check_interval_ms,
                        self.replicas.expire_producers)
        if config.log_scrub_bytes_per_second > 0:
            budget = max(1, config.log_scrub_bytes_per_second * limits.SCRUB_INTERVAL_MS // 1000)
            self.loop.every(limits.SCRUB_INTERVAL_MS, lambda: self.replicas.scrub(budget))
        self.loop.every(limits.FLUSH_CHECK_INTERVAL_MS, self.replicas.flush_due)
        if self.cleaner is not None:
            self.cleaner.start()
        self.controller = ControllerRunner(
            broker_id=self.broker_id, zk=self.zk, config=config, post=self.loop.post,
            send=self.send_to_broker, now_ms=now_ms,
            eligible=self._registered_in_this_session)
        self.controller.start()
        # Everything made so far (modules, the coordinator session, the controller) lives
        # as long as the process: keep it out of the collector, so a full collection
        # scans only what requests made (~15 ms on the import graph, a latency spike).
        gc.freeze()
        kafka = "" if self.kafka is None else \
            f", Kafka's protocol on {config.listener(KAFKA_LISTENER).host}:{self.kafka.port}"
        print(f"broker {self.broker_id} started, listening on {config.host}:{self.port}{kafka} "
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
                time.sleep(limits.STARTUP_COORDINATOR_RETRY_S)

    def _read_cluster_id(self, registering_again: bool = False) -> str:
        """The coordinator's /cluster/id. Absent, it is created at start-up (with
        ``cluster.id`` if configured) but not when registering again in a new session:
        a coordinator that took our coordinator's port while it was away holds another
        id, or none yet. One holding another id belongs to another cluster: this broker
        must not register (nor compete for /controller) there (Kafka's
        InconsistentClusterIdException)."""
        ours = self.cluster_id if registering_again else self.config.cluster_id
        for _ in range(10):
            try:
                data, _ = self.zk.get(CLUSTER_ID_PATH)
                held = check_cluster_id(json.loads(data.decode())["id"])
            except NoNodeError:
                if registering_again:
                    held = None
                else:
                    new_id = ours or "c" + uuid.uuid4().hex[:16]
                    try:
                        self.zk.create(CLUSTER_ID_PATH, json.dumps(
                            {"version": "1", "id": new_id}).encode(), makepath=True)
                        return new_id
                    except NodeExistsError:
                        continue
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                raise ConfigError(f"{CLUSTER_ID_PATH} holds no usable cluster id: {e}") from None
            if ours is not None and held != ours:
                raise InconsistentClusterIdError(
                    f"the coordinator at {self.config.zookeeper_connect} holds cluster id "
                    f"{held}, this broker's is {ours}: it is another cluster's coordinator")
            return held
        raise RuntimeError(f"could not read or create {CLUSTER_ID_PATH}")

    def _registration(self) -> bytes:
        """/brokers/ids/N: the native listener's host and port, and every listener's
        advertised endpoint (Kafka's "endpoints")."""
        others = ()
        if self.kafka is not None:
            kafka = self.config.advertised(KAFKA_LISTENER, self.kafka.port)
            others = ((kafka.name, kafka.host, kafka.port),)
        native = self.config.advertised("PLAINTEXT", self.port)
        return zkdata.encode_broker(zkdata.BrokerInfo(
            self.broker_id, native.host, native.port, self.config.broker_rack,
            lost_replicas=tuple(sorted(self.lost.marked)),
            clean_shutdown=self.clean_shutdown, other_endpoints=others))

    def _find_lost_replicas(self) -> dict[tuple[str, int], int]:
        """Partitions whose ISR (as the coordinator holds it) names this broker although
        its copy lost committed data (``node.broker.lost_replicas.find_lost``)."""
        in_isr = []
        topics = self.zk.get_children(zkdata.BROKER_TOPICS)
        for topic in sorted(topics):
            try:
                assignment = zkdata.decode_assignment(
                    topic, self.zk.get(zkdata.topic_path(topic))[0])
            except (NoNodeError, zkdata.ZkDataError):
                continue
            for partition, replicas in sorted(assignment.items()):
                if self.broker_id not in replicas:
                    continue
                try:
                    data, stat = self.zk.get(zkdata.partition_state_path(topic, partition))
                    state = zkdata.decode_partition_state(data, stat.version)
                except (NoNodeError, zkdata.ZkDataError):
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
        path = zkdata.broker_path(self.broker_id)
        wait_s = (limits.OLD_REGISTRATION_WAIT_SESSIONS
                  * self.config.zookeeper_session_timeout_ms / 1000)
        deadline = time.monotonic() + wait_s
        said = False
        while True:
            try:
                _, stat = self.zk.create(path, self._registration(), ephemeral=True,
                                         include_data=True)
                self.broker_epoch = stat.czxid
                self._registered_session = stat.ephemeralOwner
                return
            except NodeExistsError:
                try:
                    _, stat = self.zk.get(path)
                except NoNodeError:
                    continue
                client_id = self.zk.client_id
                if client_id is not None and stat.ephemeralOwner == client_id[0]:
                    self.broker_epoch = stat.czxid
                    self._registered_session = stat.ephemeralOwner
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{path} is still held by another session after "
                                       f"{wait_s:.0f} s: is broker {self.broker_id} running?")
                if not said:
                    logger.warning("%s exists from a previous session; waiting for it to "
                                   "expire", path)
                    said = True
                time.sleep(limits.OLD_REGISTRATION_POLL_S)

    def _update_registration(self) -> None:
        """Rewrite /brokers/ids/N (same znode, same broker epoch) once a lost replica is
        back, so a controller elected later does not count it lost again."""
        try:
            self.zk.set(zkdata.broker_path(self.broker_id), self._registration())
        except COORDINATOR_ERRORS as e:   # the next controller waits for an ISR change
            logger.warning("cannot update the registration: %s", e)

    def _on_zk_state(self, state) -> None:  # kazoo thread
        if state == KazooState.LOST and self.dropping_session_lost > 0:   # tests only
            self.dropping_session_lost -= 1
            return
        if state == KazooState.LOST:
            self.loop.post(lambda: self._zk_session_changed(lost=True))
        elif state == KazooState.CONNECTED:
            self.loop.post(lambda: self._zk_session_changed(lost=False))

    def _zk_session_changed(self, lost: bool) -> None:
        if lost:
            logger.warning("coordinator session lost")
        elif self._registration_stale():     # a new session: at once, not at the tick
            self._register_again()

    def _register_again(self) -> None:
        """Register in the current session (a new one: the old registration went with
        the old session)."""
        logger.warning("new coordinator session: registering again")
        self._reregister_at_ms = now_ms() + limits.REREGISTER_RETRY_MS
        try:
            if self.failing_reregistrations > 0:     # tests only
                self.failing_reregistrations -= 1
                raise coordinator.CoordinatorUnavailable(
                    f"{FAIL_REREGISTRATIONS_ENV}: this attempt fails")
            self._read_cluster_id(registering_again=True)
            self._register()
        except COORDINATOR_ERRORS as e:  # tried again by the tick (or a reconnect)
            logger.error("re-registration failed (trying again in %d ms): %s",
                         limits.REREGISTER_RETRY_MS, e)
        except (InconsistentClusterIdError, ConfigError) as e:
            logger.error("not registering again: %s", e)
            client_id = self.zk.client_id
            self._refused_session = client_id[0] if client_id is not None else None

    def _registration_stale(self) -> bool:
        """Connected in a session that did not register us and did not refuse us."""
        if self._shutting_down or self._registered_session is None or \
                self.zk.client.state != KazooState.CONNECTED:
            return False
        client_id = self.zk.client_id
        return client_id is not None and \
            client_id[0] not in (self._registered_session, self._refused_session)

    def _registered_in_this_session(self) -> bool:
        """Whether /brokers/ids/N was made by the current coordinator session: the
        controller competes only then (Kafka registers, then elects)."""
        client_id = self.zk.client_id
        return client_id is not None and client_id[0] == self._registered_session

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
            # ours: the b<id>- objects, the replication slots of what we led and our
            # doorbell (replica.transport=shm)
            heads = (f"/mk-{self.cluster_id}-b{self.broker_id}-",
                     f"/mk-{self.cluster_id}-repl-{self.broker_id}-")
            bell = f"/mk-{self.cluster_id}-bell-{self.broker_id}"
            for name in cluster_objects(self.cluster_id):
                if name.startswith(heads) or name == bell:
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
        closer.join(limits.ZK_CLOSE_TIMEOUT_S)
        if closer.is_alive():
            logger.warning("the coordinator did not answer the session close within %g s; "
                           "the session will expire", limits.ZK_CLOSE_TIMEOUT_S)

    def _tick(self) -> None:
        now = now_ms()
        self.replicas.tick(now)
        self.apis.groups.sync()      # leaderships lost outside a LeaderAndIsr (a failed dir)
        self.apis.txn.sync()
        self.fetch_outbound.expire(now)
        self.coordinator_outbound.expire(now)
        self.controller_outbound.expire(now)
        if now >= self._reregister_at_ms and self._registration_stale():
            self._register_again()
        if self.controller is not None:
            self.controller.tick(now)

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
        if self.config.controlled_shutdown_enable and attempts > 0 and self.network.bound:
            self._controlled_shutdown(attempts - 1)
        else:
            self._stop = True

    def _controlled_shutdown(self, retries_left: int) -> None:
        """Ask the controller to move our leaderships away; keep serving meanwhile."""
        endpoint = None
        try:
            # Bounded: the loop keeps serving while the coordinator is slow or away.
            data, _ = self.zk.get(zkdata.CONTROLLER)
            controller_id = zkdata.decode_controller(data)
            info, _ = self.zk.get(zkdata.broker_path(controller_id))
            endpoint = zkdata.decode_broker(controller_id, info).endpoint
        except COORDINATOR_ERRORS as e:
            logger.warning("controlled shutdown: no controller found (%s)", e)

        def answered(response: protocol.Response | None) -> None:
            error = ErrorCode.REQUEST_TIMED_OUT if response is None else response.body.get("error", -1)
            remaining = [] if response is None else response.body.get(
                "remaining_partitions", [])
            if error == NONE and not remaining:
                logger.info("controlled shutdown succeeded")
                self._stop = True
                return
            logger.warning("controlled shutdown attempt failed: %s, %d partitions remaining",
                           errors.name_of(error) if isinstance(error, int) else error,
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
        self.controller_outbound.send(endpoint, protocol.ApiKey.CONTROLLED_SHUTDOWN,
                                      {"broker_id": self.broker_id,
                                       "broker_epoch": self.broker_epoch}, answered)

    def _start_shm_replication(self) -> None:
        """replica.transport=shm (node.broker.shm_replication): followers on this host
        copy from the leaders' segments; a leader's appends ring its followers."""
        from node.broker.shm_replication import ShmReplication
        self._unlink_own_slots()        # left by a SIGKILLed incarnation
        shm = ShmReplication(self.replicas, self.cluster_id)
        shm.apis = self.apis            # traced writes (bench.perf.latency --breakdown)
        self.replicas.shm = self.fetchers.shm = shm
        purgatory = self.apis.purgatory
        wake = purgatory.wake

        def wake_and_ring(key, *, leo_moved: bool) -> None:
            if leo_moved:
                shm.leo_moved(key)      # the followers first: they copy meanwhile
            wake(key, leo_moved=leo_moved)
        purgatory.wake = wake_and_ring

    def _unlink_own_slots(self) -> None:
        head = f"/mk-{self.cluster_id}-repl-{self.broker_id}-"
        for name in cluster_objects(self.cluster_id):
            if name.startswith(head):
                unlink(name)

    def _close(self) -> None:
        if self.controller is not None:
            try:
                self.controller.stop()
            except COORDINATOR_ERRORS as e:
                logger.error("stopping the controller failed: %s", e)
        self.fetchers.close()
        if self.replicas.shm is not None:
            self.replicas.shm.close()
            self.replicas.shm = self.fetchers.shm = None
            self._unlink_own_slots()
        self.fetch_outbound.close()
        self.coordinator_outbound.close()
        self.controller_outbound.close()
        if self.kafka is not None:
            self.kafka.close()
        self.network.close()
        if self.cleaner is not None:
            self.cleaner.close()       # before the logs close: no thread reads them after
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m node.broker", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="server.properties (Kafka keys)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="override one property (repeatable)")
    return parser


FAULT_POINT_ENV = "MINIKAFKA_BROKER_FAULT_POINT"
# Tests only: this many re-registrations in a new coordinator session fail as if the
# coordinator had not answered.
FAIL_REREGISTRATIONS_ENV = "MINIKAFKA_BROKER_FAIL_REREGISTRATIONS"
# Tests only: this many of kazoo's LOST events never reach the loop (an event gone astray).
DROP_SESSION_LOST_ENV = "MINIKAFKA_BROKER_DROP_SESSION_LOST"


# Loggers' levels, as log4j's logger lines: "name=LEVEL,...", e.g.
# MINIKAFKA_LOG_LEVELS=kafka.request.logger=DEBUG for Kafka's request log.
LOG_LEVELS_ENV = "MINIKAFKA_LOG_LEVELS"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def set_log_levels(text: str) -> None:
    """Set each named logger's level from ``name=LEVEL,...``; ValueError names a bad one."""
    wanted = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, level = (x.strip() for x in item.partition("="))
        if not sep or not name or level.upper() not in LOG_LEVELS:
            raise ValueError(f"{item!r} is not name=LEVEL (LEVEL one of "
                             f"{', '.join(LOG_LEVELS)})")
        wanted.append((name, level.upper()))
    for name, level in wanted:
        logging.getLogger(name).setLevel(level)


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
    try:
        set_log_levels(os.environ.get(LOG_LEVELS_ENV, ""))
    except ValueError as e:
        print(f"error: {LOG_LEVELS_ENV}: {e}", file=sys.stderr, flush=True)
        return 2
    fault_point = os.environ.get(FAULT_POINT_ENV)
    if fault_point:  # tests only: make a storage invariant fail at this point
        faults.break_invariant_at(fault_point)
    broker = Broker(config)
    try:
        broker.start()
    except EXPECTED_ERRORS + (InconsistentClusterIdError,) as e:
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
