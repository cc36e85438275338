"""Sparse offset and time indexes of one segment, as numpy arrays in POSIX shared memory.

Why shared memory: a broker restarted after SIGKILL reattaches its indexes instead of
rebuilding them, and other processes on the host (LocalReader, dashboard, checker) look
offsets up without asking the broker.

Shared-memory object (one per index per segment), an int64 little-endian array:

    slot 0: MAGIC   slot 1: kind (1 offset, 2 time)   slot 2: segment base offset
    slot 3: entries_max   slot 4: count (entries valid)
    slot 5: file id (the inode of the segment file it indexes; 0: not set)
    slots 6..7: reserved (0)
    then keys[entries_max], then values[entries_max]

- OffsetIndex: key = batch base offset - segment base offset (relative offset),
  value = file position of that batch. Keys and values strictly increase.
- TimeIndex: key = largest batch max_timestamp seen in the segment up to and including
  the batch, value = that batch's relative offset. Both strictly increase.
  So "every batch at or before relative offset v has max_timestamp <= k".

Names: ``index_name(cluster_id, broker_id, topic, partition, base_offset, kind)``
= ``/mk-<cluster>-b<broker>-<topic>-<partition>-<base_offset>-idx`` (``-tidx``).

Rules (one writer, the broker that owns the log; any number of readers):
- The writer stores key and value first and publishes them by storing count after;
  it shrinks count first when truncating. A reader loads count once, then reads
  ``keys[:count]``. Entries below the high watermark are never rewritten while the
  log lives, which is all a LocalReader needs.
- Lookups are ``np.searchsorted`` over ``keys[:count]``: the floor entry.
- Persisted as ``%020d.index`` / ``%020d.timeindex``: the same 8 header slots followed
  by keys[:count] and values[:count], written atomically on roll and clean close.
"""
from __future__ import annotations

import os

import numpy as np

from shm.config import INDEX_ENTRIES_MAX
from shm.names import SharedArray, SharedMemoryError, shm_name, unlink

MAGIC = 0x4D4B494458  # "MKIDX"
KIND_OFFSET = 1
KIND_TIME = 2
HEADER_SLOTS = 8
S_MAGIC, S_KIND, S_BASE, S_MAX, S_COUNT, S_FILE_ID = range(6)
SUFFIX = {KIND_OFFSET: "idx", KIND_TIME: "tidx"}
FILE_SUFFIX = {KIND_OFFSET: ".index", KIND_TIME: ".timeindex"}


class IndexCorruptError(Exception):
    """An index object or file is malformed (reattach falls back to a rebuild)."""


def index_name(cluster_id: str, broker_id: int, topic: str, partition: int,
               base_offset: int, kind: int) -> str:
    return shm_name(cluster_id, f"b{broker_id}", topic, str(partition), str(base_offset),
                    SUFFIX[kind])


