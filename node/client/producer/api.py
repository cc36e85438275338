"""The ``Producer``: its configs, ``send`` / ``send_many`` / ``send_batch``, ``flush``
and ``close``; it owns the I/O thread, whose turns are the ``Sender``'s.

What is shared between the callers' threads and the I/O thread is under ``_lock``: the
accumulator, the topics wanted in metadata, the sticky partitioner. The sender writes
``_metadata`` (readers take a snapshot reference) and completes futures under ``_done``.
"""
from __future__ import annotations

import collections
import itertools
import logging
import os
import threading
import time

import numpy as np
import pyarrow as pa

from node.client.metadata import ClusterMetadata, parse_bootstrap
from node.client.network import Network
from node.client.partitioner import StickyPartitioner, partition_for_key
from node.client.producer.accumulator import (RECORD_OVERHEAD_BYTES, ProducerBatch,
                                              RecordAccumulator)
from node.client.producer.futures import (FutureBatchMetadata, FutureRecordMetadata,
                                          ProduceRequestResult)
from node.client.producer.sender import Sender
from node.client.producer.transactions import TransactionManager
from node.client.types import (ConsumerGroupMetadata, KafkaTimeoutError, OffsetAndMetadata,
                               TopicPartition)
from shm.batch import build_batch, read_header

log = logging.getLogger("minikafka.producer")

IDEMPOTENT_IN_FLIGHT_MAX = 5
TRANSACTION_TIMEOUT_MS = 60_000    # Kafka's transaction.timeout.ms default
REQUEST_TIMEOUT_SLACK_MS = 2000  # the broker answers REQUEST_TIMED_OUT before we give up
METADATA_MAX_AGE_MS = 300_000
_client_ids = itertools.count(1)


def as_bytes(value, what: str) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    raise TypeError(f"{what} must be bytes or str, got {type(value).__name__}")


def record_headers(headers) -> list[tuple[str, bytes | None]] | None:
    """``send``'s ``headers`` checked and put in Kafka's shape: a list of (str key,
    bytes or None value) in order (keys may repeat), or None for no headers. Takes a
    list/tuple of pairs (Kafka's clients' shape) or a dict; a value may be bytes-like,
    str (sent as UTF-8) or None (a null value)."""
    if headers is None:
        return None
    if headers.__class__ is list:   # the common shape, already right: copied as it is
        for header in headers:
            if not (header.__class__ is tuple and len(header) == 2 and
                    header[0].__class__ is str and header[0].isascii() and
                    (header[1] is None or header[1].__class__ is bytes)):
                break
        else:
            return list(headers) or None
    if isinstance(headers, dict):
        headers = headers.items()
    elif isinstance(headers, (str, bytes, bytearray, memoryview)) or \
            not hasattr(headers, "__iter__"):
        raise TypeError(f"headers must be a list of (str, bytes) pairs or a dict, "
                        f"got {type(headers).__name__}")
    out = []
    for header in headers:
        if not isinstance(header, (tuple, list)) or len(header) != 2:
            raise TypeError(f"a header must be a (key, value) pair, got {header!r:.80}")
        key, value = header
        if not isinstance(key, str):
            raise TypeError(f"a header key must be str, got {type(key).__name__}")
        try:
            key.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as e:
            raise ValueError(f"header key {key!r:.80} cannot be encoded as UTF-8: {e}") from None
        if value is not None and value.__class__ is not bytes:
            value = as_bytes(value, f"the value of header {key!r:.80}")
        out.append((key, value))
    return out or None


