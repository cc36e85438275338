"""TxnShard, one API at a time: each answer and error as Kafka's TransactionCoordinator gives
it, the records written and the marker requests asked for."""

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.core.groups.hashing import partition_for
from node.core.txn import records
from node.core.txn.bodies import REQUESTS, RESPONSES
from node.core.txn.config import TxnConfig
from node.core.txn.shard import ProducerIdsUnavailable, TxnShard, error_response
from node.core.txn.state import TxnMeta, TxnState

INIT, ADD, OFFSETS, END, DESCRIBE, LIST = 22, 24, 25, 26, 65, 66
NONE, INVALID_REQUEST, NOT_COORDINATOR, LOADING = 0, 42, 16, 14
OLD_FENCED, TXN_STATE, MAPPING, TIMEOUT, CONCURRENT = 47, 48, 49, 50, 51
FENCED, NOT_FOUND, ABORTABLE = 90, 105, 120
CONFIG = TxnConfig()                      # 3 partitions, transaction.version 2
OWNED = [t for t in (f"t{i}" for i in range(40)) if partition_for(t, 3) == 0]
T, T2 = OWNED[0], OWNED[1]
FOREIGN = next(t for t in (f"t{i}" for i in range(40)) if partition_for(t, 3) != 0)


class Harness:
    def __init__(self, config=CONFIG, loaded=True, first_pid=1000):
        self.pids = itertools.count(first_pid)
        self.config = config
        self.log = []
        self.shard = TxnShard(0, config, 7, self.allocate)
        self.unavailable = False
        if loaded:
            self.shard.loaded(0)

    def allocate(self):
        if self.unavailable:
            raise ProducerIdsUnavailable()
        return next(self.pids)

    def call(self, api, version, body, now=10):
        out = self.shard.handle(now, api, version, body, "tok")
        self.log += out.records
        self.last = out
        assert [r.token for r in out.replies] == ["tok"]
        return out.replies[0].body

    def init(self, tid=T, timeout=60000, pid=-1, epoch=-1, version=5, now=10):
        return self.call(INIT, version, {"transactional_id": tid, "transaction_timeout_ms": timeout,
                                         "producer_id": pid, "producer_epoch": epoch}, now)

    def add(self, pid, epoch, parts=(("x", 0),), tid=T, version=3, now=20):
        topics = {}
        for topic, p in parts:
            topics.setdefault(topic, []).append(p)
        body = self.call(ADD, version, {
            "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]},
            now)
        codes = {r["partition_error_code"] for t in body["results_by_topic_v3_and_below"]
                 for r in t["results_by_partition"]}
        assert len(codes) == 1, body
        return codes.pop()

    def verify(self, pid, epoch, parts, tid=T, verify_only=True):
        body = self.call(ADD, 5, {"transactions": [{
            "transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
            "verify_only": verify_only,
            "topics": [{"name": t, "partitions": [p]} for t, p in parts]}]})
        [result] = body["results_by_transaction"]
        assert result["transactional_id"] == tid
        return {(t["name"], r["partition_index"]): r["partition_error_code"]
                for t in result["topic_results"] for r in t["results_by_partition"]}

    def end(self, pid, epoch, commit=True, tid=T, version=5, now=30):
        return self.call(END, version, {"transactional_id": tid, "producer_id": pid,
                                        "producer_epoch": epoch, "committed": commit}, now)

    def done(self, now=40):
        """Every marker request of the last call completes."""
        out = []
        for m in self.last.markers:
            r = self.shard.markers_done(now, m.transactional_id, m.producer_id,
                                        m.producer_epoch, {tp: NONE for tp in m.partitions})
            self.log += r.records
            out.append(r)
        return out

    def meta(self, tid=T) -> TxnMeta:
        return self.shard.transaction(tid)


def started(h=None, **kw):
    h = h or Harness(**kw)
    r = h.init()
    assert r["error_code"] == NONE
    return h, r["producer_id"], r["producer_epoch"]


# ---- InitProducerId ------------------------------------------------------------------------

def test_init_gives_a_new_id_epoch_0_then_bumps_the_epoch():
    h = Harness()
    assert h.init() == {"throttle_time_ms": 0, "error_code": NONE, "producer_id": 1000,
                        "producer_epoch": 0}
    assert h.init()["producer_epoch"] == 1
    assert h.meta().state is TxnState.EMPTY and len(h.log) == 2
    assert records.decode(*h.log[-1])[1].producer_epoch == 1


@pytest.mark.parametrize("body, error", [
    ({"transactional_id": "", "transaction_timeout_ms": 1000}, INVALID_REQUEST),
    ({"transactional_id": None, "transaction_timeout_ms": 1000}, INVALID_REQUEST),
    ({"transactional_id": T, "transaction_timeout_ms": 0}, TIMEOUT),
    ({"transactional_id": T, "transaction_timeout_ms": 900_001}, TIMEOUT),
    ({"transactional_id": T, "transaction_timeout_ms": 1000, "producer_id": -1,
      "producer_epoch": 3}, INVALID_REQUEST),
    ({"transactional_id": T, "transaction_timeout_ms": 1000, "producer_id": 5,
      "producer_epoch": -1}, INVALID_REQUEST),
    ({"transactional_id": FOREIGN, "transaction_timeout_ms": 1000}, NOT_COORDINATOR),
    ({"transactional_id": T, "transaction_timeout_ms": 1000, "bogus": 1}, INVALID_REQUEST),
    ({"transactional_id": T, "transaction_timeout_ms": "soon"}, INVALID_REQUEST),
])
def test_init_refuses_bad_requests_and_changes_nothing(body, error):
    h = Harness()
    reply = h.call(INIT, 5, body)
    assert reply["error_code"] == error
    assert (reply["producer_id"], reply["producer_epoch"]) == (-1, -1)
    assert h.log == [] and h.shard.txns == {}


def test_requests_before_the_load_get_coordinator_load_in_progress():
    h = Harness(loaded=False)
    assert h.init()["error_code"] == LOADING
    assert h.end(1, 0)["error_code"] == LOADING
    h.shard.loaded(0)
    assert h.init()["error_code"] == NONE


def test_no_producer_id_at_hand_is_retriable_and_leaves_nothing():
    h = Harness()
    h.unavailable = True
    assert h.init()["error_code"] == LOADING
    assert h.shard.txns == {} and h.log == []


def test_init_fences_an_ongoing_transaction_by_aborting_it_with_a_bumped_epoch():
    h, pid, epoch = started()
    assert h.add(pid, epoch, [("x", 0), ("y", 1)]) == NONE
    reply = h.init()
    assert reply["error_code"] == CONCURRENT
    [marker] = h.last.markers
    assert (marker.producer_id, marker.producer_epoch, marker.commit) == (pid, epoch + 1, False)
    assert marker.partitions == (("x", 0), ("y", 1)) and marker.coordinator_epoch == 7
    assert h.meta().state is TxnState.PREPARE_ABORT
    # The old producer is fenced from now on; the new one waits for the markers.
    assert h.add(pid, epoch, [("z", 0)]) == FENCED
    assert h.end(pid, epoch, commit=True)["error_code"] == FENCED
    assert h.init()["error_code"] == CONCURRENT
    h.last.markers.append(marker)
    h.done()
    assert h.meta().state is TxnState.COMPLETE_ABORT
    assert h.init() == {"throttle_time_ms": 0, "error_code": NONE, "producer_id": pid,
                        "producer_epoch": epoch + 2}


def test_kip360_init_with_the_current_id_and_epoch_bumps_and_a_retry_gets_the_same():
    h, pid, epoch = started()
    assert h.init(pid=pid, epoch=epoch)["producer_epoch"] == epoch + 1
    assert h.init(pid=pid, epoch=epoch)["producer_epoch"] == epoch + 1   # a retry
    assert h.init(pid=pid, epoch=epoch + 1)["producer_epoch"] == epoch + 2
    assert h.init(pid=pid, epoch=epoch)["error_code"] == FENCED          # long gone
    assert h.init(pid=pid + 50, epoch=0)["error_code"] == FENCED         # not its id
    assert h.init(pid=pid + 50, epoch=0, version=3)["error_code"] == OLD_FENCED


def test_kip360_after_a_plain_init_fences_the_older_producer():
    h, pid, epoch = started()
    assert h.init()["producer_epoch"] == epoch + 1          # another instance: last epoch -1
    assert h.init(pid=pid, epoch=epoch)["error_code"] == FENCED


def seeded(h: Harness, epoch: int, state=TxnState.EMPTY, tv=0, pid=500, tid=T):
    """A shard whose log holds ``tid`` at ``epoch`` (near exhaustion)."""
    h2 = Harness(config=h.config, loaded=False)
    m = TxnMeta(tid, pid, producer_epoch=epoch, state=state, timeout_ms=60000,
                last_update_ms=0, client_tv=tv)
    h2.shard.replay(0, *records.encode(m, h.config.log_value_version))
    h2.shard.loaded(0)
    return h2


def test_an_exhausted_epoch_gets_a_new_producer_id():
    h = seeded(Harness(), 32765)
    assert h.init() == {"throttle_time_ms": 0, "error_code": NONE, "producer_id": 500,
                        "producer_epoch": 32766}
    reply = h.init()
    assert (reply["producer_id"], reply["producer_epoch"]) == (1000, 0)
    assert h.meta().previous_producer_id == 500


def test_kip360_retry_of_a_rotation_is_answered_with_the_new_id():
    h = seeded(Harness(), 32766)
    assert (h.init(pid=500, epoch=32766)["producer_id"], h.meta().producer_epoch) == (1000, 0)
    again = h.init(pid=500, epoch=32766)
    assert (again["error_code"], again["producer_id"], again["producer_epoch"]) == (NONE, 1000, 0)


# ---- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------------------

def test_add_partitions_starts_the_transaction_and_a_repeat_writes_nothing():
    h, pid, epoch = started()
    assert h.add(pid, epoch, [("x", 0)], now=25) == NONE
    m = h.meta()
    assert (m.state, m.partitions, m.start_ms) == (TxnState.ONGOING, {("x", 0)}, 25)
    n = len(h.log)
    assert h.add(pid, epoch, [("x", 0)], now=30) == NONE and len(h.log) == n
    assert h.add(pid, epoch, [("y", 3)], now=35) == NONE and len(h.log) == n + 1
    assert h.meta().start_ms == 25 and h.meta().partitions == {("x", 0), ("y", 3)}


def test_add_partitions_errors():
    h, pid, epoch = started()
    assert h.add(pid, epoch, tid=T2) == MAPPING                 # never initialized
    assert h.add(pid + 1, epoch) == MAPPING                     # not its producer id
    assert h.add(pid, epoch + 1) == FENCED
    assert h.add(pid, epoch - 1) == FENCED
    assert h.add(pid, epoch + 1, version=1) == OLD_FENCED       # v0-v1: INVALID_PRODUCER_EPOCH
    assert h.add(pid, epoch, tid=FOREIGN) == NOT_COORDINATOR
    assert h.add(pid, epoch, tid="") == INVALID_REQUEST
    assert h.add(pid, epoch) == NONE
    h.end(pid, epoch)
    assert h.add(pid, epoch + 1, [("z", 0)]) == CONCURRENT      # markers pending


def test_the_batched_form_adds_for_several_transactions_and_verifies():
    h, pid, epoch = started()
    h.init(tid=T2)
    body = h.call(ADD, 5, {"transactions": [
        {"transactional_id": T, "producer_id": pid, "producer_epoch": epoch,
         "topics": [{"name": "x", "partitions": [0, 1]}]},
        {"transactional_id": T2, "producer_id": 1001, "producer_epoch": 9,
         "topics": [{"name": "y", "partitions": [0]}]}]})
    codes = [[r["partition_error_code"] for t in x["topic_results"]
              for r in t["results_by_partition"]] for x in body["results_by_transaction"]]
    assert codes == [[NONE, NONE], [FENCED]]
    assert h.meta().partitions == {("x", 0), ("x", 1)}
    # KIP-890 part 1: verify_only answers, writes nothing.
    n = len(h.log)
    assert h.verify(pid, epoch, [("x", 1), ("x", 2)]) == {("x", 1): NONE, ("x", 2): ABORTABLE}
    assert h.verify(pid, epoch + 1, [("x", 1)]) == {("x", 1): FENCED}
    assert h.verify(pid, epoch, [("x", 1)], tid=OWNED[2]) == {("x", 1): MAPPING}
    assert len(h.log) == n and h.meta().partitions == {("x", 0), ("x", 1)}


def test_verify_answers_concurrent_transactions_while_markers_are_pending():
    h, pid, epoch = started()
    h.add(pid, epoch, [("x", 0)])
    h.end(pid, epoch, version=3)
    assert h.verify(pid, epoch, [("x", 0)]) == {("x", 0): CONCURRENT}


def test_add_offsets_adds_the_groups_consumer_offsets_partition():
    h, pid, epoch = started(config=TxnConfig(offsets_topic_num_partitions=7))
    body = {"transactional_id": T, "producer_id": pid, "producer_epoch": epoch, "group_id": "g1"}
    assert h.call(OFFSETS, 4, body) == {"throttle_time_ms": 0, "error_code": NONE}
    assert h.meta().partitions == {("__consumer_offsets", partition_for("g1", 7))}
    assert h.call(OFFSETS, 4, {**body, "producer_epoch": epoch + 1})["error_code"] == FENCED
    assert h.call(OFFSETS, 1, {**body, "producer_epoch": epoch + 1})["error_code"] == OLD_FENCED
    assert h.call(OFFSETS, 4, {**body, "transactional_id": T2})["error_code"] == MAPPING


# ---- EndTxn ----------------------------------------------------------------------------------

def test_end_txn_without_kip890_keeps_the_epoch_and_retries_are_answered():
    h, pid, epoch = started(config=TxnConfig(transaction_version=0))
    assert h.end(pid, epoch)["error_code"] == TXN_STATE                 # nothing added
    h.add(pid, epoch, [("x", 0), ("y", 0)])
    assert h.end(pid, epoch) == {"throttle_time_ms": 0, "error_code": NONE,
                                 "producer_id": pid, "producer_epoch": epoch}
    [marker] = h.last.markers
    assert (marker.producer_epoch, marker.commit, marker.partitions) == (
        epoch, True, (("x", 0), ("y", 0)))
    assert h.end(pid, epoch)["error_code"] == CONCURRENT
    assert h.end(pid, epoch, commit=False)["error_code"] == TXN_STATE
    h.last.markers.append(marker)
    h.done()
    assert h.meta().state is TxnState.COMPLETE_COMMIT and h.meta().partitions == set()
    assert h.end(pid, epoch)["error_code"] == NONE                      # a retry: done
    assert h.end(pid, epoch, commit=False)["error_code"] == TXN_STATE
    assert h.end(pid, epoch + 1)["error_code"] == FENCED
    assert h.end(pid, epoch + 1, version=1)["error_code"] == OLD_FENCED
    assert h.end(pid + 1, epoch)["error_code"] == MAPPING
    assert h.end(pid, epoch, tid=T2)["error_code"] == MAPPING


def test_end_txn_v5_bumps_the_epoch_and_answers_it():
    h, pid, epoch = started()
    h.add(pid, epoch, [("x", 0)])
    assert h.end(pid, epoch, commit=False) == {"throttle_time_ms": 0, "error_code": NONE,
                                               "producer_id": pid, "producer_epoch": epoch + 1}
    [marker] = h.last.markers
    assert (marker.producer_epoch, marker.commit) == (epoch + 1, False)
    assert h.end(pid, epoch, commit=False)["error_code"] == CONCURRENT    # retry, pending
    assert h.end(pid, epoch, commit=True)["error_code"] == TXN_STATE
    assert h.end(pid, epoch + 1, commit=False)["error_code"] == FENCED    # not yet its turn
    h.last.markers.append(marker)
    h.done()
    assert h.end(pid, epoch, commit=False)["producer_epoch"] == epoch + 1  # retry: done
    # The next transaction with the new epoch; the old one is fenced from it.
    assert h.add(pid, epoch, [("y", 0)]) == FENCED
    assert h.add(pid, epoch + 1, [("y", 0)]) == NONE
    assert h.end(pid, epoch, commit=False)["error_code"] == FENCED


@pytest.mark.parametrize("config, version", [(TxnConfig(), 4),
                                             (TxnConfig(transaction_version=1), 5)])
def test_no_bump_for_an_old_client_or_when_transaction_version_is_below_2(config, version):
    h, pid, epoch = started(config=config)
    h.add(pid, epoch)
    assert h.end(pid, epoch, version=version)["producer_epoch"] == epoch
    assert h.last.markers[0].producer_epoch == epoch


def test_end_txn_at_an_exhausted_epoch_moves_to_a_new_producer_id_at_completion():
    h = seeded(Harness(), 32766, state=TxnState.COMPLETE_COMMIT, tv=2)
    assert h.add(500, 32766) == NONE
    h.unavailable = True                                            # no id at hand: retry
    assert h.end(500, 32766)["error_code"] == LOADING
    assert h.meta().state is TxnState.ONGOING
    h.unavailable = False
    assert h.end(500, 32766) == {"throttle_time_ms": 0, "error_code": NONE,
                                 "producer_id": 1000, "producer_epoch": 0}
    [marker] = h.last.markers
    assert (marker.producer_id, marker.producer_epoch) == (500, 32767)
    assert h.add(1000, 0, [("y", 0)]) == CONCURRENT                  # the new id, too early
    assert h.end(1000, 0)["error_code"] == CONCURRENT
    h.last.markers.append(marker)
    h.done()
    m = h.meta()
    assert (m.producer_id, m.producer_epoch, m.previous_producer_id, m.next_producer_id) == (
        1000, 0, 500, -1)
    assert h.end(500, 32766)["producer_id"] == 1000                 # a retry of the overflow
    assert h.add(500, 32767) == MAPPING
    assert h.add(1000, 0, [("y", 0)]) == NONE


# ---- markers, load, time -------------------------------------------------------------------

def test_markers_done_completes_once_and_ignores_stale_or_fenced_reports():
    h, pid, epoch = started()
    h.add(pid, epoch)
    h.end(pid, epoch)
    [marker] = h.last.markers
    assert h.shard.markers_done(50, T, pid, epoch, {}).records == []        # old epoch
    assert h.shard.markers_done(50, T, pid, marker.producer_epoch,
                                {("x", 0): 52}).records == []              # coordinator fenced
    assert h.shard.markers_done(50, T, pid, marker.producer_epoch,
                                {("x", 0): OLD_FENCED}).records == []      # epoch refused
    assert h.shard.pending_markers() == [marker]                           # sent again on load
    out = h.shard.markers_done(50, T, pid, marker.producer_epoch, {("x", 0): NONE})
    assert len(out.records) == 1 and h.meta().state is TxnState.COMPLETE_COMMIT
    assert h.shard.markers_done(60, T, pid, marker.producer_epoch, {}).records == []
    assert h.shard.markers_done(60, "nobody", 1, 1, {}).records == []


def test_a_new_shard_rebuilt_from_the_log_resends_pending_markers():
    h, pid, epoch = started()
    h.add(pid, epoch, [("x", 0)])
    h.end(pid, epoch, commit=False)
    h.init(tid=T2)
    h.add(1001, 0, [("y", 1)], tid=T2)
    again = TxnShard(0, CONFIG, 8, lambda: 99)
    for offset, (key, value) in enumerate(h.log):
        again.replay(offset, key, value)
    assert again.handle(0, INIT, 5, {"transactional_id": T, "transaction_timeout_ms": 1},
                        "x").replies[0].body["error_code"] == LOADING
    out = again.loaded(100)
    [marker] = out.markers
    assert (marker.transactional_id, marker.commit, marker.coordinator_epoch) == (T, False, 8)
    assert marker.producer_epoch == epoch + 1 and out.records == []
    assert again.transaction(T2).state is TxnState.ONGOING
    assert again.transaction(T2).partitions == {("y", 1)}
    assert again.unload() == [] and not again.is_loaded


def test_replay_skips_unknown_key_versions_and_applies_tombstones():
    h = Harness(loaded=False)
    key, value = records.encode(TxnMeta(T, 5, producer_epoch=1), 1)
    h.shard.replay(0, key, value)
    h.shard.replay(1, b"\x00\x09junk", b"")
    assert h.shard.skipped_records == 1 and h.shard.transaction(T).producer_id == 5
    fence = bytearray(records.encode(TxnMeta(T, 5, producer_epoch=2), 0)[1])
    fence[2 + 8 + 2 + 4] = int(TxnState.PREPARE_EPOCH_FENCE)   # never written: skipped
    h.shard.replay(2, key, bytes(fence))
    assert h.shard.skipped_records == 2 and h.shard.transaction(T).producer_epoch == 1
    dead = bytearray(fence)
    dead[2 + 8 + 2 + 4] = int(TxnState.DEAD)                  # as a tombstone
    h.shard.replay(3, key, bytes(dead))
    assert h.shard.transaction(T) is None
    h.shard.replay(4, key, value)
    h.shard.replay(5, key, None)
    assert h.shard.transaction(T) is None


def test_a_timed_out_transaction_is_aborted_and_its_producer_fenced():
    h, pid, epoch = started()
    h.init(timeout=1000)
    epoch += 1
    h.add(pid, epoch, now=100)
    assert h.shard.next_deadline_ms() == 1101
    assert h.shard.tick(1100).records == []
    out = h.shard.tick(1101)
    [marker] = out.markers
    assert (marker.producer_epoch, marker.commit) == (epoch + 1, False)
    assert h.end(pid, epoch)["error_code"] == FENCED
    assert h.add(pid, epoch) == FENCED


def test_idle_transactional_ids_expire_but_not_ongoing_ones():
    config = TxnConfig(transactional_id_expiration_ms=1000,
                       transaction_remove_expired_transaction_cleanup_interval_ms=500)
    h, pid, epoch = started(config=config)            # T: Empty, updated at 10
    h.init(tid=T2, now=10)
    h.add(1001, 0, tid=T2, now=20)
    h.shard.tick(400)
    assert h.shard.next_deadline_ms() == 500
    out = h.shard.tick(1010)
    assert out.records == [records.tombstone(T)]
    assert h.shard.transaction(T) is None and h.shard.transaction(T2) is not None
    reply = h.call(DESCRIBE, 0, {"transactional_ids": [T]})
    assert reply["transaction_states"][0]["error_code"] == NOT_FOUND
    assert h.add(pid, epoch) == MAPPING
    assert h.init()["producer_id"] == 1002             # a new id for a new start


# ---- DescribeTransactions / ListTransactions --------------------------------------------------

def test_describe_transactions():
    h, pid, epoch = started()
    h.add(pid, epoch, [("x", 1), ("x", 0), ("a", 2)], now=33)
    reply = h.call(DESCRIBE, 0, {"transactional_ids": [T, T2, FOREIGN]})
    described, missing, foreign = reply["transaction_states"]
    assert described == {"error_code": NONE, "transactional_id": T,
                         "transaction_state": "Ongoing", "transaction_timeout_ms": 60000,
                         "transaction_start_time_ms": 33, "producer_id": pid,
                         "producer_epoch": epoch,
                         "topics": [{"topic": "a", "partitions": [2]},
                                    {"topic": "x", "partitions": [0, 1]}]}
    assert (missing["transactional_id"], missing["error_code"]) == (T2, NOT_FOUND)
    assert foreign["error_code"] == NOT_COORDINATOR


def test_list_transactions_filters_by_state_producer_id_and_duration():
    h, pid, epoch = started()
    h.init(tid=T2)
    h.add(pid, epoch, now=100)

    def listed(**body):
        reply = h.call(LIST, 1, body, now=1000)
        return [(x["transactional_id"], x["transaction_state"])
                for x in reply["transaction_states"]], reply["unknown_state_filters"]

    assert listed() == ([(T, "Ongoing"), (T2, "Empty")], [])
    assert listed(state_filters=["Ongoing", "Nope"]) == ([(T, "Ongoing")], ["Nope"])
    assert listed(producer_id_filters=[1001]) == ([(T2, "Empty")], [])
    assert listed(duration_filter=899) == ([(T, "Ongoing"), (T2, "Empty")], [])
    assert listed(duration_filter=900) == ([(T2, "Empty")], [])   # started 900 ms ago


def test_error_response_puts_the_error_everywhere():
    body = {"transactions": [{"transactional_id": T, "producer_id": 1, "producer_epoch": 0,
                              "verify_only": True,
                              "topics": [{"name": "x", "partitions": [0, 1]}]}]}
    out = error_response(ADD, body, NOT_COORDINATOR)
    assert out["error_code"] == NOT_COORDINATOR
    assert [r["partition_error_code"] for r in
            out["results_by_transaction"][0]["topic_results"][0]["results_by_partition"]] == [
        NOT_COORDINATOR, NOT_COORDINATOR]
    assert error_response(END, {}, LOADING)["producer_id"] == -1
    # Whatever the request dict holds, the answer is built (the malformed parts left out).
    odd = {"transactions": [{"topics": [{"name": "x"}, 5]}, "junk"],
           "v3_and_below_topics": [{"name": "y", "partitions": [1, "2"]}]}
    out = error_response(ADD, odd, NOT_COORDINATOR)
    assert out["results_by_transaction"] == [{"transactional_id": "", "topic_results": []}]
    assert out["results_by_topic_v3_and_below"] == []
    assert error_response(DESCRIBE, {"transactional_ids": None}, LOADING)[
        "transaction_states"] == []
    assert error_response(INIT, None, LOADING)["error_code"] == LOADING
    assert error_response(DESCRIBE, {"transactional_ids": ["a"]}, LOADING)[
        "transaction_states"][0]["error_code"] == LOADING


def test_an_api_that_is_not_the_coordinators_is_a_programming_error():
    with pytest.raises(ValueError):
        Harness().shard.handle(0, 8, 0, {}, "t")


def test_transaction_version_levels_as_kafkas_feature():
    # 0: the original protocol; 1: flexible records (value version 1); 2: also the bump.
    levels = [TxnConfig(transaction_version=v) for v in (0, 1, 2)]
    assert [c.log_value_version for c in levels] == [0, 1, 1]
    assert [c.kip890 for c in levels] == [False, False, True]
    with pytest.raises(AssertionError):
        TxnConfig(transaction_version=3)


_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["name", "partitions", "transactional_id", "producer_id",
                         "producer_epoch", "verify_only", "topics"]), inner, max_size=4),
    max_leaves=8)
_FIELDS = sorted({name for cls in REQUESTS.values() for name in cls.__dataclass_fields__}
                 | {"bogus"})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(api=st.sampled_from(sorted(REQUESTS)), version=st.integers(-1, 7),
       body=st.dictionaries(st.sampled_from(_FIELDS), _VALUES, max_size=5))
def test_hypothesis_any_body_gets_one_answer_of_the_apis_response(api, version, body):
    h, pid, epoch = started()
    out = h.shard.handle(10, api, version, body, "tok")
    [reply] = out.replies
    assert reply.token == "tok"
    assert set(reply.body) == set(records.defaults_of(RESPONSES[api]))
    for key, value in out.records:                     # whatever it wrote reads back
        records.decode(key, value)