class SparseIndex:
    """keys -> values, both strictly increasing, in one shared-memory object."""

    kind = 0

    def __init__(self, shared: SharedArray, readonly: bool) -> None:
        self._shared = shared
        self.name = shared.name
        self.readonly = readonly
        array = shared.array
        self._header = array[:HEADER_SLOTS]
        self.entries_max = int(self._header[S_MAX])
        self.base_offset = int(self._header[S_BASE])
        self._keys = array[HEADER_SLOTS:HEADER_SLOTS + self.entries_max]
        self._values = array[HEADER_SLOTS + self.entries_max:HEADER_SLOTS + 2 * self.entries_max]

    # ------------------------------------------------------------ lifecycle

    @classmethod
    def create(cls, name: str, base_offset: int, entries_max: int) -> "SparseIndex":
        """A new empty index; an object left under this name is replaced."""
        assert 1 <= entries_max <= INDEX_ENTRIES_MAX, entries_max
        unlink(name)
        shared = SharedArray.create(name, HEADER_SLOTS + 2 * entries_max, np.int64)
        header = shared.array[:HEADER_SLOTS]
        header[:] = 0
        header[S_KIND] = cls.kind
        header[S_BASE] = base_offset
        header[S_MAX] = entries_max
        header[S_MAGIC] = MAGIC  # last: a half-made object fails the magic check
        return cls(shared, readonly=False)

    @classmethod
    def attach(cls, name: str, base_offset: int, *, readonly: bool = False) -> "SparseIndex":
        """Map an existing object and check its header and entries (IndexCorruptError if bad)."""
        try:
            shared = SharedArray.attach(name, np.int64, readonly=readonly)
        except SharedMemoryError as e:
            raise IndexCorruptError(str(e)) from e
        array = shared.array
        problem = None
        if len(array) < HEADER_SLOTS:
            problem = "too small"
        elif int(array[S_MAGIC]) != MAGIC or int(array[S_KIND]) != cls.kind:
            problem = "bad magic or kind"
        elif int(array[S_BASE]) != base_offset:
            problem = f"base offset {int(array[S_BASE])} != {base_offset}"
        elif not 1 <= int(array[S_MAX]) <= INDEX_ENTRIES_MAX or \
                len(array) < HEADER_SLOTS + 2 * int(array[S_MAX]):
            problem = f"bad entries_max {int(array[S_MAX])}"
        if problem is not None:
            del array
            shared.close()
            raise IndexCorruptError(f"shared index {name}: {problem}")
        index = cls(shared, readonly=readonly)
        index.check()
        return index

    def close(self) -> None:
        self._header = self._keys = self._values = None
        self._shared.close()

    def unlink(self) -> None:
        self._shared.unlink()

    # ------------------------------------------------------------ reading

    @property
    def count(self) -> int:
        return int(self._header[S_COUNT])

    @property
    def file_id(self) -> int:
        """The inode of the segment file this index is for (0: unknown). The cleaner
        replaces a segment by a new file of the same base offset, whose index objects
        get the same names: a reader uses an index only with the file it names."""
        return int(self._header[S_FILE_ID])

    def set_file_id(self, file_id: int) -> None:
        assert not self.readonly
        self._header[S_FILE_ID] = file_id

    @property
    def keys(self) -> np.ndarray:
        return self._keys[:self.count]

    @property
    def values(self) -> np.ndarray:
        return self._values[:self.count]

    def floor(self, key: int) -> int:
        """Index of the last entry with keys[i] <= key, or -1."""
        count = self.count
        return int(np.searchsorted(self._keys[:count], key, side="right")) - 1

    def entry(self, i: int) -> tuple[int, int]:
        return int(self._keys[i]), int(self._values[i])

    def last(self) -> tuple[int, int] | None:
        count = self.count
        return None if count == 0 else self.entry(count - 1)

    @property
    def full(self) -> bool:
        return self.count >= self.entries_max

    def check(self) -> None:
        """Structure: count in bounds, keys and values strictly increasing, non-negative."""
        count = int(self._header[S_COUNT])
        if not 0 <= count <= self.entries_max:
            raise IndexCorruptError(
                f"index {self.name}: count {count} outside [0, {self.entries_max}]")
        keys, values = self._keys[:count], self._values[:count]
        if count and (int(keys[0]) < 0 or int(values[0]) < 0 or
                      bool((np.diff(keys) <= 0).any()) or bool((np.diff(values) <= 0).any())):
            raise IndexCorruptError(f"index {self.name}: entries are not strictly increasing")

    # ------------------------------------------------------------ writing

    def append(self, key: int, value: int) -> None:
        assert not self.readonly
        count = self.count
        assert count < self.entries_max, f"index {self.name} is full"
        if count:
            last_key, last_value = self.entry(count - 1)
            assert key > last_key and value > last_value, (key, value, last_key, last_value)
        self._keys[count] = key
        self._values[count] = value
        self._header[S_COUNT] = count + 1  # publish after the entry is in place

    def truncate_to_count(self, count: int) -> None:
        assert not self.readonly and 0 <= count
        if count < self.count:
            self._header[S_COUNT] = count

    def load(self, keys: np.ndarray, values: np.ndarray) -> None:
        """Replace all entries (used when restoring from a file)."""
        count = len(keys)
        if count > self.entries_max:
            raise IndexCorruptError(f"index {self.name}: {count} entries > {self.entries_max}")
        self._header[S_COUNT] = 0
        self._keys[:count] = keys
        self._values[:count] = values
        self._header[S_COUNT] = count
        self.check()

    # ------------------------------------------------------------ files

    def file_args(self, path: str) -> tuple:
        """``write_index_file``'s arguments for this index (its file at ``path``), its
        entries copied: a roll's flusher thread writes them while this one goes on."""
        count = self.count
        return (path, self.kind, self.base_offset, self.entries_max,
                self._keys[:count].copy(), self._values[:count].copy())

    @classmethod
    def read_file(cls, path: str, base_offset: int) -> tuple[np.ndarray, np.ndarray]:
        """(keys, values) from a persisted index; IndexCorruptError if missing or malformed."""
        try:
            with open(path, "rb") as f:
                raw = f.read((HEADER_SLOTS + 2 * INDEX_ENTRIES_MAX) * 8 + 1)
        except FileNotFoundError as e:
            raise IndexCorruptError(f"{path}: missing") from e
        if len(raw) % 8 or len(raw) < HEADER_SLOTS * 8:
            raise IndexCorruptError(f"{path}: bad size {len(raw)}")
        array = np.frombuffer(raw, "<i8")
        count = int(array[S_COUNT])
        if int(array[S_MAGIC]) != MAGIC or int(array[S_KIND]) != cls.kind or \
                int(array[S_BASE]) != base_offset or \
                len(array) != HEADER_SLOTS + 2 * count:
            raise IndexCorruptError(f"{path}: bad header")
        keys = array[HEADER_SLOTS:HEADER_SLOTS + count]
        values = array[HEADER_SLOTS + count:]
        if count and (bool((np.diff(keys) <= 0).any()) or bool((np.diff(values) <= 0).any())
                      or int(keys[0]) < 0 or int(values[0]) < 0):
            raise IndexCorruptError(f"{path}: entries are not strictly increasing")
        return keys.astype(np.int64), values.astype(np.int64)


