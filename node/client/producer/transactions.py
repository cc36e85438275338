"""Kafka's TransactionManager: a transactional producer's state and its requests to the
transaction coordinator (and to the group coordinator, for TxnOffsetCommit).

The caller's threads change the state (``init_transactions``, ``begin_transaction``,
``send_offsets``, ``commit``, ``abort``, ``add_partition`` from ``send``) and wait on a
``TxnResult``; the producer's I/O thread sends the requests (``step``) and handles their
answers (``on_completion``). Everything shared is under ``lock``.

Rules (Kafka's TransactionManager and Sender, KIP-98/360/447/588/890):
- States and their transitions are ``TRANSITIONS`` (Kafka's State.isTransitionValid).
  FATAL_ERROR is final: every later call raises its error. ABORTABLE_ERROR allows only
  ``abort``.
- One coordinator request in flight at a time; queued ones go by priority (coordinator
  lookups, InitProducerId, AddPartitions/AddOffsets/TxnOffsetCommit, EndTxn), then in
  order. A request needing a coordinator we do not know first looks it up
  (FindCoordinator, key type 1 for the transaction, 0 for a group); NOT_COORDINATOR,
  COORDINATOR_NOT_AVAILABLE, a lost connection or a timeout forget it and look again.
  Retriable errors (CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS, ...) send the
  same request again after ``retry_backoff_ms``.
- A partition gets batches only once AddPartitionsToTxn added it (the first ``send`` to
  it in a transaction queues it; the partitions queued meanwhile go in one request,
  Kafka's client form: version 3, the v3-and-below fields).
- EndTxn is sent only once every batch is completed (commit flushes first). A commit
  after a failed batch fails with that error (ABORTABLE_ERROR: abort then). An abort
  fails the batches not yet sent (TransactionAbortedError) and waits for those in
  flight. A transaction that added no partition and no offsets ends without EndTxn.
- Epochs: InitProducerId gives the id and epoch; EndTxn v5 (KIP-890 part 2) answers the
  next ones, taken at once. An abortable error after which the partitions' sequences
  are unknown (a failed batch) sets ``epoch_bump_required``: the abort ends with
  InitProducerId(id, epoch) (KIP-360) unless EndTxn already gave a new epoch. The
  sender resets its sequences whenever the id or epoch changes.
- Errors by Kafka's names: PRODUCER_FENCED (and INVALID_PRODUCER_EPOCH from a
  coordinator) is fatal ProducerFencedError; TRANSACTIONAL_ID_AUTHORIZATION_FAILED and
  INVALID_TXN_STATE from the coordinator are fatal; TRANSACTION_ABORTABLE,
  UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_ID_MAPPING, a failed batch and a refused
  TxnOffsetCommit (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION: CommitFailedError) are
  abortable; anything unexpected is fatal.
- A call that timed out may be made again: it waits on the same pending operation.
"""

from __future__ import annotations

import logging
import threading
import time

from node.client.producer.txn_requests import (S, TRANSITIONS, AddOffsets, AddPartitions,
                                               EndTxn, FindCoordinator, Handler,
                                               InitProducerId, State, TxnResult)
from node.client.types import (ConsumerGroupMetadata, IllegalStateError, KafkaTimeoutError,
                               TransactionAbortedError)
from node.wire import errors
from node.wire.errors import ErrorCode, KafkaError

log = logging.getLogger("minikafka.producer")

__all__ = ["TransactionManager", "State"]


# ------------------------------------------------------------------ the manager

