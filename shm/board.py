"""Replica-state board: one shared-memory table per broker, read by anyone on the host.

The broker publishes, per partition replica it hosts, what the rest of the host may want
to know without asking it: role, leader epoch, leader id, LEO, HW, log start offset, ISR
and (on a leader) each follower's LEO as of its last fetch and when it last caught up. Readers are LocalReaders (they read
below HW straight from the segment files), the dashboard and the chaos checker.

Rules and invariants:
- One writer: the broker process that created the board (its pid is in the header).
  Any number of readers in other processes map it read-only.
- Every row is written under a seqlock. The writer makes the row's sequence odd, writes
  the body, then makes the sequence even again (one higher than before the write). A
  reader copies the row and accepts the copy only if the sequence was even and the same
  before and after the copy, and equal to the sequence inside the copy. Otherwise it
  retries, a bounded number of times, then raises ``BoardReadError``.
- Why a torn row cannot be returned: (1) Every store the writer makes is a call into
  C (an item or slice assignment of a memoryview) that completes before the next
  bytecode runs, and all of them go through the same shared mapping, so the interpreter
  issues them in program order (an item of a memoryview cast to ``Q`` is one ``memcpy``
  of 8 bytes: one store; not ``struct.pack_into``, which zeroes its bytes first, so a
  word written with it reads 0 for a moment, and a row whose sequence reads 0 counts as
  never written); on
  x86-64 (TSO) stores become visible to other cores in program order and loads are not
  reordered with other loads, which is exactly what a seqlock needs. The sequence is an
  aligned 8-byte word, which x86-64 reads and writes in one piece. (2) As a second line,
  independent of the memory model, each row carries a CRC-32C of its body computed
  before the write; a copy whose CRC does not match is treated like a torn copy. A row
  whose sequence stays odd (the writer was killed mid-write) or whose CRC never matches
  raises ``BoardReadError`` after the retries; it is never returned.
- ``log_start_offset <= high_watermark <= log_end_offset`` on every published row (and
  ``log_start_offset <= last_stable_offset <= high_watermark`` when a leader publishes
  its LSO: read_committed readers stop there, ``ReplicaState.stable_offset``), the
  ISR and follower lists have at most ``REPLICAS_MAX`` distinct broker ids, topic names
  are Kafka's (``[A-Za-z0-9._-]``, at most ``TOPIC_BYTES_MAX`` bytes). All limits live in
  the block below.
- Rows never move while they exist: a partition keeps its slot until ``remove``; a freed
  slot may be reused, so readers check the key of every row they read.
- The header's ``generation`` grows by one on every publish or remove, so a reader can
  poll one word to learn whether anything changed.
"""
from __future__ import annotations

import dataclasses
import enum
import os
import struct
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass

import crc32c
import numpy as np

from shm.names import (TOPIC_NAME_CHARS_MAX, SharedArray, SharedMemoryError, exists, shm_name,
                       topic_name_error)
from shm.names import unlink as unlink_shm

# ---- limits (all of them, and how they relate) ----------------------------------------
PARTITIONS_MAX = 16_384          # rows per board (partition replicas hosted by one broker)
REPLICAS_MAX = 16                # broker ids in an ISR, followers tracked by a leader
TOPIC_BYTES_MAX = TOPIC_NAME_CHARS_MAX  # ASCII only: a character is a byte
READ_SPINS = 64                  # attempts before a reader starts backing off
READ_ATTEMPTS_MAX = 20_000       # attempts per row before BoardReadError
READ_BACKOFF_S = 0.000_05        # between attempts after READ_SPINS (about 1 s in total)
assert REPLICAS_MAX <= 255       # counts are stored as uint8
assert TOPIC_BYTES_MAX <= 255
assert READ_SPINS < READ_ATTEMPTS_MAX

MAGIC = 0x444B424D               # b"MBKD" little-endian: minikafka board
VERSION = 3  # 2: a leader's row holds its followers' LEOs (follower_leo); 3: its LSO
CACHE_LINE_BYTES = 64



