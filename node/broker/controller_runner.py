"""The controller's shell: runs ``node.core.controller.Controller`` inside a broker.

Threading: everything here runs on the broker's event-loop thread, except kazoo watch
and session callbacks, which only ``post`` work to that loop. Coordinator calls made
from the loop go through ``node.broker.coordinator.GuardedZk``: kazoo's asynchronous
calls waited on for at most CALL_TIMEOUT_S, failing at once while the session is not
connected, so a coordinator outage never stalls the broker's loop (the coordinator
answers in well under a millisecond when it is up); broker requests never block
(``send`` answers through a callback).

Coordinator outages: on SUSPENDED (the connection is lost) an active controller resigns,
since it can neither read nor write the state, and wants an election; a watch event of
type NONE (kazoo's connection-state notice) triggers no read. On CONNECTED the election
runs again: our own /controller from before the outage is deleted and a new epoch won,
so the new term starts from a fresh read of the coordinator.

Election (Kafka 2.2+, KIP-... "controller epoch in a multi"): create the ephemeral
``/controller`` and bump ``/controller_epoch`` in one multi conditional on the epoch
znode's version; the winner reads the whole cluster state, hands it to the core as
``BecomeController``, and keeps the new epoch znode version. Every write the core asks
for then goes in a multi with a ``check`` of that version, so a controller that lost
its title can never write again (a zombie's multi fails: ``Fenced``), and every request
it sends carries its epoch for the brokers to refuse once a newer one has spoken.

Watches (kazoo's are one-shot; each handler re-reads and re-arms):
/controller, /brokers/ids (children), /brokers/topics (children) and each topic's data,
/config/topics/T, /admin/preferred_replica_election, /admin/reassign_partitions,
/admin/delete_topics (children), /isr_change_notification (children),
/log_dir_event_notification (children: a broker's failed log dir). Callbacks of a
term that has ended are ignored (kazoo cannot take a watch back).

About 640 lines, kept whole: the election, the watches, the reads and the effects all
act on one controller term on the loop thread (a watch or a response of an ended term
is dropped); the reads of the cluster state are the part that could leave first.
"""
from __future__ import annotations

import itertools
import json
import logging
from collections import deque
from collections.abc import Callable

from kazoo.client import KazooClient, KazooState
from kazoo.protocol.states import EventType
from kazoo.exceptions import (BadVersionError, KazooException, NodeExistsError,
                              NoNodeError, NotEmptyError, RolledBackError)

from node.broker.coordinator import GuardedZk
from node.core import controller
from node.wire import errors
from node.wire.errors import ErrorCode
from node.wire import zkdata

log = logging.getLogger("minikafka.controller")

# Limits
EPOCH_BUMP_ATTEMPTS_MAX = 10
EVENTS_PER_RUN_MAX = 100_000          # effects loop guard: a core bug must not spin forever
TREE_NODES_MAX = 100_000              # recursive delete bound
READ_PIPELINE_MAX = 1_000             # coordinator reads in flight at once on failover
WATCH_READ_RETRY_MS = 500             # a watch handler whose read failed runs again then

_ERROR_NAMES = {BadVersionError: "BadVersion", NoNodeError: "NoNode",
                NodeExistsError: "NodeExists", NotEmptyError: "NotEmpty"}


