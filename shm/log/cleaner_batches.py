"""Rewriting one batch for the cleaner: the kept records of a batch, as batches. Pure.

Our batch format has no per-record offset (a record's offset is the batch's base offset
plus its index), so a batch that loses records in the middle becomes one batch per run
of consecutive kept records. Each run's batch keeps every record's offset and what the
batch said of it:
- base offset = the original base + the run's first index; base sequence likewise
  (wrapping at 2**31 - 1 to 0, as Kafka's sequences), when the batch has one;
- producer id and epoch, partition leader epoch, the codec hint, the timestamp type
  (LogAppendTime) and the transactional bit are kept (a control batch has one record:
  it is kept whole or dropped); the headers column is cut to the run;
- CreateTime: the base timestamp is the run's smallest and the deltas are recomputed,
  so every record keeps its timestamp; LogAppendTime: the batch's max timestamp (every
  record's timestamp) is kept, the deltas are carried over;
- null keys and null values keep their validity bitmaps (cut to the run), written only
  when the run has a null, as ``build_batch`` does;
- a batch whose records are all kept is copied byte for byte (no re-encoding).
"""
from __future__ import annotations

import numpy as np

from shm import batch as codec

SEQUENCE_WRAP = 2**31  # Kafka's sequences run 0 .. Int.MAX_VALUE, then 0 again


def runs(keep: np.ndarray) -> list[tuple[int, int]]:
    """[start, stop) of each run of True in ``keep``."""
    if not len(keep):
        return []
    padded = np.concatenate(([False], keep.astype(bool), [False]))
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    return list(zip(edges[0::2].tolist(), edges[1::2].tolist()))


def _bits(bitmap, start: int, stop: int) -> np.ndarray | None:
    """The validity bits [start, stop) repacked; None when none of them is null."""
    if bitmap is None:
        return None
    bits = np.unpackbits(np.frombuffer(bitmap, np.uint8), bitorder="little")[start:stop]
    if bits.all():
        return None
    return np.packbits(bits, bitorder="little")


def _cut(offsets: np.ndarray, data, start: int, stop: int) -> tuple[np.ndarray, memoryview]:
    low, high = int(offsets[start]), int(offsets[stop])
    return (offsets[start:stop + 1].astype(np.int64) - low).astype("<i4"), data[low:high]


def kept_batches(buf, position: int, keep: np.ndarray) -> list[bytes]:
    """The batches holding the kept records of the batch at ``position`` of ``buf``
    (``keep``: one bool per record); [] if none is kept."""
    header = codec.read_header(buf, position)
    n = header.record_count
    assert len(keep) == n, (len(keep), n)
    if not keep.any():
        return []
    if keep.all():
        return [bytes(memoryview(buf)[position:position + header.size_bytes])]
    c = codec.read_columns(buf, position, verify_crc=False)
    log_append_time = bool(header.attributes & codec.ATTR_LOG_APPEND_TIME)
    out = []
    for start, stop in runs(keep):
        deltas = c.timestamp_deltas[start:stop].astype(np.int64)
        if log_append_time:
            base_timestamp = header.max_timestamp - int(deltas.max())
        else:
            stamps = deltas + header.base_timestamp
            base_timestamp = int(stamps.min())
            deltas = stamps - base_timestamp
        key_offsets, key_data = _cut(c.key_offsets, c.key_data, start, stop)
        value_offsets, value_data = _cut(c.value_offsets, c.value_data, start, stop)
        header_offsets = header_data = None
        if c.header_offsets is not None:
            header_offsets, header_data = _cut(c.header_offsets, c.header_data, start, stop)
        sequence = header.base_sequence
        if sequence >= 0:
            sequence = (sequence + start) % SEQUENCE_WRAP
        out.append(bytes(codec.encode_columns(
            deltas.astype("<i4"), key_offsets, key_data, value_offsets, value_data,
            key_validity=_bits(c.key_validity, start, stop),
            value_validity=_bits(c.value_validity, start, stop),
            header_offsets=header_offsets, header_data=header_data,
            base_timestamp=base_timestamp, base_offset=header.base_offset + start,
            partition_leader_epoch=header.partition_leader_epoch,
            producer_id=header.producer_id, producer_epoch=header.producer_epoch,
            base_sequence=sequence, codec_hint=header.attributes & codec.ATTR_CODEC_MASK,
            log_append_time=log_append_time, transactional=header.transactional)))
    return out
