"""The cleaner's files in a partition directory, and its half of recovery.

    cleaner-checkpoint   the first dirty offset (Kafka's cleaner-offset-checkpoint, kept
                         per partition) and the tombstones' delete horizons by offset
    cleaner-swap         only while a swap is under way: the groups being replaced,
                         ``<base> <end> <kept>`` (end: the first offset after the
                         group; kept 0: nothing of the group survived, no new segment)
    <base>.log.cleaned   a cleaned segment being written (not part of the log)
    <base>.index.cleaned, <base>.timeindex.cleaned   its index files
    <base>.log.swap      a cleaned segment being swapped in (Kafka's .swap)

The swap (``shm.log.cleaner_swap``), with its commit point first:
1. the .cleaned files and their index files (``<base>.index.cleaned``,
   ``<base>.timeindex.cleaned``) are complete and fsynced, the directory too (the
   plan's ``build``, on the cleaner thread);
2. ``cleaner-swap`` is written durably: from here on recovery finishes the swap;
3. .cleaned -> .swap;
4. each .swap replaces its group's first old .log (one rename: the group's range never
   lacks a file for a LocalReader); the group's other old segments are renamed
   .deleted, then every old segment is deleted: names (files and shared-memory indexes:
   this frees the first one's index names for the new segment) here, the unlinked
   files' release (closing them frees their blocks, the slow part) on a background
   thread (``Segment.delete``);
5. the new segments' shared indexes are created from the build's arrays (stamped with
   the new file's inode, so a LocalReader never pairs an index with another file), their
   index files renamed in place, directory fsync;
6. ``cleaner-checkpoint`` is updated, ``cleaner-swap`` removed.
Only two points need a barrier: the intent durable before the first rename (step 2),
and every step durable before the intent's removal can be (step 5's fsync). Between
them no fsync is needed (Kafka fsyncs after its renames; we do not): recovery keys on
names that exist in one state only, so any subset of steps 3-5 that reached the disk is
finished the same way (a .cleaned or .swap file: the group's new data is not in place,
whatever .log holds its base goes; no .swap: the .log at the base is the new segment;
every other .log of the range and every index file of it goes and is rebuilt).
``finish_swap`` (the loader, before it lists segments) redoes 3-6 from whatever a crash
left; without ``cleaner-swap`` it removes the clean's .cleaned and .swap files (an
unfinished clean: the old segments are whole). Either the old segments of a group or
its new segment is in the log, never parts of both.
"""
from __future__ import annotations

import logging
import os

from shm.checkpoint import VERSION, CheckpointError, _int, _read_lines, fsync_dir, \
    write_atomically
from shm.index import KIND_OFFSET, KIND_TIME, index_name
from shm.log.cleaner_core import Horizons
from shm.log.producer_snapshots import delete_snapshots
from shm.names import unlink
from shm.segment import DELETED_SUFFIX

logger = logging.getLogger("shm.log")

CLEANER_CHECKPOINT = "cleaner-checkpoint"
CLEANER_SWAP = "cleaner-swap"
CLEANED_SUFFIX = ".log.cleaned"
SWAP_SUFFIX = ".log.swap"
# A cleaned segment's index files, written (fsynced) with it by the build: the swap
# renames them to .index / .timeindex, recovery removes them (and rebuilds indexes).
INDEX_CLEANED_SUFFIXES = (".index.cleaned", ".timeindex.cleaned")
_LEFTOVERS = (".cleaned", SWAP_SUFFIX)  # every file of a clean that is not in place


def stem(directory: str, base: int) -> str:
    return os.path.join(directory, f"{base:020d}")


