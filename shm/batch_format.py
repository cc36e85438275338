"""The record batch's format: constants, header fields, the error and the parsed types.

The layout and its rules are documented in ``shm.batch`` (the codec; import from there:
it re-exports everything here). Split out only to keep the codec's module readable.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from shm import record_headers
from shm.config import BATCH_BYTES_MAX

MAGIC = 2
HEADER = struct.Struct("<qiibIhiqqqhii")
HEADER_BYTES = HEADER.size
LENGTH_OVERHEAD_BYTES = 12  # base_offset + batch_length: not counted in batch_length
CRC_START = 21
BASE_OFFSET = struct.Struct("<q")
LEADER_EPOCH = struct.Struct("<i")
LEADER_EPOCH_POSITION = 12
PREFIX = struct.Struct("<qi")  # base_offset, batch_length: enough to walk a region
LAST_OFFSET_DELTA = struct.Struct("<i")
LAST_OFFSET_DELTA_POSITION = 23
CRC = struct.Struct("<I")
CRC_POSITION = 17
PRODUCER = struct.Struct("<qhi")  # producer_id, producer_epoch, base_sequence
PRODUCER_POSITION = 43

ATTR_CODEC_MASK = 0x07  # Kafka's compression codec: a hint, the body is never compressed
CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = range(5)
CODEC_MAX = CODEC_ZSTD
ATTR_LOG_APPEND_TIME = 0x08  # Kafka's timestamp type bit
ATTR_TRANSACTIONAL = 0x10  # Kafka's: the batch belongs to a transaction (KIP-98)
ATTR_CONTROL = 0x20  # Kafka's: a control batch (one marker record: ``shm.control``)
ATTR_KEY_NULLS = 0x100
ATTR_VALUE_NULLS = 0x200
ATTR_HEADERS = 0x400
ATTR_KNOWN = ATTR_CODEC_MASK | ATTR_LOG_APPEND_TIME | ATTR_TRANSACTIONAL | ATTR_CONTROL | \
    ATTR_KEY_NULLS | ATTR_VALUE_NULLS | ATTR_HEADERS

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1

assert HEADER_BYTES == 61
assert HEADER_BYTES + 4 + 8 <= BATCH_BYTES_MAX


def transaction_problem(transactional: bool, control: bool, producer_id: int,
                        producer_epoch: int, base_sequence: int, record_count: int
                        ) -> str | None:
    """What breaks the transactional/control rules (``shm.batch``'s docstring); None if none."""
    if control and not transactional:
        return "a control batch without the transactional bit"
    if producer_id < 0 or producer_epoch < 0:
        return (f"a transactional batch needs a producer id and epoch (has "
                f"{producer_id}, {producer_epoch})")
    if control and (base_sequence != NO_SEQUENCE or record_count != 1):
        return (f"a control batch has base_sequence -1 and one record (has "
                f"{base_sequence}, {record_count} records)")
    if not control and base_sequence < 0:
        return f"a transactional data batch needs a base_sequence (has {base_sequence})"
    return None


class CorruptRecordError(Exception):
    """A buffer is not a valid record batch (truncated, oversized or corrupt).

    ``position`` is where the bad batch starts within the buffer that was walked.
    """

    def __init__(self, message: str, position: int = 0) -> None:
        super().__init__(message)
        self.position = position


@dataclass(frozen=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size_bytes(self) -> int:
        """Total bytes of the batch, header included."""
        return self.batch_length + LENGTH_OVERHEAD_BYTES

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)


_HEADER_FIELDS = tuple(BatchHeader.__dataclass_fields__)
assert len(_HEADER_FIELDS) == len(HEADER.unpack(bytes(HEADER_BYTES)))


def header_from(values) -> BatchHeader:
    """The BatchHeader of ``HEADER``'s unpacked ``values``, the same object as
    ``BatchHeader(*values)`` (equality, hash and repr read the fields) without the
    frozen dataclass's ``__init__``, which sets each of the 13 fields through
    ``object.__setattr__``: more than half of a header read, and every batch appended
    or parsed has one."""
    header = object.__new__(BatchHeader)
    header.__dict__.update(zip(_HEADER_FIELDS, values))
    return header


def header_stamped(header: BatchHeader, base_offset: int,
                   partition_leader_epoch: int) -> BatchHeader:
    """``dataclasses.replace(header, base_offset=..., partition_leader_epoch=...)``, the
    header of a batch a leader stamped, built as ``header_from`` builds one (a
    ``replace`` runs the frozen ``__init__``: about a tenth of a leader's append of a
    default 16 KiB batch)."""
    stamped = object.__new__(BatchHeader)
    fields = stamped.__dict__
    fields.update(header.__dict__)
    fields["base_offset"] = base_offset
    fields["partition_leader_epoch"] = partition_leader_epoch
    return stamped


@dataclass(frozen=True)
class RecordBatch:
    """A parsed batch. ``keys``/``values`` are pyarrow BinaryArrays viewing the buffer;
    ``headers`` likewise (one entry per record, ``shm.record_headers``' encoding) or None
    when the batch has no headers column."""

    header: BatchHeader
    timestamp_deltas: np.ndarray
    keys: pa.Array
    values: pa.Array
    headers: pa.Array | None = None

    @property
    def base_offset(self) -> int:
        return self.header.base_offset

    @property
    def record_count(self) -> int:
        return self.header.record_count

    @property
    def size_bytes(self) -> int:
        return self.header.size_bytes

    @property
    def codec_hint(self) -> int:
        """The compression codec its producer used (CODEC_*); the body is not compressed."""
        return self.header.attributes & ATTR_CODEC_MASK

    @property
    def log_append_time(self) -> bool:
        return bool(self.header.attributes & ATTR_LOG_APPEND_TIME)

    @property
    def transactional(self) -> bool:
        return self.header.transactional

    @property
    def control(self) -> bool:
        return self.header.control

    @property
    def timestamps(self) -> np.ndarray:
        """Per record: base + delta; with LogAppendTime every record has the batch's
        max_timestamp, as in Kafka."""
        if self.log_append_time:
            return np.full(self.record_count, self.header.max_timestamp, dtype=np.int64)
        return self.timestamp_deltas.astype(np.int64) + self.header.base_timestamp

    @property
    def offsets(self) -> np.ndarray:
        return np.arange(self.header.base_offset, self.header.next_offset, dtype=np.int64)

    def record_headers(self) -> list[list[tuple[str, bytes | None]]]:
        """Per record, its headers ``[(key, value or None), ...]``: per-record Python work,
        for whoever asks for headers (the structure was checked when the batch was
        parsed; a key that is not UTF-8 decodes with surrogateescape)."""
        if self.headers is None:
            return [[] for _ in range(self.record_count)]
        out = []
        previous, decoded = None, []
        try:
            for entry in self.headers.to_pylist():
                if entry != previous:   # a run of equal entries (the same headers) decodes once
                    previous, decoded = entry, record_headers.decode_entry(entry)
                out.append(list(decoded))   # a list of its own per record
        except record_headers.HeaderFormatError as e:  # not reached for a checked batch
            raise CorruptRecordError(f"record headers: {e}") from None
        return out

    def records(self, *, with_headers: bool = False) -> list[tuple]:
        """(offset, timestamp, key, value) per record, and its headers (a list) as a fifth
        item when ``with_headers``: per-record Python work, for tests and tools."""
        columns = [self.offsets.tolist(), self.timestamps.tolist(), self.keys.to_pylist(),
                   self.values.to_pylist()]
        if with_headers:
            columns.append(self.record_headers())
        return list(zip(*columns))


@dataclass(frozen=True)
class Columns:
    """A checked batch's sections as views over its buffer (no copies): what a converter
    reads. Offsets are "<i4" numpy arrays of n + 1 entries; validity bitmaps and the
    headers column are None when the batch has none."""

    header: BatchHeader
    timestamp_deltas: np.ndarray
    key_offsets: np.ndarray
    key_data: memoryview
    value_offsets: np.ndarray
    value_data: memoryview
    key_validity: memoryview | None
    value_validity: memoryview | None
    header_offsets: np.ndarray | None
    header_data: memoryview | None

    def keys_present(self) -> bool:
        """Has every record a key (no null key)?"""
        if self.key_validity is None:
            return True
        n = self.header.record_count
        bits = np.unpackbits(np.frombuffer(self.key_validity, np.uint8), bitorder="little")
        return bool(bits[:n].all())
