"""The transaction coordinator of one ``__transaction_state`` partition, as a pure core.

The shell (the broker runtime) feeds it requests, the log's records at load, marker
completions and the clock; it gives back ``Result`` (``effects``): records to append,
replies to send once they are committed, and marker requests to send then. Nothing here
does I/O or reads a clock. Producer ids come from ``allocate_producer_id()`` (the shell's
block allocator); it raises ``ProducerIdsUnavailable`` when it has none at hand (the
request gets COORDINATOR_LOAD_IN_PROGRESS, retriable, as Kafka's RPCProducerIdManager).

Kafka's rules (TransactionCoordinator, TransactionMetadata), with one simplification: a
state change happens when its record is emitted, not when it is committed (Kafka's
"pending state"); the shell keeps replies in log order, so nobody learns of a change before
it is durable, and a failed append rebuilds the shard from the log. Hence
CONCURRENT_TRANSACTIONS means "markers pending" (PrepareCommit/PrepareAbort) only.

- InitProducerId: a new id gets a producer id at epoch 0; a known one in Empty/Complete*
  gets its epoch bumped (a new producer id once the epoch is exhausted); an Ongoing one is
  fenced: epoch + 1, PrepareAbort, abort markers, CONCURRENT_TRANSACTIONS (the client
  retries and gets the next epoch). KIP-360: a request with the producer's id and epoch
  bumps only if they are current (or returns the current epoch to a retry of a bump).
- KIP-890 part 2 (``config.kip890`` and EndTxn v5+): EndTxn bumps the epoch; the markers
  carry the new epoch, the reply the new id/epoch (a new producer id when exhausted, taken
  at completion).
- A timed-out Ongoing transaction (``tick``) is fenced and aborted like InitProducerId's.
- The fence bumps the epoch once and writes the transaction as not-KIP-890 (client version
  0), so a fenced producer's retried EndTxn is always PRODUCER_FENCED.
"""

from collections.abc import Callable

from node.core.groups.hashing import partition_for
from node.kafka.protocol import messages as m

from . import effects as E
from . import records
from .bodies import (ADD_OFFSETS, ADD_PARTITIONS, DESCRIBE, END_TXN, INIT_PRODUCER_ID,
                     REQUESTS, body_of, end_reply, error_response, init_reply, normalize,
                     old_fenced, partitions_of, topic_results)
from .config import TxnConfig
from .effects import Effects, MarkerRequest, Reply, Result
from .records import RecordError
from .state import (COMPLETED, EPOCH_MAX, EXPIRABLE, NO_PRODUCER_EPOCH, NO_PRODUCER_ID,
                    PREPARING, VALID_PREVIOUS, TxnMeta, TxnState, epoch_exhausted)

__all__ = ["TxnShard", "ProducerIdsUnavailable", "Result", "Reply", "MarkerRequest",
           "OFFSETS_TOPIC", "error_response"]

OFFSETS_TOPIC = "__consumer_offsets"
END_TXN_EPOCH_BUMP_FROM_VERSION = 5       # Kafka's TV_2 clients (KafkaApis: version > 4)
ADD_PARTITIONS_BATCHED_FROM_VERSION = 4   # the broker-to-coordinator form (KIP-890 part 1)


# Marker answers that stop a transaction's completion (see markers_done).
_REFUSED = frozenset({E.TRANSACTION_COORDINATOR_FENCED, E.INVALID_PRODUCER_EPOCH})


class ProducerIdsUnavailable(Exception):
    """``allocate_producer_id`` has no id at hand now (retriable)."""


