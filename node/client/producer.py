"""The producer: ``send()`` appends to a per-partition buffer, an I/O thread does the rest.

Theory of operation (Kafka's RecordAccumulator + Sender, simplified):

- ``send()`` runs in the caller's thread and does as little as possible: pick the
  partition (explicit, murmur2 of the key, or the sticky partition of KIP-480), append
  value/key/timestamp to that partition's open buffer, return a future that points at
  (buffer, index). No encoding happens here.
- The I/O thread owns the sockets (a ``Network``). Each turn it takes the buffers that
  are ready (``linger_ms`` elapsed, ``batch_size`` reached, or a flush) and encodes
  each into ONE record batch (``shm.batch.build_batch``), queues the batches per
  partition, and sends one Produce request per leader broker carrying one frame per
  partition (all of that partition's queued batches back to back).
- Ordering: a partition with a request in flight is muted (as Kafka does when it must
  keep order) — its next batches wait and then travel together in the next request,
  which is also what makes batches big under load. ``max_in_flight_requests_per_connection``
  bounds the requests in flight per broker.
- Responses complete futures: record i of a batch gets offset base_offset + i.
  Retriable errors (ErrorCode.NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE,
  UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, a lost
  connection, ...) put the batches back at the front of their partition's queue after
  ``retry_backoff_ms`` and refresh metadata, up to ``retries`` attempts and within
  ``delivery_timeout_ms`` of the batch's creation; then the last error completes them.
- A lost connection fails its requests at once (``node.client.network.Network``). A leader
  that keeps its connection but does not answer (SIGSTOP, a partition) is suspected
  after 1 s: metadata is checked, and if every partition of the request has a newer
  leader epoch, the request is abandoned and retried at the new leader instead of
  waiting for ``request_timeout_ms``. Backoffs after leadership errors end as soon as
  fresh metadata shows a newer leader epoch.
- acks=0: nothing comes back; futures complete when the request is handed to ZeroMQ,
  with offset -1 (as Kafka).

``send_many(topic, values, ...)`` is the bulk path for the perf tool: it encodes
batches of up to ``batch_size`` bytes directly from a list / 2-D uint8 numpy array /
pyarrow binary array (no per-record Python work) and returns one future per batch.

Idempotence (KIP-98 without transactions; ``enable_idempotence``, on by default with
acks=all as in Kafka 3, refused with acks 0/1): the producer gets an id and epoch from
a broker (InitProducerId) before its first send, and stamps each batch, when it is
first sent, with them and the partition's next sequence number (``stamp_producer``;
retries keep them). One request in flight per partition (the muting above), so
sequences reach the leader in order; a retry resends exactly the batches first sent
together, and the leader answers a retry of appended batches with their original
offsets instead of writing them twice. After a batch fails for good, or the leader reports a sequence gap
or an unknown producer, the producer waits for its requests in flight, takes the next
epoch and numbers the unsent batches from 0 again (KIP-360).

``key_serializer`` / ``value_serializer`` (kafka-python's names) turn what ``send`` is
given into bytes (e.g. ``node.client.avro.AvroSerializer``); ``send_many`` takes bytes.
"""
from __future__ import annotations

import collections
import itertools
import logging
import os
import struct
import threading
import time

import numpy as np
import pyarrow as pa

from node.wire import errors as E
from node.wire.errors import ErrorCode
from node.wire import protocol as P
from node.client.metadata import ClusterMetadata, parse_bootstrap, parse_metadata
from node.client.network import Network
from node.client.types import (METADATA_STALE_CODES, BatchMetadata, KafkaTimeoutError,
                               RecordMetadata, error)
from node.client.partitioner import StickyPartitioner, partition_for_key
from crc32c import crc32c

from shm.batch import (ATTR_KEY_NULLS, CRC, CRC_POSITION, CRC_START, HEADER, HEADER_BYTES,
                       LENGTH_OVERHEAD_BYTES, MAGIC, NO_PRODUCER_EPOCH, NO_PRODUCER_ID,
                       NO_SEQUENCE, build_batch, read_header, stamp_producer)
