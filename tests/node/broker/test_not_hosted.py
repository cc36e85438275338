"""The error for a partition a broker does not host (pure): NOT_LEADER_OR_FOLLOWER
unless the broker knows the partition does not exist, never before the controller's first
UpdateMetadata (a just-started broker: librdkafka fails a Produce's messages on
UNKNOWN_TOPIC_OR_PARTITION, without a retry)."""
from __future__ import annotations

from node.broker.apis.common import not_hosted_error
from node.broker.metadata_cache import MetadataCache
from node.wire.control import UpdateMetadataPartition
from node.wire.errors import ErrorCode


def test_not_hosted_error_before_and_after_the_first_update_metadata():
    cache = MetadataCache()
    assert not_hosted_error(cache, "chaos", 0) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert not_hosted_error(cache, "nope", 0) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    cache.update(1, [[1, "10.0.0.1", 9001, None]],
                 [UpdateMetadataPartition("chaos", 0, 1, 3, (1,), 4, (1,))])
    assert not_hosted_error(cache, "chaos", 0) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert not_hosted_error(cache, "chaos", 1) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert not_hosted_error(cache, "nope", 0) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
