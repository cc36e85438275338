"""Kafka's control records: the COMMIT/ABORT markers that end a transaction (KIP-98).

A marker is a control batch (``shm.batch``: ATTR_TRANSACTIONAL | ATTR_CONTROL,
base_sequence -1, exactly one record) whose one record carries, as Kafka's
ControlRecordType and EndTransactionMarker define them (big-endian, as Kafka):

    key   = version i16 (0) | type i16 (0 ABORT, 1 COMMIT)          4 bytes
    value = version i16 (0) | coordinator_epoch i32                 6 bytes

So a marker's key and value bytes are Kafka's own: the Kafka listener passes them
through unchanged. Parsing follows Kafka: a negative version is corrupt, a newer version
is read as version 0 (its first fields are the same; extra bytes are ignored). Control
types other than ABORT/COMMIT (Kafka's KRaft types 2..6) have no place in a partition
log here: ``parse_marker`` refuses them as corrupt.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from shm import batch
from shm.batch import CorruptRecordError

ABORT, COMMIT = 0, 1
KEY_VERSION = 0                     # Kafka's ControlRecordType.CURRENT_CONTROL_RECORD_KEY_VERSION
VALUE_VERSION = 0                   # Kafka's EndTransactionMarker.CURRENT_END_TXN_MARKER_VERSION
KEY = struct.Struct(">hh")          # version, type
VALUE = struct.Struct(">hi")        # version, coordinator_epoch
assert KEY.size == 4 and VALUE.size == 6  # Kafka's CURRENT_CONTROL_RECORD_KEY_SIZE, ..._VALUE_SIZE


@dataclass(frozen=True)
class Marker:
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int


def marker_key(commit: bool) -> bytes:
    return KEY.pack(KEY_VERSION, COMMIT if commit else ABORT)


def marker_value(coordinator_epoch: int) -> bytes:
    return VALUE.pack(VALUE_VERSION, coordinator_epoch)


def build_marker(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                 timestamp_ms: int) -> bytearray:
    """A whole control batch (our format) at offset 0, writable: the leader stamps it."""
    if producer_id < 0 or producer_epoch < 0:
        raise ValueError(f"a marker needs a producer id and epoch, got {producer_id}, "
                         f"{producer_epoch}")
    if not -2**31 <= coordinator_epoch < 2**31:
        raise ValueError(f"coordinator epoch {coordinator_epoch} is not an int32")
    return batch.build_batch([marker_value(coordinator_epoch)], [marker_key(commit)],
                             timestamp_ms, producer_id=producer_id,
                             producer_epoch=producer_epoch, transactional=True, control=True)


def parse_record(key: bytes | None, value: bytes | None) -> tuple[bool, int]:
    """(commit, coordinator_epoch) of a control record's key and value bytes; raises
    CorruptRecordError if they are not a COMMIT/ABORT marker."""
    if key is None or len(key) < KEY.size:
        raise CorruptRecordError(f"control record key of {0 if key is None else len(key)} "
                                 f"bytes, Kafka's has {KEY.size}")
    key_version, kind = KEY.unpack_from(key)
    if key_version < 0:
        raise CorruptRecordError(f"control record key version {key_version}")
    if kind not in (ABORT, COMMIT):
        raise CorruptRecordError(f"control record type {kind} is not a transaction marker")
    if value is None or len(value) < VALUE.size:
        raise CorruptRecordError(f"end transaction marker value of "
                                 f"{0 if value is None else len(value)} bytes, Kafka's has "
                                 f"{VALUE.size}")
    value_version, coordinator_epoch = VALUE.unpack_from(value)
    if value_version < 0:
        raise CorruptRecordError(f"end transaction marker version {value_version}")
    return kind == COMMIT, coordinator_epoch


def parse_marker(batch_view, position: int = 0) -> Marker | None:
    """The marker of the control batch at ``position`` (checked: header, CRC and
    layout); None if that batch is not a control batch (only its header is read then).
    CorruptRecordError for a bad batch or a control record that is not a COMMIT/ABORT
    marker."""
    header = batch.read_header(batch_view, position)
    if not header.control:
        return None
    columns = batch.read_columns(batch_view, position)
    n = header.record_count
    assert n == 1  # read_header's rule for control batches
    keys, values = _only_entry(columns.key_offsets, columns.key_data, columns.key_validity), \
        _only_entry(columns.value_offsets, columns.value_data, columns.value_validity)
    commit, coordinator_epoch = parse_record(keys, values)
    return Marker(header.producer_id, header.producer_epoch, commit, coordinator_epoch)


def _only_entry(offsets, data, validity) -> bytes | None:
    if validity is not None and not validity[0] & 1:
        return None
    return bytes(data[int(offsets[0]):int(offsets[1])])
