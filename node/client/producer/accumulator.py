"""Kafka's RecordAccumulator: the records ``send`` appended and the sender has not yet
taken, per partition, and the encoding of a partition's records into one batch.

Rules:
- ``send`` does as little as possible: it appends value, key, timestamp (and headers,
  checked by ``send``) to the partition's open batch (``OpenBatch``); nothing is
  encoded in the caller's thread. A batch keeps a headers list only once one of its
  records has headers, so records without any cost nothing more than before.
- An open batch is sealed when it reaches ``batch_size`` bytes; the sender takes sealed
  ones at once, and open ones when ``linger_ms`` has passed (or at once with
  ``linger_ms=0`` or during a flush), and encodes each into ONE record batch
  (``encode``: ``shm.batch``'s encoder, its small-batch fast path first).
- Order within a partition is send order: prebuilt batches (``send_many``,
  ``send_batch``) go after the partition's open batch, which is sealed first.
- ``incomplete`` counts the records sent and not yet completed (``flush`` waits for 0).
- Its state is shared by the callers' threads and the I/O thread: every change is made
  under ``lock`` (the producer's), as each method says.
"""
from __future__ import annotations

import time

from node.client.producer.futures import ProduceRequestResult
from shm.batch import build_batch, encode_small_batch

RECORD_OVERHEAD_BYTES = 12  # timestamp delta + key offset + value offset per record
HEADER_OVERHEAD_BYTES = 3   # key and value length varints of a small header, roughly


def headers_bytes(headers: list) -> int:
    """About what ``headers`` add to a batch (its ``batch_size`` accounting)."""
    return 4 + sum(HEADER_OVERHEAD_BYTES + len(k) + (len(v) if v is not None else 0)
                   for k, v in headers)


class OpenBatch:
    """Records of one partition appended by send() and not yet encoded."""

    __slots__ = ("tp", "values", "keys", "timestamps", "headers", "result", "bytes",
                 "created_s", "has_keys", "has_timestamps")

    def __init__(self, tp, now_s: float):
        self.tp = tp
        self.values: list = []
        self.keys: list = []
        self.timestamps: list = []
        self.headers: list | None = None  # per record (None: none), once one has some
        self.result = ProduceRequestResult(tp[0], tp[1])
        self.bytes = 0
        self.created_s = now_s
        self.has_keys = False
        self.has_timestamps = False


class ProducerBatch:
    """One encoded record batch on its way to the leader."""

    __slots__ = ("tp", "data", "record_count", "result", "created_s", "attempts", "ready_s",
                 "last_error", "sent_epoch", "owned", "producer")

    def __init__(self, tp, data, record_count: int, result: ProduceRequestResult,
                 created_s: float, owned: bool = True):
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


def encode(buf: OpenBatch, *, crc: bool = True) -> ProducerBatch:
    """Encode an open buffer into one record batch (in the I/O thread); ``crc=False``
    for a batch stamped before it is sent (``shm.batch.build_batch``)."""
    now_ms = int(time.time() * 1000)
    timestamps = now_ms
    if buf.has_timestamps:
        timestamps = [now_ms if t is None else t for t in buf.timestamps]
        buf.result.timestamps = timestamps
    keys = buf.keys if buf.has_keys else None
    data = encode_small_batch(buf.values, keys, timestamps, buf.headers, crc=crc)  # fast path
    if data is None:
        data = build_batch(buf.values, keys, timestamps, headers=buf.headers, crc=crc)
    buf.result.record_count = len(buf.values)
    buf.result.timestamp = now_ms if not buf.has_timestamps else min(timestamps)
    return ProducerBatch(buf.tp, data, len(buf.values), buf.result, buf.created_s)


class RecordAccumulator:
    """Open and sealed batches of every partition, in send order."""

    def __init__(self, lock, batch_size: int, linger_s: float):
        self.lock = lock
        self.batch_size = batch_size
        self.linger_s = linger_s
        self.open: dict[tuple, OpenBatch] = {}
        self.sealed: list = []  # OpenBatch or ProducerBatch, in send order
        self.incomplete = 0  # records not yet completed
        self.flushing = 0

    def has_open(self, tp) -> bool:
        return tp in self.open

    def append(self, tp, value, key, timestamp_ms,
               headers: list | None = None) -> tuple[ProduceRequestResult, int, bool]:
        """Add one record to ``tp``'s open batch (the caller holds ``lock``); ``headers``:
        None or a non-empty list of (str, bytes | None), already checked. Returns the
        batch's result, the record's index in it, and whether the sender should wake."""
        buf = self.open.get(tp)
        if buf is None:
            buf = self.open[tp] = OpenBatch(tp, time.monotonic())
        index = len(buf.values)
        buf.values.append(value)
        buf.keys.append(key)
        buf.timestamps.append(timestamp_ms)
        if key is not None:
            buf.has_keys = True
        if timestamp_ms is not None:
            buf.has_timestamps = True
        if headers is not None or buf.headers is not None:
            if buf.headers is None:
                buf.headers = [None] * index
            buf.headers.append(headers)
            if headers is not None:
                buf.bytes += headers_bytes(headers)
        buf.bytes += RECORD_OVERHEAD_BYTES + (len(value) if value is not None else 0) + \
            (len(key) if key is not None else 0)
        self.incomplete += 1
        if buf.bytes >= self.batch_size:
            del self.open[tp]
            self.sealed.append(buf)
            wake = True
        else:
            wake = self.linger_s == 0 or index == 0   # a new batch: Kafka's doSend wakes the sender
        return buf.result, index, wake

    def enqueue(self, batches: list[ProducerBatch], records: int) -> None:
        """Add encoded batches of ``records`` records (the caller holds ``lock``)."""
        for batch in batches:
            open_buf = self.open.pop(batch.tp, None)
            if open_buf is not None:  # keep send order within the partition
                self.sealed.append(open_buf)
            self.sealed.append(batch)
        self.incomplete += records

    def drainable(self) -> bool:
        """Whether ``drain`` would take something now (read without the lock)."""
        return bool(self.sealed) or (bool(self.open) and (self.linger_s == 0 or self.flushing > 0))

    def drain(self, now: float) -> list:
        """Take the sealed batches and the open ones that are due, in send order."""
        with self.lock:
            taken = self.sealed
            self.sealed = []
            if self.open:
                if self.linger_s == 0 or self.flushing:
                    taken += self.open.values()
                    self.open = {}
                else:
                    for tp, buf in list(self.open.items()):
                        if now - buf.created_s >= self.linger_s:
                            taken.append(buf)
                            del self.open[tp]
        return taken

    def linger_expiry_s(self, now: float) -> float | None:
        """When the oldest open batch's linger ends; None if nothing lingers."""
        if not (self.linger_s and self.open):
            return None
        return min((b.created_s for b in list(self.open.values())), default=now) + self.linger_s

    def take_all(self) -> list:
        """Take everything, due or not (the producer is failing)."""
        with self.lock:
            taken = self.sealed + list(self.open.values())
            self.sealed, self.open = [], {}
        return taken