class Role(enum.IntEnum):
    LEADER = 1
    FOLLOWER = 2
    OFFLINE = 3


_ROLE_FREE = 0  # encoded role of a slot that holds no partition


class BoardError(SharedMemoryError):
    """Base class for board errors."""


class BoardNotFoundError(BoardError):
    """No board exists for this cluster id and broker id."""


class BoardReadError(BoardError):
    """A row could not be read consistently within the retry bound."""


def _round_up(n: int, to: int) -> int:
    return (n + to - 1) // to * to


def _padded(dtype: np.dtype, itemsize: int) -> np.dtype:
    names = list(dtype.names)
    return np.dtype({"names": names,
                     "formats": [dtype.fields[n][0] for n in names],
                     "offsets": [dtype.fields[n][1] for n in names],
                     "itemsize": itemsize})


_HEADER_FIELDS = np.dtype([
    ("magic", "<u4"), ("version", "<u4"), ("capacity", "<u4"), ("row_count", "<u4"),
    ("row_bytes", "<u4"), ("broker_id", "<i4"), ("writer_pid", "<i8"), ("generation", "<u8"),
], align=True)
HEADER_DTYPE = _padded(_HEADER_FIELDS, _round_up(_HEADER_FIELDS.itemsize, CACHE_LINE_BYTES))

_ROW_FIELDS = np.dtype([
    ("seq", "<u8"),                  # seqlock word: odd while the writer is inside the row
    ("crc", "<u4"),                  # CRC-32C of bytes [CRC_START_BYTES, itemsize)
    ("partition", "<i4"),
    ("role", "i1"),
    ("isr_count", "u1"),
    ("follower_count", "u1"),
    ("leader_epoch", "<i4"),
    ("leader_id", "<i4"),
    ("log_end_offset", "<i8"),
    ("high_watermark", "<i8"),
    ("log_start_offset", "<i8"),
    ("last_stable_offset", "<i8"),   # -1: not published (no transactions: the HW)
    ("isr", "<i4", (REPLICAS_MAX,)),
    ("follower_ids", "<i4", (REPLICAS_MAX,)),
    ("last_caught_up_ms", "<i8", (REPLICAS_MAX,)),
    ("follower_leo", "<i8", (REPLICAS_MAX,)),   # -1: unknown
    ("topic", f"S{TOPIC_BYTES_MAX}"),
], align=True)
ROW_DTYPE = _padded(_ROW_FIELDS, _round_up(_ROW_FIELDS.itemsize, CACHE_LINE_BYTES))
SEQ_BYTES = 8
CRC_START_BYTES = ROW_DTYPE.fields["crc"][1] + 4
assert ROW_DTYPE.fields["seq"][1] == 0 and ROW_DTYPE.fields["crc"][1] == SEQ_BYTES
assert HEADER_DTYPE.itemsize % 8 == 0 and ROW_DTYPE.itemsize % 8 == 0  # seq stays aligned


def board_name(cluster_id: str, broker_id: int) -> str:
    return shm_name(cluster_id, f"b{int(broker_id)}", "board")


def board_bytes(capacity: int) -> int:
    return HEADER_DTYPE.itemsize + capacity * ROW_DTYPE.itemsize


def _offsets_error(start: int, hw: int, leo: int, lso: int | None) -> str | None:
    """What is wrong with a row's offsets (the board's rules above), or None."""
    if not 0 <= start <= hw <= leo:
        return (f"need 0 <= log_start_offset ({start}) <= high_watermark ({hw}) <= "
                f"log_end_offset ({leo})")
    if lso is not None and not start <= lso <= hw:
        return (f"need log_start_offset ({start}) <= last_stable_offset ({lso}) <= "
                f"high_watermark ({hw})")
    return None


