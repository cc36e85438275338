"""The partition leader's transactional rules (node.broker.apis.txn_rules): Kafka's
checks of a client's frame, KIP-890 part 1's verification plan, its guards, and the
verification's request/answer against a scripted transaction coordinator (a pure stand-in
that answers AddPartitionsToTxn verify_only from the partitions it was told)."""
from __future__ import annotations

from node.broker.apis import txn_rules
from node.broker.apis.txn_markers import marker_error
from node.wire.errors import ErrorCode
from shm import batch, control
from shm.producer_state import ProducerStates
from shm.txn_state import TxnState

KEY = ("t", 0)


def header(pid=7, epoch=1, seq=0, *, transactional=True, n=1, offset=0):
    buf = batch.build_batch([b"v"] * n, producer_id=pid, producer_epoch=epoch,
                            base_sequence=seq, transactional=transactional)
    batch.stamp(buf, offset, 0)
    return batch.read_header(buf)


def marker_header(pid=7, epoch=1):
    return batch.read_header(control.build_marker(pid, epoch, True, 0, 1000))


def test_a_client_may_not_write_control_batches():
    assert txn_rules.frame_error([marker_header()], {})[0] == ErrorCode.INVALID_RECORD


def test_plain_batch_of_a_producer_with_an_open_transaction_is_invalid_txn_state():
    plain = header(transactional=False, seq=3)
    assert txn_rules.frame_error([plain], {}) is None
    error = txn_rules.frame_error([plain], {7: 100})
    assert error[0] == ErrorCode.INVALID_TXN_STATE and "100" in error[1]
    assert txn_rules.frame_error([plain], {8: 100}) is None       # another producer's
    assert txn_rules.frame_error([header()], {7: 100}) is None     # its transaction goes on


def test_a_frame_mixing_transactional_and_plain_batches_is_invalid_record():
    frame = [header(seq=0), header(seq=1, transactional=False)]
    assert txn_rules.frame_error(frame, {})[0] == ErrorCode.INVALID_RECORD


def test_verification_is_needed_only_to_open_a_transaction():
    assert txn_rules.needs_verification([header()], {}) == (7, 1)
    assert txn_rules.needs_verification([header()], {7: 5}) is None
    assert txn_rules.needs_verification([header(transactional=False)], {}) is None


def test_plan_one_producer_per_request():
    frames = [(0, ("t", 0), [header()], {}), (1, ("t", 1), [header()], {7: 3}),
              (2, ("u", 0), [header()], {})]
    plan = txn_rules.plan_verification(frames, "tx")
    assert plan.producer == (7, 1) and plan.verify == {0: ("t", 0), 2: ("u", 0)}
    assert plan.errors == {}
    two = frames + [(3, ("u", 1), [header(pid=8)], {})]
    plan = txn_rules.plan_verification(two, "tx")
    assert plan.verify == {} and set(plan.errors) == {0, 2, 3}
    assert {e[0] for e in plan.errors.values()} == {ErrorCode.INVALID_PRODUCER_ID_MAPPING}
    plan = txn_rules.plan_verification(frames, None)
    assert plan.verify == {} and {e[0] for e in plan.errors.values()} == \
        {ErrorCode.INVALID_REQUEST}
    assert txn_rules.plan_verification([(0, KEY, [header()], {7: 0})], "tx").verify == {}


def test_guards_stop_a_stale_verification():
    guards = txn_rules.VerificationGuards()
    token = guards.start(KEY, 7)
    assert guards.holds(KEY, 7, token) and not guards.holds(KEY, 8, token)
    assert not guards.holds(KEY, 7, None)
    guards.clear(KEY, 7)                 # a marker landed meanwhile (the ABA case)
    assert not guards.holds(KEY, 7, token)
    again = guards.start(KEY, 7)
    newer = guards.start(KEY, 7)         # a pipelined request shares the pending guard
    assert newer == again and guards.holds(KEY, 7, again)
    guards.start(("t", 1), 7)
    guards.clear_partition(KEY)
    assert not guards.holds(KEY, 7, newer) and len(guards) == 1


class ScriptedCoordinator:
    """Answers AddPartitionsToTxn (v4+ dicts) from what it was told: the partitions each
    (transactional id, producer id, epoch) added; a newer epoch fences older ones."""

    def __init__(self):
        self.added: dict[str, tuple[int, int, set]] = {}
        self.asked = []

    def add(self, transactional_id, pid, epoch, *keys):
        self.added[transactional_id] = (pid, epoch, set(keys))

    def handle(self, body):
        self.asked.append(body)
        out = []
        for txn in body["transactions"]:
            assert txn["verify_only"] is True
            known = self.added.get(txn["transactional_id"])
            results = []
            for topic in txn["topics"]:
                parts = []
                for p in topic["partitions"]:
                    if known is None or known[0] != txn["producer_id"]:
                        code = ErrorCode.INVALID_PRODUCER_ID_MAPPING
                    elif txn["producer_epoch"] < known[1]:
                        code = ErrorCode.PRODUCER_FENCED
                    elif (topic["name"], p) not in known[2]:
                        code = ErrorCode.INVALID_TXN_STATE
                    else:
                        code = 0
                    parts.append({"partition_index": p, "partition_error_code": code})
                results.append({"name": topic["name"], "results_by_partition": parts})
            out.append({"transactional_id": txn["transactional_id"], "topic_results": results})
        return {"throttle_time_ms": 0, "error_code": 0, "results_by_transaction": out}