class Producer:
    """A thread-safe producer (see the module docstring).

    Parameters are Kafka's producer configs in snake case; times in ms, sizes in bytes.
    """

    def __init__(self, bootstrap_servers="127.0.0.1:9092", *, acks="all", linger_ms: int = 0,
                 batch_size: int = 16384, retries: int = 2_147_483_647,
                 request_timeout_ms: int = 30_000, delivery_timeout_ms: int = 120_000,
                 max_in_flight_requests_per_connection: int = 5,
                 retry_backoff_ms: int = 100, max_block_ms: int = 60_000,
                 max_request_size: int = 16 * 1024 * 1024,
                 metadata_max_age_ms: int = METADATA_MAX_AGE_MS,
                 metadata_backoff_ms: int | None = None,
                 client_id: str | None = None, partitioner_seed: int | None = None,
                 key_serializer=None, value_serializer=None,
                 enable_idempotence: bool | None = None,
                 transactional_id: str | None = None,
                 transaction_timeout_ms: int = TRANSACTION_TIMEOUT_MS):
        self.key_serializer = key_serializer
        self.value_serializer = value_serializer
        self.acks = {"all": -1, -1: -1, "-1": -1, 1: 1, "1": 1, 0: 0, "0": 0}.get(acks)
        if self.acks is None:
            raise ValueError(f"acks must be 'all', -1, 0 or 1, got {acks!r}")
        if batch_size < 1 or linger_ms < 0 or retries < 0 or request_timeout_ms < 1 or \
                max_in_flight_requests_per_connection < 1 or max_request_size < 1024:
            raise ValueError("producer configs out of range")
        if transactional_id is not None:
            if enable_idempotence is False:
                raise ValueError("Cannot set a transactional.id without also enabling "
                                 "idempotence.")
            enable_idempotence = True       # Kafka: a transactional producer is idempotent
        if enable_idempotence:
            if self.acks != -1:
                raise ValueError("Must set acks to all in order to use the idempotent "
                                 "producer. Otherwise we cannot guarantee idempotence.")
            if max_in_flight_requests_per_connection > IDEMPOTENT_IN_FLIGHT_MAX:
                raise ValueError("Must set max.in.flight.requests.per.connection to at "
                                 "most 5 to use the idempotent producer.")
            if retries < 1:
                raise ValueError("Must set retries to non-zero when using the idempotent "
                                 "producer.")
        # Kafka 3: on by default where it can be (acks=all, <= 5 in flight, retries).
        self.idempotent = enable_idempotence if enable_idempotence is not None else (
            self.acks == -1 and retries > 0 and
            max_in_flight_requests_per_connection <= IDEMPOTENT_IN_FLIGHT_MAX)
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.client_id = client_id or f"producer-{os.getpid()}-{next(_client_ids)}"
        self.linger_s = linger_ms / 1000
        self.batch_size = batch_size
        self.retries = retries
        self.request_timeout_ms = request_timeout_ms
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self.max_in_flight = max_in_flight_requests_per_connection
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.max_block_s = max_block_ms / 1000
        self.max_request_size = max_request_size
        self.metadata_max_age_s = metadata_max_age_ms / 1000
        # Minimum time between metadata refreshes (Kafka uses retry.backoff.ms for it).
        self.metadata_backoff_s = (retry_backoff_ms if metadata_backoff_ms is None
                                   else metadata_backoff_ms) / 1000

        # Shared between send() and the I/O thread, under _lock.
        self._lock = threading.Lock()
        self._accumulator = RecordAccumulator(self._lock, batch_size, self.linger_s)
        self._topics: set[str] = set()
        self._sticky = StickyPartitioner(partitioner_seed)
        self._sticky_started: set[str] = set()
        self._metadata_wanted = True
        # Written by the I/O thread only (readers take a snapshot reference).
        self._metadata = ClusterMetadata()
        self._done = threading.Condition()
        self._metadata_changed = threading.Condition()
        self._closed = False
        self._running = True
        self._io_error: BaseException | None = None
        # Wake-up pipe: send() writes a byte only while the I/O thread sleeps.
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._sleeping = False
        self._wake_sent = False
        # Transactions (``transactions``): None without a transactional id.
        self._txn = None if transactional_id is None else TransactionManager(
            transactional_id, transaction_timeout_ms, self.retry_backoff_s, self._wake)
        self._thread = threading.Thread(target=self._run, name=f"{self.client_id}-io",
                                        daemon=True)
        self._thread.start()

    # ------------------------------------------------------------- public API
    def send(self, topic: str, value, key=None, partition: int | None = None,
             timestamp_ms: int | None = None, headers=None) -> FutureRecordMetadata:
        """Queue one record; returns a future (``.get(timeout)`` -> RecordMetadata).
        ``headers``: Kafka's record headers, a list of (str, bytes or None) pairs (keys
        may repeat) or a dict (``record_headers``)."""
        if self._closed:
            raise RuntimeError("send() on a closed producer")
        if headers is not None:
            headers = record_headers(headers)
        if self.value_serializer is not None:
            value = self.value_serializer(value)
        if self.key_serializer is not None and key is not None:
            key = self.key_serializer(key)
        if value.__class__ is not bytes:
            value = None if value is None else as_bytes(value, "value")
        if key is not None and key.__class__ is not bytes:
            key = as_bytes(key, "key")
        if partition is None:
            count, available = self._partitions_of(topic)
            if key is not None:
                partition = partition_for_key(key, count)
        else:
            count = self._metadata.partition_count(topic)
            if count is not None and not 0 <= partition < count:
                raise ValueError(f"partition {partition} of {topic} does not exist "
                                 f"({count} partitions)")
        with self._lock:
            if partition is None:
                partition = self._sticky.partition(topic, count, available)
                if not self._accumulator.has_open((topic, partition)):
                    # a new batch: KIP-480 switches
                    if topic in self._sticky_started:
                        partition = self._sticky.on_new_batch(topic, count, available)
                    self._sticky_started.add(topic)
            if self._txn is not None:
                self._txn.add_partition((topic, partition))
            self._topics.add(topic)
            result, index, wake = self._accumulator.append((topic, partition), value, key,
                                                           timestamp_ms, headers)
        if wake and self._sleeping:
            self._wake()
        return FutureRecordMetadata(result, index, self._done)

    def send_many(self, topic: str, values, keys=None, partition: int | None = None,
                  timestamp_ms=None) -> list[FutureBatchMetadata]:
        """Bulk send: records are encoded here, ``batch_size`` bytes per batch, without
        per-record Python work. ``values``: list of bytes (None: a null value), 2-D
        uint8 numpy array or pyarrow binary array. Unkeyed records without
        ``partition`` go to the available partitions round robin, one batch each.
        Returns a future per batch."""
        if self._closed:
            raise RuntimeError("send_many() on a closed producer")
        n = len(values)
        if n == 0:
            return []
        if keys is not None and len(keys) != n:
            raise ValueError(f"{len(keys)} keys for {n} values")
        if keys is not None and partition is None:
            return self._send_many_keyed(topic, values, keys, timestamp_ms)
        if isinstance(values, np.ndarray):
            record_bytes = values.shape[1] if values.ndim == 2 else 1
        elif isinstance(values, (pa.Array, pa.ChunkedArray)):
            record_bytes = max(1, values.nbytes // n)
        else:
            # One conversion for the whole call, each batch a zero-copy slice of it (a
            # conversion per batch cost a third of encoding a default 16 KiB batch).
            values = pa.array(values, type=pa.binary())
            record_bytes = max(1, _data_bytes(values) // n)
        per_batch = max(1, self.batch_size // (record_bytes + RECORD_OVERHEAD_BYTES))
        targets = [partition] if partition is not None else None
        if targets is None:
            count, available = self._partitions_of(topic)
            targets = available or list(range(count))
            with self._lock:
                start = self._sticky.partition(topic, count, available)
            targets = targets[targets.index(start):] + targets[:targets.index(start)] \
                if start in targets else targets
        batches = []
        now_s = time.monotonic()
        for i, begin in enumerate(range(0, n, per_batch)):
            chunk_values = values[begin:begin + per_batch]
            chunk_keys = None if keys is None else keys[begin:begin + per_batch]
            ts = timestamp_ms
            if ts is not None and not isinstance(ts, (int, np.integer)):
                ts = ts[begin:begin + per_batch]
            tp = (topic, targets[i % len(targets)])
            result = ProduceRequestResult(*tp)
            data = build_batch(chunk_values, chunk_keys, ts,
                               crc=not self.idempotent)    # stamped when first sent
            count_i = len(chunk_values)
            result.record_count = count_i
            result.timestamp = int.from_bytes(data[27:35], "little", signed=True)
            batches.append(ProducerBatch(tp, data, count_i, result, now_s))
        self._enqueue_batches(topic, batches, n)
        return [FutureBatchMetadata(b.result, 0, self._done) for b in batches]

    def send_batch(self, topic: str, partition: int, batch) -> FutureBatchMetadata:
        """Send one prebuilt record batch (``shm.batch.build_batch`` output) as is.
        The broker stamps its own copy, so the same batch may be sent many times."""
        if self._closed:
            raise RuntimeError("send_batch() on a closed producer")
        header = read_header(batch)
        if header.size_bytes != len(batch):
            raise ValueError(f"expected exactly one batch of {header.size_bytes} bytes, "
                             f"got {len(batch)}")
        tp = (topic, int(partition))
        result = ProduceRequestResult(*tp)
        result.record_count = header.record_count
        result.timestamp = header.base_timestamp
        item = ProducerBatch(tp, batch, header.record_count, result, time.monotonic(), owned=False)
        self._enqueue_batches(topic, [item], header.record_count)
        return FutureBatchMetadata(result, 0, self._done)

    def _send_many_keyed(self, topic, values, keys, timestamp_ms) -> list[FutureBatchMetadata]:
        count, _ = self._partitions_of(topic)
        groups: dict[int, list[int]] = collections.defaultdict(list)
        for i, key in enumerate(keys):
            groups[partition_for_key(as_bytes(key, "key"), count)].append(i)
        futures = []
        for p, indexes in sorted(groups.items()):
            vs = [values[i] for i in indexes]
            ks = [keys[i] for i in indexes]
            ts = timestamp_ms
            if ts is not None and not isinstance(ts, (int, np.integer)):
                ts = [ts[i] for i in indexes]
            if isinstance(values, np.ndarray):
                vs = values[indexes]
            futures += self.send_many(topic, vs, ks, partition=p, timestamp_ms=ts)
        return futures

    def _enqueue_batches(self, topic: str, batches: list[ProducerBatch], records: int) -> None:
        with self._lock:
            if self._txn is not None:
                for tp in dict.fromkeys(b.tp for b in batches):
                    self._txn.add_partition(tp)
            self._topics.add(topic)
            self._accumulator.enqueue(batches, records)
        self._wake()

    def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now and wait until every record sent so far is
        acknowledged or failed."""
        accumulator = self._accumulator
        with self._lock:
            accumulator.flushing += 1
        try:
            self._wake()
            with self._done:
                if not self._done.wait_for(lambda: accumulator.incomplete == 0 or
                                           self._io_error is not None, timeout):
                    raise KafkaTimeoutError(f"flush did not finish in {timeout} s "
                                            f"({accumulator.incomplete} records incomplete)")
        finally:
            with self._lock:
                accumulator.flushing -= 1

    # ------------------------------------------------------------- transactions
    def _transactions(self) -> TransactionManager:
        if self._txn is None:
            raise RuntimeError("Transactional method invoked on a non-transactional "
                               "producer (no transactional_id).")
        if self._closed:
            raise RuntimeError("transactional call on a closed producer")
        return self._txn

    def init_transactions(self, timeout_s: float | None = None) -> None:
        """Get this transactional id's producer id and epoch from its coordinator
        (fencing older producers with the same id, and ending their open transaction).
        Waits up to ``timeout_s`` (default ``max_block_ms``); after a timeout, call it
        again."""
        self._transactions().init_transactions(self._block_s(timeout_s))

    def begin_transaction(self) -> None:
        """Start a transaction: what ``send`` sends from now on belongs to it."""
        self._transactions().begin_transaction()

    def send_offsets_to_transaction(self, offsets: dict, group, timeout_s: float | None = None
                                    ) -> None:
        """Commit a consumer group's ``offsets`` {TopicPartition: offset, or
        OffsetAndMetadata / (offset, metadata)} as part of the transaction (visible when
        it commits). ``group``: the group id, or the consumer's ``group_metadata()``
        (its generation and member id are then checked by the group coordinator)."""
        txn = self._transactions()
        if isinstance(group, str):
            group = ConsumerGroupMetadata(group)
        elif not isinstance(group, ConsumerGroupMetadata):
            raise TypeError(f"group must be a group id or ConsumerGroupMetadata, got "
                            f"{type(group).__name__}")
        if not group.group_id:
            raise ValueError("send_offsets_to_transaction needs a group id")
        txn.send_offsets(offsets_and_metadata(offsets), group, self._block_s(timeout_s))

    def commit_transaction(self, timeout_s: float | None = None) -> None:
        """Flush, then commit the transaction (its records and offsets become visible to
        read_committed readers). A failed batch fails the commit: abort then."""
        self._transactions().commit(self._block_s(timeout_s), self._flush_until)

    def abort_transaction(self, timeout_s: float | None = None) -> None:
        """Abort the transaction: unsent records fail (TransactionAbortedError), sent ones
        are marked aborted; read_committed readers never see them."""
        self._transactions().abort(self._block_s(timeout_s))

    def _block_s(self, timeout_s: float | None) -> float:
        return self.max_block_s if timeout_s is None else timeout_s

    def _flush_until(self, result, timeout_s: float | None) -> None:
        """Drain everything at once (as a flush) while waiting for ``result``."""
        accumulator = self._accumulator
        with self._lock:
            accumulator.flushing += 1
        try:
            self._wake()
            result.wait(timeout_s)
        finally:
            with self._lock:
                accumulator.flushing -= 1

    def partitions_for(self, topic: str) -> list[int]:
        count, _ = self._partitions_of(topic)
        return list(range(count))

    def close(self, timeout: float | None = None) -> None:
        """Flush (up to ``timeout``), stop the I/O thread, fail anything left."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._io_error is None:
                self.flush(timeout)
        except KafkaTimeoutError:
            pass
        finally:
            self._running = False
            self._wake_sent = False
            self._wake()
            self._thread.join()
            self._wake_sent = True  # nobody writes to the pipe once it is closed
            os.close(self._wake_r)
            os.close(self._wake_w)

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def metadata(self) -> ClusterMetadata:
        return self._metadata

    # ------------------------------------------------------------- helpers (caller side)
    def _wake(self) -> None:
        if not self._wake_sent:
            self._wake_sent = True
            try:
                os.write(self._wake_w, b"\0")
            except (BlockingIOError, OSError):
                pass

    def _partitions_of(self, topic: str) -> tuple[int, list[int]]:
        """(partition count, partitions with a leader); blocks up to max_block_ms for
        the topic's metadata, as Kafka's send() does."""
        md = self._metadata
        count = md.partition_count(topic)
        if count:
            return count, md.available_partitions(topic)
        with self._lock:
            self._topics.add(topic)
            self._metadata_wanted = True
        self._wake()
        deadline = time.monotonic() + self.max_block_s
        with self._metadata_changed:
            while True:
                md = self._metadata
                count = md.partition_count(topic)
                if count:
                    return count, md.available_partitions(topic)
                if self._io_error is not None:
                    raise self._io_error
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise KafkaTimeoutError(
                        f"Topic {topic} not present in metadata after "
                        f"{int(self.max_block_s * 1000)} ms.")
                self._metadata_changed.wait(min(remaining, 0.5))

    # ------------------------------------------------------------- the I/O thread
    def _run(self) -> None:
        net = Network(self.client_id, self.request_timeout_ms + REQUEST_TIMEOUT_SLACK_MS)
        io = Sender(self, net)
        try:
            net.register_fd(self._wake_r)
            while self._running:
                io.turn()
            io.fail_everything(RuntimeError("the producer was closed"))
        except BaseException as e:  # a bug: fail loudly, never hang the callers
            log.exception("producer I/O thread died")
            self._io_error = e
            io.fail_everything(e)
        finally:
            net.close()


def _data_bytes(values) -> int:
    """The bytes of a binary array's values, nulls as none (``sum(map(len, ...))``)."""
    total = 0
    for chunk in values.chunks if isinstance(values, pa.ChunkedArray) else (values,):
        if len(chunk):
            offsets = np.frombuffer(chunk.buffers()[1], dtype="<i4")
            total += int(offsets[chunk.offset + len(chunk)]) - int(offsets[chunk.offset])
    return total


def offsets_and_metadata(offsets: dict) -> dict:
    """{(topic, partition): OffsetAndMetadata} of ``send_offsets_to_transaction``'s
    offsets: each an int, an OffsetAndMetadata, an (offset, metadata) pair or an object
    with ``offset`` (and ``metadata``, ``leader_epoch``) as kafka-python's."""
    out = {}
    for tp, value in offsets.items():
        topic, partition = tp
        if isinstance(value, int) and not isinstance(value, bool):
            om = OffsetAndMetadata(value)
        elif isinstance(value, tuple) and not hasattr(value, "offset"):
            om = OffsetAndMetadata(*value)
        elif hasattr(value, "offset"):
            om = OffsetAndMetadata(value.offset, getattr(value, "metadata", "") or "",
                                   getattr(value, "leader_epoch", -1)
                                   if getattr(value, "leader_epoch", None) is not None else -1)
        else:
            raise TypeError(f"offset of {topic}-{partition}: {value!r:.80}")
        if not isinstance(om.offset, int) or om.offset < 0:
            raise ValueError(f"offset of {topic}-{partition} must be >= 0, got {om.offset!r}")
        out[TopicPartition(str(topic), int(partition))] = om
    return out