@dataclass(frozen=True)
class ReplicaState:
    """One partition replica as its broker last published it."""

    topic: str
    partition: int
    role: Role = Role.OFFLINE
    leader_epoch: int = -1
    leader_id: int = -1
    log_end_offset: int = 0
    high_watermark: int = 0
    log_start_offset: int = 0
    # The leader's LSO (shm.txn_state: min(first unstable offset, HW)); None: not
    # published. read_committed readers stop at ``stable_offset``.
    last_stable_offset: int | None = None
    isr: tuple[int, ...] = ()
    # Leader's view: (follower broker id, last time it caught up to the LEO, ms) pairs.
    last_caught_up_ms: tuple[tuple[int, int], ...] = ()
    # Leader's view: (follower broker id, its LEO as of its last fetch) pairs, for
    # followers named in last_caught_up_ms. Written in the same row as the leader's own
    # LEO and HW, so a reader gets one consistent cut: no follower ahead of its leader.
    follower_leo: tuple[tuple[int, int], ...] = ()

    def __post_init__(self):
        topic_bytes = self.topic.encode("ascii", "replace")
        if topic_name_error(self.topic) is not None or len(topic_bytes) > TOPIC_BYTES_MAX:
            raise ValueError(f"topic {self.topic!r} must be 1-{TOPIC_BYTES_MAX} chars of [A-Za-z0-9._-]")
        if not 0 <= self.partition < 2**31:
            raise ValueError(f"partition {self.partition} out of range")
        object.__setattr__(self, "role", Role(self.role))
        problem = _offsets_error(self.log_start_offset, self.high_watermark,
                                 self.log_end_offset, self.last_stable_offset)
        if problem is not None:
            raise ValueError(f"{self.topic}-{self.partition}: {problem}")
        isr = tuple(int(b) for b in self.isr)
        if len(isr) > REPLICAS_MAX or len(set(isr)) != len(isr):
            raise ValueError(f"isr {isr} must be at most {REPLICAS_MAX} distinct broker ids")
        object.__setattr__(self, "isr", isr)
        pairs = self.last_caught_up_ms
        pairs = pairs.items() if isinstance(pairs, Mapping) else pairs
        pairs = tuple(sorted((int(b), int(ms)) for b, ms in pairs))
        ids = [b for b, _ in pairs]
        if len(pairs) > REPLICAS_MAX or len(set(ids)) != len(ids):
            raise ValueError(f"last_caught_up_ms must name at most {REPLICAS_MAX} distinct followers")
        object.__setattr__(self, "last_caught_up_ms", pairs)
        leos = self.follower_leo
        leos = leos.items() if isinstance(leos, Mapping) else leos
        leos = tuple(sorted((int(b), int(o)) for b, o in leos))
        if not {b for b, _ in leos} <= set(ids) or len({b for b, _ in leos}) != len(leos):
            raise ValueError("follower_leo must name followers of last_caught_up_ms, once each")
        object.__setattr__(self, "follower_leo", leos)

    @property
    def stable_offset(self) -> int:
        """Where a read_committed reader stops: the LSO if published, else the HW."""
        return self.high_watermark if self.last_stable_offset is None else \
            self.last_stable_offset

    def follower_log_end_offset(self, broker_id: int) -> int | None:
        for b, offset in self.follower_leo:
            if b == broker_id:
                return offset
        return None

    def caught_up_ms(self, broker_id: int) -> int | None:
        for b, ms in self.last_caught_up_ms:
            if b == broker_id:
                return ms
        return None


def _body_struct(dtype: np.dtype, start: int) -> struct.Struct:
    """A ``struct`` of ``dtype``'s fields from offset ``start`` to its end, its gaps and
    tail as pad bytes (packed as zeros): one ``pack_into`` writes a row's body, where a
    numpy field assignment each cost most of a publish (~10 of ~21 µs)."""
    codes = {"<u8": "Q", "<i8": "q", "<u4": "I", "<i4": "i", "|u1": "B", "|i1": "b"}
    fields = sorted((offset, name, field_dtype)
                    for name, (field_dtype, offset) in dtype.fields.items() if offset >= start)
    layout, at = "<", start
    for offset, name, field_dtype in fields:
        assert offset >= at, (name, offset, at)
        layout += "x" * (offset - at)
        if field_dtype.kind == "S":
            layout += f"{field_dtype.itemsize}s"
        else:
            base = field_dtype.base.str
            count = field_dtype.shape[0] if field_dtype.shape else 1
            layout += f"{count}{codes[base]}" if field_dtype.shape else codes[base]
            assert field_dtype.itemsize == count * struct.calcsize("<" + codes[base]), name
        at = offset + field_dtype.itemsize
    layout += "x" * (dtype.itemsize - at)
    packed = struct.Struct(layout)
    assert packed.size == dtype.itemsize - start
    return packed


