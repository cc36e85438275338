"""The group coordinator's runtime on a broker: one ``GroupShard`` (the pure core,
``node.core.groups.shard``) per ``__consumer_offsets`` partition this broker leads.

Leadership (``sync``, called after LeaderAndIsr, StopReplica and on the broker's tick):
- a partition this broker now leads is LOADING: its log is read from its start to its
  end in chunks of ``offsets.load.buffer.size`` bytes, one chunk per loop turn (the
  loop keeps serving meanwhile), each record replayed into a new shard; then
  ``loaded()`` and the partition is ACTIVE. Group requests meanwhile get
  COORDINATOR_LOAD_IN_PROGRESS;
- a partition it no longer leads (or leads in a new leader epoch: loaded again) is
  unloaded: every parked request and every answer waiting for its records is answered
  NOT_COORDINATOR; a group of a partition not led here gets NOT_COORDINATOR.

Writes: a ``Result``'s records are appended as one batch by the leader, with acks=all
semantics (the replication core completes them once the HW passes them, or fails them
after ``offsets.commit.timeout.ms``). Its replies go out only then; a Result without
records waits behind the earlier ones still uncommitted, so answers leave in order and
never show state that may be lost. A failed append answers every waiting reply with the
mapped error (Kafka's CoordinatorOperationExceptionHelper: NOT_ENOUGH_REPLICAS and
REQUEST_TIMED_OUT -> COORDINATOR_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER and
KAFKA_STORAGE_ERROR -> NOT_COORDINATOR, too-large records -> UNKNOWN_SERVER_ERROR) and
rebuilds the shard from the log (LOADING again).

Timers: one loop timer per shard at its ``next_deadline_ms()``, moved after every call.
``metadata_changed`` is passed the topics (name -> (id, partitions)) whenever the
metadata cache's change.
"""
from __future__ import annotations

import dataclasses
import logging
import struct
import time
from collections import deque
from typing import Callable

from node.broker.failures import STORAGE_ERRORS
from node.broker.groups import bodies
from node.broker.groups.offsets_topic import OFFSETS_TOPIC, OffsetsTopicCreator, partition_for
from node.broker.loop import now_ms
from node.core.groups.config import GroupConfig
from node.core.groups.shard import GroupShard
from node.core.replication import CompleteProduce, Role
from node.kafka.protocol import KafkaProtocolError
from node.wire import errors
from node.wire.errors import ErrorCode
from shm import batch
from shm.batch import CorruptRecordError
from shm.config import BATCH_RECORDS_MAX

logger = logging.getLogger("node.broker.server")

# What a failed append of a shard's records is answered with (Kafka's mapping).
_APPEND_ERRORS = {
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.CORRUPT_MESSAGE: ErrorCode.UNKNOWN_SERVER_ERROR,
}
# A record the shard cannot read while loading is skipped (logged), never fatal.
_REPLAY_ERRORS = (ValueError, KeyError, IndexError, TypeError, struct.error,
                  KafkaProtocolError)


def group_config(config):
    """The shard's ``GroupConfig`` from the broker's keys: every GroupConfig field
    named as a broker key (dots -> underscores) takes the broker's value."""
    values = {f.name: getattr(config, f.name) for f in dataclasses.fields(GroupConfig)
              if hasattr(config, f.name)}
    return GroupConfig(**values)


@dataclasses.dataclass(eq=False)
class Request:
    """A request given to a shard: its reply's token."""

    api_key: int
    body: dict
    answer: Callable[[dict], None]
    answered: bool = False

    def send(self, body: dict) -> None:
        if not self.answered:
            self.answered = True
            self.answer(body)

    def fail(self, code: int) -> None:
        self.send(bodies.error_body(self.api_key, self.body, code))


@dataclasses.dataclass(eq=False)
class Waiting:
    """A Result's replies waiting for its records (or for earlier ones)."""

    replies: list
    committed: bool


