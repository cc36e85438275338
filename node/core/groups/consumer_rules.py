"""The rules a ConsumerGroupHeartbeat must follow before the coordinator looks at its group
(Kafka 4's throwIfConsumerGroupHeartbeatRequestIsInvalid), and the error codes the KIP-848
core answers. A request that breaks them gets INVALID_REQUEST (or UNSUPPORTED_ASSIGNOR) with
Kafka's message and changes nothing.
"""
from __future__ import annotations

from collections.abc import Mapping

from node.core.groups.consumer_state import LEAVE_GROUP_EPOCH, LEAVE_STATIC_EPOCH

# Kafka's error codes answered here (org.apache.kafka.common.protocol.Errors).
NONE = 0
COORDINATOR_LOAD_IN_PROGRESS = 14
UNKNOWN_MEMBER_ID = 25
UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82
FENCED_MEMBER_EPOCH = 110
UNRELEASED_INSTANCE_ID = 111
UNSUPPORTED_ASSIGNOR = 112
STALE_MEMBER_EPOCH = 113


class GroupError(Exception):
    """A request that Kafka answers with an error code (and a message)."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


_OPTIONAL_TEXT = ("instance_id", "rack_id", "subscribed_topic_regex", "server_assignor")


def _badly_typed(body: Mapping) -> str | None:
    """The first field of a heartbeat body that is not of its Kafka type (a native client
    can send anything), or None."""
    def is_int(v):
        return isinstance(v, int) and not isinstance(v, bool)
    if not isinstance(body.get("group_id"), str):
        return "GroupId"
    if not isinstance(body.get("member_id", ""), str):
        return "MemberId"
    if not is_int(body.get("member_epoch")) or not is_int(body.get("rebalance_timeout_ms", -1)):
        return "MemberEpoch or RebalanceTimeoutMs"
    if any(not isinstance(body.get(f), (str, type(None))) for f in _OPTIONAL_TEXT):
        return "InstanceId, RackId, SubscribedTopicRegex or ServerAssignor"
    names = body.get("subscribed_topic_names")
    if names is not None and (not isinstance(names, list)
                              or not all(isinstance(n, str) for n in names)):
        return "SubscribedTopicNames"
    owned = body.get("topic_partitions")
    if owned is not None and (not isinstance(owned, list) or not all(
            isinstance(tp, Mapping) and isinstance(tp.get("topic_id"), str)
            and isinstance(tp.get("partitions"), list)
            and all(is_int(p) for p in tp["partitions"]) for tp in owned)):
        return "TopicPartitions"
    return None


def validate_heartbeat(version: int, body: Mapping, assignors: list[str]) -> None:
    """Raises GroupError when the heartbeat breaks a rule of its own (no group state used)."""
    def invalid(message):
        raise GroupError(INVALID_REQUEST, message)
    bad = _badly_typed(body)
    if bad:
        invalid(f"{bad} has the wrong type.")

    def empty(value):                               # Kafka trims: "  " is empty too
        return value is not None and not value.strip()
    if empty(body.get("group_id", "")):
        invalid("GroupId can't be empty.")
    if empty(body.get("instance_id")):
        invalid("InstanceId can't be empty.")
    if empty(body.get("rack_id")):
        invalid("RackId can't be empty.")
    if body.get("subscribed_topic_regex"):         # "" is taken as "no regex"
        # Python's re has no linear-time guarantee (Kafka uses RE2J): a client's
        # pattern could stall the coordinator, so none runs here.
        invalid("SubscribedTopicRegex is not supported yet.")
    epoch, member_id = body["member_epoch"], (body.get("member_id") or "").strip()
    timeout = body.get("rebalance_timeout_ms", -1)
    if timeout < -1:
        invalid(f"RebalanceTimeoutMs {timeout} is negative.")
    if version >= 1 and not member_id:
        invalid("MemberId can't be empty.")          # KIP-1082: the client makes it
    if epoch > 0 or epoch == LEAVE_GROUP_EPOCH:
        if not member_id:
            invalid("MemberId can't be empty.")
    elif epoch == 0:
        if timeout == -1:
            invalid("RebalanceTimeoutMs must be provided in first request.")
        if body.get("topic_partitions") != []:
            invalid("TopicPartitions must be empty when (re-)joining.")
        if not body.get("subscribed_topic_names"):
            invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
    elif epoch == LEAVE_STATIC_EPOCH:
        if not member_id:
            invalid("MemberId can't be empty.")
        if body.get("instance_id") is None:
            invalid("InstanceId can't be null.")
    else:
        invalid("MemberEpoch is invalid.")
    assignor = body.get("server_assignor")
    if assignor is not None and assignor not in assignors:
        raise GroupError(UNSUPPORTED_ASSIGNOR,
                         f"ServerAssignor {assignor} is not supported. Supported assignors: "
                         f"{', '.join(assignors)}.")
