"""Finding a group's coordinator and asking it (the native wire): FindCoordinator, then
the group APIs with Kafka's retries. Used by the consumer's broker-coordinated groups
(``node.client.broker_group``) and by ``minikafka consumer-groups``.

The bodies are the Kafka messages' fields as dicts with snake_case names, at the newest
version the broker supports (GROUPS_CONTRACT section 3): the native wire carries no
other form.

Rules:
- FindCoordinator goes to any broker (the first that answers); the answer names the
  coordinator by broker id, its endpoint is the one metadata gives for that id (the
  answer's host and port when metadata does not know it yet).
- NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, a lost connection or a timeout: forget
  the coordinator, find it again and retry after ``retry_backoff_ms``;
  COORDINATOR_LOAD_IN_PROGRESS and UNSTABLE_OFFSET_COMMIT: retry the same coordinator
  after the backoff. Until the caller's deadline; then the last error is raised.
"""
from __future__ import annotations

import time

from node.client.metadata import MetadataFetcher
from node.client.network import Network
from node.wire import errors
from node.wire.errors import ErrorCode, KafkaError
from node.wire.protocol import ApiKey

COORDINATOR_KEY_GROUP = 0       # FindCoordinator key_type: a group
COORDINATOR_KEY_TRANSACTION = 1  # ... and a transactional id

REDISCOVER = frozenset({int(ErrorCode.NOT_COORDINATOR),
                        int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                        int(ErrorCode.REQUEST_TIMED_OUT),
                        int(ErrorCode.NETWORK_EXCEPTION)})
# UNSTABLE_OFFSET_COMMIT (KIP-447): an OffsetFetch with require_stable of a partition with
# a pending transactional offset; asked again until the transaction ends (Kafka's consumer).
RETRIABLE = REDISCOVER | {int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
                          int(ErrorCode.UNSTABLE_OFFSET_COMMIT)}


class GroupRequestError(KafkaError):
    """A group API answered an error (``code``, Kafka's ``name``)."""

    def __init__(self, code: int, message: str | None = None):
        self.code = code
        self.name = errors.name_of(code)
        self.retriable = code in RETRIABLE
        super().__init__(message or "")


def top_error(body: dict) -> int:
    return int(body.get("error_code") or 0)


def refused(body: dict) -> int:
    """The code of a request the broker refused as a whole (the native wire's
    ``{"error", "error_message"}`` answer: INVALID_REQUEST, UNSUPPORTED_VERSION, ...),
    else 0."""
    return int(body.get("error") or 0) if isinstance(body, dict) else \
        int(errors.ErrorCode.INVALID_REQUEST)


def check_refused(body: dict, what: str) -> dict:
    code = refused(body)
    if code:
        raise GroupRequestError(code, f"{what}: {body.get('error_message') or ''}")
    return body


class Coordinators:
    """The coordinators of groups, found and cached (one client thread: ``net``'s)."""

    def __init__(self, net: Network, meta: MetadataFetcher, *, request_timeout_ms: int,
                 retry_backoff_ms: int = 100, key_type: int = COORDINATOR_KEY_GROUP):
        self.key_type = key_type      # FindCoordinator's: 0 groups, 1 transactional ids
        self.net = net
        self.meta = meta
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.known: dict[str, tuple[int, str]] = {}     # group -> (broker id, endpoint)

    def forget(self, group_id: str) -> None:
        self.known.pop(group_id, None)

    def node_id(self, group_id: str) -> int | None:
        found = self.known.get(group_id)
        return None if found is None else found[0]

    def find(self, group_id: str, deadline_s: float | None = None) -> str:
        """The coordinator's endpoint (asks a broker when not known)."""
        found = self.known.get(group_id)
        if found is not None:
            return found[1]
        deadline_s = deadline_s or time.monotonic() + self.request_timeout_ms / 1000
        while True:
            try:
                node, endpoint = self._ask(group_id, deadline_s)
                self.known[group_id] = (node, endpoint)
                return endpoint
            except KafkaError as e:
                if not getattr(e, "retriable", False) or time.monotonic() >= deadline_s:
                    raise
            time.sleep(self.retry_backoff_s)

    def _ask(self, group_id: str, deadline_s: float) -> tuple[int, str]:
        timeout_ms = max(1, int((deadline_s - time.monotonic()) * 1000))
        _, response = self.net.request_first(
            self.meta.endpoints(), ApiKey.FIND_COORDINATOR,
            {"key_type": self.key_type, "coordinator_keys": [group_id]},
            timeout_ms=min(timeout_ms, self.request_timeout_ms))
        body = check_refused(response.body, "FindCoordinator")
        entry = (body.get("coordinators") or [body])[0]    # v4+ list, or the v0-3 fields
        code = int(entry.get("error_code") or 0)
        if code:
            raise GroupRequestError(code, entry.get("error_message") or
                                    f"no coordinator for group {group_id}")
        if not isinstance(entry.get("node_id"), int):
            raise GroupRequestError(int(errors.ErrorCode.UNKNOWN_SERVER_ERROR),
                                    f"FindCoordinator answered no node id: {body!r:.200}")
        node = int(entry["node_id"])
        endpoint = self.meta.current.endpoint(node)
        if endpoint is None:
            try:
                self.meta.refresh([], timeout_ms=timeout_ms)
            except KafkaError:
                pass
            endpoint = self.meta.current.endpoint(node) or \
                f"tcp://{entry['host']}:{int(entry['port'])}"
        return node, endpoint

    def request(self, group_id: str, api_key: int, body: dict, *, error_of=top_error,
                deadline_s: float | None = None) -> dict:
        """Ask the group's coordinator; retries coordinator errors (rules above) until
        ``deadline_s``. ``error_of(body)`` picks the code that decides a retry; the
        answer's body is returned whatever its other errors."""
        deadline_s = deadline_s or time.monotonic() + self.request_timeout_ms / 1000
        while True:
            remaining_ms = int((deadline_s - time.monotonic()) * 1000)
            try:
                endpoint = self.find(group_id, deadline_s)
                response = self.net.request(endpoint, api_key, body,
                                            timeout_ms=max(1, min(remaining_ms,
                                                                  self.request_timeout_ms)))
                check_refused(response.body, ApiKey(api_key).name)
                code = error_of(response.body)
            except KafkaError as e:
                code = int(getattr(e, "code", errors.ErrorCode.NETWORK_EXCEPTION))
                if code not in RETRIABLE or time.monotonic() >= deadline_s:
                    raise
                response = None
            if code not in RETRIABLE:
                return response.body
            if code in REDISCOVER:
                self.forget(group_id)
            if time.monotonic() + self.retry_backoff_s >= deadline_s:
                raise GroupRequestError(code, f"group {group_id}: the coordinator did not "
                                              f"answer {ApiKey(api_key).name} in time")
            time.sleep(self.retry_backoff_s)