_BODY_START = ROW_DTYPE.fields["partition"][1]
# partition, role, isr_count, follower_count, leader_epoch, leader_id, the four offsets,
# then isr, follower_ids, last_caught_up_ms, follower_leo (REPLICAS_MAX each), topic.
_BODY = _body_struct(ROW_DTYPE, _BODY_START)
_UNUSED_IDS = (0,) * REPLICAS_MAX

# The writer's words in the mapping go through memoryviews cast to ``Q``/``I`` instead
# of numpy field access (a numpy field store or load costs microseconds in a process
# whose caches went cold between two publishes: in a broker, a publish took ~100 us,
# most of it numpy and dataclasses). An item assignment is one memcpy of the word: one
# store (``struct.pack_into`` would zero the word first: see the docstring).
assert sys.byteorder == "little"     # the dtypes above are little-endian
_CRC = struct.Struct("<I")           # into the writer's own row bytes only
_ROW_COUNT_WORD = HEADER_DTYPE.fields["row_count"][1] // 4          # in the "I" view
_GENERATION_WORD = HEADER_DTYPE.fields["generation"][1] // 8        # in the "Q" view
_HEADER_BYTES = HEADER_DTYPE.itemsize
assert HEADER_DTYPE.fields["row_count"][1] % 4 == 0 and \
    HEADER_DTYPE.fields["generation"][1] % 8 == 0
_ROW_BYTES = ROW_DTYPE.itemsize
# The fields that move on every write (``_moved``): the four offsets, one after the
# other, and the followers' caught-up times and LEOs, one array after the other.
_OFFSETS_AT = ROW_DTYPE.fields["log_end_offset"][1]
_OFFSETS = struct.Struct("<4q")
_PAIRS_AT = ROW_DTYPE.fields["last_caught_up_ms"][1]
_PAIRS = struct.Struct(f"<{2 * REPLICAS_MAX}q")
assert [ROW_DTYPE.fields[n][1] for n in ("high_watermark", "log_start_offset",
                                         "last_stable_offset")] == \
    [_OFFSETS_AT + 8, _OFFSETS_AT + 16, _OFFSETS_AT + 24]
assert ROW_DTYPE.fields["follower_leo"][1] == _PAIRS_AT + 8 * REPLICAS_MAX
_OFFSET_FIELDS = ("log_end_offset", "high_watermark", "log_start_offset", "last_stable_offset")
_SAME_FIELDS = ("role", "leader_epoch", "leader_id")


def _moved(old: ReplicaState, fields: dict) -> ReplicaState | None:
    """``old`` with ``fields``, where they change only what moves on every write (the
    offsets, the followers' caught-up times and LEOs) of the same followers; None
    otherwise (``publish`` then builds and checks the whole state). Checks what
    ``ReplicaState.__post_init__`` checks of the fields that change; the rest is
    ``old``'s, checked when it was made."""
    values = dict(old.__dict__)
    for name, value in fields.items():
        if name in _OFFSET_FIELDS:
            values[name] = value
        elif name in _SAME_FIELDS:
            if value != values[name]:
                return None
        elif name == "isr":
            if tuple(value) != old.isr:
                return None
        elif name == "last_caught_up_ms":
            if not isinstance(value, Mapping):
                return None
            pairs = tuple(sorted((int(b), int(ms)) for b, ms in value.items()))
            if len(pairs) != len(old.last_caught_up_ms) or \
                    any(b != was for (b, _), (was, _) in zip(pairs, old.last_caught_up_ms)):
                return None
            values[name] = pairs
        elif name == "follower_leo":
            if not isinstance(value, Mapping):
                return None
            values[name] = tuple(sorted((int(b), int(o)) for b, o in value.items()))
        else:
            return None
    ids = {b for b, _ in values["last_caught_up_ms"]}
    if any(b not in ids for b, _ in values["follower_leo"]):
        return None                       # the whole check says what is wrong
    if _offsets_error(values["log_start_offset"], values["high_watermark"],
                      values["log_end_offset"], values["last_stable_offset"]) is not None:
        return None                       # the whole check says what is wrong
    state = object.__new__(ReplicaState)  # frozen: its fields are set as __init__ does
    state.__dict__.update(values)
    return state


