"""``node.broker.groups.bodies.merge``: per-shard answers of a multi-group request put
back in the request's order; a shard answer that lacks groups (a whole-request error
answer) is filled per group with its error, never an assertion that stops the broker."""
from node.broker.groups import bodies
from node.wire.errors import ErrorCode
from node.wire.protocol import ApiKey


def test_answers_go_back_in_the_request_order():
    parts = [([1], {"groups": [{"group_id": "b", "error_code": 0}]}),
             ([0, 2], {"groups": [{"group_id": "a", "error_code": 0},
                                  {"group_id": "c", "error_code": 0}]})]
    out = bodies.merge(ApiKey.DESCRIBE_GROUPS, parts, ["a", "b", "c"])
    assert [g["group_id"] for g in out["groups"]] == ["a", "b", "c"]


def test_a_shard_answer_without_its_groups_gives_each_group_its_error():
    parts = [([0], {"groups": [{"group_id": "a", "error_code": 0, "topics": []}]}),
             ([1, 2], {"error_code": ErrorCode.INVALID_REQUEST, "groups": [], "topics": []})]
    out = bodies.merge(ApiKey.OFFSET_FETCH, parts, ["a", "b", "c"])
    assert [(g["group_id"], g["error_code"]) for g in out["groups"]] == [
        ("a", 0), ("b", ErrorCode.INVALID_REQUEST), ("c", ErrorCode.INVALID_REQUEST)]
    assert out["error_code"] == ErrorCode.INVALID_REQUEST


def test_a_shard_answer_without_groups_nor_error_is_an_unknown_server_error():
    out = bodies.merge(ApiKey.DELETE_GROUPS, [([0], {"results": []})], ["a"])
    (only,) = out["results"]
    assert (only["group_id"], only["error_code"]) == ("a", ErrorCode.UNKNOWN_SERVER_ERROR)
