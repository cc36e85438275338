"""A Log's producers and transactions: building their state (``ProducerStates``,
``TxnState``) from the newest producer snapshot and the batch headers after it, keeping
it up to date on appends, and the segments' ``.txnindex`` files (``txn_index``).

Rules:
- Built together, the first time either is needed (``Log.producer_states``, any
  transaction query, or an append of a transactional batch), then kept up to date by
  every append; dropped together by a truncation or a DeleteRecords (rebuilt on the
  next need). A build reads the newest snapshot at or below the LEO (Kafka's: its
  producers and their ongoing transactions' first offsets), the ``.txnindex`` entries
  of the segments below it, and walks the batch headers from it (markers are parsed).
  A completed transaction whose marker is below the snapshot but not below the HW is
  not known as unstable after a build: Kafka's ``unreplicatedTxns`` are not in its
  snapshots either.
- The ``.txnindex`` files at or after the snapshot are rewritten from that walk when
  they differ (a crash between a marker and its entry, a cut tail); a damaged file
  below it makes the build start over from the log start without a snapshot.
- After DeleteRecords (or when the build starts at the log start) a transaction whose
  data is all below the log start is not known: it no longer holds the LSO back (its
  marker, later, completes nothing); ``Log.first_unstable_offset`` is never below the
  log start (Kafka's clamp), whatever a snapshot says.
- A control batch appended must be a COMMIT/ABORT marker (``shm.control``), else the
  append is refused as corrupt.

Functions of a ``Log`` (they read and set its fields; nothing outside ``shm.log`` does).
"""
from __future__ import annotations

import bisect
import logging

from shm import batch, control
from shm.checkpoint import fsync_dir
from shm.log import txn_index
from shm.log.producer_snapshots import read_snapshot, snapshot_offsets
from shm.producer_state import ProducerStates, last_sequence
from shm.txn_state import TxnState

logger = logging.getLogger("shm.log")


def build(log) -> None:
    """Set ``log._producers`` and ``log._txns`` from the snapshot and the log."""
    start, producers, txns = _from_snapshot(log)
    if txns is not None and not _read_index_files_below(log, start, txns):
        start, producers, txns = log.log_start_offset, None, None
    producers = producers if producers is not None else ProducerStates()
    txns = txns if txns is not None else TxnState()
    log._producers, log._txns = producers, txns
    for segment in log.segments:
        if segment.next_offset <= start:
            continue
        end = segment.size_bytes
        view = segment.view(0, end)
        position = segment.position_of(start) if segment.base_offset < start else 0
        while position is not None and position < end:
            header = batch.read_header(view, position)
            if header.producer_id >= 0 and header.base_offset >= start:
                learn(log, view, position, header, index_base=None)
            position += header.size_bytes
    _rewrite_index_files_from(log, start)


def _from_snapshot(log):
    """(start, producers, txns) of the newest readable snapshot in [log start, LEO];
    (log start, None, None) without one."""
    for offset in reversed(snapshot_offsets(log.directory)):
        if log.log_start_offset <= offset <= log.log_end_offset:
            found = read_snapshot(log.directory, offset)
            if found is not None:
                return offset, found[0], found[1]
    return log.log_start_offset, None, None


def _read_index_files_below(log, start: int, txns: TxnState) -> bool:
    """Add the aborted entries below ``start`` from the files; False if one is damaged."""
    for segment in log.segments:
        if segment.base_offset >= start:
            break
        entries = txn_index.read(log.directory, segment.base_offset)
        if entries is None:
            logger.warning("%s: the .txnindex of segment %d is damaged; rebuilding the "
                           "transactions from the log start", log.directory,
                           segment.base_offset)
            return False
        for entry in entries:
            if log.log_start_offset <= entry.last_offset < start:
                txns.add_aborted(entry)
    return True


def _rewrite_index_files_from(log, start: int) -> None:
    """Make the files of the segments holding offsets at or after ``start`` say what
    the walk found (rewritten only when they differ)."""
    bases = log._bases
    for i, segment in enumerate(log.segments):
        if i + 1 < len(bases) and bases[i + 1] <= start:
            continue    # wholly below: its file was read, and trusted
        wanted = entries_of_segment(log, i)
        if txn_index.read(log.directory, segment.base_offset) != wanted:
            txn_index.rewrite(log.directory, segment.base_offset, wanted)
            log._txn_indexes_unsynced.add(segment.base_offset)


def entries_of_segment(log, i: int) -> list:
    """The aborted entries whose marker lies in segment ``i`` (the state is built)."""
    aborted, lasts = log._txns.aborted, log._txns._aborted_last
    low = bisect.bisect_left(lasts, log._bases[i])
    high = len(lasts) if i + 1 == len(log._bases) else \
        bisect.bisect_left(lasts, log._bases[i + 1])
    return aborted[low:high]


def learn(log, view, position: int, header: batch.BatchHeader, *,
          index_base: int | None) -> None:
    """A batch of a producer (``header.producer_id >= 0``) was appended (or walked by a
    build): update the producers and the transactions. ``index_base``: the segment
    that holds it, whose ``.txnindex`` gets an ABORT's entry (None: a build, which
    rewrites the files itself)."""
    if header.control:
        marker = control.parse_marker(view, position)
        log._producers.end_transaction(header.producer_id, header.producer_epoch,
                                       header.max_timestamp)
        done = log._txns.marker(header.producer_id, marker.commit, marker.coordinator_epoch,
                                header.base_offset)
        if done is not None and done.aborted and index_base is not None:
            txn_index.append(log.directory, index_base, log._txns.aborted[-1])
            log._txn_indexes_unsynced.add(index_base)
        return
    if header.transactional:
        log._txns.data_batch(header.producer_id, header.base_offset)
    if header.base_sequence >= 0 and header.producer_epoch >= 0:
        log._producers.update(
            header.producer_id, header.producer_epoch, header.base_sequence,
            last_sequence(header.base_sequence, header.record_count), header.base_offset,
            header.next_offset - 1, header.max_timestamp)


def sync_indexes(log) -> None:
    """Make every ``.txnindex`` written since the last call durable (files and names):
    a roll calls it before its snapshot, which makes the build trust them."""
    if log._txn_indexes_unsynced:
        for base in sorted(log._txn_indexes_unsynced):
            txn_index.fsync(log.directory, base)
        fsync_dir(log.directory)
        log._txn_indexes_unsynced.clear()


def check_markers(view, batches) -> None:
    """Refuse (CorruptRecordError) a control batch that is not a COMMIT/ABORT marker."""
    for position, header in batches:
        if header.control:
            control.parse_marker(view, position)


def trim_active_index(log) -> None:
    """The active segment's file keeps only entries below the LEO (after a cut)."""
    base = log.active_segment.base_offset
    entries = txn_index.read(log.directory, base)
    if entries is None or any(e.last_offset >= log.log_end_offset for e in entries):
        txn_index.rewrite(log.directory, base, [e for e in entries or []
                                                if e.last_offset < log.log_end_offset])
        log._txn_indexes_unsynced.add(base)