class TransactionManager:
    """State shared by the callers and the I/O thread (rules: the module docstring)."""

    def __init__(self, transactional_id: str, transaction_timeout_ms: int,
                 retry_backoff_s: float, wake=lambda: None):
        if not isinstance(transactional_id, str) or not transactional_id:
            raise ValueError("transactional_id must be a non-empty string")
        if transaction_timeout_ms < 1:
            raise ValueError("transaction_timeout_ms must be positive")
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = int(transaction_timeout_ms)
        self.retry_backoff_s = retry_backoff_s
        self.wake = wake
        self.lock = threading.RLock()
        self.state = S.UNINITIALIZED
        self.last_error: BaseException | None = None
        self.producer_id = -1
        self.producer_epoch = -1
        self.epoch_bump_required = False
        self.transaction_started = False
        self.new_partitions: set = set()        # sent to, not yet asked to add
        self.pending_partitions: set = set()    # in an AddPartitionsToTxn not answered
        self.partitions_in_txn: set = set()     # added: batches may go
        self.queue: list[Handler] = []
        self.in_flight: Handler | None = None
        self.next_send_s = 0.0
        self.coordinators: dict[tuple[int, str], str] = {}
        self.pending_op: tuple[str, TxnResult] | None = None
        self.io = None                           # the sender, set by ``step``

    # ------------------------------------------------------------- state
    def transition(self, target: State, error: BaseException | None = None) -> None:
        with self.lock:
            if self.state not in TRANSITIONS[target]:
                if self.state is S.FATAL_ERROR:
                    return          # stays fatal
                raise IllegalStateError(f"TransactionalId {self.transactional_id}: invalid "
                                        f"transition attempted from state {self.state.value} "
                                        f"to state {target.value}")
            if error is not None:
                self.last_error = error
            log.debug("transactional id %s: %s -> %s", self.transactional_id,
                      self.state.value, target.value)
            self.state = target

    def fatal(self, error: BaseException, handler: Handler | None = None) -> None:
        with self.lock:
            log.info("transactional id %s: fatal error %s", self.transactional_id, error)
            self.transition(S.FATAL_ERROR, error)
            for h in self.queue:
                h.result.fail(error)
            self.queue.clear()
            if handler is not None:
                handler.result.fail(error)

    def abortable(self, error: BaseException, handler: Handler | None = None) -> None:
        with self.lock:
            if self.state is S.ABORTING_TRANSACTION:
                pass                # already aborting: the abort goes on
            elif self.state in TRANSITIONS[S.ABORTABLE_ERROR]:
                log.info("transactional id %s: abortable error %s", self.transactional_id,
                         error)
                self.transition(S.ABORTABLE_ERROR, error)
            elif self.state is not S.FATAL_ERROR:
                log.warning("transactional id %s: error %s in state %s", self.transactional_id,
                            error, self.state.value)
            if handler is not None:
                handler.result.fail(error)

    def abortable_if_possible(self, error: BaseException, handler=None) -> None:
        """Kafka: abortable with an epoch bump where the coordinator can bump (KIP-360)."""
        with self.lock:
            self.epoch_bump_required = True
            self.abortable(error, handler)

    def batch_failed(self, error: BaseException) -> None:
        """A batch of the transaction failed for good (Kafka's maybeTransitionToErrorState)."""
        with self.lock:
            code = getattr(error, "code", None)
            if code in (ErrorCode.PRODUCER_FENCED, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                        ErrorCode.UNSUPPORTED_VERSION):
                self.fatal(error)
                return
            if isinstance(error, TransactionAbortedError):
                return
            if self.state not in (S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION):
                self.epoch_bump_required = True
            self.abortable(error)

    def set_producer(self, producer_id: int, producer_epoch: int) -> None:
        assert producer_id >= 0 and producer_epoch >= 0, (producer_id, producer_epoch)
        with self.lock:
            self.producer_id, self.producer_epoch = producer_id, producer_epoch

    def producer(self) -> tuple[int, int] | None:
        """(id, epoch) batches may be stamped with now, or None (none yet, or a new one
        on its way)."""
        with self.lock:
            if self.producer_id < 0 or self.state in (S.UNINITIALIZED, S.INITIALIZING):
                return None
            return self.producer_id, self.producer_epoch

    def may_send(self, tp) -> bool:
        """Batches of ``tp`` may go (it is in the transaction)."""
        return tp in self.partitions_in_txn

    def complete_transaction(self) -> bool:
        """The transaction ended; True if READY now, False if a new epoch is wanted first."""
        with self.lock:
            bump = self.epoch_bump_required
            self.transition(S.INITIALIZING if bump else S.READY)
            self.reset_transaction()
            return not bump

    def reset_transaction(self) -> None:
        """No transaction any more: no partitions, no error, no bump pending."""
        self.last_error = None
        self.epoch_bump_required = False
        self.transaction_started = False
        self.new_partitions.clear()
        self.pending_partitions.clear()
        self.partitions_in_txn.clear()

    # ------------------------------------------------------------- callers' side
    def _fail_if_error(self, what: str) -> None:
        if self.state is S.FATAL_ERROR or self.state is S.ABORTABLE_ERROR:
            error = self.last_error
            if error is None:
                raise IllegalStateError(f"Cannot {what}: the producer is in state "
                                        f"{self.state.value}")
            raise error

    def _start(self, operation: str, allowed: tuple, target: State, build) -> TxnResult:
        """Kafka's handleCachedTransactionRequestResult: the same call again after a
        timeout waits on the first one's result; another call meanwhile is refused."""
        with self.lock:
            if self.pending_op is not None:
                name, result = self.pending_op
                if name == operation:
                    return result
                raise IllegalStateError(f"Cannot attempt operation `{operation}` because the "
                                        f"previous call to `{name}` timed out and must be "
                                        f"retried")
            if operation != "abortTransaction" or self.state is not S.ABORTABLE_ERROR:
                self._fail_if_error(operation)
            if self.state not in allowed:
                raise IllegalStateError(f"Cannot call {operation} in state {self.state.value} "
                                        f"(transactional id {self.transactional_id})")
            if target is not self.state:
                self.transition(target)
            result = TxnResult(operation)
            build(result)
            self.pending_op = (operation, result)
        self.wake()
        return result

    def _await(self, result: TxnResult, timeout_s: float | None, on_wait=None) -> None:
        try:
            result.wait(timeout_s) if on_wait is None else on_wait(result, timeout_s)
        except KafkaTimeoutError:
            raise                   # pending: the same call may be made again
        except BaseException:
            with self.lock:
                if self.pending_op is not None and self.pending_op[1] is result:
                    self.pending_op = None
            raise
        with self.lock:
            if self.pending_op is not None and self.pending_op[1] is result:
                self.pending_op = None

    def init_transactions(self, timeout_s: float | None) -> None:
        def build(result):
            self.producer_id = self.producer_epoch = -1
            self.enqueue(InitProducerId(result, self, bump=False))
        result = self._start("initTransactions", (S.UNINITIALIZED,), S.INITIALIZING, build)
        self._await(result, timeout_s)

    def begin_transaction(self) -> None:
        with self.lock:
            if self.pending_op is not None:
                raise IllegalStateError(f"Cannot begin a transaction: the previous call to "
                                        f"`{self.pending_op[0]}` timed out and must be retried")
            self._fail_if_error("beginTransaction")
            if self.state is not S.READY:
                raise IllegalStateError(f"Cannot begin a transaction in state "
                                        f"{self.state.value}")
            self.transition(S.IN_TRANSACTION)

    def add_partition(self, tp) -> None:
        """``send`` to ``tp`` in the transaction (called under the producer's lock)."""
        with self.lock:
            if self.state is not S.IN_TRANSACTION:
                self._fail_if_error("send")
                raise IllegalStateError(f"Cannot add partition {tp[0]}-{tp[1]} to the "
                                        f"transaction while in state {self.state.value}")
            if tp in self.partitions_in_txn or tp in self.pending_partitions:
                return
            if tp not in self.new_partitions:
                self.new_partitions.add(tp)
                self.wake()

    def send_offsets(self, offsets: dict, group: ConsumerGroupMetadata,
                     timeout_s: float | None) -> None:
        with self.lock:
            if self.state is not S.IN_TRANSACTION and self.pending_op is None:
                self._fail_if_error("sendOffsetsToTransaction")
                raise IllegalStateError(f"Cannot send offsets if a transaction is not in "
                                        f"progress (currentState= {self.state.value})")
        result = self._start("sendOffsetsToTransaction", (S.IN_TRANSACTION,), S.IN_TRANSACTION,
                             lambda r: self.enqueue(AddOffsets(r, self, offsets, group)))
        self._await(result, timeout_s)

    def commit(self, timeout_s: float | None, flush) -> None:
        """``flush(result, timeout_s)`` flushes the producer until ``result`` is done."""
        result = self._start("commitTransaction", (S.IN_TRANSACTION,),
                             S.COMMITTING_TRANSACTION,
                             lambda r: self.enqueue(EndTxn(r, self, commit=True)))
        self._await(result, timeout_s, flush)

    def abort(self, timeout_s: float | None) -> None:
        def build(result):
            self.new_partitions.clear()
            if isinstance(self.last_error, errors.error_for(ErrorCode.INVALID_PRODUCER_ID_MAPPING)):
                # the coordinator would refuse EndTxn: straight to a new epoch
                self.enqueue(InitProducerId(result, self, bump=True))
            else:
                self.enqueue(EndTxn(result, self, commit=False))
        result = self._start("abortTransaction", (S.IN_TRANSACTION, S.ABORTABLE_ERROR),
                             S.ABORTING_TRANSACTION, build)
        self._await(result, timeout_s)

    def close(self, error: BaseException) -> None:
        with self.lock:
            for h in self.queue:
                h.result.fail(error)
            self.queue.clear()
            if self.in_flight is not None:
                self.in_flight.result.fail(error)
                self.in_flight = None

    # ------------------------------------------------------------- the I/O thread's side
    def enqueue(self, handler: Handler) -> None:
        with self.lock:
            i = len(self.queue)
            while i > 0 and self.queue[i - 1].priority > handler.priority:
                i -= 1
            self.queue.insert(i, handler)

    def reenqueue(self, handler: Handler, backoff_s: float | None = None) -> None:
        with self.lock:
            self.enqueue(handler)
            self.next_send_s = max(self.next_send_s, time.monotonic() + (
                self.retry_backoff_s if backoff_s is None else backoff_s))

    def lookup(self, key: tuple[int, str]) -> None:
        """Forget ``key``'s coordinator and find it before anything else."""
        with self.lock:
            self.coordinators.pop(key, None)
            if not any(isinstance(h, FindCoordinator) and h.key == key for h in self.queue):
                self.enqueue(FindCoordinator(key))

    def aborting(self) -> bool:
        return self.state in (S.ABORTABLE_ERROR, S.ABORTING_TRANSACTION)

    def next_wake_s(self) -> float | None:
        """When ``step`` has something to do (None: nothing queued)."""
        with self.lock:
            if self.in_flight is not None or not (self.queue or self.new_partitions):
                return None
            return self.next_send_s

    def step(self, now: float, io) -> None:
        """Send the next coordinator request if one may go. ``io`` (the sender) gives
        ``endpoint_of(node_id)``, ``any_endpoint()``, ``has_incomplete()``,
        ``abort_undrained(error)`` and ``send(endpoint, api_key, body, context)``."""
        self.io = io
        with self.lock:
            abort = self.aborting() and io.has_incomplete()
            error = self.last_error or TransactionAbortedError()
        if abort:
            # outside the lock: the sender takes the producer's lock, and ``send`` holds
            # that one when it calls ``add_partition`` (which refuses while aborting)
            io.abort_undrained(error)
        with self.lock:
            if self.in_flight is not None or now < self.next_send_s:
                return
            if self.new_partitions and self.state in (S.IN_TRANSACTION,
                                                      S.COMMITTING_TRANSACTION):
                self.pending_partitions |= self.new_partitions
                self.enqueue(AddPartitions(self, self.new_partitions))
                self.new_partitions = set()
            while self.queue:
                handler = self.queue[0]
                if handler.is_end_txn and io.has_incomplete():
                    return          # EndTxn only once every batch is completed
                self.queue.pop(0)
                if self.state in (S.FATAL_ERROR, S.ABORTABLE_ERROR) and \
                        not isinstance(handler, FindCoordinator):
                    handler.result.fail(self.last_error or IllegalStateError(self.state.value))
                    if isinstance(handler, AddPartitions):
                        self.pending_partitions -= handler.partitions
                    continue
                if handler.is_end_txn and not self.transaction_started:
                    # nothing was added: nothing for the coordinator to end
                    if self.complete_transaction():
                        handler.result.succeed()
                    else:
                        self.enqueue(InitProducerId(handler.result, self, bump=True))
                    continue
                if self._send(handler, io):
                    return

    def _send(self, handler: Handler, io) -> bool:
        """Send ``handler``'s request; False if its coordinator must be found first (the
        lookup is then first in the queue, the handler after it)."""
        endpoint = None
        if handler.coordinator is not None:
            endpoint = self.coordinators.get(handler.coordinator)
            if endpoint is None:
                self.enqueue(handler)
                self.lookup(handler.coordinator)
                return False
        else:
            endpoint = io.any_endpoint()
        try:
            io.send(endpoint, handler.api_key, handler.body(self), ("txn", handler))
        except KafkaError as e:
            log.debug("transactional request %s to %s not sent: %s",
                      type(handler).__name__, endpoint, e)
            if handler.coordinator is not None:
                self.lookup(handler.coordinator)
            self.reenqueue(handler)
            return True
        self.in_flight = handler
        return True

    def on_completion(self, handler: Handler, body: dict | None, error_code: int) -> None:
        """The answer (``body``), or the failure (``error_code``) of ``handler``'s request."""
        with self.lock:
            if self.in_flight is not handler:
                return                  # closed meanwhile
            self.in_flight = None
            if body is None:
                log.debug("transactional request %s failed: %s", type(handler).__name__,
                          errors.name_of(error_code))
                if handler.coordinator is not None:
                    self.lookup(handler.coordinator)
                self.reenqueue(handler)
                return
            handler.handle(self, body)
        self.wake()
