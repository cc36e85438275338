"""The group request bodies the native clients send (Kafka's fields, snake_case) and
how their answers are read (node.client.coordinator), without a broker."""
from __future__ import annotations

import pytest

from node.client import coordinator as coord
from node.client.coordinator import GroupErrors, GroupRequestError


def test_offset_commit_body_groups_partitions_by_topic_with_kafkas_fields():
    body = coord.offset_commit_body("g", {("b", 1): 7, ("a", 0): 3, ("b", 0): 5},
                                    member_id="m", epoch=4)
    assert body["group_id"] == "g" and body["member_id"] == "m"
    assert body["generation_id_or_member_epoch"] == 4
    assert [t["name"] for t in body["topics"]] == ["a", "b"]
    assert body["topics"][1]["partitions"] == [
        {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
         "committed_metadata": ""},
        {"partition_index": 1, "committed_offset": 7, "committed_leader_epoch": -1,
         "committed_metadata": ""}]
    simple = coord.offset_commit_body("g", {("a", 0): 1})
    assert simple["member_id"] == "" and simple["generation_id_or_member_epoch"] == -1


def test_a_coordinator_error_decides_the_retry_before_a_partition_error():
    answer = {"topics": [{"name": "a", "partitions": [
        {"partition_index": 0, "error_code": 3},
        {"partition_index": 1, "error_code": int(GroupErrors.NOT_COORDINATOR)}]}]}
    errors = coord.offset_commit_errors(answer)
    assert errors == {("a", 0): 3, ("a", 1): 16}
    assert coord.first_error(errors.values()) == GroupErrors.NOT_COORDINATOR
    assert coord.first_error([0, 0]) == 0 and coord.first_error([0, 3]) == 3


def test_offset_fetch_reads_the_one_group_and_leaves_out_partitions_without_offsets():
    body = coord.offset_fetch_body("g", [("t", 1), ("t", 0)], member_id="m", epoch=2)
    assert body["groups"] == [{"group_id": "g", "member_id": "m", "member_epoch": 2,
                               "topics": [{"name": "t", "partition_indexes": [0, 1]}]}]
    assert coord.offset_fetch_body("g")["groups"][0]["topics"] is None
    answer = {"groups": [{"group_id": "g", "error_code": 0, "topics": [{"name": "t",
              "partitions": [{"partition_index": 0, "committed_offset": 9, "error_code": 0},
                             {"partition_index": 1, "committed_offset": -1,
                              "error_code": 0}]}]}]}
    assert coord.offset_fetch_offsets(answer) == {("t", 0): 9}
    stale = {"groups": [{"group_id": "g", "error_code": 113, "topics": []}]}
    assert coord.offset_fetch_error(stale) == 113
    with pytest.raises(GroupRequestError, match="STALE_MEMBER_EPOCH"):
        coord.offset_fetch_offsets(stale)


def test_a_request_the_broker_refused_whole_is_an_error_not_an_empty_success():
    refused = {"error": 42, "error_message": "bad body"}
    assert coord.refused(refused) == 42 and coord.refused({"error_code": 0}) == 0
    # Without the check, this answer would read as a commit with no partition errors.
    assert coord.offset_commit_errors(refused) == {}
    with pytest.raises(GroupRequestError, match="INVALID_REQUEST: OffsetCommit: bad body"):
        coord.check_refused(refused, "OffsetCommit")
