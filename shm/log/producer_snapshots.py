"""The idempotent producers' snapshot files of one partition directory, as Kafka's
ProducerStateManager keeps them: ``<offset>.snapshot`` (20 digits) is the state of every
producer as of ``offset``, i.e. after every batch below it, with each producer's ongoing
transaction's first offset and last coordinator epoch (``shm.txn_state``; the aborted
transactions are in the segments' ``.txnindex`` files, ``shm.log.txn_index``).

Rules:
- A snapshot is written at each roll (``Log.roll``), as a CRC line and a JSON payload.
- Not fsynced: it is derived from the log, so a lost or torn one is ignored (and
  deleted) and the state is rebuilt from the batch headers after an older one.
- At most SNAPSHOTS_KEPT are kept, none below the log start offset; truncation and
  retention delete the ones they make wrong (``delete_snapshots``).
"""
from __future__ import annotations

import json
import logging
import os

from crc32c import crc32c

from shm.producer_state import ProducerStates
from shm.txn_state import TxnState

logger = logging.getLogger("shm.log")

SNAPSHOT_SUFFIX = ".snapshot"      # idempotent producers' state as of an offset
SNAPSHOTS_KEPT = 3


def _unlink_if_present(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def snapshot_path(directory: str, offset: int) -> str:
    return os.path.join(directory, f"{offset:020d}{SNAPSHOT_SUFFIX}")


def snapshot_offsets(directory: str) -> list[int]:
    return sorted(int(n[:20]) for n in os.listdir(directory)
                  if n.endswith(SNAPSHOT_SUFFIX) and len(n) == 20 + len(SNAPSHOT_SUFFIX)
                  and n[:20].isdigit())


def write_snapshot(directory: str, offset: int, producers: ProducerStates,
                   log_start_offset: int, txns: TxnState | None = None) -> None:
    """The producers' state as of ``offset`` (every batch below it), with its CRC.
    Not fsynced: it is derived from the log, and a lost or torn one is rebuilt."""
    data = {"offset": offset, "producers": producers.to_json()}
    if txns is not None:
        data["transactions"] = txns.to_json()
    payload = json.dumps(data, separators=(",", ":")).encode()
    path = snapshot_path(directory, offset)
    with open(path + ".tmp", "wb") as f:
        f.write(b"%08x\n" % crc32c(payload) + payload)
    os.replace(path + ".tmp", path)
    delete_snapshots(directory, lambda o: o < log_start_offset)
    kept = snapshot_offsets(directory)
    for old in kept[:-SNAPSHOTS_KEPT]:
        _unlink_if_present(snapshot_path(directory, old))


def read_snapshot(directory: str, offset: int) -> tuple[ProducerStates, TxnState] | None:
    """The producers' and transactions' state of a snapshot (the transactions' without
    aborted entries); None (and the file deleted) if it is torn or not one."""
    path = snapshot_path(directory, offset)
    try:
        with open(path, "rb") as f:
            data = f.read()
        crc, payload = int(data[:8], 16), data[9:]
        if crc != crc32c(payload):
            raise ValueError("CRC mismatch")
        snapshot = json.loads(payload)
        if snapshot["offset"] != offset:
            raise ValueError(f"it says offset {snapshot['offset']}")
        return (ProducerStates.from_json(snapshot["producers"]),
                TxnState.from_json(snapshot.get("transactions")))
    except (OSError, ValueError, KeyError, TypeError) as e:
        logger.warning("ignoring producer-state snapshot %s: %s", path, e)
        _unlink_if_present(path)
        return None


def delete_snapshots(directory: str, which) -> None:
    """Delete every snapshot whose offset ``which(offset)`` is true of."""
    for offset in snapshot_offsets(directory):
        if which(offset):
            _unlink_if_present(snapshot_path(directory, offset))