class CleanerState:
    """The first dirty offset (None: never cleaned) and the delete horizons."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, CLEANER_CHECKPOINT)
        self.first_dirty: int | None = None
        self.horizons = Horizons()

    @classmethod
    def load(cls, directory: str) -> "CleanerState":
        state = cls(directory)
        try:
            lines = _read_lines(state.path, 2)
        except CheckpointError as e:
            logger.warning("%s; cleaning %s from its log start again", e, directory)
            return state
        try:
            if lines:
                kind, value = lines[0]
                if kind != "dirty":
                    raise CheckpointError(f"{state.path}: first line {lines[0]}")
                dirty = _int(state.path, value)
                state.first_dirty = dirty if dirty >= 0 else None
                state.horizons = Horizons([(_int(state.path, e), _int(state.path, h))
                                           for e, h in lines[1:]])
        except (CheckpointError, AssertionError) as e:
            logger.warning("%s; cleaning %s from its log start again", e, directory)
            return cls(directory)
        return state

    def save(self) -> None:
        dirty = -1 if self.first_dirty is None else self.first_dirty
        lines = [f"dirty {dirty}"] + [f"{e} {h}" for e, h in self.horizons.steps]
        write_atomically(self.path, f"{VERSION}\n{len(lines)}\n" + "".join(
            line + "\n" for line in lines))

    def truncated(self, offset: int) -> None:
        """Kafka's maybeTruncateCheckpoint: nothing at or above ``offset`` is clean."""
        changed = False
        if self.first_dirty is not None and self.first_dirty > offset:
            self.first_dirty = offset
            changed = True
        horizons = self.horizons.truncated(offset)
        if horizons.steps != self.horizons.steps:
            self.horizons = horizons
            changed = True
        if changed:
            self.save()


def write_swap_intent(directory: str, groups: list[tuple[int, int, int]]) -> None:
    write_atomically(os.path.join(directory, CLEANER_SWAP), f"{VERSION}\n{len(groups)}\n" +
                     "".join(f"{b} {e} {k}\n" for b, e, k in groups))


def read_swap_intent(directory: str) -> list[tuple[int, int, int]] | None:
    path = os.path.join(directory, CLEANER_SWAP)
    if not os.path.exists(path):
        return None
    return [(_int(path, b), _int(path, e), _int(path, k)) for b, e, k in _read_lines(path, 3)]


def remove_swap_intent(directory: str) -> None:
    try:
        os.unlink(os.path.join(directory, CLEANER_SWAP))
    except FileNotFoundError:
        return
    fsync_dir(directory)


def unlink_index_objects(log, base: int) -> None:
    for kind in (KIND_OFFSET, KIND_TIME):
        unlink(index_name(log.cluster_id, log.broker_id, log.topic, log.partition, base, kind))


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def path_of_log(directory: str, base: int) -> str:
    return stem(directory, base) + ".log"


def _segment_bases(directory: str) -> list[int]:
    return sorted(int(n[:-4]) for n in os.listdir(directory)
                  if n.endswith(".log") and len(n) == 24 and n[:20].isdigit())


def finish_swap(log) -> None:
    """The loader's half (see the module): finish a committed swap, or drop an
    uncommitted one's files. Runs before the loader lists the segments."""
    directory = log.directory
    try:
        groups = read_swap_intent(directory)
    except CheckpointError as e:
        raise CheckpointError(f"{e}; refusing to guess which segments a clean replaced")
    if groups is None:
        for name in os.listdir(directory):
            if name.endswith(_LEFTOVERS):
                _remove(os.path.join(directory, name))
        return
    for base, _, _ in groups:
        if os.path.exists(stem(directory, base) + CLEANED_SUFFIX):
            os.rename(stem(directory, base) + CLEANED_SUFFIX, stem(directory, base) + SWAP_SUFFIX)
    fsync_dir(directory)
    bases = _segment_bases(directory)
    for base, end, kept in groups:
        # Whatever is left of the group's old segments goes: every .log in its range
        # but the first (which is the new segment once the .swap has replaced it), and
        # every index of its range (the first's may be the old segment's).
        swap = stem(directory, base) + SWAP_SUFFIX
        for old in (o for o in bases if base <= o < end):
            path = stem(directory, old)
            if old != base or not kept or os.path.exists(swap):
                if os.path.exists(path + ".log"):
                    os.rename(path + ".log", path + ".log" + DELETED_SUFFIX)
            unlink_index_objects(log, old)
            for suffix in (".index", ".timeindex", ".txnindex", ".log" + DELETED_SUFFIX):
                _remove(path + suffix)
        if kept and os.path.exists(swap):
            os.rename(swap, path_of_log(directory, base))
    fsync_dir(directory)
    # The groups' .txnindex files went with their other indexes: without snapshots the
    # next build of the transactions walks the whole log and writes them again.
    delete_snapshots(directory, lambda offset: True)
    remove_swap_intent(directory)
    for name in os.listdir(directory):   # a .cleaned of a group not in the intent
        if name.endswith(_LEFTOVERS):
            _remove(os.path.join(directory, name))
    log.recovery.completed_operations.append(
        "clean_swap(" + ",".join(f"{b}-{e}" for b, e, _ in groups) + ")")
    logger.warning("recovery of %s finished an interrupted swap of cleaned segments %s",
                   directory, groups)
