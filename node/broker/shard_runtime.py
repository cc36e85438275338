"""The runtime of a coordinator built from pure shards on a broker (Kafka's
CoordinatorRuntime): one shard per partition of the coordinator's internal topic that this
broker leads. The group coordinator (``node.broker.groups.runtime``, one ``GroupShard`` per
``__consumer_offsets`` partition) and the transaction coordinator
(``node.broker.txn.runtime``, one ``TxnShard`` per ``__transaction_state`` partition) are
both a ``ShardRuntime`` with their own shard, error bodies and hooks.

Leadership (``sync``, called after LeaderAndIsr, StopReplica and on the broker's tick):
- a partition this broker now leads is LOADING: its log is read from its start to its
  end in chunks of ``load_buffer_size`` bytes, one chunk per loop turn (the loop keeps
  serving meanwhile), each record replayed into a new shard; then ``loaded()`` and the
  partition is ACTIVE. Requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS;
- a partition it no longer leads (or leads in a new leader epoch: loaded again) is
  unloaded: every parked request and every answer waiting for its records is answered
  NOT_COORDINATOR; a key of a partition not led here gets NOT_COORDINATOR.

Writes: a ``Result``'s records are appended as one batch by the leader, with acks=all
semantics (the replication core completes them once the HW passes them, or fails them
after ``commit_timeout_ms``). Its replies go out only then (``released``); a Result
without records waits behind the earlier ones still uncommitted, so answers leave in
order and never show state that may be lost. A failed append answers every waiting reply
with the mapped error (Kafka's CoordinatorOperationExceptionHelper: NOT_ENOUGH_REPLICAS
and REQUEST_TIMED_OUT -> COORDINATOR_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER and
KAFKA_STORAGE_ERROR -> NOT_COORDINATOR, too-large records -> UNKNOWN_SERVER_ERROR) and
rebuilds the shard from the log (LOADING again).

Timers: one loop timer per shard at its ``next_deadline_ms()``, moved after every call.
"""
from __future__ import annotations

import dataclasses
import logging
import struct
import time
from collections import deque
from typing import Callable

from node.broker.failures import STORAGE_ERRORS
from node.broker.loop import now_ms
from node.core.replication import CompleteProduce, Role
from node.kafka.protocol import KafkaProtocolError
from node.wire import errors
from node.wire.errors import ErrorCode
from shm import batch, control
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


def config_from_broker(cls, config):
    """A shard's config dataclass ``cls`` from the broker's keys: every field named as a
    broker key (dots -> underscores) takes the broker's value."""
    values = {f.name: getattr(config, f.name) for f in dataclasses.fields(cls)
              if hasattr(config, f.name)}
    return cls(**values)


@dataclasses.dataclass(eq=False)
class Request:
    """A request given to a shard: its reply's token."""

    api_key: int
    body: dict
    answer: Callable[[dict], None]
    error_body: Callable[[int, dict, int], dict]    # (api key, body, code) -> answer
    answered: bool = False

    def send(self, body: dict) -> None:
        if not self.answered:
            self.answered = True
            self.answer(body)

    def fail(self, code: int) -> None:
        self.send(self.error_body(self.api_key, self.body, code))


@dataclasses.dataclass(eq=False)
class Waiting:
    """A Result waiting for its records (or for earlier ones) before it is released."""

    result: object
    committed: bool


@dataclasses.dataclass(eq=False)
class Hosted:
    """One partition of the internal topic this broker leads."""

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

    runtime: "ShardRuntime"
    hosted: Hosted
    waiting: Waiting