class TxnShard:
    def __init__(self, partition: int, config: TxnConfig, coordinator_epoch: int,
                 allocate_producer_id: Callable[[], int]):
        assert 0 <= partition < config.transaction_state_log_num_partitions
        self.partition = partition
        self.config = config
        self.coordinator_epoch = coordinator_epoch
        self.allocate_producer_id = allocate_producer_id
        self.txns: dict[str, TxnMeta] = {}
        self.ongoing: set[str] = set()    # the ids in Ongoing (the ones that can time out)
        self.is_loaded = False
        self.next_expiry_ms: int | None = None
        self.skipped_records = 0

    # ---- loading -------------------------------------------------------------------------

    def replay(self, offset: int, key: bytes, value: bytes | None) -> None:
        """One record of the partition, in log order. RecordError if it is malformed."""
        assert not self.is_loaded
        try:
            tid, meta = records.decode(key, value)
        except records.UnknownRecordType:
            self.skipped_records += 1
            return
        if meta is None or meta.state is TxnState.DEAD:
            self.txns.pop(tid, None)            # expired (Kafka writes a tombstone)
            self.ongoing.discard(tid)
        elif meta.state is TxnState.PREPARE_EPOCH_FENCE:
            self.skipped_records += 1           # a transient state, never written by Kafka
        else:
            self.txns[tid] = meta
            self._track(meta)

    def loaded(self, now_ms: int) -> Result:
        """Loading done: the transactions left in PrepareCommit/PrepareAbort get their
        markers again (Kafka's loadTransactionsForTxnTopicPartition)."""
        assert not self.is_loaded
        self.is_loaded = True
        self.next_expiry_ms = now_ms + self.config.transaction_remove_expired_transaction_cleanup_interval_ms
        fx = Effects()
        fx.markers += self.pending_markers()
        return fx.result()

    def unload(self) -> list[Reply]:
        """Nothing is parked here (replies wait in the shell): no replies."""
        self.is_loaded = False
        return []

    def pending_markers(self) -> list[MarkerRequest]:
        """The marker requests of every transaction whose markers are not done."""
        return [self._marker(meta) for _, meta in sorted(self.txns.items())
                if meta.state in PREPARING]

    def transaction(self, transactional_id: str) -> TxnMeta | None:
        """The metadata of a transactional id (read only: for the shell's views and tests)."""
        return self.txns.get(transactional_id)

    def owns(self, transactional_id: str) -> bool:
        """Whether the transactional id lives in this partition (Kafka's partitionFor)."""
        return partition_for(transactional_id,
                             self.config.transaction_state_log_num_partitions) == self.partition

    # ---- requests ------------------------------------------------------------------------

    def handle(self, now_ms: int, api_key: int, version: int, body: dict, token) -> Result:
        """One request. A body that is not the request's fields gets INVALID_REQUEST and
        changes nothing; missing fields take Kafka's defaults."""
        if api_key not in REQUESTS:
            raise ValueError(f"api {api_key} is not the transaction coordinator's")
        fx = Effects()
        try:
            body = normalize(api_key, version, body)
        except RecordError:
            fx.reply(token, error_response(api_key, {}, E.INVALID_REQUEST))
            return fx.result()
        if not self.is_loaded:
            fx.reply(token, error_response(api_key, body, E.COORDINATOR_LOAD_IN_PROGRESS))
            return fx.result()
        if api_key == INIT_PRODUCER_ID:
            reply = self._init(now_ms, body, fx)
        elif api_key == ADD_PARTITIONS:
            reply = self._add_partitions(now_ms, version, body, fx)
        elif api_key == ADD_OFFSETS:
            group_partition = partition_for(body["group_id"],
                                            self.config.offsets_topic_num_partitions)
            error = self._add(now_ms, body["transactional_id"], body["producer_id"],
                              body["producer_epoch"], {(OFFSETS_TOPIC, group_partition)}, fx)
            reply = body_of(m.AddOffsetsToTxnResponse, error_code=error)
        elif api_key == END_TXN:
            reply = self._end(now_ms, version, body, fx)
        elif api_key == DESCRIBE:
            reply = self._describe(body)
        else:
            reply = self._list(now_ms, body)
        old_fenced(api_key, version, reply)
        fx.reply(token, reply)
        return fx.result()

    def _check_owner(self, tid: str) -> int:
        if not tid:
            return E.INVALID_REQUEST
        if not self.owns(tid):
            return E.NOT_COORDINATOR
        return E.NONE

    # InitProducerId --------------------------------------------------------------------

    def _init(self, now: int, body: dict, fx: Effects) -> dict:
        tid = body["transactional_id"]
        timeout = body["transaction_timeout_ms"]
        pid, epoch = body["producer_id"], body["producer_epoch"]
        error = E.INVALID_REQUEST if tid is None else self._check_owner(tid)
        if not error and not 0 < timeout <= self.config.transaction_max_timeout_ms:
            error = E.INVALID_TRANSACTION_TIMEOUT
        if not error and (pid == NO_PRODUCER_ID) != (epoch == NO_PRODUCER_EPOCH):
            error = E.INVALID_REQUEST
        if error:
            return init_reply(error)
        expected = None if pid == NO_PRODUCER_ID else (pid, epoch)
        meta = self.txns.get(tid)
        if meta is None:
            new_pid = self._allocate()
            if new_pid is None:
                return init_reply(E.COORDINATOR_LOAD_IN_PROGRESS)
            meta = self.txns[tid] = TxnMeta(tid, new_pid, timeout_ms=timeout,
                                            last_update_ms=now)
        if expected is not None and not _valid_expected(meta, expected):
            return init_reply(E.PRODUCER_FENCED)
        if meta.state in PREPARING:
            return init_reply(E.CONCURRENT_TRANSACTIONS)
        if meta.state is TxnState.ONGOING:
            self._fence_and_abort(now, meta, fx)
            return init_reply(E.CONCURRENT_TRANSACTIONS)
        assert meta.state is TxnState.EMPTY or meta.state in COMPLETED, meta
        old_pid, old_epoch = meta.producer_id, meta.producer_epoch
        if epoch_exhausted(meta.producer_epoch) and (expected is None
                                                    or expected[1] == meta.producer_epoch):
            new_pid = self._allocate()
            if new_pid is None:
                return init_reply(E.COORDINATOR_LOAD_IN_PROGRESS)
            new_epoch, last = 0, (old_epoch if expected is not None else NO_PRODUCER_EPOCH)
        else:
            new_pid = old_pid
            if expected is None:
                new_epoch, last = old_epoch + 1, NO_PRODUCER_EPOCH
            elif old_epoch == NO_PRODUCER_EPOCH or expected[1] == old_epoch:
                new_epoch, last = old_epoch + 1, old_epoch
            elif expected[1] == meta.last_producer_epoch:       # a retry of a bump
                new_epoch, last = old_epoch, meta.last_producer_epoch
            else:
                return init_reply(E.PRODUCER_FENCED)
            assert not (epoch_exhausted(old_epoch) and new_epoch > old_epoch), meta
        self._transit(meta, TxnState.EMPTY, now, producer_id=new_pid, epoch=new_epoch,
                      last_epoch=last, partitions=set(), start_ms=-1, timeout_ms=timeout,
                      client_tv=0, next_producer_id=NO_PRODUCER_ID)
        fx.records.append(self._record(meta))
        return init_reply(E.NONE, meta.producer_id, meta.producer_epoch)

    # AddPartitionsToTxn / AddOffsetsToTxn ----------------------------------------------

    def _add_partitions(self, now: int, version: int, body: dict, fx: Effects) -> dict:
        reply = body_of(m.AddPartitionsToTxnResponse)
        if version < ADD_PARTITIONS_BATCHED_FROM_VERSION:
            topics = body["v3_and_below_topics"]
            error = self._add(now, body["v3_and_below_transactional_id"],
                              body["v3_and_below_producer_id"],
                              body["v3_and_below_producer_epoch"], partitions_of(topics), fx)
            reply["results_by_topic_v3_and_below"] = topic_results(topics, lambda tp: error)
            return reply
        for txn in body["transactions"]:
            tid, topics = txn["transactional_id"], txn["topics"]
            args = (tid, txn["producer_id"], txn["producer_epoch"], partitions_of(topics))
            if txn["verify_only"]:
                errors = self._verify(*args)
                results = topic_results(topics, lambda tp: errors.get(tp, E.NONE))
            else:
                error = self._add(now, *args, fx)
                results = topic_results(topics, lambda tp: error)
            reply["results_by_transaction"].append(
                {"transactional_id": tid, "topic_results": results})
        return reply

    def _validate_producer(self, meta: TxnMeta | None, pid: int, epoch: int) -> int:
        if meta is None:
            return E.INVALID_PRODUCER_ID_MAPPING
        if (meta.state in PREPARING and pid == meta.next_producer_id and epoch == 0):
            return E.CONCURRENT_TRANSACTIONS   # the new id (KIP-890 overflow) before completion
        if meta.producer_id != pid:
            return E.INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != epoch:
            return E.PRODUCER_FENCED
        if meta.state in PREPARING:
            return E.CONCURRENT_TRANSACTIONS
        return E.NONE

    def _add(self, now: int, tid: str, pid: int, epoch: int, partitions: set, fx: Effects) -> int:
        meta = self.txns.get(tid)
        error = self._check_owner(tid) or self._validate_producer(meta, pid, epoch)
        if error:
            return error
        if not partitions:
            return E.INVALID_REQUEST
        if meta.state is TxnState.ONGOING and partitions <= meta.partitions:
            return E.NONE
        start = meta.start_ms if meta.state is TxnState.ONGOING else now
        self._transit(meta, TxnState.ONGOING, now, partitions=meta.partitions | partitions,
                      start_ms=start)
        fx.records.append(self._record(meta))
        return E.NONE

    def _verify(self, tid: str, pid: int, epoch: int, partitions: set) -> dict:
        """KIP-890 part 1: were these partitions added to the producer's transaction?
        (partition -> error: TRANSACTION_ABORTABLE for one that was not)."""
        meta = self.txns.get(tid)
        error = self._check_owner(tid) or self._validate_producer(meta, pid, epoch)
        if error:
            return {tp: error for tp in partitions}
        return {tp: E.NONE if tp in meta.partitions else E.TRANSACTION_ABORTABLE
                for tp in partitions}

    # EndTxn ----------------------------------------------------------------------------

    def _end(self, now: int, version: int, body: dict, fx: Effects) -> dict:
        tid, pid, epoch = body["transactional_id"], body["producer_id"], body["producer_epoch"]
        commit = body["committed"]
        error = self._check_owner(tid)
        if error:
            return end_reply(error)
        meta = self.txns.get(tid)
        if meta is None:
            return end_reply(E.INVALID_PRODUCER_ID_MAPPING)
        if meta.state in PREPARING and pid == meta.next_producer_id and epoch == 0:
            return end_reply(E.CONCURRENT_TRANSACTIONS)
        tv2 = meta.client_tv >= 2
        retry_bump = tv2 and meta.producer_epoch == epoch + 1
        retry_overflow = (tv2 and meta.previous_producer_id == pid and meta.producer_epoch == 0
                          and epoch == EPOCH_MAX - 1 and meta.state in COMPLETED)
        if meta.producer_id != pid and not retry_overflow:
            return end_reply(E.INVALID_PRODUCER_ID_MAPPING)
        if not tv2 or meta.state in (TxnState.ONGOING, TxnState.EMPTY):
            valid = epoch == meta.producer_epoch
        elif meta.state in PREPARING:
            valid = retry_bump
        else:
            valid = retry_bump or retry_overflow
        if not valid:
            return end_reply(E.PRODUCER_FENCED)
        state = meta.state
        if state is TxnState.ONGOING:
            bump = self.config.kip890 and version >= END_TXN_EPOCH_BUMP_FROM_VERSION
            next_pid = NO_PRODUCER_ID
            if bump and epoch_exhausted(meta.producer_epoch):
                next_pid = self._allocate()
                if next_pid is None:
                    return end_reply(E.COORDINATOR_LOAD_IN_PROGRESS)
            self._prepare_end(now, meta, commit, bump, next_pid, fx)
            if meta.state in COMPLETED or meta.next_producer_id == NO_PRODUCER_ID:
                return end_reply(E.NONE, meta.producer_id, meta.producer_epoch)
            return end_reply(E.NONE, meta.next_producer_id, 0)
        same = commit == (state in (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT))
        if state in COMPLETED and same:
            return end_reply(E.NONE, meta.producer_id, meta.producer_epoch)
        if state in PREPARING and same:
            return end_reply(E.CONCURRENT_TRANSACTIONS)
        return end_reply(E.INVALID_TXN_STATE)

    def _prepare_end(self, now: int, meta: TxnMeta, commit: bool, bump: bool, next_pid: int,
                     fx: Effects) -> None:
        """Ongoing -> PrepareCommit/PrepareAbort (record + markers); with ``bump`` the epoch
        goes up (``next_pid``, the new producer id once it is exhausted, waits in
        next_producer_id until the completion)."""
        assert (next_pid != NO_PRODUCER_ID) == (bump and epoch_exhausted(meta.producer_epoch))
        epoch, last = meta.producer_epoch, meta.last_producer_epoch
        if bump:
            epoch, last = meta.producer_epoch + 1, meta.producer_epoch
        target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        self._transit(meta, target, now, epoch=epoch, last_epoch=last,
                      next_producer_id=next_pid, client_tv=2 if bump else 0)
        fx.records.append(self._record(meta))
        self._send_or_complete(now, meta, fx)

    def _fence_and_abort(self, now: int, meta: TxnMeta, fx: Effects) -> None:
        """Fence the Ongoing transaction's producer (epoch + 1) and abort it."""
        assert meta.state is TxnState.ONGOING and meta.producer_epoch < EPOCH_MAX, meta
        self._transit(meta, TxnState.PREPARE_ABORT, now, epoch=meta.producer_epoch + 1,
                      last_epoch=NO_PRODUCER_EPOCH, next_producer_id=NO_PRODUCER_ID,
                      client_tv=0)
        fx.records.append(self._record(meta))
        self._send_or_complete(now, meta, fx)

    def _send_or_complete(self, now: int, meta: TxnMeta, fx: Effects) -> None:
        if meta.partitions:
            fx.markers.append(self._marker(meta))
        else:
            self._complete(now, meta, fx)

    # markers ---------------------------------------------------------------------------

    def markers_done(self, now_ms: int, transactional_id: str, producer_id: int,
                     producer_epoch: int, results: dict | None = None) -> Result:
        """Every partition of a marker request answered (``results``: (topic, partition) ->
        error code): the transaction completes (CompleteCommit/CompleteAbort record). A
        stale report (the transaction moved on) changes nothing, nor does one where a
        leader refused a marker as TRANSACTION_COORDINATOR_FENCED or INVALID_PRODUCER_EPOCH:
        this coordinator or this transaction is not the newest there, so, as Kafka's
        TransactionMarkerRequestCompletionHandler, it stops and claims no completion."""
        fx = Effects()
        meta = self.txns.get(transactional_id)
        if (not self.is_loaded or meta is None or meta.state not in PREPARING
                or meta.producer_id != producer_id or meta.producer_epoch != producer_epoch):
            return fx.result()
        if results and not _REFUSED.isdisjoint(results.values()):
            return fx.result()
        self._complete(now_ms, meta, fx)
        return fx.result()

    def _complete(self, now: int, meta: TxnMeta, fx: Effects) -> None:
        target = (TxnState.COMPLETE_COMMIT if meta.state is TxnState.PREPARE_COMMIT
                  else TxnState.COMPLETE_ABORT)
        pid, epoch = meta.producer_id, meta.producer_epoch
        if meta.client_tv >= 2 and meta.next_producer_id != NO_PRODUCER_ID:
            pid, epoch = meta.next_producer_id, 0
        self._transit(meta, target, now, producer_id=pid, epoch=epoch,
                      last_epoch=meta.producer_epoch, next_producer_id=NO_PRODUCER_ID,
                      partitions=set())
        fx.records.append(self._record(meta))

    def _marker(self, meta: TxnMeta) -> MarkerRequest:
        assert meta.state in PREPARING and meta.partitions, meta
        return MarkerRequest(meta.transactional_id, meta.producer_id, meta.producer_epoch,
                             meta.state is TxnState.PREPARE_COMMIT, self.coordinator_epoch,
                             tuple(sorted(meta.partitions)))

    # Describe / List -------------------------------------------------------------------

    def _describe(self, body: dict) -> dict:
        reply = body_of(m.DescribeTransactionsResponse)
        for tid in body["transactional_ids"]:
            out = {**body_of(m.DescribeTransactionsResponse.TransactionState),
                   "transactional_id": tid}
            meta = self.txns.get(tid)
            error = self._check_owner(tid)
            if not error and (meta is None or meta.state is TxnState.DEAD):
                error = E.TRANSACTIONAL_ID_NOT_FOUND
            out["error_code"] = error
            if not error:
                by_topic: dict[str, list[int]] = {}
                for topic, partition in sorted(meta.partitions):
                    by_topic.setdefault(topic, []).append(partition)
                out.update(transaction_state=meta.state.kafka_name,
                           transaction_timeout_ms=meta.timeout_ms,
                           transaction_start_time_ms=meta.start_ms,
                           producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
                           topics=[{"topic": t, "partitions": ps} for t, ps in by_topic.items()])
            reply["transaction_states"].append(out)
        return reply

    def _list(self, now: int, body: dict) -> dict:
        reply = body_of(m.ListTransactionsResponse)
        states = set()
        for name in body["state_filters"]:
            state = TxnState.by_kafka_name(name)
            if state is None:
                reply["unknown_state_filters"].append(name)
            else:
                states.add(state)
        pids = set(body["producer_id_filters"])
        duration = body["duration_filter"]
        for tid, meta in sorted(self.txns.items()):
            if (meta.state is TxnState.DEAD or (pids and meta.producer_id not in pids)
                    or (body["state_filters"] and meta.state not in states)
                    or (duration >= 0 and now - meta.start_ms <= duration)):
                continue
            reply["transaction_states"].append({"transactional_id": tid,
                                                "producer_id": meta.producer_id,
                                                "transaction_state": meta.state.kafka_name})
        return reply

    # time ------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> Result:
        """Aborts the Ongoing transactions past their timeout (fencing their producers);
        every cleanup interval, expires the transactional ids idle for
        transactional.id.expiration.ms (a tombstone each)."""
        fx = Effects()
        if not self.is_loaded:
            return fx.result()
        for tid in sorted(self.ongoing):
            meta = self.txns[tid]
            if meta.start_ms + meta.timeout_ms < now_ms:
                self._fence_and_abort(now_ms, meta, fx)
        if self.next_expiry_ms is not None and self.next_expiry_ms <= now_ms:
            interval = self.config.transaction_remove_expired_transaction_cleanup_interval_ms
            self.next_expiry_ms = now_ms + interval
            horizon = now_ms - self.config.transactional_id_expiration_ms
            for tid, meta in sorted(self.txns.items()):
                if meta.state in EXPIRABLE and meta.last_update_ms <= horizon:
                    del self.txns[tid]
                    fx.records.append(records.tombstone(tid))
        return fx.result()

    def next_deadline_ms(self) -> int | None:
        """When ``tick`` has something to do next (None: nothing until a request)."""
        times = [self.txns[tid].start_ms + self.txns[tid].timeout_ms + 1 for tid in self.ongoing]
        if self.is_loaded and self.next_expiry_ms is not None:
            times.append(self.next_expiry_ms)
        return min(times, default=None)

    # helpers ---------------------------------------------------------------------------

    def _allocate(self) -> int | None:
        try:
            pid = self.allocate_producer_id()
        except ProducerIdsUnavailable:
            return None
        assert isinstance(pid, int) and pid >= 0, pid
        return pid

    def _track(self, meta: TxnMeta) -> None:
        if meta.state is TxnState.ONGOING:
            self.ongoing.add(meta.transactional_id)
        else:
            self.ongoing.discard(meta.transactional_id)

    def _transit(self, meta: TxnMeta, target: TxnState, now: int, *, producer_id: int | None = None,
                 epoch: int | None = None, last_epoch: int | None = None,
                 next_producer_id: int | None = None, partitions: set | None = None,
                 start_ms: int | None = None, timeout_ms: int | None = None,
                 client_tv: int | None = None) -> None:
        """Kafka's prepareTransitionTo + completeTransitionTo in one step."""
        assert meta.state in VALID_PREVIOUS[target], (meta.state, target)
        meta.previous_producer_id = meta.producer_id
        if producer_id is not None:
            meta.producer_id = producer_id
        if epoch is not None:
            assert 0 <= epoch <= EPOCH_MAX, epoch
            meta.producer_epoch = epoch
        if last_epoch is not None:
            meta.last_producer_epoch = last_epoch
        if next_producer_id is not None:
            meta.next_producer_id = next_producer_id
        if partitions is not None:
            meta.partitions = partitions
        if start_ms is not None:
            meta.start_ms = start_ms
        if timeout_ms is not None:
            meta.timeout_ms = timeout_ms
        if client_tv is not None:
            meta.client_tv = client_tv
        meta.state = target
        meta.last_update_ms = now
        meta.check()
        self._track(meta)

    def _record(self, meta: TxnMeta) -> tuple[bytes, bytes]:
        return records.encode(meta, self.config.log_value_version)


def _valid_expected(meta: TxnMeta, expected: tuple[int, int]) -> bool:
    """Kafka's isValidProducerId (KIP-360): the producer's id is the current one (its epoch
    is checked when bumping), the metadata was just created, or it is the previous id and
    its epoch was exhausted (a retry of a rotation)."""
    pid, epoch = expected
    return (meta.producer_epoch == NO_PRODUCER_EPOCH or pid == meta.producer_id
            or (pid == meta.previous_producer_id and epoch_exhausted(epoch)))
