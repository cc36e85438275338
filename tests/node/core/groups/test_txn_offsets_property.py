"""A property of the group core's transactional offsets: after any sequence of plain
commits, TxnOffsetCommits of several producers, their COMMIT/ABORT markers, OffsetDeletes
and coordinator fail-overs (a new shard from the log: records of transactional batches
and markers), what OffsetFetch shows is the model's (Kafka's rules, written out
independently), and require_stable answers UNSTABLE_OFFSET_COMMIT exactly for the
partitions with a pending offset."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.wire.errors import ErrorCode

from .harness import OFFSET_DELETE
from .test_txn_offsets import TxnHarness, commit, fetch, txn_commit

GROUP = "g"
TPS = [("t", 0), ("t", 1)]
PIDS = [11, 12]
SEEDS = 40
OPS_PER_SEED = 40

ops = st.lists(st.one_of(
    st.tuples(st.just("txn"), st.sampled_from(PIDS), st.sampled_from(TPS),
              st.integers(0, 1000)),
    st.tuples(st.just("plain"), st.sampled_from(TPS), st.integers(0, 1000)),
    st.tuples(st.just("marker"), st.sampled_from(PIDS), st.booleans()),
    st.tuples(st.just("delete"), st.sampled_from(TPS)),
    st.tuples(st.just("failover"))), min_size=3, max_size=30)


class Model:
    """Kafka's rules: a transaction's offset counts from its COMMIT marker on, unless a
    plain commit written after it is there; a delete drops committed and pending."""

    def __init__(self):
        self.clock = 0
        self.committed: dict = {}           # tp -> (offset, written at)
        self.pending: dict = {}             # pid -> {tp: (offset, written at)}

    def apply(self, op) -> None:
        self.clock += 1
        kind = op[0]
        if kind == "txn":
            _, pid, tp, value = op
            self.pending.setdefault(pid, {})[tp] = (value, self.clock)
        elif kind == "plain":
            _, tp, value = op
            self.committed[tp] = (value, self.clock)
        elif kind == "marker":
            _, pid, won = op
            for tp, (value, at) in self.pending.pop(pid, {}).items():
                if won and (tp not in self.committed or self.committed[tp][1] < at):
                    self.committed[tp] = (value, at)
        elif kind == "delete":
            _, tp = op
            self.committed.pop(tp, None)
            for offsets in self.pending.values():
                offsets.pop(tp, None)

    def visible(self) -> dict:
        return {tp: (self.committed[tp][0] if tp in self.committed else -1, 0) for tp in TPS}

    def unstable(self) -> set:
        return {tp for offsets in self.pending.values() for tp in offsets}


def _random_ops(seed: int, n: int) -> list:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        kind = rng.choice(("txn", "txn", "plain", "marker", "marker", "delete", "failover"))
        if kind == "txn":
            out.append(("txn", rng.choice(PIDS), rng.choice(TPS), rng.randrange(1000)))
        elif kind == "plain":
            out.append(("plain", rng.choice(TPS), rng.randrange(1000)))
        elif kind == "marker":
            out.append(("marker", rng.choice(PIDS), rng.random() < 0.6))
        elif kind == "delete":
            out.append(("delete", rng.choice(TPS)))
        else:
            out.append(("failover",))
    return out


@pytest.mark.parametrize("seed", range(SEEDS))
def test_seeded_histories_follow_the_model(seed):
    """Seeded (the seed reproduces a failure): longer histories than hypothesis's."""
    _check(_random_ops(seed, OPS_PER_SEED))


@settings(max_examples=200, deadline=None)
@given(ops)
def test_fetched_offsets_follow_the_model_through_markers_deletes_and_failovers(sequence):
    _check(sequence)


def _check(sequence) -> None:
    h, model = TxnHarness(), Model()
    for op in sequence:
        if op[0] == "txn":
            txn_commit(h, GROUP, {op[2]: op[3]}, pid=op[1])
        elif op[0] == "plain":
            commit(h, GROUP, {op[1]: op[2]})
        elif op[0] == "marker":
            h.marker(op[1], op[2])
        elif op[0] == "delete":
            answer = h.call(OFFSET_DELETE, {"group_id": GROUP, "topics": [
                {"name": op[1][0], "partitions": [{"partition_index": op[1][1]}]}]})
            assert answer["error_code"] in (0, ErrorCode.GROUP_ID_NOT_FOUND), answer
        else:
            h.failover()
        model.apply(op)
        h.shard.pending.check()
        assert fetch(h, GROUP, TPS, require_stable=False) == model.visible(), (op, sequence)
        stable = fetch(h, GROUP, TPS)
        assert {tp for tp, (_, code) in stable.items()
                if code == ErrorCode.UNSTABLE_OFFSET_COMMIT} == model.unstable(), op
