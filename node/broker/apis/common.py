"""What every request family uses: an API's name for log lines, and the error for a
partition this broker does not host."""
from __future__ import annotations

from node.broker.metadata_cache import MetadataCache
from node.wire import protocol
from node.wire.errors import ErrorCode

NONE = 0


def api_name(api_key: int) -> str:
    try:
        return protocol.ApiKey(api_key).name
    except ValueError:
        return f"api {api_key}"


def not_hosted_error(metadata: MetadataCache, topic: str, partition: int) -> int:
    """NOT_LEADER_OR_FOLLOWER for a partition the metadata cache knows (the client's
    metadata is stale: it asks again and retries), UNKNOWN_TOPIC_OR_PARTITION for one it
    does not. A broker the controller has not told anything yet (just started) cannot
    say a partition does not exist: NOT_LEADER_OR_FOLLOWER (librdkafka fails a Produce's
    messages on UNKNOWN_TOPIC_OR_PARTITION without a retry)."""
    if metadata.partition(topic, partition) is not None or not metadata.initialized:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