from shm.config import BATCH_BYTES_MAX

log = logging.getLogger("minikafka.producer")

RECORD_OVERHEAD_BYTES = 12  # timestamp delta + key offset + value offset per record
IDEMPOTENT_IN_FLIGHT_MAX = 5
SEQUENCE_WRAP = 2**31
REQUEST_TIMEOUT_SLACK_MS = 2000  # the broker answers REQUEST_TIMED_OUT before we give up
IDLE_POLL_MS = 1000
# A Produce unanswered this long makes the producer check whether its leader moved.
PRODUCE_SUSPECT_MS = 1000
METADATA_MAX_AGE_MS = 300_000
_client_ids = itertools.count(1)


# ----------------------------------------------------------------- futures

class _Result:
    """The outcome of one batch, shared by the futures of its records."""

    __slots__ = ("topic", "partition", "base_offset", "record_count", "timestamp",
                 "timestamps", "error", "done", "callbacks")

    def __init__(self, topic: str, partition: int):
        self.topic = topic
        self.partition = partition
        self.base_offset = -1
        self.record_count = 0
        self.timestamp = -1
        self.timestamps = None
        self.error: BaseException | None = None
        self.done = False
        self.callbacks = None


class _Future:
    __slots__ = ("_result", "_index", "_done_condition")

    def __init__(self, result: _Result, index: int, done_condition: threading.Condition):
        self._result = result
        self._index = index
        self._done_condition = done_condition

    def done(self) -> bool:
        return self._result.done

    def _wait(self, timeout: float | None) -> _Result:
        result = self._result
        if not result.done:
            with self._done_condition:
                if not self._done_condition.wait_for(lambda: result.done, timeout):
                    raise KafkaTimeoutError(f"no acknowledgement within {timeout} s")
        if result.error is not None:
            raise result.error
        return result

    def exception(self) -> BaseException | None:
        return self._result.error if self._result.done else None

    def succeeded(self) -> bool:
        return self._result.done and self._result.error is None

    def failed(self) -> bool:
        return self._result.done and self._result.error is not None

    def add_callback(self, fn) -> "_Future":
        """``fn(metadata, exception)`` — called in the I/O thread (or now, if done)."""
        if self._result.done:
            self._call(fn)
        else:
            with self._done_condition:
                if not self._result.done:
                    if self._result.callbacks is None:
                        self._result.callbacks = []
                    self._result.callbacks.append((self, fn))
                    return self
            self._call(fn)
        return self

    def _call(self, fn) -> None:
        try:
            if self._result.error is not None:
                fn(None, self._result.error)
            else:
                fn(self._value(self._result), None)
        except Exception:
            log.exception("producer callback failed")


class FutureRecordMetadata(_Future):
    """``get(timeout)`` -> RecordMetadata(topic, partition, offset, timestamp)."""

    __slots__ = ()

    def get(self, timeout: float | None = None) -> RecordMetadata:
        return self._value(self._wait(timeout))

    def _value(self, r: _Result) -> RecordMetadata:
        offset = r.base_offset + self._index if r.base_offset >= 0 else -1
        ts = r.timestamps[self._index] if r.timestamps is not None else r.timestamp
        return RecordMetadata(r.topic, r.partition, offset, ts)


class FutureBatchMetadata(_Future):
    """``get(timeout)`` -> BatchMetadata(topic, partition, base_offset, record_count, timestamp)."""

    __slots__ = ()

    def get(self, timeout: float | None = None) -> BatchMetadata:
        return self._value(self._wait(timeout))

    def _value(self, r: _Result) -> BatchMetadata:
        return BatchMetadata(r.topic, r.partition, r.base_offset, r.record_count, r.timestamp)


# ----------------------------------------------------------------- buffers