def _encode_moved(state: ReplicaState, row: bytearray) -> None:
    """Write into ``row`` (the partition's row as last encoded) what ``_moved`` changes."""
    leos = dict(state.follower_leo)
    pairs = state.last_caught_up_ms
    pad = _UNUSED_IDS[:REPLICAS_MAX - len(pairs)]
    _OFFSETS.pack_into(row, _OFFSETS_AT, state.log_end_offset, state.high_watermark,
                       state.log_start_offset,
                       -1 if state.last_stable_offset is None else state.last_stable_offset)
    _PAIRS.pack_into(row, _PAIRS_AT, *(ms for _, ms in pairs), *pad,
                     *(leos.get(b, -1) for b, _ in pairs), *pad)


def _encode(state: ReplicaState, out) -> None:
    """Fill the row bytes ``out`` (seq and crc excepted) from ``state``."""
    isr, pairs = state.isr, state.last_caught_up_ms
    leos = dict(state.follower_leo)
    pad = _UNUSED_IDS[:REPLICAS_MAX - len(pairs)]
    _BODY.pack_into(
        out, _BODY_START, state.partition, int(state.role), len(isr),
        len(pairs), state.leader_epoch, state.leader_id, state.log_end_offset,
        state.high_watermark, state.log_start_offset,
        -1 if state.last_stable_offset is None else state.last_stable_offset,
        *isr, *_UNUSED_IDS[:REPLICAS_MAX - len(isr)],
        *(b for b, _ in pairs), *pad, *(ms for _, ms in pairs), *pad,
        *(leos.get(b, -1) for b, _ in pairs), *pad, state.topic.encode("ascii"))


def _decode(row: np.void) -> ReplicaState:
    isr_count = int(row["isr_count"])
    follower_count = int(row["follower_count"])
    if isr_count > REPLICAS_MAX or follower_count > REPLICAS_MAX:
        raise ValueError(f"row has counts {isr_count}/{follower_count} above {REPLICAS_MAX}")
    return ReplicaState(
        topic=row["topic"].decode("ascii"),
        partition=int(row["partition"]),
        role=Role(int(row["role"])),
        leader_epoch=int(row["leader_epoch"]),
        leader_id=int(row["leader_id"]),
        log_end_offset=int(row["log_end_offset"]),
        high_watermark=int(row["high_watermark"]),
        log_start_offset=int(row["log_start_offset"]),
        last_stable_offset=None if int(row["last_stable_offset"]) < 0 else
        int(row["last_stable_offset"]),
        isr=tuple(int(b) for b in row["isr"][:isr_count]),
        last_caught_up_ms=tuple(
            (int(b), int(ms)) for b, ms in zip(row["follower_ids"][:follower_count],
                                               row["last_caught_up_ms"][:follower_count])),
        follower_leo=tuple(
            (int(b), int(o)) for b, o in zip(row["follower_ids"][:follower_count],
                                             row["follower_leo"][:follower_count])
            if o >= 0),
    )


