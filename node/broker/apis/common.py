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
    if metadata.partition(topic, partition) is not None:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