@dataclasses.dataclass(eq=False)
class Hosted:
    """One __consumer_offsets partition this broker leads."""

    partition: int
    leader_epoch: int
    shard: object = None
    loading: bool = True
    load_offset: int = 0
    waiting: deque = dataclasses.field(default_factory=deque)
    timer: int | None = None
    deadline: int | None = None
    gone: bool = False
    started_ms: int = 0


@dataclasses.dataclass(eq=False)
class Append:
    """The request id of a shard's append in the replication core."""

    hosted: Hosted
    waiting: Waiting


class GroupRuntime:
    def __init__(self, apis) -> None:
        self.apis = apis
        self.loop = apis.purgatory.loop
        self.config = apis.config
        self.replicas = apis.replicas
        self.metadata = apis.metadata
        self.creator = OffsetsTopicCreator(apis.zk, apis.config, apis.metadata)
        self.hosted: dict[int, Hosted] = {}
        self._group_config = None
        self._topics: dict[str, tuple[str, int]] | None = None

    @property
    def group_config(self):
        if self._group_config is None:
            self._group_config = group_config(self.config)
        return self._group_config

    # ================================================================ routing

    def partitions(self) -> int:
        """How many partitions __consumer_offsets has (the configured count before it
        exists, as Kafka)."""
        return self.creator.partitions() or self.config.offsets_topic_num_partitions

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self.partitions())

    def state_of(self, partition: int) -> int:
        """NONE if this broker serves the partition's groups now, else the error."""
        hosted = self.hosted.get(partition)
        if hosted is None:
            return ErrorCode.NOT_COORDINATOR
        if hosted.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NONE

    def call(self, partition: int, api_key: int, version: int, body: dict,
             answer: Callable[[dict], None], client_id: str = "",
             client_host: str = "") -> None:
        """Run one request on the partition's shard; ``answer(body)`` exactly once.
        ``client_id``/``client_host``: the request's, kept with classic members."""
        request = Request(api_key, body, answer)
        error = self.state_of(partition)
        if error:
            if error == ErrorCode.NOT_COORDINATOR and not self.creator.exists():
                self.creator.ensure()
            request.fail(error)
            return
        hosted = self.hosted[partition]
        result = hosted.shard.handle(now_ms(), api_key, version, body, request,
                                     client_id=client_id, client_host=client_host)
        self._apply(hosted, result)

    def active_partitions(self) -> list[int]:
        return sorted(self.hosted)

    # ================================================================ leadership

    def sync(self) -> None:
        """Load the partitions this broker now leads, unload the others."""
        led: dict[int, int] = {}
        for partition in range(self.creator.partitions() or 0):
            part = self.replicas.partitions.get((OFFSETS_TOPIC, partition))
            if part is not None and part.core.role is Role.LEADER and \
                    not self.replicas.is_offline(part):
                led[partition] = part.core.leader_epoch
        # also partitions hosted beyond a count the cache no longer shows
        for partition, hosted in list(self.hosted.items()):
            if led.get(partition) != hosted.leader_epoch:
                self._unload(hosted, "no longer the leader" if partition not in led
                             else "a new leader epoch")
        for partition, epoch in led.items():
            if partition not in self.hosted:
                self._load(partition, epoch)

    def _unload(self, hosted: Hosted, why: str) -> None:
        hosted.gone = True
        self.hosted.pop(hosted.partition, None)
        self.loop.cancel(hosted.timer)
        replies = []
        if hosted.shard is not None and not hosted.loading:
            replies = hosted.shard.unload()
        for waiting in hosted.waiting:
            for reply in waiting.replies:
                reply.token.fail(ErrorCode.NOT_COORDINATOR)
        hosted.waiting.clear()
        for reply in replies:
            reply.token.send(reply.body)
        logger.info("%s-%d: group coordinator unloaded (%s)", OFFSETS_TOPIC,
                    hosted.partition, why)

    def _load(self, partition: int, leader_epoch: int) -> None:
        part = self.replicas.partitions[(OFFSETS_TOPIC, partition)]
        hosted = Hosted(partition, leader_epoch,
                        shard=GroupShard(partition, self.group_config),
                        load_offset=part.log.log_start_offset)
        self.hosted[partition] = hosted
        logger.info("%s-%d: loading the group coordinator (leader epoch %d, offsets %d to "
                    "%d)", OFFSETS_TOPIC, partition, leader_epoch, hosted.load_offset,
                    part.log.log_end_offset)
        hosted.started_ms = now_ms()
        self.loop.call_later(0, lambda: self._load_step(hosted))

    def _load_step(self, hosted: Hosted) -> None:
        """Replay one chunk of the log; then schedule the next, or finish."""
        if hosted.gone:
            return
        part = self.replicas.partitions.get((OFFSETS_TOPIC, hosted.partition))
        if part is None or part.core.role is not Role.LEADER or \
                part.core.leader_epoch != hosted.leader_epoch:
            self.sync()
            return
        log = part.log
        end = log.log_end_offset
        try:
            if hosted.load_offset < log.log_start_offset:
                hosted.load_offset = log.log_start_offset
            if hosted.load_offset < end:
                view = log.read(hosted.load_offset, self.config.offsets_load_buffer_size)
                hosted.load_offset = self._replay(hosted, view, hosted.load_offset)
        except STORAGE_ERRORS as e:
            logger.error("%s-%d: loading the group coordinator failed: %s; giving up "
                         "leadership of its groups until the next leader change",
                         OFFSETS_TOPIC, hosted.partition, e)
            self._unload(hosted, f"the load failed: {e}")
            return
        if hosted.load_offset < end:
            self.loop.call_later(0, lambda: self._load_step(hosted))
            return
        hosted.loading = False
        logger.info("%s-%d: group coordinator loaded in %d ms (to offset %d)",
                    OFFSETS_TOPIC, hosted.partition, now_ms() - hosted.started_ms, end)
        self._topics = None
        self._apply(hosted, hosted.shard.loaded(now_ms()))
        self._notify_metadata(hosted)

    def _replay(self, hosted: Hosted, view, offset: int) -> int:
        """Replay the whole batches in ``view``; the offset after the last one."""
        if not len(view):
            raise CorruptRecordError(f"no batch at offset {offset}")
        next_offset = offset
        for parsed in batch.parse_batches(view):
            for record_offset, _, key, value in parsed.records():
                if record_offset < offset:
                    continue
                if key is None:
                    logger.warning("%s-%d: skipping a record without a key at offset %d",
                                   OFFSETS_TOPIC, hosted.partition, record_offset)
                    continue
                try:
                    hosted.shard.replay(record_offset, key, value)
                except _REPLAY_ERRORS as e:
                    logger.error("%s-%d: skipping an unreadable record at offset %d: %s",
                                 OFFSETS_TOPIC, hosted.partition, record_offset, e)
            next_offset = parsed.header.next_offset
        if next_offset <= offset:
            raise CorruptRecordError(f"the batches read at offset {offset} end at "
                                     f"{next_offset}")
        return next_offset

    # ================================================================ results

    def _apply(self, hosted: Hosted, result) -> None:
        if hosted.gone:      # e.g. an unload inside a shard call: answer what it gave
            for reply in result.replies:
                reply.token.fail(ErrorCode.NOT_COORDINATOR)
            return
        if result.records:
            waiting = Waiting(list(result.replies), committed=False)
            hosted.waiting.append(waiting)
            self._append(hosted, waiting, result.records)
        elif hosted.waiting:
            hosted.waiting.append(Waiting(list(result.replies), committed=True))
        else:
            for reply in result.replies:
                reply.token.send(reply.body)
        self._schedule(hosted)

    def _append(self, hosted: Hosted, waiting: Waiting, records) -> None:
        part = self.replicas.partitions.get((OFFSETS_TOPIC, hosted.partition))
        if part is None or part.core.role is not Role.LEADER:
            self._failed(hosted, ErrorCode.NOT_LEADER_OR_FOLLOWER, "not the leader")
            return
        error = part.core.check_produce(-1)
        if error:
            self._failed(hosted, error, "cannot append")
            return
        now = now_ms()
        for start in range(0, len(records), BATCH_RECORDS_MAX):
            chunk = records[start:start + BATCH_RECORDS_MAX]
            last = start + BATCH_RECORDS_MAX >= len(records)
            data = batch.build_batch([v for _, v in chunk], [k for k, _ in chunk],
                                     timestamps_ms=self._wall_ms())
            try:
                info = part.log.append_as_leader(data, part.core.leader_epoch)
            except STORAGE_ERRORS as e:
                code = errors.code_for_exception(e)
                if isinstance(e, OSError):
                    code = ErrorCode.KAFKA_STORAGE_ERROR
                    self.replicas.storage_failed(part, e)
                self._failed(hosted, code, str(e))
                return
            request_id = Append(hosted, waiting) if last else None
            if request_id is None:
                continue     # the last chunk's completion completes them all
            self.apis.purgatory.wake(part.key, leo_moved=True)
            effects = part.core.on_leader_append(
                request_id, -1, info.first_offset, info.last_offset,
                self.config.offsets_commit_timeout_ms, now, part.view)
            self.replicas.apply_effects(part, effects)

    @staticmethod
    def _wall_ms() -> int:
        return int(time.time() * 1000)

    def on_append_complete(self, append: Append, effect: CompleteProduce) -> None:
        """The replication core's answer for a shard's append."""
        hosted = append.hosted
        if hosted.gone or self.hosted.get(hosted.partition) is not hosted:
            return          # unloaded meanwhile: its replies were answered then
        if effect.error:
            self._failed(hosted, effect.error, errors.name_of(effect.error))
            return
        append.waiting.committed = True
        while hosted.waiting and hosted.waiting[0].committed:
            for reply in hosted.waiting.popleft().replies:
                reply.token.send(reply.body)

    def _failed(self, hosted: Hosted, code: int, why: str) -> None:
        """An append failed: answer every waiting reply with the mapped error and
        rebuild the shard from the log (or unload it if this broker no longer leads)."""
        answer = _APPEND_ERRORS.get(code, code)
        logger.warning("%s-%d: writing group records failed (%s: %s): answering %d "
                       "requests %s and reloading", OFFSETS_TOPIC, hosted.partition,
                       errors.name_of(code), why,
                       sum(len(w.replies) for w in hosted.waiting), errors.name_of(answer))
        for waiting in hosted.waiting:
            for reply in waiting.replies:
                reply.token.fail(answer)
        hosted.waiting.clear()
        self._unload(hosted, "rebuilding from the log")
        self.sync()

    # ================================================================ timers, metadata

    def _schedule(self, hosted: Hosted) -> None:
        if hosted.gone or hosted.loading:
            return
        deadline = hosted.shard.next_deadline_ms()
        if deadline == hosted.deadline and hosted.timer is not None:
            return
        self.loop.cancel(hosted.timer)
        hosted.timer = None
        hosted.deadline = deadline
        if deadline is not None:
            hosted.timer = self.loop.call_later(max(0, deadline - now_ms()),
                                                lambda: self._tick(hosted))

    def _tick(self, hosted: Hosted) -> None:
        hosted.timer = None
        hosted.deadline = None
        if hosted.gone or hosted.loading:
            return
        self._apply(hosted, hosted.shard.tick(now_ms()))

    def metadata_updated(self) -> None:
        """After an UpdateMetadata: leadership and the topics the shards assign."""
        self.sync()
        topics = self._current_topics()
        if topics == self._topics:
            return
        self._topics = topics
        for hosted in list(self.hosted.values()):
            self._notify_metadata(hosted)

    def _current_topics(self) -> dict[str, tuple[str, int]]:
        md = self.metadata
        return {name: (md.topic_ids.get(name, ""), len(parts))
                for name, parts in md.topics.items()}

    def _notify_metadata(self, hosted: Hosted) -> None:
        if hosted.gone or hosted.loading:
            return
        if self._topics is None:
            self._topics = self._current_topics()
        self._apply(hosted, hosted.shard.metadata_changed(dict(self._topics)))
