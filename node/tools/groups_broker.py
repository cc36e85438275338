"""The brokers' consumer groups (classic and KIP-848 "consumer"), for
``minikafka consumer-groups``: Kafka's admin calls over the native wire, read into
``node.tools.groups_model``.

- ``--list``: ListGroups to every broker (each answers for the groups it coordinates),
  the consumer groups kept (protocol type "consumer", or none for a group without
  members), as Kafka's admin client does.
- describe: FindCoordinator, then ConsumerGroupDescribe; a group that is not a KIP-848
  group (GROUP_ID_NOT_FOUND) is asked again with DescribeGroups, as Kafka 4's admin
  client does. Committed offsets: OffsetFetch (every partition of the group).
- resets: OffsetCommit as a "simple" committer (no member id, generation -1), which a
  coordinator accepts only for a group without members; deletion: DeleteGroups;
  ``--delete-offsets``: OffsetDelete.
"""
from __future__ import annotations

from node.client import coordinator as coord
from node.client.coordinator import GroupApi, GroupErrors, GroupRequestError
from node.client.metadata import MetadataFetcher, parse_bootstrap
from node.client.network import Network
from node.tools.common import ADMIN_TIMEOUT_MS, ToolError
from node.tools.groups_model import CLASSIC, CONSUMER, GroupInfo, Listed, MemberInfo
from node.wire import consumer_protocol
from node.wire.errors import KafkaError

CONSUMER_PROTOCOL_TYPE = "consumer"
# Kafka's exception names in the tool's messages.
EXCEPTION_NAMES = {GroupErrors.NON_EMPTY_GROUP: "GroupNotEmptyException: The group is not empty.",
                   GroupErrors.GROUP_ID_NOT_FOUND: "GroupIdNotFoundException: The group id "
                                                   "does not exist.",
                   GroupErrors.INVALID_GROUP_ID: "InvalidGroupIdException: The configured "
                                                 "groupId is invalid."}