def write_index_file(path: str, kind: int, base_offset: int, entries_max: int,
                     keys: np.ndarray, values: np.ndarray) -> None:
    """A persisted index (what ``SparseIndex.read_file`` reads), written whole and
    fsynced (tmp file, then rename); any thread (the cleaner writes its new
    segments' index files as it builds them)."""
    header = np.zeros(HEADER_SLOTS, np.int64)
    header[S_MAGIC], header[S_KIND], header[S_BASE] = MAGIC, kind, base_offset
    header[S_MAX], header[S_COUNT] = entries_max, len(keys)
    data = np.concatenate([header, keys, values]).astype("<i8")
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data.tobytes())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class OffsetIndex(SparseIndex):
    """Relative offset -> file position of the batch starting there."""

    kind = KIND_OFFSET

    @classmethod
    def attach_readonly(cls, cluster_id: str, broker_id: int, topic: str, partition: int,
                        base_offset: int) -> "OffsetIndex":
        """For readers in other processes (LocalReader): map the live index read-only."""
        name = index_name(cluster_id, broker_id, topic, partition, base_offset, cls.kind)
        return cls.attach(name, base_offset, readonly=True)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last indexed batch starting at or below ``offset``;
        (base_offset, 0) when none is - scan from the segment's start."""
        i = self.floor(offset - self.base_offset)
        if i < 0:
            return self.base_offset, 0
        relative, position = self.entry(i)
        return self.base_offset + relative, position


class TimeIndex(SparseIndex):
    """Largest timestamp so far -> relative offset of the batch where it was reached."""

    kind = KIND_TIME

    @classmethod
    def attach_readonly(cls, cluster_id: str, broker_id: int, topic: str, partition: int,
                        base_offset: int) -> "TimeIndex":
        name = index_name(cluster_id, broker_id, topic, partition, base_offset, cls.kind)
        return cls.attach(name, base_offset, readonly=True)

    def scan_start(self, timestamp_ms: int) -> int:
        """An offset from which scanning finds the first batch with max_timestamp >=
        ``timestamp_ms``: every batch at or before an entry with key < target is older."""
        count = self.count
        i = int(np.searchsorted(self._keys[:count], timestamp_ms, side="left")) - 1
        if i < 0:
            return self.base_offset
        return self.base_offset + int(self._values[i]) + 1