class _Open:
    """Records of one partition appended by send() and not yet encoded."""

    __slots__ = ("tp", "values", "keys", "timestamps", "result", "bytes", "created_s",
                 "has_keys", "has_timestamps")

    def __init__(self, tp, now_s: float):
        self.tp = tp
        self.values: list = []
        self.keys: list = []
        self.timestamps: list = []
        self.result = _Result(tp[0], tp[1])
        self.bytes = 0
        self.created_s = now_s
        self.has_keys = False
        self.has_timestamps = False


class _Batch:
    """One encoded record batch on its way to the leader."""

    __slots__ = ("tp", "data", "record_count", "result", "created_s", "attempts", "ready_s",
                 "last_error", "sent_epoch", "owned", "producer")

    def __init__(self, tp, data, record_count: int, result: _Result, created_s: float,
                 owned: bool = True):
        self.tp = tp
        self.data = data
        self.owned = owned          # data is ours to stamp in place (else copied first)
        self.producer: tuple | None = None   # (id, epoch, base sequence) once stamped
        self.record_count = record_count
        self.result = result
        self.created_s = created_s
        self.attempts = 0
        self.ready_s = 0.0
        self.last_error: BaseException | None = None
        self.sent_epoch = -1  # the leader epoch (from metadata) of its last attempt


def _as_bytes(value, what: str) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    raise TypeError(f"{what} must be bytes or str, got {type(value).__name__}")


SMALL_BATCH_RECORDS_MAX = 256  # below this, plain struct packing beats numpy/pyarrow


