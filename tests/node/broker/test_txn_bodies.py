"""The transaction coordinator shell's pure parts: ``__transaction_state``'s overrides,
and the merge of per-shard answers (node.broker.txn.bodies)."""
from __future__ import annotations

from node.broker.txn import bodies
from node.broker.txn.state_topic import topic_configs
from node.config import BrokerConfig
from node.wire.errors import ErrorCode


def _config(**props) -> BrokerConfig:
    return BrokerConfig.from_props({"broker.id": "0", "log.dirs": "/nonexistent",
                                    "zookeeper.connect": "127.0.0.1:2181", **props})


def test_the_state_topic_is_compacted_with_min_isr_capped_at_its_replication_factor():
    config = _config(**{"transaction.state.log.min.isr": "2",
                        "transaction.state.log.segment.bytes": "1048576"})
    assert topic_configs(config, 3) == {"cleanup.policy": "compact",
                                        "min.insync.replicas": "2",
                                        "segment.bytes": "1048576"}
    assert topic_configs(config, 1)["min.insync.replicas"] == "1"   # a one-broker cluster
    assert topic_configs(config, 3, compact=False)["retention.ms"] == "-1"


def test_describe_answers_merge_in_the_requests_order():
    ids = ["a", "b", "c"]
    answers = [([2], {"transaction_states": [{"transactional_id": "c", "error_code": 0}]}),
               ([0], {"transaction_states": [{"transactional_id": "a", "error_code": 51}]})]
    # "b" was asked of no shard that answered for it: an error, never a missing entry
    merged = bodies.merge_describe(answers, ids)
    states = merged["transaction_states"]
    assert [s["transactional_id"] for s in states] == ids
    assert [s["error_code"] for s in states] == [51, ErrorCode.UNKNOWN_SERVER_ERROR, 0]


def test_list_and_add_partitions_answers_merge():
    merged = bodies.merge_list([
        {"error_code": 0, "unknown_state_filters": ["Nope"],
         "transaction_states": [{"transactional_id": "a"}]},
        {"error_code": ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "unknown_state_filters": ["Nope"],
         "transaction_states": [{"transactional_id": "b"}]}])
    assert [t["transactional_id"] for t in merged["transaction_states"]] == ["a", "b"]
    assert merged["error_code"] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert merged["unknown_state_filters"] == ["Nope"]
    refused = {"transactional_id": "x", "topic_results": []}
    added = bodies.merge_add_partitions(
        [{"error_code": 0, "results_by_transaction": [{"transactional_id": "y"}]}],
        refused=[refused])
    assert [r["transactional_id"] for r in added["results_by_transaction"]] == ["x", "y"]