# ------------------------------------------------------------------ offsets

def offset_commit_body(group_id: str, offsets: dict, *, member_id: str = "",
                       epoch: int = -1) -> dict:
    """OffsetCommit for {(topic, partition): offset} (newest version's fields)."""
    by_topic: dict[str, list] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        by_topic.setdefault(topic, []).append({
            "partition_index": int(partition), "committed_offset": int(offset),
            "committed_leader_epoch": -1, "committed_metadata": ""})
    return {"group_id": group_id, "generation_id_or_member_epoch": epoch,
            "member_id": member_id, "group_instance_id": None,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}


def offset_commit_errors(body: dict) -> dict:
    """{(topic, partition): error code} of an OffsetCommit answer."""
    return {(t["name"], int(p["partition_index"])): int(p.get("error_code") or 0)
            for t in body.get("topics") or () for p in t.get("partitions") or ()}


def first_error(codes) -> int:
    """The code that decides a retry: a coordinator error if any, else the first."""
    codes = [c for c in codes if c]
    return next((c for c in codes if c in RETRIABLE), codes[0] if codes else 0)


def offset_fetch_body(group_id: str, partitions=None, *, member_id: str | None = None,
                      epoch: int = -1, require_stable: bool = True) -> dict:
    """OffsetFetch of ``partitions`` [(topic, partition)] (None: every partition)."""
    topics = None
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(partitions):
            by_topic.setdefault(topic, []).append(int(partition))
        topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
    return {"groups": [{"group_id": group_id, "member_id": member_id, "member_epoch": epoch,
                        "topics": topics}],
            "require_stable": require_stable}


def offset_fetch_group(body: dict) -> dict:
    """The one group of an OffsetFetch answer (v8+ ``groups``, or the v0-7 fields)."""
    groups = body.get("groups")
    return groups[0] if groups else body


def offset_fetch_error(body: dict) -> int:
    group = offset_fetch_group(body)
    return first_error([int(group.get("error_code") or 0)] + [
        int(p.get("error_code") or 0) for t in group.get("topics") or ()
        for p in t.get("partitions") or ()])


def offset_fetch_leader_epochs(body: dict) -> dict:
    """{(topic, partition): committed leader epoch} where a commit carried one."""
    group = offset_fetch_group(body)
    return {(t["name"], int(p["partition_index"])): int(p["committed_leader_epoch"])
            for t in group.get("topics") or () for p in t.get("partitions") or ()
            if int(p.get("committed_leader_epoch", -1)) >= 0
            and int(p.get("committed_offset", -1)) >= 0}


def offset_fetch_offsets(body: dict) -> dict:
    """{(topic, partition): committed offset} of an OffsetFetch answer (-1 = none:
    left out). A partition error is raised."""
    group = offset_fetch_group(body)
    code = int(group.get("error_code") or 0)
    if code:
        raise GroupRequestError(code, f"OffsetFetch of group {group.get('group_id')}")
    out = {}
    for t in group.get("topics") or ():
        for p in t.get("partitions") or ():
            code = int(p.get("error_code") or 0)
            if code:
                raise GroupRequestError(code, f"OffsetFetch of {t['name']}-"
                                              f"{p['partition_index']}")
            if int(p["committed_offset"]) >= 0:
                out[(t["name"], int(p["partition_index"]))] = int(p["committed_offset"])
    return out
