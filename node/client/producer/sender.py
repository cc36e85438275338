"""Kafka's Sender: the producer's I/O thread, one ``turn`` at a time.

Each turn: take the ready batches from the accumulator (encoding open ones), expire
those past ``delivery_timeout_ms``, suspect unanswered Produce requests, refresh metadata
when due, and send one Produce request per leader broker with one frame per partition
(all of that partition's queued batches back to back); then poll the network and
complete what came back.

Rules:
- A partition with a request in flight is muted, so its batches stay in order (and its
  next batches travel together); ``max_in_flight_requests_per_connection`` bounds the
  requests in flight per broker.
- Retriable errors put batches back at the front of their queue after
  ``retry_backoff_ms``, within ``retries`` and ``delivery_timeout_ms``; a newer leader
  epoch in fresh metadata ends a leadership backoff, and abandons a request its old
  leader does not answer (after PRODUCE_SUSPECT_MS).
- Idempotence: the producer id and epoch come from InitProducerId; a batch is stamped
  with them and its partition's next sequence when first sent, and a retry resends
  exactly the batches first sent together (the leader recognises a frame of any length:
  ``shm.producer_state``'s runs). A sequence gap takes a new epoch (KIP-360).
- Every batch completes exactly once (asserted in ``finish``).
- Transactions (``transactions.TransactionManager``, when the producer has a
  transactional id): its coordinator requests go out from this thread (``step`` each
  turn, their answers through ``complete``); the id and epoch are the manager's (no
  InitProducerId of our own); a partition's batches wait until the manager added it to
  the transaction, and are stamped transactional; a batch that fails for good puts the
  transaction in an error state instead of asking for a new epoch.
"""
from __future__ import annotations

import collections
import logging
import os
import time

import pyarrow as pa

from node.client.metadata import ClusterMetadata, parse_metadata
from node.client.network import Network
from node.client.producer.accumulator import OpenBatch, ProducerBatch, encode
from node.client.producer.futures import ProduceRequestResult
from node.client.types import METADATA_STALE_CODES, KafkaTimeoutError, error
from node.wire import errors
from node.wire import protocol
from node.wire.errors import ErrorCode
from shm.batch import stamp_producer

log = logging.getLogger("minikafka.producer")

SEQUENCE_WRAP = 2**31
IDLE_POLL_MS = 1000
# A Produce unanswered this long makes the producer check whether its leader moved.
PRODUCE_SUSPECT_MS = 1000


