"""``Log.swap_cleaned``: put a built clean's segments in place of the old ones, on the
owner thread, crash-safely, in the order of ``shm.log.cleaner_files`` (Kafka's
``replaceSegments``: .cleaned -> .swap, old -> .deleted and removed, .swap -> .log,
except that each .swap replaces its group's first old .log in one rename, before the
group's other old segments go: our LocalReaders list the directory, Kafka's readers
use its in-memory segment map), each step named by a ``shm.faults`` point.

Shared-memory indexes are named by base offset, and the new segment of a group has the
base of the group's first old segment: the old segment is deleted (its objects
unlinked) before the new one's are created under the same names. A ``LocalReader``
attached to the old objects keeps its mapping, sees the ``.log`` file's inode change,
and re-attaches (``shm.local_reader``).
"""
from __future__ import annotations

import os

from shm import faults
from shm.checkpoint import fsync_dir
from shm.index import KIND_OFFSET, KIND_TIME, OffsetIndex, TimeIndex, index_name
from shm.log import cleaner, txn_index
from shm.log.producer_snapshots import delete_snapshots
from shm.log.cleaner_files import (INDEX_CLEANED_SUFFIXES, SWAP_SUFFIX, remove_swap_intent,
                                   stem, write_swap_intent)
from shm.segment import Segment


def unchanged(log, plan) -> bool:
    """Does the log still hold the segments the plan read, as they were?"""
    if log._closed or log._segments_changed != plan.generation:
        return False
    count = len(plan.sources)
    if len(log.segments) <= count:
        return False
    return all(log.segments[i] is s.segment and not s.segment.deleted and
               s.segment.size_bytes == s.size for i, s in enumerate(plan.sources))


def swap(log, cleaned) -> bool:
    plan = cleaned.plan
    if cleaned.done or not unchanged(log, plan):
        cleaned.abort()
        return False
    cleaned.done = True
    directory = log.directory
    outputs = cleaned.outputs
    state = cleaner.state(log)
    if not outputs:  # every group was skipped: nothing changes but the checkpoint
        return False
    if plan.txn_pass.dropped_marker_max >= 0:
        # A snapshot at or below a dropped marker may hold its transaction as ongoing:
        # a build from it would never see the transaction end. Derived: safe to drop.
        delete_snapshots(directory, lambda o: o <= plan.txn_pass.dropped_marker_max)
    write_swap_intent(directory, [(o.base, o.end, int(o.kept)) for o in outputs])
    faults.point("clean:intent-written")
    for output in outputs:
        if output.kept:
            os.rename(output.path, stem(directory, output.base) + SWAP_SUFFIX)
            faults.point("clean:renamed-to-swap")
    # No directory fsync here nor before the old segments go: from the durable intent
    # on, recovery finishes the swap from any subset of these steps (cleaner_files).
    # Each group's .swap replaces its first old segment's .log in one rename, so a
    # LocalReader listing the directory never finds the group's range without a file.
    firsts = set()
    for output in outputs:
        if output.kept:
            first = plan.sources[output.first].segment
            os.rename(stem(directory, output.base) + SWAP_SUFFIX, first.path)
            first.deleted = True  # its file is gone: delete() only closes and unlinks
            firsts.add(id(first))
            faults.point("clean:swap-renamed")
    olds = [s.segment for o in outputs for s in plan.sources[o.first:o.stop]]
    for old in olds:
        if id(old) not in firsts:
            old.mark_deleted()
            faults.point("clean:old-renamed")
    closes = []
    for old in olds:
        old.delete(closes.append)   # also frees the shared-memory index names of the group's base
        faults.point("clean:old-deleted")
    log._release(closes)   # the files' close (which frees their blocks) in the background
    for output in outputs:     # the old first segment's .txnindex went with it
        if output.kept and output.aborted:
            txn_index.rewrite(directory, output.base, output.aborted)
            txn_index.fsync(directory, output.base)
    new_segments = {o.base: _install(log, o) for o in outputs if o.kept}
    fsync_dir(directory)  # every step durable before the intent can go
    faults.point("clean:log-durable")
    replaced = {id(old) for old in olds}
    segments = []
    for segment in log.segments:
        if id(segment) in replaced:
            new = new_segments.pop(segment.base_offset, None)
            if new is not None:
                segments.append(new)
        else:
            segments.append(segment)
    assert not new_segments
    log.segments = segments
    log._bases = [s.base_offset for s in segments]
    log._segments_changed += 1
    log._producers = log._txns = None   # rebuilt (snapshot, .txnindex files) when needed
    state.first_dirty = max(plan.end, state.first_dirty or 0)
    state.horizons = state.horizons.after_clean(plan.end, cleaned.now_ms,
                                                plan.delete_retention_ms)
    state.save()
    faults.point("clean:checkpoint-written")
    remove_swap_intent(directory)
    log.check()
    return True


def _install(log, output) -> Segment:
    """The new segment of a group (its file already renamed to .log): its shared
    indexes created (the names are free since the old segment went) from the arrays the
    build made, stamped with the file's inode (a LocalReader uses an index only with
    that file); its index files, written and fsynced by the build, renamed in place."""
    base = output.base
    indexes = []
    for cls, kind in ((OffsetIndex, KIND_OFFSET), (TimeIndex, KIND_TIME)):
        name = index_name(log.cluster_id, log.broker_id, log.topic, log.partition, base, kind)
        indexes.append(cls.create(name, base, log._index_entries_max()))
    keys, positions, time_keys, time_values = output.index
    indexes[0].load(keys, positions)
    indexes[1].load(time_keys, time_values)
    segment = Segment(log.directory, base, output.fd, log.config.segment_bytes,
                      indexes[0], indexes[1], log.config.index_interval_bytes, 0)
    output.fd = -1  # the segment owns it now
    segment.map_readonly()
    assert segment.trust(output.size), f"cleaned segment {base} does not walk"
    base_stem = stem(log.directory, base)
    for suffix, final in zip(INDEX_CLEANED_SUFFIXES, (".index", ".timeindex")):
        os.rename(base_stem + suffix, base_stem + final)
    segment.indexes_dirty = False  # the files hold what the shared indexes hold
    return segment
