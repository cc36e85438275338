"""node.kafka.dicts (pure): the generated messages as dicts and back, per version, and the
type check of native bodies."""
from __future__ import annotations

import uuid

from node.kafka.dicts import check, default_dict, from_dict, to_dict
from node.kafka.protocol import RequestHeader, encode_response
from node.kafka.protocol.messages import (ConsumerGroupHeartbeatResponse,
                                          FindCoordinatorResponse, OffsetFetchRequest,
                                          OffsetFetchResponse)
from node.wire.zkdata import topic_id_text


def test_a_response_dict_becomes_the_object_of_each_version_and_encodes():
    body = {"throttle_time_ms": 5, "coordinators": [
        {"key": "g", "node_id": 2, "host": "h", "port": 9, "error_code": 0,
         "error_message": None}], "node_id": 2, "host": "h", "port": 9, "error_code": 0,
        "error_message": None}
    v4 = from_dict(FindCoordinatorResponse, body, 4)
    assert v4.coordinators[0].node_id == 2 and v4.node_id == 0   # v4 has no top-level node
    v0 = from_dict(FindCoordinatorResponse, body, 0)
    assert v0.coordinators == [] and v0.node_id == 2            # v0 has no coordinators
    for version, obj in ((0, v0), (4, v4)):
        assert encode_response(RequestHeader(10, version, 1), obj)


def test_to_dict_and_back_round_trip_nested_structs():
    request = OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
        group_id="g", member_id="m", member_epoch=3, topics=[
            OffsetFetchRequest.OffsetFetchRequestTopics(name="t", partition_indexes=[0, 2])])])
    body = to_dict(request)
    assert body["groups"][0]["topics"][0] == {"name": "t", "partition_indexes": [0, 2]}
    assert from_dict(OffsetFetchRequest, body, 9) == request
    assert from_dict(OffsetFetchRequest, body, 8).groups[0].member_id == \
        OffsetFetchRequest.OffsetFetchRequestGroup().member_id      # v8 has none


def test_topic_ids_are_text_in_dicts():
    topic_id = uuid.uuid4()
    R = ConsumerGroupHeartbeatResponse
    response = R(assignment=R.Assignment(topic_partitions=[
        R.TopicPartitions(topic_id=topic_id, partitions=[1])]))
    body = to_dict(response)
    assert body["assignment"]["topic_partitions"][0]["topic_id"] == topic_id_text(topic_id)
    assert from_dict(R, body, 0).assignment.topic_partitions[0].topic_id == topic_id


def test_check_names_what_is_wrong():
    assert check(OffsetFetchRequest, default_dict(OffsetFetchRequest)) is None
    assert check(OffsetFetchRequest, {"groups": [{"group_id": 7}]}) == \
        "OffsetFetchRequest.groups.group_id must be string, got int"
    assert "must be a list" in check(OffsetFetchRequest, {"groups": "g"})
    assert "must be a map" in check(OffsetFetchRequest, {"groups": ["g"]})
    assert "must not be null" in check(OffsetFetchResponse, {"throttle_time_ms": None})
    assert check(OffsetFetchRequest, {"require_stable": 1}) is not None     # not a bool
    assert check(OffsetFetchRequest, {"unknown": object()}) is None         # ignored
