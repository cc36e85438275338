"""Named crash points inside multi-step storage operations, for crash tests.

A crash test's child process sets ``hook`` (for instance to ``os._exit`` at the n-th
hit of one named point) so that every intermediate on-disk state of a truncation,
retention or roll is recovered from, not only the states that a randomly timed SIGKILL
happens to hit. The process and the files are real; only the moment of death is chosen.
In production ``hook`` stays None and a point costs a global load and a compare.

Point names are ``<operation>:<step>``; ``POINTS`` lists every one so that a test can
assert it covered them all.
"""
from __future__ import annotations

from typing import Callable

hook: Callable[[str], None] | None = None

POINTS = (
    # truncate_to (intent: truncate_to T)
    "truncate_to:intent-written",
    "truncate_to:segment-renamed",
    "truncate_to:segments-renamed-durable",
    "truncate_to:segment-deleted",
    "truncate_to:tail-cut",
    "truncate_to:tail-flushed",
    "truncate_to:checkpoints-written",
    # truncate_fully_and_start_at (intent: truncate_fully_and_start_at X)
    "truncate_fully:intent-written",
    "truncate_fully:segment-renamed",
    "truncate_fully:segments-renamed-durable",
    "truncate_fully:segment-deleted",
    "truncate_fully:segment-created",
    "truncate_fully:checkpoints-written",
    # delete_old_segments (the new log start offset is checkpointed first)
    "retention:log-start-written",
    "retention:segment-renamed",
    "retention:segments-renamed-durable",
    "retention:segment-deleted",
    # roll
    "roll:sealed",
    "roll:indexes-persisted",
    "roll:segment-created",
    "roll:directory-synced",
    # Segment.truncate_at: after each zeroed chunk (zeroing runs from the end backwards)
    "segment-truncate:zeroed-chunk",
    # Segment.delete, between its files (the .log was renamed to .log.deleted first)
    "segment-delete:shm-unlinked",
    "segment-delete:index-files-unlinked",
    # Log.swap_cleaned (shm.log.cleaner_swap; the swap intent is written first)
    "clean:intent-written",
    "clean:renamed-to-swap",
    "clean:old-renamed",
    "clean:old-deleted",
    "clean:swap-renamed",
    "clean:log-durable",
    "clean:checkpoint-written",
)
# The points only a clean passes (the truncation / retention / roll crash test's
# script does not clean; the compaction crash test covers these).
CLEAN_POINTS = tuple(p for p in POINTS if p.startswith("clean:"))
_KNOWN = frozenset(POINTS)


def point(name: str) -> None:
    """A place where a crash leaves an intermediate state that recovery must handle."""
    if hook is not None:
        assert name in _KNOWN, name
        hook(name)


def break_invariant_at(name: str) -> None:
    """Arm ``name`` to fail an assertion when it is reached: how a test shows what a
    broken invariant does to a live process (``MINIKAFKA_BROKER_FAULT_POINT``)."""
    global hook
    if name not in _KNOWN:
        raise ValueError(f"unknown fault point {name!r}; known: {', '.join(POINTS)}")

    def fail(hit: str) -> None:
        if hit == name:
            raise AssertionError(f"fault point {name}: an invariant broken on purpose")

    hook = fail