class ShardRuntime:
    """The shell around one pure shard per led partition of ``topic``. A subclass gives
    ``new_shard``, ``error_body`` and the config keys; ``loaded_hook`` and ``released``
    are its hooks."""

    topic = ""
    what = "coordinator"                 # for the log: "group coordinator", ...

    def __init__(self, apis, creator) -> None:
        self.apis = apis
        self.loop = apis.purgatory.loop
        self.config = apis.config
        self.replicas = apis.replicas
        self.metadata = apis.metadata
        self.creator = creator            # the internal topic's InternalTopicCreator
        self.hosted: dict[int, Hosted] = {}

    # ---------------------------------------------------------------- the subclass's

    def new_shard(self, partition: int, leader_epoch: int):
        raise NotImplementedError

    def error_body(self, api_key: int, body: dict, code: int) -> dict:
        raise NotImplementedError

    @property
    def load_buffer_size(self) -> int:
        raise NotImplementedError

    @property
    def commit_timeout_ms(self) -> int:
        raise NotImplementedError

    def loaded_hook(self, hosted: Hosted) -> None:
        """After a partition finished loading (and its ``loaded()`` result applied)."""

    def released(self, hosted: Hosted, result) -> None:
        """A Result whose records (and every earlier one's) are committed: its replies go."""
        for reply in result.replies:
            reply.token.send(reply.body)

    # ================================================================ routing

    def partitions(self) -> int:
        """How many partitions the topic has (the configured count before it exists)."""
        return self.creator.partitions() or self.creator.num_partitions()

    def state_of(self, partition: int) -> int:
        """NONE if this broker serves the partition's keys now, else the error."""
        hosted = self.hosted.get(partition)
        if hosted is None:
            return ErrorCode.NOT_COORDINATOR
        if hosted.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NONE

    def call(self, partition: int, api_key: int, version: int, body: dict,
             answer: Callable[[dict], None], **extra) -> None:
        """Run one request on the partition's shard; ``answer(body)`` exactly once.
        ``extra``: keyword arguments of the shard's ``handle``."""
        request = Request(api_key, body, answer, self.error_body)
        error = self.state_of(partition)
        if error:
            if error == ErrorCode.NOT_COORDINATOR and not self.creator.exists():
                self.creator.ensure()
            request.fail(error)
            return
        hosted = self.hosted[partition]
        result = hosted.shard.handle(now_ms(), api_key, version, body, request, **extra)
        self._apply(hosted, result)

    def active_partitions(self) -> list[int]:
        return sorted(self.hosted)

    # ================================================================ leadership

    def sync(self) -> None:
        """Load the partitions this broker now leads, unload the others."""
        led: dict[int, int] = {}
        for partition in range(self.creator.partitions() or 0):
            part = self.replicas.partitions.get((self.topic, partition))
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
            for reply in waiting.result.replies:
                reply.token.fail(ErrorCode.NOT_COORDINATOR)
        hosted.waiting.clear()
        for reply in replies:
            reply.token.send(reply.body)
        logger.info("%s-%d: %s unloaded (%s)", self.topic, hosted.partition, self.what,
                    why)

    def _load(self, partition: int, leader_epoch: int) -> None:
        part = self.replicas.partitions[(self.topic, partition)]
        hosted = Hosted(partition, leader_epoch,
                        shard=self.new_shard(partition, leader_epoch),
                        load_offset=part.log.log_start_offset)
        self.hosted[partition] = hosted
        logger.info("%s-%d: loading the %s (leader epoch %d, offsets %d to %d)",
                    self.topic, partition, self.what, leader_epoch, hosted.load_offset,
                    part.log.log_end_offset)
        hosted.started_ms = now_ms()
        self.loop.call_later(0, lambda: self._load_step(hosted))

    def _load_step(self, hosted: Hosted) -> None:
        """Replay one chunk of the log; then schedule the next, or finish."""
        if hosted.gone:
            return
        part = self.replicas.partitions.get((self.topic, hosted.partition))
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
                view = log.read(hosted.load_offset, self.load_buffer_size)
                hosted.load_offset = self._replay(hosted, view, hosted.load_offset)
        except STORAGE_ERRORS as e:
            logger.error("%s-%d: loading the %s failed: %s; giving up its keys until "
                         "the next leader change", self.topic, hosted.partition, self.what,
                         e)
            self._unload(hosted, f"the load failed: {e}")
            return
        if hosted.load_offset < end:
            self.loop.call_later(0, lambda: self._load_step(hosted))
            return
        hosted.loading = False
        logger.info("%s-%d: %s loaded in %d ms (to offset %d)", self.topic,
                    hosted.partition, self.what, now_ms() - hosted.started_ms, end)
        self._apply(hosted, hosted.shard.loaded(now_ms()))
        self.loaded_hook(hosted)

    def _replay(self, hosted: Hosted, view, offset: int) -> int:
        """Replay the whole batches in ``view``; the offset after the last one."""
        if not len(view):
            raise CorruptRecordError(f"no batch at offset {offset}")
        next_offset = offset
        replay_marker = getattr(hosted.shard, "replay_marker", None)
        for parsed in batch.parse_batches(view):
            header = parsed.header
            for record_offset, _, key, value in parsed.records():
                if record_offset < offset:
                    continue
                if header.control:      # a transaction marker (txgroup: groups' shards)
                    if replay_marker is not None:
                        try:
                            commit, _ = control.parse_record(key, value)
                            replay_marker(record_offset, header.producer_id, commit)
                        except CorruptRecordError as e:
                            logger.error("%s-%d: skipping an unreadable marker at offset %d: "
                                         "%s", self.topic, hosted.partition, record_offset, e)
                    continue
                if key is None:
                    logger.warning("%s-%d: skipping a record without a key at offset %d",
                                   self.topic, hosted.partition, record_offset)
                    continue
                try:
                    if header.transactional:    # a transaction's records (txgroup)
                        hosted.shard.replay(record_offset, key, value,
                                            producer_id=header.producer_id)
                    else:
                        hosted.shard.replay(record_offset, key, value)
                except _REPLAY_ERRORS as e:
                    logger.error("%s-%d: skipping an unreadable record at offset %d: %s",
                                 self.topic, hosted.partition, record_offset, e)
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
            waiting = Waiting(result, committed=False)
            hosted.waiting.append(waiting)
            self._append(hosted, waiting, result.records, getattr(result, "producer", None))
        elif hosted.waiting:
            hosted.waiting.append(Waiting(result, committed=True))
        else:
            self.released(hosted, result)
        self._schedule(hosted)

    def _append(self, hosted: Hosted, waiting: Waiting, records, producer=None) -> None:
        """``producer``: (id, epoch) to write the records as that producer's
        transactional batches (a group shard's TxnOffsetCommit; sequence 0 as Kafka's
        coordinator writes them), else None."""
        part = self.replicas.partitions.get((self.topic, hosted.partition))
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
            txn = {} if producer is None else {
                "producer_id": producer[0], "producer_epoch": producer[1],
                "base_sequence": 0, "transactional": True}
            data = batch.build_batch([v for _, v in chunk], [k for k, _ in chunk],
                                     timestamps_ms=self._wall_ms(), **txn)
            try:
                info = part.log.append_as_leader(data, part.core.leader_epoch)
            except STORAGE_ERRORS as e:
                code = errors.code_for_exception(e)
                if isinstance(e, OSError):
                    code = ErrorCode.KAFKA_STORAGE_ERROR
                    self.replicas.storage_failed(part, e)
                self._failed(hosted, code, str(e))
                return
            request_id = Append(self, hosted, waiting) if last else None
            if request_id is None:
                continue     # the last chunk's completion completes them all
            self.apis.purgatory.wake(part.key, leo_moved=True)
            effects = part.core.on_leader_append(
                request_id, -1, info.first_offset, info.last_offset,
                self.commit_timeout_ms, now, part.view)
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
        while hosted.waiting and hosted.waiting[0].committed and not hosted.gone:
            self.released(hosted, hosted.waiting.popleft().result)

    def _failed(self, hosted: Hosted, code: int, why: str) -> None:
        """An append failed: answer every waiting reply with the mapped error and
        rebuild the shard from the log (or unload it if this broker no longer leads)."""
        answer = _APPEND_ERRORS.get(code, code)
        logger.warning("%s-%d: writing the %s's records failed (%s: %s): answering %d "
                       "requests %s and reloading", self.topic, hosted.partition, self.what,
                       errors.name_of(code), why,
                       sum(len(w.result.replies) for w in hosted.waiting),
                       errors.name_of(answer))
        for waiting in hosted.waiting:
            for reply in waiting.result.replies:
                reply.token.fail(answer)
        hosted.waiting.clear()
        self._unload(hosted, "rebuilding from the log")
        self.sync()

    # ================================================================ timers

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