class Sender:
    """The I/O thread's state: per-partition queues, in-flight requests, metadata."""

    def __init__(self, producer, network: Network):
        self.p = producer
        self.accumulator = producer._accumulator
        self.net = network
        self.queues: dict[tuple, collections.deque] = collections.defaultdict(collections.deque)
        self.muted: set[tuple] = set()
        self.metadata_requests: dict[object, tuple[str, int]] = {}
        self.metadata_next_s = 0.0
        self.metadata_refreshed_s = 0.0
        self.produce_in_flight: dict[int, tuple] = {}  # id(context) -> (endpoint, cid, context, sent_s)
        self.suspect_next_s = 0.0
        # Idempotence: our producer id and epoch (-1: none yet), the next sequence per
        # partition, and whether a new epoch is wanted (after a sequence gap).
        self.producer_id = -1
        self.producer_epoch = -1
        self.next_sequence: dict[tuple, int] = {}
        self.epoch_bump_wanted = False
        self.init_in_flight = False
        self.init_next_s = 0.0
        self.group = 0                  # numbers the requests batches are first sent in
        self.txn = getattr(producer, "_txn", None)    # the TransactionManager, or None
        # Kafka's leastLoadedNode: when a request to an endpoint last failed (a dead or
        # unreachable broker is skipped for ``retry_backoff_ms``), and a turn counter
        # that rotates the choice among equals.
        self.failed_s: dict[str, float] = {}
        self.rotation = 0

    # -- one turn of the loop
    def turn(self) -> None:
        p = self.p
        now = time.monotonic()
        self.drain(now)
        self.expire(now)
        self.check_suspects(now)
        self.maybe_request_metadata(now)
        if self.txn is not None:
            self.txn.step(now, self)
        self.send_ready(now)
        timeout_ms = self.poll_timeout_ms(time.monotonic())
        p._sleeping = True
        if timeout_ms > 0 and self.accumulator.drainable():
            timeout_ms = 0
        completions, ready_fds = self.net.poll(timeout_ms)
        p._sleeping = False
        if ready_fds:
            try:
                os.read(p._wake_r, 4096)
            except BlockingIOError:
                pass
            p._wake_sent = False
        for c in completions:
            self.complete(c)

    def drain(self, now: float) -> None:
        """Take what the accumulator has ready; encode open batches; queue them all."""
        for item in self.accumulator.drain(now):
            if isinstance(item, OpenBatch):
                try:
                    item = encode(item, crc=not self.p.idempotent)  # stamped at send
                except (ValueError, TypeError, pa.ArrowException) as e:
                    self.fail_result(item.result, len(item.values), e)
                    continue
            self.queues[item.tp].append(item)

    def expire(self, now: float) -> None:
        deadline_s = self.p.delivery_timeout_s
        for tp, queue in self.queues.items():
            if queue and now - queue[0].created_s >= deadline_s:
                kept = collections.deque()
                for batch in queue:
                    if now - batch.created_s >= deadline_s:
                        self.fail(batch, batch.last_error or KafkaTimeoutError(
                            f"Expiring {batch.record_count} record(s) for {tp[0]}-{tp[1]}: "
                            f"{int(deadline_s * 1000)} ms has passed since batch creation"))
                    else:
                        kept.append(batch)
                self.queues[tp] = kept

    def poll_timeout_ms(self, now: float) -> float:
        wake_s = now + IDLE_POLL_MS / 1000
        linger_expiry_s = self.accumulator.linger_expiry_s(now)
        if linger_expiry_s is not None:
            wake_s = min(wake_s, linger_expiry_s)
        for tp, queue in self.queues.items():
            if queue and tp not in self.muted:
                wake_s = min(wake_s, max(queue[0].ready_s, now + 0.001))
        if self.metadata_due() and not self.metadata_requests:
            wake_s = min(wake_s, self.metadata_next_s)
        if self.produce_in_flight:
            oldest_s = min(sent_s for _, _, _, sent_s in self.produce_in_flight.values())
            wake_s = min(wake_s, max(oldest_s + PRODUCE_SUSPECT_MS / 1000, self.suspect_next_s))
        if self.txn is not None:
            txn_s = self.txn.next_wake_s()
            if txn_s is not None:
                wake_s = min(wake_s, max(txn_s, now + 0.001))
        return max(0.0, (wake_s - now) * 1000)

    # -- metadata
    def metadata_due(self) -> bool:
        p = self.p
        if p._metadata_wanted:
            return True
        md = p._metadata
        if time.monotonic() - self.metadata_refreshed_s > p.metadata_max_age_s:
            return True
        for tp, queue in self.queues.items():
            if queue and md.leader_endpoint(*tp) is None:
                return True
        return False

    def maybe_request_metadata(self, now: float) -> None:
        if self.metadata_requests or now < self.metadata_next_s or not self.metadata_due():
            return
        p = self.p
        with p._lock:
            topics = sorted(p._topics)
            p._metadata_wanted = False
        md = p._metadata
        known = [md.endpoint(b) for b in sorted(md.brokers)]
        for endpoint in dict.fromkeys([e for e in known if e] + p.bootstrap):
            marker = ("metadata", endpoint)
            cid = self.net.send(endpoint, protocol.ApiKey.METADATA, {"topics": topics},
                                context=marker, timeout_ms=p.request_timeout_ms)
            self.metadata_requests[marker] = (endpoint, cid)
        self.metadata_next_s = now + p.metadata_backoff_s

    def on_metadata(self, completion) -> None:
        p = self.p
        self.metadata_requests.pop(completion.context, None)
        if completion.response is None:
            if not self.metadata_requests:
                p._metadata_wanted = True  # everyone failed: try again after the backoff
            return
        for endpoint, cid in self.metadata_requests.values():
            self.net.cancel(endpoint, cid)
        self.metadata_requests.clear()
        try:
            fresh = parse_metadata(completion.response.body, time.monotonic())
        except protocol.ProtocolError as e:
            log.warning("%s", e)
            p._metadata_wanted = True
            return
        p._metadata = p._metadata.merged(fresh)
        self.abandon_moved(p._metadata, time.monotonic())
        self.release_moved(p._metadata)
        self.metadata_refreshed_s = time.monotonic()
        with p._lock:
            missing = any(p._metadata.partition_count(t) is None for t in p._topics)
        if missing:
            p._metadata_wanted = True
        with p._metadata_changed:
            p._metadata_changed.notify_all()

    def release_moved(self, md: ClusterMetadata) -> None:
        """Batches backing off after a leadership error go at once when metadata shows
        a newer leader epoch: the backoff was for stale metadata, and it is fresh now."""
        for tp, queue in self.queues.items():
            if not queue or queue[0].ready_s == 0:
                continue
            pm = md.partition(*tp)
            if pm is None or pm.leader < 0:
                continue
            for batch in queue:
                if batch.sent_epoch >= 0 and pm.leader_epoch > batch.sent_epoch and \
                        getattr(batch.last_error, "code", None) in METADATA_STALE_CODES:
                    batch.ready_s = 0.0

    # -- idempotence
    def producer_id_ready(self, now: float) -> bool:
        """True when batches may be sent: not idempotent, or an id and epoch are known
        and no new epoch is wanted. Asks a broker for them otherwise (a new epoch only
        once the requests in flight are answered)."""
        p = self.p
        if self.txn is not None:
            producer = self.txn.producer()
            if producer is None:
                return False
            if producer != (self.producer_id, self.producer_epoch):
                self.producer_id, self.producer_epoch = producer
                self.next_sequence.clear()      # a new id or epoch: every partition from 0
            return True
        if not p.idempotent or (self.producer_id >= 0 and not self.epoch_bump_wanted):
            return True
        if self.init_in_flight or now < self.init_next_s or \
                (self.epoch_bump_wanted and self.produce_in_flight):
            return False
        endpoint = self.any_endpoint()
        body = {"producer_id": self.producer_id if self.epoch_bump_wanted else -1,
                "producer_epoch": self.producer_epoch if self.epoch_bump_wanted else -1}
        try:
            self.net.send(endpoint, protocol.ApiKey.INIT_PRODUCER_ID, body, context=("init",),
                          timeout_ms=p.request_timeout_ms)
            self.init_in_flight = True
        except errors.KafkaError:
            self.failed_s[endpoint] = now
            self.init_next_s = now + p.retry_backoff_s
        return False

    def on_init(self, completion) -> None:
        p = self.p
        self.init_in_flight = False
        body = completion.response.body if completion.response is not None else {}
        code = body.get("error", completion.error_code) if completion.response is not None \
            else completion.error_code
        if completion.response is None or code:
            self.init_next_s = time.monotonic() + p.retry_backoff_s
            p._metadata_wanted = True
            log.info("InitProducerId failed (%s); retrying", code)
            return
        self.producer_id = body["producer_id"]
        self.producer_epoch = body["producer_epoch"]
        self.next_sequence.clear()      # a new id or epoch: every partition from 0
        self.epoch_bump_wanted = False

    def stamped_now(self, batch: ProducerBatch) -> bool:
        """The batch carries our current id and epoch (it was sent before: a retry)."""
        return batch.producer is not None and \
            batch.producer[:2] == (self.producer_id, self.producer_epoch)

    def stamp(self, batch: ProducerBatch, group: int) -> None:
        """Give ``batch`` our id, epoch and its partition's next sequence (a retry keeps
        them within an epoch); ``group`` names the request it is first sent in."""
        pid, epoch = self.producer_id, self.producer_epoch
        sequence = self.next_sequence.get(batch.tp, 0)
        if not batch.owned:
            batch.data = bytearray(batch.data)
            batch.owned = True
        stamp_producer(batch.data, pid, epoch, sequence, transactional=self.txn is not None)
        batch.producer = (pid, epoch, sequence, group)
        self.next_sequence[batch.tp] = (sequence + batch.record_count) % SEQUENCE_WRAP

    # -- sending
    def send_ready(self, now: float) -> None:
        p = self.p
        if not self.producer_id_ready(now):
            return
        md = p._metadata
        by_leader: dict[str, list[tuple]] = collections.defaultdict(list)
        for tp, queue in self.queues.items():
            if not queue or tp in self.muted or queue[0].ready_s > now:
                continue
            if self.txn is not None and not self.txn.may_send(tp):
                continue        # not added to the transaction yet
            endpoint = md.leader_endpoint(*tp)
            if endpoint is None:
                p._metadata_wanted = True
                continue
            by_leader[endpoint].append(tp)
        for endpoint, tps in by_leader.items():
            if self.net.in_flight_count(endpoint) >= p.max_in_flight:
                continue
            self.send_produce(endpoint, tps, now)

    def send_produce(self, endpoint: str, tps: list[tuple], now: float) -> None:
        p = self.p
        entries, frames, sent = [], [], []
        total = 0
        for tp in tps:
            queue = self.queues[tp]
            batches = []
            if p.idempotent and queue and queue[0].ready_s <= now and \
                    self.stamped_now(queue[0]):
                # A retry: exactly the batches first sent together, so the leader sees
                # the same frame (all duplicates, or none).
                group = queue[0].producer[3]
                while queue and queue[0].producer is not None and \
                        queue[0].producer[3] == group and self.stamped_now(queue[0]):
                    batch = queue.popleft()
                    total += len(batch.data)
                    batches.append(batch)
            else:
                while queue and queue[0].ready_s <= now and \
                        (total + len(queue[0].data) <= p.max_request_size or
                         not batches and not total) and \
                        not (p.idempotent and self.stamped_now(queue[0])):
                    batch = queue.popleft()
                    total += len(batch.data)
                    batches.append(batch)
                if p.idempotent and batches:
                    self.group += 1
                    for batch in batches:
                        self.stamp(batch, self.group)
            if not batches:
                continue
            pm = p._metadata.partition(*tp)
            for batch in batches:
                batch.sent_epoch = pm.leader_epoch if pm is not None else -1
            entries.append([tp[0], tp[1]])
            frames.append(batches[0].data if len(batches) == 1 else
                          b"".join(b.data for b in batches))
            sent.append((tp, batches))
        if not sent:
            return
        body = {"acks": p.acks, "timeout_ms": p.request_timeout_ms, "partitions": entries}
        if self.txn is not None:        # KIP-890: the leader verifies with this id's coordinator
            body["transactional_id"] = self.txn.transactional_id
        context = ("produce", sent)
        try:
            cid = self.net.send(endpoint, protocol.ApiKey.PRODUCE, body, frames, context=context,
                                expect_response=p.acks != 0)
        except errors.KafkaError as e:
            for tp, batches in sent:
                self.retry_or_fail(tp, batches, e, now)
            return
        if p.acks == 0:
            for tp, batches in sent:
                for batch in batches:
                    self.succeed(batch, -1)
            self.notify()
        else:
            self.muted.update(tp for tp, _ in sent)
            self.produce_in_flight[id(context)] = (endpoint, cid, context, now)

    def check_suspects(self, now: float) -> None:
        """A Produce unanswered for PRODUCE_SUSPECT_MS asks for metadata (at most once
        per PRODUCE_SUSPECT_MS): if its leader moved, ``abandon_moved`` retries it."""
        if now < self.suspect_next_s:
            return
        if any(now - sent_s > PRODUCE_SUSPECT_MS / 1000
               for _, _, _, sent_s in self.produce_in_flight.values()):
            self.p._metadata_wanted = True
            self.suspect_next_s = now + PRODUCE_SUSPECT_MS / 1000

    def abandon_moved(self, md: ClusterMetadata, now: float) -> None:
        """Give up on in-flight requests whose every partition has a newer leader epoch
        in fresh metadata (the old leader is paused or partitioned: its answer would
        only come after the request timeout). Retried like a ErrorCode.NOT_LEADER_OR_FOLLOWER;
        a late answer is dropped."""
        for key, (endpoint, cid, context, _) in list(self.produce_in_flight.items()):
            sent = context[1]
            moved = all(
                (pm := md.partition(*tp)) is not None and pm.leader >= 0 and
                pm.leader_epoch > batches[0].sent_epoch >= 0 for tp, batches in sent)
            if not moved:
                continue
            del self.produce_in_flight[key]
            self.net.cancel(endpoint, cid)
            e = error(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{endpoint} did not answer and is no longer "
                                              f"the leader")
            for tp, batches in sent:
                self.muted.discard(tp)
                self.retry_or_fail(tp, batches, e, now)
                for batch in batches:
                    batch.ready_s = 0.0

    # -- completions
    def complete(self, completion) -> None:
        kind = completion.context[0]
        if completion.response is None and kind in ("init", "txn"):
            self.failed_s[completion.endpoint] = time.monotonic()
            self.p._metadata_wanted = True      # a broker may be gone: look again
        if kind == "metadata":
            self.on_metadata(completion)
        elif kind == "init":
            self.on_init(completion)
        elif kind == "produce":
            self.on_produce(completion)
        elif kind == "txn":
            self.txn.on_completion(completion.context[1],
                                   None if completion.response is None
                                   else completion.response.body, completion.error_code)
        self.notify()

    def on_produce(self, completion) -> None:
        now = time.monotonic()
        if self.produce_in_flight.pop(id(completion.context), None) is None:
            # Abandoned (``abandon_moved``) after this completion was already on its way
            # (a dropped connection fails its requests into the same poll's results): its
            # batches are queued again, and completing them here too would send them twice
            # and count their records done twice (flush() then never returns).
            return
        sent = completion.context[1]
        for tp, _ in sent:
            self.muted.discard(tp)
        if completion.response is None:
            e = error(completion.error_code, completion.error_message)
            for tp, batches in sent:
                self.retry_or_fail(tp, batches, e, now)
            return
        answers = {}
        try:
            for topic, partition, code, base_offset, _log_start, message in \
                    completion.response.body["partitions"]:
                answers[(topic, partition)] = (code, base_offset, message)
        except (KeyError, TypeError, ValueError):
            answers = {}
        for tp, batches in sent:
            code, base_offset, message = answers.get(
                tp, (-1, -1, "the Produce response does not mention this partition"))
            if code == 0:
                for batch in batches:
                    self.succeed(batch, base_offset)
                    base_offset += batch.record_count
            else:
                self.retry_or_fail(tp, batches, error(code, message), now)

    def retry_or_fail(self, tp, batches: list[ProducerBatch], e: BaseException,
                      now: float) -> None:
        p = self.p
        code = getattr(e, "code", -1)
        if code in METADATA_STALE_CODES:
            p._metadata_wanted = True
        retriable = getattr(e, "retriable", False)
        if p.idempotent and self.txn is None and \
                code in (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID):
            # Not appended: the leader lost track of our sequence (a batch before it
            # failed, or its state went with truncated data). A new epoch, then again.
            log.info("%s-%d: %s; asking for a new producer epoch", tp[0], tp[1], e)
            self.epoch_bump_wanted = True
            retriable = True
        queue = self.queues[tp]
        for batch in reversed(batches):
            batch.last_error = e
            if retriable and batch.attempts < p.retries and \
                    now - batch.created_s < p.delivery_timeout_s:
                batch.attempts += 1
                batch.ready_s = now + p.retry_backoff_s
                queue.appendleft(batch)
            else:
                self.fail(batch, e)

    def succeed(self, batch: ProducerBatch, base_offset: int) -> None:
        r = batch.result
        r.base_offset = base_offset
        r.record_count = batch.record_count
        self.finish(r, batch.record_count)

    def fail(self, batch: ProducerBatch, e: BaseException) -> None:
        batch.result.attempts = batch.attempts + (batch.last_error is not None)
        if self.txn is not None:
            self.txn.batch_failed(e)        # the transaction can only be aborted now
        elif self.p.idempotent and batch.producer is not None:
            log.info("%s-%d: a batch failed (%s); asking for a new producer epoch",
                     batch.tp[0], batch.tp[1], e)
            self.epoch_bump_wanted = True   # its sequence is a gap now: start an epoch
        self.fail_result(batch.result, batch.record_count, e)

    def fail_result(self, r: ProduceRequestResult, records: int, e: BaseException) -> None:
        r.error = e
        self.finish(r, records)

    def finish(self, r: ProduceRequestResult, records: int) -> None:
        # ``done`` and the callback list change together under the futures' condition,
        # so a callback added while the batch completes is either run here or by
        # add_callback itself, never lost.
        with self.p._done:
            assert not r.done, ("a batch completed twice", r.topic, r.partition)
            r.done = True
            callbacks, r.callbacks = r.callbacks, None
        with self.p._lock:
            self.accumulator.incomplete -= records
        for future, fn in callbacks or ():
            future._call(fn)

    def notify(self) -> None:
        with self.p._done:
            self.p._done.notify_all()

    def fail_everything(self, e: BaseException) -> None:
        p = self.p
        for item in self.accumulator.take_all():
            if isinstance(item, OpenBatch):
                self.fail_result(item.result, len(item.values), e)
            else:
                self.fail(item, e)
        for queue in self.queues.values():
            for batch in queue:
                self.fail(batch, e)
            queue.clear()
        for entry in list(self.net.in_flight.values()):
            if entry.context and entry.context[0] == "produce":
                for _, batches in entry.context[1]:
                    for batch in batches:
                        self.fail(batch, e)
        self.net.in_flight.clear()
        self.produce_in_flight.clear()
        if self.txn is not None:
            self.txn.close(e)
        self.notify()
        with p._metadata_changed:
            p._metadata_changed.notify_all()

    # -- what the TransactionManager asks of this thread (``transactions.step``)
    def endpoint_of(self, node_id: int) -> str | None:
        return self.p._metadata.endpoint(node_id)

    def any_endpoint(self) -> str:
        """A broker for a request any broker answers (FindCoordinator, InitProducerId):
        Kafka's leastLoadedNode, one whose last request did not fail within
        ``retry_backoff_ms`` (a SIGKILLed broker stays in the metadata until it is
        refreshed: always taking the first one looped on it), the fewest in flight,
        the choice rotating among equals."""
        md = self.p._metadata
        endpoints = [e for e in (md.endpoint(b) for b in sorted(md.brokers)) if e] or \
            list(self.p.bootstrap)
        assert endpoints, "no broker known, not even a bootstrap server"
        self.rotation += 1
        start = self.rotation % len(endpoints)
        endpoints = endpoints[start:] + endpoints[:start]
        recent = time.monotonic() - self.p.retry_backoff_s
        return min(endpoints, key=lambda e: (self.failed_s.get(e, -1.0) > recent,
                                             self.net.in_flight_count(e)))

    def has_incomplete(self) -> bool:
        """Records sent and not completed (buffered, queued or in flight)."""
        return self.accumulator.incomplete > 0

    def abort_undrained(self, e: BaseException) -> None:
        """Fail every batch not in flight (the transaction is being aborted)."""
        batches = list(self.accumulator.take_all())
        for queue in self.queues.values():
            batches += queue
            queue.clear()
        for item in batches:
            if isinstance(item, OpenBatch):
                self.fail_result(item.result, len(item.values), e)
                continue
            if item.producer is not None:
                # a retry: the leader may or may not have it, so its partition's
                # sequence is unknown: a new epoch before the next transaction
                self.txn.epoch_bump_required = True
            item.result.attempts = item.attempts + (item.last_error is not None)
            self.fail_result(item.result, item.record_count, e)
        self.notify()

    def send(self, endpoint: str, api_key: int, body: dict, context) -> None:
        try:
            self.net.send(endpoint, api_key, body, context=context,
                          timeout_ms=self.p.request_timeout_ms)
        except errors.KafkaError:
            self.failed_s[endpoint] = time.monotonic()
            raise