class BrokerGroups:
    def __init__(self, bootstrap: str, timeout_ms: int = ADMIN_TIMEOUT_MS):
        self.net = Network("minikafka-consumer-groups", timeout_ms)
        self.meta = MetadataFetcher(self.net, parse_bootstrap(bootstrap), timeout_ms)
        self.coordinators = coord.Coordinators(self.net, self.meta,
                                               request_timeout_ms=timeout_ms)
        self.meta.refresh([])

    def close(self) -> None:
        self.net.close()

    def __enter__(self) -> "BrokerGroups":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------- listing
    def list_groups(self) -> list[Listed]:
        found: dict[str, Listed] = {}
        md = self.meta.refresh([])
        for broker in sorted(md.brokers):
            body = coord.check_refused(self.net.request(
                md.endpoint(broker), GroupApi.LIST_GROUPS,
                {"states_filter": [], "types_filter": []}).body, "ListGroups")
            code = int(body.get("error_code") or 0)
            if code:
                raise GroupRequestError(code, f"ListGroups at broker {broker}")
            for g in body.get("groups") or ():
                if g.get("protocol_type") not in (CONSUMER_PROTOCOL_TYPE, ""):
                    continue
                kind = CONSUMER if (g.get("group_type") or "").lower() == "consumer" \
                    else CLASSIC
                found[g["group_id"]] = Listed(g["group_id"], kind,
                                              g.get("group_state") or "Unknown")
        return [found[g] for g in sorted(found)]

    # ------------------------------------------------------------- describing
    def describe(self, group: str) -> GroupInfo | None:
        body = self.coordinators.request(
            group, GroupApi.CONSUMER_GROUP_DESCRIBE,
            {"group_ids": [group], "include_authorized_operations": False},
            error_of=lambda b: _first_group_error(b))
        described = (body.get("groups") or [{}])[0]
        code = int(described.get("error_code") or 0)
        if code in (GroupErrors.GROUP_ID_NOT_FOUND, 35, 42):   # not KIP-848's: classic
            info = self._describe_classic(group)
        elif code:
            raise GroupRequestError(code, described.get("error_message") or
                                    f"ConsumerGroupDescribe of {group}")
        else:
            info = self._consumer_group(described)
        if info is None:
            return None
        body = self._offset_fetch(group)
        info.offsets = coord.offset_fetch_offsets(body)
        info.leader_epochs = coord.offset_fetch_leader_epochs(body)
        return info

    def _coordinator_text(self, group: str) -> str:
        node = self.coordinators.node_id(group)
        broker = self.meta.current.brokers.get(node)
        host, port = (broker.host, broker.port) if broker else ("-", "-")
        return f"{host}:{port}  ({node})"

    def _consumer_group(self, g: dict) -> GroupInfo:
        names = {i: t for t, i in self.meta.current.topic_ids.items()}
        def partitions(assignment) -> tuple:
            out = []
            for t in (assignment or {}).get("topic_partitions") or ():
                name = t.get("topic_name") or names.get(t.get("topic_id"), t.get("topic_id"))
                out += [(name, int(p)) for p in t.get("partitions") or ()]
            return tuple(sorted(out))
        members = [MemberInfo(m["member_id"], _host(m.get("client_host")),
                              m.get("client_id") or "-", partitions(m.get("assignment")),
                              m.get("instance_id"), m.get("member_epoch"),
                              partitions(m.get("target_assignment")))
                   for m in g.get("members") or ()]
        return GroupInfo(g["group_id"], CONSUMER, g.get("group_state") or "Unknown",
                         self._coordinator_text(g["group_id"]),
                         g.get("assignor_name") or "", members,
                         group_epoch=g.get("group_epoch"),
                         assignment_epoch=g.get("assignment_epoch"))

    def _describe_classic(self, group: str) -> GroupInfo | None:
        body = self.coordinators.request(
            group, GroupApi.DESCRIBE_GROUPS,
            {"groups": [group], "include_authorized_operations": False},
            error_of=lambda b: _first_group_error(b))
        g = (body.get("groups") or [{}])[0]
        code = int(g.get("error_code") or 0)
        if code == GroupErrors.GROUP_ID_NOT_FOUND:
            return None
        if code:
            raise GroupRequestError(code, g.get("error_message") or f"DescribeGroups of "
                                                                   f"{group}")
        if g.get("group_state") == "Dead":
            return None
        members = [MemberInfo(m["member_id"], _host(m.get("client_host")),
                              m.get("client_id") or "-",
                              tuple(sorted(decode_assignment(m.get("member_assignment")))),
                              m.get("group_instance_id"))
                   for m in g.get("members") or ()]
        return GroupInfo(group, CLASSIC, g.get("group_state") or "Unknown",
                         self._coordinator_text(group), g.get("protocol_data") or "",
                         members)

    def _offset_fetch(self, group: str) -> dict:
        return self.coordinators.request(
            group, GroupApi.OFFSET_FETCH,
            coord.offset_fetch_body(group, None, require_stable=False),
            error_of=coord.offset_fetch_error)

    def committed(self, group: str) -> dict:
        return coord.offset_fetch_offsets(self._offset_fetch(group))

    # ------------------------------------------------------------- changing
    def commit(self, group: str, offsets: dict) -> None:
        body = self.coordinators.request(
            group, GroupApi.OFFSET_COMMIT, coord.offset_commit_body(group, offsets),
            error_of=lambda b: coord.first_error(coord.offset_commit_errors(b).values()))
        code = coord.first_error(coord.offset_commit_errors(body).values())
        if code:
            raise GroupRequestError(code, f"the offsets of group {group} were not written")

    def delete(self, group: str) -> str | None:
        """None when deleted, else why not (Kafka's words)."""
        body = self.coordinators.request(
            group, GroupApi.DELETE_GROUPS, {"groups_names": [group]},
            error_of=lambda b: int(((b.get("results") or [{}])[0]).get("error_code") or 0))
        code = int(((body.get("results") or [{}])[0]).get("error_code") or 0)
        if not code:
            return None
        return EXCEPTION_NAMES.get(code, coord.error_name(code))

    def delete_offsets(self, group: str, partitions) -> tuple[int, dict]:
        """OffsetDelete: (the top error code, {tp: partition error code})."""
        by_topic: dict[str, list] = {}
        for topic, partition in sorted(partitions):
            by_topic.setdefault(topic, []).append({"partition_index": partition})
        body = self.coordinators.request(
            group, GroupApi.OFFSET_DELETE,
            {"group_id": group, "topics": [{"name": t, "partitions": ps}
                                           for t, ps in by_topic.items()]})
        results = {(t["name"], int(p["partition_index"])): int(p.get("error_code") or 0)
                   for t in body.get("topics") or () for p in t.get("partitions") or ()}
        return int(body.get("error_code") or 0), results

    def partitions(self, topic: str) -> int:
        try:
            md = self.meta.refresh([topic])
        except KafkaError as e:
            raise ToolError(f"Topic '{topic}' does not exist as expected ({e})") from None
        count = md.partition_count(topic)
        if not count:
            raise ToolError(f"Topic '{topic}' does not exist as expected")
        return count


def _first_group_error(body: dict) -> int:
    return int(((body.get("groups") or [{}])[0]).get("error_code") or 0)


def _host(text) -> str:
    return text or "-"


def decode_assignment(data) -> list[tuple[str, int]]:
    """The partitions of a classic consumer's assignment (Kafka's ConsumerProtocol
    Assignment); a member whose bytes are not that (another client's own protocol)
    shows none."""
    try:
        return consumer_protocol.decode_assignment(data)
    except consumer_protocol.ConsumerProtocolError:
        return []