class ControllerRunner:
    def __init__(self, *, broker_id: int, zk: GuardedZk | KazooClient, config,
                 post: Callable[[Callable[[], None]], None],
                 send: Callable[[str, int, dict, Callable], None],
                 now_ms: Callable[[], int],
                 eligible: Callable[[], bool] = lambda: True) -> None:
        self.broker_id = broker_id
        self.zk = zk if isinstance(zk, GuardedZk) else GuardedZk(zk)
        self.config = config
        self._post = post
        self._send = send
        self._now_ms = now_ms
        self._eligible = eligible      # registered in this session (the broker says)
        self._core: controller.Controller | None = None
        self._epoch = -1
        self._epoch_zk_version = -1
        self._term = 0                     # increments on every win and every resignation
        self._started = False
        self._stopped = False
        self._want_election = False
        self._watched_topics: set[str] = set()
        self._watchers: dict = {}
        self._replies: dict[int, Callable[[dict], None]] = {}
        self._request_ids = itertools.count(1)
        self._running = False
        self._queue: deque = deque()
        self._unread: dict = {}            # watch key -> (term, handler) whose read failed
        self._unread_at_ms = 0

    # ---------------------------------------------------------------- public

    @property
    def active(self) -> bool:
        return self._core is not None and self._core.active

    @property
    def epoch(self) -> int:
        """The controller epoch of the current (or last) term, -1 before any."""
        return self._epoch

    @property
    def core(self) -> controller.Controller | None:
        return self._core

    def start(self) -> None:
        assert not self._started, "start() once"
        self._started = True
        self.zk.add_listener(self._on_session_state)
        self._elect()

    def tick(self, now_ms: int) -> None:
        if self._stopped:
            return
        if self._want_election and not self.active:
            self._elect()
        if self.active:
            self._read_again(now_ms)
        if self.active:
            self._run(controller.Tick(now_ms))

    def handle_controlled_shutdown(self, body: dict, reply: Callable[[dict], None]) -> None:
        broker_id = body.get("broker_id") if isinstance(body, dict) else None
        broker_epoch = body.get("broker_epoch", -1) if isinstance(body, dict) else None
        if not (isinstance(broker_id, int) and isinstance(broker_epoch, int)) or \
                isinstance(broker_id, bool) or isinstance(broker_epoch, bool):
            reply({"error": ErrorCode.INVALID_REQUEST, "remaining_partitions": []})
            return
        if not self.active:
            reply({"error": ErrorCode.NOT_CONTROLLER, "remaining_partitions": []})
            return
        request_id = next(self._request_ids)
        self._replies[request_id] = reply
        self._run(controller.ControlledShutdownRequested(request_id, broker_id, broker_epoch))

    def stop(self) -> None:
        """Resign and stop competing: ignore every watch, delete /controller if ours."""
        if self._stopped:
            return
        self._stopped = True
        self.zk.remove_listener(self._on_session_state)  # a set discard: cannot fail
        was_active = self.active
        self._resign("stopping")
        if was_active:
            try:
                data, stat = self.zk.get(zkdata.CONTROLLER)
                if zkdata.decode_controller(data) == self.broker_id:
                    self.zk.delete(zkdata.CONTROLLER, version=stat.version)
            except (KazooException, zkdata.ZkDataError):
                pass

    # ---------------------------------------------------------------- election

    def _elect(self) -> None:
        if self._stopped or self.active:
            return
        if not self.zk.available or not self._eligible():
            # After the session is back and the broker has registered in it (a
            # coordinator found after an outage may be another cluster's): the tick asks.
            self._want_election = True
            return
        self._want_election = False
        try:
            won = self._try_register()
        except NodeExistsError:
            won = False
        except KazooException as e:
            log.warning("controller election failed (%s); will retry", e)
            self._want_election = True
            return
        if not won:
            try:
                stat = self.zk.exists(zkdata.CONTROLLER, watch=self._controller_watch)
                if stat is None:
                    self._want_election = True     # vanished meanwhile: next tick
                elif stat.ephemeralOwner == self.zk.client_id[0]:
                    # Ours but we resigned (a newer controller wrote a state): give it up
                    # so that a proper election with a new epoch happens.
                    self.zk.delete(zkdata.CONTROLLER, version=stat.version)
                    self._want_election = True
            except KazooException:
                self._want_election = True
            return
        try:
            self._become_controller()
        except KazooException as e:
            self._resign(f"reading the cluster state failed ({e})")
            self._want_election = True

    def _try_register(self) -> bool:
        """Create /controller and bump /controller_epoch in one multi (Kafka's
        registerControllerAndIncrementControllerEpoch)."""
        for _ in range(EPOCH_BUMP_ATTEMPTS_MAX):
            try:
                data, stat = self.zk.get(zkdata.CONTROLLER_EPOCH)
                epoch = zkdata.decode_controller_epoch(data) if data else 0
            except NoNodeError:
                try:
                    self.zk.create(zkdata.CONTROLLER_EPOCH, zkdata.encode_controller_epoch(0))
                except NodeExistsError:
                    pass
                continue
            except zkdata.ZkDataError:
                log.error("/controller_epoch is garbled: %r; starting over from it", data)
                epoch = 0
            txn = self.zk.transaction()
            txn.create(zkdata.CONTROLLER, zkdata.encode_controller(self.broker_id), ephemeral=True)
            txn.set_data(zkdata.CONTROLLER_EPOCH, zkdata.encode_controller_epoch(epoch + 1),
                         version=stat.version)
            created, epoch_stat = txn.commit()
            if isinstance(created, NodeExistsError):
                return False
            if isinstance(epoch_stat, BadVersionError):
                continue
            if isinstance(created, Exception) or isinstance(epoch_stat, Exception):
                raise KazooException(f"controller registration failed: {created!r} "
                                     f"{epoch_stat!r}")
            self._epoch = epoch + 1
            self._epoch_zk_version = epoch_stat.version
            return True
        raise KazooException("could not bump /controller_epoch")

    def _become_controller(self) -> None:
        self._term += 1
        log.info("broker %d won the controller election (controller_epoch %d)",
                 self.broker_id, self._epoch)
        for path in zkdata.PERSISTENT_PATHS:
            self.zk.ensure_path(path)
        self._watched_topics = set()
        self._core = controller.Controller(
            self.broker_id, controller.ControllerConfig.from_broker_config(self.config))
        self.zk.exists(zkdata.CONTROLLER, watch=self._controller_watch)
        brokers = self._read_brokers()
        topics = tuple(t for t in (self._read_topic(name) for name in self._topic_names())
                       if t is not None)
        # Drain the ISR change notifications (and watch for new ones) BEFORE reading the
        # states: a leader that shrinks its ISR after this drain fires the watch, so the
        # states read below are at least as fresh as every notification drained here.
        # Drained after the read, a shrink written between the two was lost until the
        # next change of that partition.
        self._drain_isr_notifications()
        states = self._read_states([(t.name, p) for t in topics for p in sorted(t.assignment)])
        moves, moves_version = self._read_reassignments()
        election = self._read_election()
        deleting = self._read_deletions()
        offline = self._drain_log_dir_events()
        self._run(controller.BecomeController(self._epoch, brokers, topics, states, moves,
                                     moves_version, election, deleting, self._now_ms()))
        for broker_id, partitions in offline:
            self._run(controller.ReplicasOffline(broker_id, partitions))

    def _resign(self, reason: str) -> None:
        if self._core is not None:
            log.warning("broker %d resigns as controller (epoch %d): %s",
                        self.broker_id, self._epoch, reason)
        self._core = None
        self._term += 1
        self._queue.clear()
        self._unread.clear()
        for reply in self._replies.values():
            reply({"error": ErrorCode.NOT_CONTROLLER, "remaining_partitions": []})
        self._replies.clear()

    # ---------------------------------------------------------------- kazoo callbacks
    # (kazoo's thread: post only)

    def _on_session_state(self, state) -> None:
        self._post(lambda: self._on_session_state_loop(state))
        return None   # keep the listener

    def _on_session_state_loop(self, state) -> None:
        if self._stopped:
            return
        if state == KazooState.LOST:
            self._resign("coordinator session lost")
            self._want_election = True
        elif state == KazooState.SUSPENDED:
            if self.active:
                self._resign("coordinator connection lost")
            self._want_election = True
        elif state == KazooState.CONNECTED and not self.active:
            self._want_election = True

    def _watcher(self, key, handler: Callable[[], None]) -> Callable:
        """One watch callback per (term, key): kazoo keeps a set of callbacks per path,
        so re-arming with the same object never piles up registrations."""
        term = self._term
        cached = self._watchers.get(key)
        if cached is not None and cached[0] == term:
            return cached[1]

        def on_event(event) -> None:
            if event.type == EventType.NONE:
                return        # a connection-state notice, not a change: nothing to read
            self._post(lambda: self._if_term(term, handler, key))
        self._watchers[key] = (term, on_event)
        return on_event

    def _if_term(self, term: int, handler: Callable[[], None], key=None) -> None:
        if term == self._term and self.active and not self._stopped:
            try:
                handler()
            except KazooException as e:
                if key is None:
                    log.warning("coordinator read failed in the controller (%s)", e)
                    return
                # The handler re-reads and re-arms its watch: dropped, the watch would be
                # gone for the rest of the term (every topic created after it unseen).
                log.warning("coordinator read failed in the controller (%s); reading "
                            "again in %d ms", e, WATCH_READ_RETRY_MS)
                self._read_later(key, handler, term)

    def _read_later(self, key, handler: Callable[[], None], term: int | None = None) -> None:
        self._unread[key] = (self._term if term is None else term, handler)
        self._unread_at_ms = self._now_ms() + WATCH_READ_RETRY_MS

    def _read_again(self, now_ms: int) -> None:
        """The watch handlers whose reads failed, once more (each under its term)."""
        if not self._unread or now_ms < self._unread_at_ms:
            return
        unread, self._unread = self._unread, {}
        for key, (term, handler) in unread.items():
            self._if_term(term, handler, key)

    def _controller_watch(self, event) -> None:
        if event.type == EventType.NONE:
            return
        self._post(lambda: self._on_controller_changed(event))

    def _on_controller_changed(self, event) -> None:
        if self._stopped:
            return
        try:
            stat = self.zk.exists(zkdata.CONTROLLER, watch=self._controller_watch)
            owner = zkdata.decode_controller(self.zk.get(zkdata.CONTROLLER)[0]) if stat else None
        except (KazooException, zkdata.ZkDataError):
            self._want_election = True      # an inactive runner elects on its tick ...
            if self.active:                 # ... an active one reads (and re-arms) again
                self._read_later("controller", lambda: self._on_controller_changed(None))
            return
        if self.active and owner != self.broker_id:
            self._resign(f"/controller is now {owner}")
        if owner is None:
            self._elect()

    # ---------------------------------------------------------------- reads

    def _read_brokers(self) -> tuple[controller.Broker, ...]:
        watch = self._watcher("brokers", self._on_brokers_changed)
        ids = self.zk.get_children(zkdata.BROKER_IDS, watch=watch)
        brokers = []
        for child in sorted(ids, key=lambda s: (len(s), s)):
            try:
                broker_id = int(child)
                data, stat = self.zk.get(zkdata.broker_path(broker_id))
                info = zkdata.decode_broker(broker_id, data)
            except NoNodeError:
                continue
            except (ValueError, zkdata.ZkDataError) as e:
                log.error("ignoring broker registration %s: %s", child, e)
                continue
            brokers.append(controller.Broker(broker_id, info.host, info.port, info.rack,
                                             stat.czxid, frozenset(info.lost_replicas),
                                             info.clean_shutdown, info.other_endpoints))
        return tuple(sorted(brokers))

    def _topic_names(self) -> list[str]:
        watch = self._watcher("topics", self._on_topics_changed)
        return sorted(self.zk.get_children(zkdata.BROKER_TOPICS, watch=watch))

    def _read_topic(self, name: str) -> controller.TopicSnapshot | None:
        self._watched_topics.add(name)
        try:
            data, stat = self.zk.get(zkdata.topic_path(name),
                                     watch=self._watcher(("topic", name),
                                                         lambda: self._on_topic_data(name)))
            assignment = zkdata.decode_assignment(name, data)
            topic_id = zkdata.decode_topic_id(name, data, stat.czxid)
        except NoNodeError:
            self._watched_topics.discard(name)
            return None
        except zkdata.ZkDataError as e:
            log.error("ignoring topic %s: %s", name, e)
            return None
        except KazooException:
            self._unseen_topic(name)
            raise
        try:
            config = self._read_topic_config(name)
        except KazooException:
            self._unseen_topic(name)
            raise
        return controller.TopicSnapshot(name, {p: tuple(r) for p, r in assignment.items()},
                               stat.version, config, topic_id)

    def _unseen_topic(self, name: str) -> None:
        """A topic whose read failed: the topics' handler reads it again, as a topic
        it has not seen (whichever handler read it)."""
        self._watched_topics.discard(name)
        self._read_later("topics", self._on_topics_changed)

    def _read_topic_config(self, name: str) -> dict[str, str]:
        path = zkdata.topic_config_path(name)
        watch = self._watcher(("config", name), lambda: self._on_topic_config(name))
        if self.zk.exists(path, watch=watch) is None:
            return {}
        try:
            return zkdata.decode_topic_config(name, self.zk.get(path)[0])
        except NoNodeError:
            return {}
        except zkdata.ZkDataError as e:
            log.error("%s", e)
            return {}

    def _read_states(self, partitions: list[tuple[str, int]]) -> dict:
        """Partition states, read pipelined (thousands of partitions on failover)."""
        states = {}
        for start in range(0, len(partitions), READ_PIPELINE_MAX):
            chunk = partitions[start:start + READ_PIPELINE_MAX]
            self.zk.check_available("get", "partition states")
            pending = [(tp, self.zk.get_async(zkdata.partition_state_path(*tp))) for tp in chunk]
            for tp, result in pending:
                try:
                    data, stat = self.zk.wait("get", zkdata.partition_state_path(*tp), result)
                    states[tp] = zkdata.decode_partition_state(data, stat.version,
                                                          f"{tp[0]}-{tp[1]} state")
                except NoNodeError:
                    continue
                except zkdata.ZkDataError as e:
                    log.error("%s", e)
        return states

    def _read_reassignments(self) -> tuple[dict, int]:
        watch = self._watcher("reassign", self._on_reassignments_changed)
        if self.zk.exists(zkdata.REASSIGN_PARTITIONS, watch=watch) is None:
            return {}, -1
        try:
            data, stat = self.zk.get(zkdata.REASSIGN_PARTITIONS)
        except NoNodeError:
            return {}, -1
        try:
            moves = zkdata.decode_reassignment(data)
        except zkdata.ZkDataError as e:
            log.error("%s", e)
            moves = {}
        return {tp: tuple(r) for tp, r in moves.items()}, stat.version

    def _read_election(self) -> controller.ElectionRequested | None:
        watch = self._watcher("election", self._on_election_changed)
        if self.zk.exists(zkdata.PREFERRED_REPLICA_ELECTION, watch=watch) is None:
            return None
        try:
            data, stat = self.zk.get(zkdata.PREFERRED_REPLICA_ELECTION)
        except NoNodeError:
            return None
        try:
            return decode_election(data, stat.version)
        except zkdata.ZkDataError as e:
            log.error("%s; deleting it", e)
            self.zk.delete(zkdata.PREFERRED_REPLICA_ELECTION, version=stat.version)
            return None

    def _read_deletions(self) -> tuple[str, ...]:
        watch = self._watcher("deletions", self._on_deletions_changed)
        return tuple(sorted(self.zk.get_children(zkdata.DELETE_TOPICS, watch=watch)))

    def _drain_isr_notifications(self) -> list[tuple[str, int]]:
        """Read and delete the ISR change notifications; the partitions they name."""
        watch = self._watcher("isr", self._on_isr_notifications)
        children = sorted(self.zk.get_children(zkdata.ISR_CHANGE_NOTIFICATION, watch=watch))
        partitions: set[tuple[str, int]] = set()
        for child in children:
            path = f"{zkdata.ISR_CHANGE_NOTIFICATION}/{child}"
            try:
                partitions.update(zkdata.decode_partition_list(self.zk.get(path)[0], path))
            except NoNodeError:
                continue
            except zkdata.ZkDataError as e:
                log.error("%s", e)
            self._fenced([controller.ZkDelete(path)])
        return sorted(partitions)

    def _drain_log_dir_events(self) -> list[tuple[int, tuple]]:
        """Read and delete the log dir event notifications: (broker, partitions) each."""
        watch = self._watcher("log_dir_events", self._on_log_dir_events)
        self.zk.ensure_path(zkdata.LOG_DIR_EVENT_NOTIFICATION)
        children = sorted(self.zk.get_children(zkdata.LOG_DIR_EVENT_NOTIFICATION, watch=watch))
        events = []
        for child in children:
            path = f"{zkdata.LOG_DIR_EVENT_NOTIFICATION}/{child}"
            try:
                broker_id, partitions = zkdata.decode_log_dir_event(self.zk.get(path)[0], path)
                events.append((broker_id, tuple(sorted(partitions))))
            except NoNodeError:
                continue
            except zkdata.ZkDataError as e:
                log.error("%s", e)
            self._fenced([controller.ZkDelete(path)])
        return events

    # ---------------------------------------------------------------- watch handlers

    def _on_log_dir_events(self) -> None:
        for broker_id, partitions in self._drain_log_dir_events():
            self._run(controller.ReplicasOffline(broker_id, partitions))

    def _on_brokers_changed(self) -> None:
        self._run(controller.BrokersChanged(self._read_brokers()))

    def _on_topics_changed(self) -> None:
        names = set(self._topic_names())
        for name in sorted(names - self._watched_topics):
            snapshot = self._read_topic(name)
            if snapshot is not None:
                self._run(controller.TopicChanged(snapshot))
        for name in sorted(self._watched_topics - names):
            self._watched_topics.discard(name)
            self._run(controller.TopicRemoved(name))

    def _on_topic_data(self, name: str) -> None:
        if name not in self._watched_topics:
            return
        snapshot = self._read_topic(name)
        if snapshot is None:
            self._run(controller.TopicRemoved(name))
        else:
            self._run(controller.TopicChanged(snapshot))

    def _on_topic_config(self, name: str) -> None:
        if name in self._watched_topics:
            self._run(controller.TopicConfigChanged(name, self._read_topic_config(name)))

    def _on_reassignments_changed(self) -> None:
        moves, version = self._read_reassignments()
        self._run(controller.ReassignmentRequested(moves, version))

    def _on_election_changed(self) -> None:
        election = self._read_election()
        if election is not None:
            self._run(election)

    def _on_deletions_changed(self) -> None:
        topics = self._read_deletions()
        if topics:
            self._run(controller.TopicDeletionRequested(topics))

    def _on_isr_notifications(self) -> None:
        partitions = self._drain_isr_notifications()
        if partitions:
            states = self._read_states(partitions)
            self._run(controller.IsrChanged({tp: states.get(tp) for tp in partitions}))

    # ---------------------------------------------------------------- effects

    def _run(self, event) -> None:
        """Step the core with ``event`` and perform its effects in order; results of
        coordinator ops are fed back before anything else."""
        self._queue.append(event)
        if self._running:
            return
        self._running = True
        try:
            steps = 0
            while self._queue and self._core is not None:
                steps += 1
                assert steps <= EVENTS_PER_RUN_MAX, "controller effects loop does not settle"
                core = self._core
                event = self._queue.popleft()
                # The core is pure: it fails only on a bug, which stops the broker
                # (node.broker.failures) and ends its session, so another broker's
                # controller rebuilds the state from the coordinator.
                effects = core.step(event)
                for effect in effects:
                    self._perform(effect)
                    if self._core is not core:
                        break
        finally:
            self._running = False

    def _perform(self, effect) -> None:
        if isinstance(effect, controller.ZkOps):
            self._queue.append(controller.ZkOpsDone(effect.op_id, tuple(
                self._fenced([op]) for op in effect.ops)))
        elif isinstance(effect, controller.SendRequest):
            self._send_request(effect)
        elif isinstance(effect, controller.ReplyControlledShutdown):
            reply = self._replies.pop(effect.request_id, None)
            if reply is not None:
                reply(effect.body)
        elif isinstance(effect, controller.LogLine):
            log.log(logging.getLevelName(effect.level if effect.level != "WARN" else "WARNING"),
                    "%s", effect.message)
        elif isinstance(effect, controller.Resign):
            self._resign(effect.reason)
            self._want_election = not self._stopped
        else:  # pragma: no cover
            raise AssertionError(f"unknown controller effect {effect!r}")

    def _send_request(self, effect: controller.SendRequest) -> None:
        term = self._term
        tag = effect.tag

        def on_response(response) -> None:
            if tag is None:
                if response is not None and response.body.get("error", 0) not in (0, None):
                    log.warning("broker %d answered %s with %s", effect.broker_id,
                                effect.api_key, errors.name_of(response.body.get("error")))
                return
            body = None if response is None else response.body
            self._post(lambda: self._if_term(
                term, lambda: self._run(controller.BrokerResponse(tag, body))))

        self._send(effect.endpoint, effect.api_key, effect.body, on_response)

    def _fenced(self, ops: list) -> controller.ZkResult:
        """One op in a multi behind a check of /controller_epoch's version."""
        op = ops[0]
        try:
            if isinstance(op, controller.ZkCreate) and op.makepath:
                parent = op.path.rsplit("/", 1)[0]
                if parent:
                    self.zk.ensure_path(parent)
            txn = self.zk.transaction()
            txn.check(zkdata.CONTROLLER_EPOCH, self._epoch_zk_version)
            if isinstance(op, controller.ZkCreate):
                txn.create(op.path, op.data)
            elif isinstance(op, controller.ZkSetData):
                txn.set_data(op.path, op.data, version=op.version)
            elif isinstance(op, controller.ZkDelete):
                if op.recursive:
                    for child in self._subtree(op.path):
                        txn.delete(child)
                txn.delete(op.path, version=op.version)
            else:  # pragma: no cover
                raise AssertionError(op)
            results = txn.commit()
        except NoNodeError:
            return controller.ZkResult("NoNode")       # the subtree walk found nothing
        except KazooException as e:
            return controller.ZkResult(type(e).__name__)
        check, last = results[0], results[-1]
        if isinstance(check, Exception) and not isinstance(check, RolledBackError):
            return controller.ZkResult("Fenced")
        failure = next((r for r in results[1:] if isinstance(r, Exception)
                        and not isinstance(r, RolledBackError)), None)
        if failure is None:
            version = last.version if hasattr(last, "version") else 0
            return controller.ZkResult(
                None, version if not isinstance(op, controller.ZkDelete) else -1)
        name = _ERROR_NAMES.get(type(failure), type(failure).__name__)
        if isinstance(op, controller.ZkDelete) and name != "BadVersion":
            return controller.ZkResult(name)
        try:
            data, stat = self.zk.get(op.path)
            return controller.ZkResult(name, current_data=data, current_version=stat.version)
        except NoNodeError:
            return controller.ZkResult(name)
        except KazooException as e:
            return controller.ZkResult(type(e).__name__)

    def _subtree(self, path: str) -> list[str]:
        """Every descendant of ``path``, deepest first."""
        found: list[str] = []
        stack = [path]
        while stack:
            node = stack.pop()
            for child in self.zk.get_children(node):
                child_path = f"{node}/{child}"
                found.append(child_path)
                stack.append(child_path)
                assert len(found) <= TREE_NODES_MAX
        found.sort(key=lambda p: p.count("/"), reverse=True)
        return found


def decode_election(data: bytes, zk_version: int = -1) -> controller.ElectionRequested:
    """/admin/preferred_replica_election -> ElectionRequested. No "partitions" (or null)
    means every partition."""
    try:
        value = json.loads(data.decode("utf-8")) if data else {}
    except (UnicodeDecodeError, ValueError) as e:
        raise zkdata.ZkDataError(f"preferred_replica_election: not JSON ({e})") from None
    if not isinstance(value, dict):
        raise zkdata.ZkDataError(f"preferred_replica_election: bad value {value!r}")
    kind = zkdata.decode_election_type(data) if data else "preferred"
    if value.get("partitions") is None:
        return controller.ElectionRequested(None, kind, zk_version)
    partitions = zkdata.decode_partition_list(data, "preferred_replica_election")
    return controller.ElectionRequested(tuple(sorted(set(partitions))), kind, zk_version)
