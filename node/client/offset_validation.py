"""KIP-320 for the consumer: after a leader change, is the position still on the log?

A pure core (no I/O): the consumer asks the new leader OffsetForLeaderEpoch with the
leader epoch of the last batch it consumed (its "last fetched epoch") and hands the
answer to ``complete_validation``, which says what to do with the position. Kafka's
``SubscriptionState.maybeCompleteValidation``.

Rules:

- The leader answers (epoch, end offset): the largest epoch it holds at or below the
  one asked for, and where that epoch ends in its log. Records the consumer read from
  a leader that was later deposed are on the new leader only up to that end offset.
- end offset >= position, and the leader holds the epoch asked for: the position is
  on the leader's log (``Validated``); fetching resumes there.
- end offset < position: the log the consumer read was truncated beneath it (an
  unclean election, or a deposed leader's unreplicated tail). The end offset is the
  first offset known to diverge. With a reset policy the position moves back to it
  (``SeekValidated``, Kafka's "resetting offset to the first offset known to
  diverge"); without one the application gets a LogTruncationException carrying it
  (``RaiseTruncation``).
- The answer is undefined (UNDEFINED_EPOCH or UNDEFINED_EPOCH_OFFSET: the leader holds
  no epoch at or below ours), or the leader holds only an older epoch than ours while
  its log reaches past the position (it never had the batch we read, and where the two
  logs part cannot be told): with a reset policy the position is reset by the policy
  (``ResetOffset``), without one a LogTruncationException with no divergent offset.
- Error answers are not decided here: the consumer refreshes metadata and asks again.
"""
from __future__ import annotations

from dataclasses import dataclass

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


@dataclass(frozen=True)
class Validated:
    """The position is on the leader's log: fetch from it."""


@dataclass(frozen=True)
class SeekValidated:
    """Move the position back to ``offset`` (first offset known to diverge), whose
    epoch is ``leader_epoch``; the new position needs no further validation."""
    offset: int
    leader_epoch: int


@dataclass(frozen=True)
class ResetOffset:
    """Where the logs diverge is unknown: apply ``auto.offset.reset``."""


@dataclass(frozen=True)
class RaiseTruncation:
    """No reset policy: raise LogTruncationException; ``divergent_offset`` is None
    when the leader could not tell where the logs diverge."""
    divergent_offset: int | None
    leader_epoch: int


Decision = Validated | SeekValidated | ResetOffset | RaiseTruncation


def complete_validation(position: int, last_fetched_epoch: int, answer_epoch: int,
                        end_offset: int, has_reset_policy: bool) -> Decision:
    """The decision for a position validated with an OffsetForLeaderEpoch answer."""
    assert position >= 0 and last_fetched_epoch >= 0, (position, last_fetched_epoch)
    undefined = end_offset == UNDEFINED_EPOCH_OFFSET or answer_epoch == UNDEFINED_EPOCH
    never_had_ours = not undefined and answer_epoch < last_fetched_epoch \
        and end_offset >= position
    if undefined or never_had_ours:
        return ResetOffset() if has_reset_policy else RaiseTruncation(None, UNDEFINED_EPOCH)
    if end_offset < position:
        if has_reset_policy:
            return SeekValidated(end_offset, answer_epoch)
        return RaiseTruncation(end_offset, answer_epoch)
    return Validated()