class _Mapped:
    """Views over one board object: header, rows as records, raw row bytes, seq words."""

    def __init__(self, shared: SharedArray, capacity: int):
        raw = shared.array
        self.shared = shared
        self.header = raw[:HEADER_DTYPE.itemsize].view(HEADER_DTYPE)
        row_bytes = raw[HEADER_DTYPE.itemsize:board_bytes(capacity)]
        self.raw = row_bytes.reshape(capacity, ROW_DTYPE.itemsize)
        # The seq word of each row, as an aligned uint64 view into the same mapping.
        self.seq = row_bytes.view("<u8").reshape(capacity, ROW_DTYPE.itemsize // 8)[:, 0]

    def close(self) -> None:
        self.header = self.raw = self.seq = None
        self.shared.close()


def _pid_alive(pid: int) -> bool:
    """A writer that exited is dead even while it is a zombie nobody reaped (a SIGKILLed
    broker whose parent, a CLI run, is gone and whose init does not reap)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return stat[stat.rindex(b")") + 2:stat.rindex(b")") + 3] not in (b"Z", b"X")
    except (OSError, ValueError):
        return True


class ReplicaStateBoard:
    """The writer side; only the broker process that created it may publish."""

    def __init__(self, name: str, mapped: _Mapped, capacity: int):
        self.name = name
        self.capacity = capacity
        self._m = mapped
        self._slots: dict[tuple[str, int], int] = {}
        self._states: dict[tuple[str, int], ReplicaState] = {}
        self._free: list[int] = []
        # Each partition's row as last encoded (its seq word unused): a publish that
        # moves only offsets rewrites those fields in it (``_moved``).
        self._rows: dict[tuple[str, int], bytearray] = {}
        self._mv = memoryview(mapped.shared.array).cast("B")   # the whole mapping
        self._words = self._mv.cast("Q")                         # its 8-byte words
        self._words32 = self._mv.cast("I")                       # its 4-byte words
        self._pid = os.getpid()

    @classmethod
    def create(cls, cluster_id: str, broker_id: int, capacity: int = 1024, *,
               replace_stale: bool = True) -> "ReplicaStateBoard":
        """Create the board of ``broker_id``.

        If a board exists whose writer pid is dead (the broker was SIGKILLed) and
        ``replace_stale`` is set, it is unlinked and replaced; a board whose writer is
        alive is never taken over.
        """
        if not 1 <= capacity <= PARTITIONS_MAX:
            raise ValueError(f"capacity {capacity} must be 1..{PARTITIONS_MAX}")
        name = board_name(cluster_id, broker_id)
        if exists(name) and replace_stale:
            stale_pid = _stale_writer_pid(name)
            if stale_pid is not None and not _pid_alive(stale_pid):
                unlink_shm(name)
        shared = SharedArray.create(name, board_bytes(capacity), np.uint8)
        mapped = _Mapped(shared, capacity)
        h = mapped.header[0]
        h["version"] = VERSION
        h["capacity"] = capacity
        h["row_count"] = 0
        h["row_bytes"] = ROW_DTYPE.itemsize
        h["broker_id"] = broker_id
        h["writer_pid"] = os.getpid()
        h["generation"] = 0
        h["magic"] = MAGIC  # last: a reader that sees the magic sees a complete header
        return cls(name, mapped, capacity)

    # ---- writer API ------------------------------------------------------------------

    def publish(self, topic: str, partition: int, **fields) -> ReplicaState:
        """Set fields of a partition replica's row (others keep their last value; a
        last stable offset not republished with a new HW or log start is dropped, not
        kept stale: readers then stop at the HW)."""
        self._check_writer()
        key = (topic, int(partition))
        old = self._states.get(key)
        if old is not None and old.last_stable_offset is not None and \
                "last_stable_offset" not in fields and \
                ("high_watermark" in fields or "log_start_offset" in fields):
            fields["last_stable_offset"] = None
        row = self._rows.get(key)
        state = _moved(old, fields) if row is not None else None
        if state is not None:
            _encode_moved(state, row)
        else:
            state = (dataclasses.replace(old, **fields) if old is not None
                     else ReplicaState(topic, int(partition), **fields))
            row = bytearray(_ROW_BYTES)
            _encode(state, row)
        slot = self._slots.get(key)
        if slot is None:
            slot = self._allocate(key)
        self._write(slot, row)
        self._rows[key] = row
        self._states[key] = state
        self._bump_generation()
        return state

    def remove(self, topic: str, partition: int) -> bool:
        self._check_writer()
        key = (topic, int(partition))
        slot = self._slots.pop(key, None)
        if slot is None:
            return False
        del self._states[key]
        del self._rows[key]
        free = np.zeros(1, ROW_DTYPE)
        free[0]["role"] = _ROLE_FREE
        self._write(slot, bytearray(free.tobytes()))
        self._free.append(slot)
        self._free.sort(reverse=True)  # reuse the lowest slot first
        self._bump_generation()
        return True

    def get(self, topic: str, partition: int) -> ReplicaState | None:
        return self._states.get((topic, int(partition)))

    def close(self, unlink: bool = True) -> None:
        if self._m is None:
            return
        self._words.release()
        self._words32.release()
        self._mv.release()
        self._m.close()
        self._m = None
        if unlink:
            unlink_shm(self.name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- internals -------------------------------------------------------------------

    def _check_writer(self) -> None:
        if self._m is None:
            raise BoardError(f"board {self.name} is closed")
        if os.getpid() != self._pid:
            raise BoardError(f"board {self.name} is written by pid {self._pid}, not {os.getpid()}")

    def _allocate(self, key: tuple[str, int]) -> int:
        if self._free:
            slot = self._free.pop()
        else:
            slot = self._words32[_ROW_COUNT_WORD]
            if slot >= self.capacity:
                raise BoardError(f"board {self.name} is full ({self.capacity} partition replicas)")
        self._slots[key] = slot
        return slot

    def _write(self, slot: int, row: bytearray) -> None:
        """Seqlock write of ``row`` (a whole encoded row; its seq word is not copied)
        into ``slot``, its CRC set first."""
        words = self._words
        at = _HEADER_BYTES + slot * _ROW_BYTES
        word = at // 8
        seq = words[word]
        assert seq % 2 == 0, f"row {slot} of {self.name} was left mid-write"
        body = memoryview(row)
        _CRC.pack_into(row, SEQ_BYTES, crc32c.crc32c(body[CRC_START_BYTES:]))
        words[word] = seq + 1                                   # 1. odd: readers back off
        self._mv[at + SEQ_BYTES:at + _ROW_BYTES] = body[SEQ_BYTES:]  # 2. crc and body
        words[word] = seq + 2                                   # 3. even again: row is whole
        if slot >= self._words32[_ROW_COUNT_WORD]:
            # Readers scan [0, row_count); grow it only once the row is whole.
            self._words32[_ROW_COUNT_WORD] = slot + 1

    def _bump_generation(self) -> None:
        self._words[_GENERATION_WORD] += 1


def _stale_writer_pid(name: str) -> int | None:
    try:
        shared = SharedArray.attach(name, np.uint8, readonly=True)
    except SharedMemoryError:
        return None
    try:
        if shared.array.size < HEADER_DTYPE.itemsize:
            return 0
        header = shared.array[:HEADER_DTYPE.itemsize].view(HEADER_DTYPE)[0]
        return int(header["writer_pid"])
    finally:
        header = None
        shared.close()


class BoardReader:
    """A read-only view of one broker's board, from any process on the host."""

    def __init__(self, name: str, mapped: _Mapped, capacity: int, read_attempts_max: int):
        self.name = name
        self.capacity = capacity
        self.read_attempts_max = read_attempts_max
        self.retries = 0  # copies thrown away because they overlapped a write
        self._m = mapped
        self._slots: dict[tuple[str, int], int] = {}

    @classmethod
    def open(cls, cluster_id: str, broker_id: int, *,
             read_attempts_max: int = READ_ATTEMPTS_MAX) -> "BoardReader":
        name = board_name(cluster_id, broker_id)
        try:
            shared = SharedArray.attach(name, np.uint8, readonly=True)
        except SharedMemoryError as e:
            raise BoardNotFoundError(
                f"no replica-state board for broker {broker_id} of cluster {cluster_id}"
                f" ({name} does not exist; is the broker running?)") from e
        try:
            size = shared.array.size
            if size < HEADER_DTYPE.itemsize:
                raise BoardError(f"board {name} is {size} bytes, smaller than its header")
            h = shared.array[:HEADER_DTYPE.itemsize].view(HEADER_DTYPE)[0]
            magic, version = int(h["magic"]), int(h["version"])
            capacity, row_bytes = int(h["capacity"]), int(h["row_bytes"])
            if magic != MAGIC:
                raise BoardError(f"board {name} is not initialised (magic {magic:#x})")
            if version != VERSION or row_bytes != ROW_DTYPE.itemsize:
                raise BoardError(f"board {name} has version {version}, row size {row_bytes};"
                                 f" this reader knows {VERSION}, {ROW_DTYPE.itemsize}")
            if not 1 <= capacity <= PARTITIONS_MAX or board_bytes(capacity) > size:
                raise BoardError(f"board {name} claims capacity {capacity} but has {size} bytes")
            del h
            return cls(name, _Mapped(shared, capacity), capacity, read_attempts_max)
        except BaseException:
            shared.close()
            raise

    @property
    def generation(self) -> int:
        return int(self._m.header[0]["generation"])

    @property
    def writer_pid(self) -> int:
        return int(self._m.header[0]["writer_pid"])

    def writer_alive(self) -> bool:
        return _pid_alive(self.writer_pid)

    def snapshot(self) -> list[ReplicaState]:
        """Every partition replica on the board, each row read consistently.

        Rows are consistent one by one (each is a seqlock read); the list as a whole
        is not one atomic picture of the board, like Kafka's own metadata caches.
        """
        states = []
        slots = {}
        for slot in range(self._row_count()):
            state = self._read_row(slot)
            if state is not None:
                states.append(state)
                slots[(state.topic, state.partition)] = slot
        self._slots = slots
        states.sort(key=lambda s: (s.topic, s.partition))
        return states

    def get(self, topic: str, partition: int) -> ReplicaState | None:
        key = (topic, int(partition))
        slot = self._slots.get(key)
        if slot is not None:
            state = self._read_row(slot)
            if state is not None and (state.topic, state.partition) == key:
                return state
        self.snapshot()  # the slot moved or is new: rescan once
        slot = self._slots.get(key)
        if slot is None:
            return None
        state = self._read_row(slot)
        return state if state is not None and (state.topic, state.partition) == key else None

    def close(self) -> None:
        if self._m is not None:
            self._m.close()
            self._m = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- internals -------------------------------------------------------------------

    def _row_count(self) -> int:
        if self._m is None:
            raise BoardError(f"board reader for {self.name} is closed")
        return min(int(self._m.header[0]["row_count"]), self.capacity)

    def _read_row(self, slot: int) -> ReplicaState | None:
        """Seqlock read of one row: None for a free slot, else a consistent copy."""
        m = self._m
        why = "no attempt"
        for attempt in range(self.read_attempts_max):
            if attempt >= READ_SPINS:
                time.sleep(READ_BACKOFF_S)
            before = int(m.seq[slot])
            if before & 1:
                why = f"sequence {before} stayed odd (writer pid {self.writer_pid} mid-write"\
                      f"{'' if self.writer_alive() else ', and it is dead'})"
                self.retries += 1
                continue
            copy = m.raw[slot].copy()
            after = int(m.seq[slot])
            record = copy.view(ROW_DTYPE)[0]
            if before != after or int(record["seq"]) != before:
                why = f"row kept changing (sequence {before} -> {after})"
                self.retries += 1
                continue
            if before == 0:
                return None  # never written
            if crc32c.crc32c(copy[CRC_START_BYTES:]) != int(record["crc"]):
                why = f"checksum mismatch at sequence {before}"
                self.retries += 1
                continue
            if int(record["role"]) == _ROLE_FREE:
                return None
            try:
                return _decode(record)
            except (ValueError, UnicodeDecodeError) as e:
                why = f"row does not decode: {e}"
                self.retries += 1
        raise BoardReadError(f"row {slot} of board {self.name} not readable after"
                             f" {self.read_attempts_max} attempts: {why}")