def verify_through(coordinator, transactional_id, producer, keys):
    body = txn_rules.verify_body(transactional_id, producer[0], producer[1], keys)
    return txn_rules.verify_outcome(coordinator.handle(body), transactional_id, keys)


def test_verification_against_a_scripted_coordinator():
    c = ScriptedCoordinator()
    c.add("tx", 7, 1, ("t", 0), ("u", 2))
    outcome = verify_through(c, "tx", (7, 1), [("t", 0), ("t", 1), ("u", 2)])
    assert outcome == {("t", 0): 0, ("t", 1): ErrorCode.INVALID_TXN_STATE, ("u", 2): 0}
    assert c.asked[0]["transactions"][0]["topics"] == [
        {"name": "t", "partitions": [0, 1]}, {"name": "u", "partitions": [2]}]
    c.add("tx", 7, 2, ("t", 0))          # the producer was bumped: the old epoch is fenced
    assert verify_through(c, "tx", (7, 1), [("t", 0)]) == \
        {("t", 0): ErrorCode.INVALID_PRODUCER_EPOCH}
    assert verify_through(c, "other", (7, 2), [("t", 0)]) == \
        {("t", 0): ErrorCode.INVALID_PRODUCER_ID_MAPPING}
    abortable = {"error_code": 0, "results_by_transaction": [{"transactional_id": "tx",
                 "topic_results": [{"name": "t", "results_by_partition": [
                     {"partition_index": 0, "partition_error_code": 120}]}]}]}
    assert txn_rules.verify_outcome(abortable, "tx", [("t", 0)]) == \
        {("t", 0): ErrorCode.TRANSACTION_ABORTABLE}  # as it came: the caller's to map


def test_outcome_of_no_answer_a_refused_request_and_a_missing_partition():
    keys = [("t", 0), ("t", 1)]
    assert txn_rules.verify_outcome(None, "tx", keys) == \
        dict.fromkeys(keys, ErrorCode.NETWORK_EXCEPTION)
    assert txn_rules.verify_outcome({"error": ErrorCode.NOT_COORDINATOR}, "tx", keys) == \
        dict.fromkeys(keys, ErrorCode.NOT_COORDINATOR)
    assert txn_rules.verify_outcome({"error_code": 31}, "tx", keys) == \
        dict.fromkeys(keys, ErrorCode.INVALID_TXN_STATE)     # never CLUSTER_AUTHORIZATION
    partial = {"error_code": 0, "results_by_transaction": [{"transactional_id": "tx",
               "topic_results": [{"name": "t", "results_by_partition": [
                   {"partition_index": 0, "partition_error_code": 0}]}]}]}
    assert txn_rules.verify_outcome(partial, "tx", keys) == \
        {("t", 0): 0, ("t", 1): ErrorCode.INVALID_TXN_STATE}


def test_produce_errors_as_kafka_maps_them():
    code, message = txn_rules.produce_error(ErrorCode.INVALID_TXN_STATE)
    assert code == ErrorCode.INVALID_TXN_STATE and "not added" in message
    assert txn_rules.produce_error(ErrorCode.TRANSACTION_ABORTABLE)[0] == \
        ErrorCode.INVALID_TXN_STATE                  # Produce before v12
    for retriable in (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                      ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                      ErrorCode.NETWORK_EXCEPTION):
        code, message = txn_rules.produce_error(retriable)
        assert code == ErrorCode.NOT_ENOUGH_REPLICAS and ErrorCode(retriable).name in message
    assert txn_rules.produce_error(ErrorCode.INVALID_PRODUCER_EPOCH)[0] == \
        ErrorCode.INVALID_PRODUCER_EPOCH


def test_marker_epochs():
    states, txns = ProducerStates(), TxnState()
    assert marker_error(states, txns, 7, 0, 0) == 0              # no state: appended anyway
    states.update(7, 3, 0, 0, 10, 10)
    assert marker_error(states, txns, 7, 2, 0) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert marker_error(states, txns, 7, 3, 0) == 0
    assert marker_error(states, txns, 7, 4, 0) == 0
    # The coordinator that wrote this producer's last marker had epoch 5: an older one
    # is a zombie coordinator (Kafka's TransactionCoordinatorFencedException).
    txns.coordinator_epochs[7] = 5
    assert marker_error(states, txns, 7, 3, 4) == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert marker_error(states, txns, 7, 3, 5) == 0
    assert marker_error(states, txns, 8, 0, 0) == 0


def test_read_end_is_the_offset_after_the_last_whole_batch():
    from node.broker.apis.fetch import read_end
    parts = []
    for offset, n in ((10, 2), (12, 3), (15, 1)):
        buf = batch.build_batch([b"v"] * n)
        batch.stamp(buf, offset, 0)
        parts.append(bytes(buf))
    data = b"".join(parts)
    assert read_end(data, 10) == 16
    assert read_end(data[:-1], 10) == 15            # a cut batch at the end is not read
    assert read_end(parts[0], 10) == 12
    assert read_end(b"", 7) == 7