def encode_small_batch(values: list, keys: list | None, timestamps) -> bytearray | None:
    """``shm.batch.build_batch`` for a few records, byte for byte, without numpy or
    pyarrow (their fixed cost dominates a one-record batch: ~50 us vs ~8 us). Returns
    None when the input needs the general encoder (null values, mixed null keys)."""
    n = len(values)
    if not 1 <= n <= SMALL_BATCH_RECORDS_MAX or None in values:
        return None
    if isinstance(timestamps, int):
        base_timestamp = max_timestamp = timestamps
        deltas = bytes(4 * n)
    else:
        base_timestamp, max_timestamp = min(timestamps), max(timestamps)
        if max_timestamp - base_timestamp > 2**31 - 1:
            return None
        deltas = struct.pack(f"<{n}i", *[t - base_timestamp for t in timestamps])
    attributes = 0
    if keys is None:
        key_offsets, key_data, key_bitmap = bytes(4 * (n + 1)), b"", bytes((n + 7) // 8)
        attributes |= ATTR_KEY_NULLS
    else:
        if None in keys:
            return None
        key_offsets = struct.pack(f"<{n + 1}i", *itertools.accumulate(map(len, keys),
                                                                        initial=0))
        key_data, key_bitmap = b"".join(keys), b""
    value_offsets = struct.pack(f"<{n + 1}i", *itertools.accumulate(map(len, values),
                                                                      initial=0))
    body = b"".join((deltas, key_offsets, value_offsets, key_data, *values, key_bitmap))
    total = HEADER_BYTES + len(body)
    if total > BATCH_BYTES_MAX:
        return None
    buf = bytearray(total)
    buf[HEADER_BYTES:] = body
    HEADER.pack_into(buf, 0, 0, total - LENGTH_OVERHEAD_BYTES, -1, MAGIC, 0, attributes,
                     n - 1, base_timestamp, max_timestamp, NO_PRODUCER_ID, NO_PRODUCER_EPOCH,
                     NO_SEQUENCE, n)
    CRC.pack_into(buf, CRC_POSITION, crc32c(memoryview(buf)[CRC_START:]))
    return buf


def _encode(buf: _Open) -> _Batch:
    """Encode an open buffer into one record batch (in the I/O thread)."""
    now_ms = int(time.time() * 1000)
    timestamps = now_ms
    if buf.has_timestamps:
        timestamps = [now_ms if t is None else t for t in buf.timestamps]
        buf.result.timestamps = timestamps
    keys = buf.keys if buf.has_keys else None
    data = encode_small_batch(buf.values, keys, timestamps)
    if data is None:
        data = build_batch(buf.values, keys, timestamps)
    buf.result.record_count = len(buf.values)
    buf.result.timestamp = now_ms if not buf.has_timestamps else min(timestamps)
    return _Batch(buf.tp, data, len(buf.values), buf.result, buf.created_s)


# ----------------------------------------------------------------- the producer

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
                 enable_idempotence: bool | None = None):
        self.key_serializer = key_serializer
        self.value_serializer = value_serializer
        self.acks = {"all": -1, -1: -1, "-1": -1, 1: 1, "1": 1, 0: 0, "0": 0}.get(acks)
        if self.acks is None:
            raise ValueError(f"acks must be 'all', -1, 0 or 1, got {acks!r}")
        if batch_size < 1 or linger_ms < 0 or retries < 0 or request_timeout_ms < 1 or \
                max_in_flight_requests_per_connection < 1 or max_request_size < 1024:
            raise ValueError("producer configs out of range")
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
        self._open: dict[tuple, _Open] = {}
        self._sealed: list = []  # _Open or _Batch, in send order
        self._topics: set[str] = set()
        self._sticky = StickyPartitioner(partitioner_seed)
        self._sticky_started: set[str] = set()
        self._incomplete = 0  # records not yet completed
        self._flushing = 0
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
        self._thread = threading.Thread(target=self._run, name=f"{self.client_id}-io",
                                        daemon=True)
        self._thread.start()

    # ------------------------------------------------------------- public API
    def send(self, topic: str, value, key=None, partition: int | None = None,
             timestamp_ms: int | None = None) -> FutureRecordMetadata:
        """Queue one record; returns a future (``.get(timeout)`` -> RecordMetadata)."""
        if self._closed:
            raise RuntimeError("send() on a closed producer")
        if self.value_serializer is not None:
            value = self.value_serializer(value)
        if self.key_serializer is not None and key is not None:
            key = self.key_serializer(key)
        if value.__class__ is not bytes:
            value = None if value is None else _as_bytes(value, "value")
        if key is not None and key.__class__ is not bytes:
            key = _as_bytes(key, "key")
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
                if (topic, partition) not in self._open:  # a new batch: KIP-480 switches
                    if topic in self._sticky_started:
                        partition = self._sticky.on_new_batch(topic, count, available)
                    self._sticky_started.add(topic)
            tp = (topic, partition)
            buf = self._open.get(tp)
            if buf is None:
                buf = self._open[tp] = _Open(tp, time.monotonic())
                self._topics.add(topic)
            index = len(buf.values)
            buf.values.append(value)
            buf.keys.append(key)
            buf.timestamps.append(timestamp_ms)
            if key is not None:
                buf.has_keys = True
            if timestamp_ms is not None:
                buf.has_timestamps = True
            buf.bytes += RECORD_OVERHEAD_BYTES + (len(value) if value is not None else 0) + \
                (len(key) if key is not None else 0)
            self._incomplete += 1
            if buf.bytes >= self.batch_size:
                del self._open[tp]
                self._sealed.append(buf)
                wake = True
            else:
                wake = self.linger_s == 0 or index == 0   # a new batch: Kafka's doSend wakes the sender
        if wake and self._sleeping:
            self._wake()
        return FutureRecordMetadata(buf.result, index, self._done)

    def send_many(self, topic: str, values, keys=None, partition: int | None = None,
                  timestamp_ms=None) -> list[FutureBatchMetadata]:
        """Bulk send: records are encoded here, ``batch_size`` bytes per batch, without
        per-record Python work. ``values``: list of bytes, 2-D uint8 numpy array or
        pyarrow binary array. Unkeyed records without ``partition`` go to the
        available partitions round robin, one batch each. Returns a future per batch."""
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
            record_bytes = max(1, sum(map(len, values)) // n)
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
            result = _Result(*tp)
            data = build_batch(chunk_values, chunk_keys, ts)
            count_i = len(chunk_values)
            result.record_count = count_i
            result.timestamp = int.from_bytes(data[27:35], "little", signed=True)
            batches.append(_Batch(tp, data, count_i, result, now_s))
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
        result = _Result(*tp)
        result.record_count = header.record_count
        result.timestamp = header.base_timestamp
        item = _Batch(tp, batch, header.record_count, result, time.monotonic(), owned=False)
        self._enqueue_batches(topic, [item], header.record_count)
        return FutureBatchMetadata(result, 0, self._done)

    def _send_many_keyed(self, topic, values, keys, timestamp_ms) -> list[FutureBatchMetadata]:
        count, _ = self._partitions_of(topic)
        groups: dict[int, list[int]] = collections.defaultdict(list)
        for i, key in enumerate(keys):
            groups[partition_for_key(_as_bytes(key, "key"), count)].append(i)
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

    def _enqueue_batches(self, topic: str, batches: list[_Batch], records: int) -> None:
        with self._lock:
            self._topics.add(topic)
            for batch in batches:
                open_buf = self._open.pop(batch.tp, None)
                if open_buf is not None:  # keep send order within the partition
                    self._sealed.append(open_buf)
                self._sealed.append(batch)
            self._incomplete += records
        self._wake()

    def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now and wait until every record sent so far is
        acknowledged or failed."""
        with self._lock:
            self._flushing += 1
        try:
            self._wake()
            with self._done:
                if not self._done.wait_for(lambda: self._incomplete == 0 or
                                           self._io_error is not None, timeout):
                    raise KafkaTimeoutError(f"flush did not finish in {timeout} s "
                                            f"({self._incomplete} records incomplete)")
        finally:
            with self._lock:
                self._flushing -= 1

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
        io = _Sender(self, net)
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


class _Sender:
    """The I/O thread's state: per-partition queues, in-flight requests, metadata."""

    def __init__(self, producer: Producer, network: Network):
        self.p = producer
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

    # -- one turn of the loop
    def turn(self) -> None:
        p = self.p
        now = time.monotonic()
        self.drain(now)
        self.expire(now)
        self.check_suspects(now)
        self.maybe_request_metadata(now)
        self.send_ready(now)
        timeout_ms = self.poll_timeout_ms(time.monotonic())
        p._sleeping = True
        if timeout_ms > 0 and self.drainable():
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

    def drainable(self) -> bool:
        p = self.p
        return bool(p._sealed) or (bool(p._open) and (p.linger_s == 0 or p._flushing > 0))

    def drain(self, now: float) -> None:
        p = self.p
        with p._lock:
            taken = p._sealed
            p._sealed = []
            if p._open:
                if p.linger_s == 0 or p._flushing:
                    taken += p._open.values()
                    p._open = {}
                else:
                    for tp, buf in list(p._open.items()):
                        if now - buf.created_s >= p.linger_s:
                            taken.append(buf)
                            del p._open[tp]
        for item in taken:
            if isinstance(item, _Open):
                try:
                    item = _encode(item)
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
        p = self.p
        wake_s = now + IDLE_POLL_MS / 1000
        if p.linger_s and p._open:
            wake_s = min(wake_s, min((b.created_s for b in list(p._open.values())),
                                     default=now) + p.linger_s)
        for tp, queue in self.queues.items():
            if queue and tp not in self.muted:
                wake_s = min(wake_s, max(queue[0].ready_s, now + 0.001))
        if self.metadata_due() and not self.metadata_requests:
            wake_s = min(wake_s, self.metadata_next_s)
        if self.produce_in_flight:
            oldest_s = min(sent_s for _, _, _, sent_s in self.produce_in_flight.values())
            wake_s = min(wake_s, max(oldest_s + PRODUCE_SUSPECT_MS / 1000, self.suspect_next_s))
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
            cid = self.net.send(endpoint, P.ApiKey.METADATA, {"topics": topics},
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
        except P.ProtocolError as e:
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
        if not p.idempotent or (self.producer_id >= 0 and not self.epoch_bump_wanted):
            return True
        if self.init_in_flight or now < self.init_next_s or \
                (self.epoch_bump_wanted and self.produce_in_flight):
            return False
        md = p._metadata
        endpoints = [e for e in (md.endpoint(b) for b in sorted(md.brokers)) if e]
        endpoint = (endpoints or p.bootstrap)[0]
        body = {"producer_id": self.producer_id if self.epoch_bump_wanted else -1,
                "producer_epoch": self.producer_epoch if self.epoch_bump_wanted else -1}
        try:
            self.net.send(endpoint, P.ApiKey.INIT_PRODUCER_ID, body, context=("init",),
                          timeout_ms=p.request_timeout_ms)
            self.init_in_flight = True
        except E.KafkaError:
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

    def stamped_now(self, batch: _Batch) -> bool:
        """The batch carries our current id and epoch (it was sent before: a retry)."""
        return batch.producer is not None and \
            batch.producer[:2] == (self.producer_id, self.producer_epoch)

    def stamp(self, batch: _Batch, group: int) -> None:
        """Give ``batch`` our id, epoch and its partition's next sequence (a retry keeps
        them within an epoch); ``group`` names the request it is first sent in."""
        pid, epoch = self.producer_id, self.producer_epoch
        sequence = self.next_sequence.get(batch.tp, 0)
        if not batch.owned:
            batch.data = bytearray(batch.data)
            batch.owned = True
        stamp_producer(batch.data, pid, epoch, sequence)
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
        context = ("produce", sent)
        try:
            cid = self.net.send(endpoint, P.ApiKey.PRODUCE, body, frames, context=context,
                                expect_response=p.acks != 0)
        except E.KafkaError as e:
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
        if kind == "metadata":
            self.on_metadata(completion)
        elif kind == "init":
            self.on_init(completion)
        elif kind == "produce":
            self.on_produce(completion)
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

    def retry_or_fail(self, tp, batches: list[_Batch], e: BaseException, now: float) -> None:
        p = self.p
        code = getattr(e, "code", -1)
        if code in METADATA_STALE_CODES:
            p._metadata_wanted = True
        retriable = getattr(e, "retriable", False)
        if p.idempotent and code in (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                     ErrorCode.UNKNOWN_PRODUCER_ID):
            # Not appended: the leader lost track of our sequence (a batch before it
            # failed, or its state went with truncated data). A new epoch, then again.
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

    def succeed(self, batch: _Batch, base_offset: int) -> None:
        r = batch.result
        r.base_offset = base_offset
        r.record_count = batch.record_count
        self.finish(r, batch.record_count)

    def fail(self, batch: _Batch, e: BaseException) -> None:
        if self.p.idempotent and batch.producer is not None:
            self.epoch_bump_wanted = True   # its sequence is a gap now: start an epoch
        self.fail_result(batch.result, batch.record_count, e)

    def fail_result(self, r: _Result, records: int, e: BaseException) -> None:
        r.error = e
        self.finish(r, records)

    def finish(self, r: _Result, records: int) -> None:
        # ``done`` and the callback list change together under the futures' condition,
        # so a callback added while the batch completes is either run here or by
        # add_callback itself, never lost.
        with self.p._done:
            assert not r.done, ("a batch completed twice", r.topic, r.partition)
            r.done = True
            callbacks, r.callbacks = r.callbacks, None
        with self.p._lock:
            self.p._incomplete -= records
        for future, fn in callbacks or ():
            future._call(fn)

    def notify(self) -> None:
        with self.p._done:
            self.p._done.notify_all()

    def fail_everything(self, e: BaseException) -> None:
        p = self.p
        with p._lock:
            taken = p._sealed + list(p._open.values())
            p._sealed, p._open = [], {}
        for item in taken:
            if isinstance(item, _Open):
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
        self.notify()
        with p._metadata_changed:
            p._metadata_changed.notify_all()
