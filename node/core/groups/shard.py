"""The group coordinator of one ``__consumer_offsets`` partition, as a pure core.

``GroupShard`` composes ``offsets`` (committed offsets), ``classic`` (JoinGroup/SyncGroup
groups) and ``consumer`` (KIP-848 groups, g848's ``ConsumerGroups``). The shell (the broker
runtime) feeds it requests, the log's records at load and the clock; it gives back
``Result``: records to append to the partition and replies to send once they are committed
(see ``effects``). Nothing here does I/O or reads a clock.

Bodies are dicts of the Kafka message's fields (snake_case, newest version); ``version`` is
the request's Kafka version, for the rules that depend on it (KIP-394 from JoinGroup v4,
GROUP_ID_NOT_FOUND for OffsetCommit v9+, a LeaveGroup v0-v2's single member).

A group id is one kind. ConsumerGroupHeartbeat on an Empty classic group deletes that group
(a GroupMetadata tombstone; its offsets stay) and makes it a consumer group, as Kafka's
maybeDeleteEmptyClassicGroup; on a non-empty one it gets GROUP_ID_NOT_FOUND ("Group X is not
a consumer group"). JoinGroup on a non-empty consumer group gets INCONSISTENT_GROUP_PROTOCOL
(Kafka 4 without online migration); an empty consumer group is deleted and becomes classic.

Transactions (``txn_offsets``, Kafka's OffsetMetadataManager): TxnOffsetCommit writes its
offsets as one producer's transactional records (``Result.producer``) and keeps them
pending; the producer's COMMIT marker on this partition makes them the committed ones
(``transaction_completed`` live, ``replay_marker`` at load), an ABORT drops them.
OffsetFetch with ``require_stable`` answers UNSTABLE_OFFSET_COMMIT for a partition with a
pending offset (KIP-447). ``next_order`` numbers the offset commits in log order (the
record offsets at load) so a later plain commit wins over an earlier transaction's.
"""

import uuid
from collections.abc import Callable

from node.kafka.protocol import KafkaProtocolError, codec
from node.kafka.protocol import messages as m

from . import classic as cl
from . import effects as E
from . import records
from .classic import ClassicGroups, State
from .config import GroupConfig
from .effects import Effects, Reply, Result
from .offsets import INVALID_OFFSET, Offsets, committed_of
from .records import Rec, RecordError
from .txn_offsets import TXN_OFFSET_COMMIT, PendingOffsets, ShardTransactions

from .consumer import ConsumerGroups

__all__ = ["GroupShard", "Reply", "Result", "error_response"]

JOIN, SYNC, HEARTBEAT, LEAVE = 11, 14, 12, 13
OFFSET_COMMIT, OFFSET_FETCH, OFFSET_DELETE = 8, 9, 47
LIST, DESCRIBE, DELETE = 16, 15, 42
CONSUMER_HEARTBEAT, CONSUMER_DESCRIBE = 68, 69
OFFSET_FETCH_MEMBER_FROM_VERSION = 9
OFFSET_COMMIT_GROUP_NOT_FOUND_FROM_VERSION = 9


class GroupShard(ShardTransactions):
    def __init__(self, partition: int, config: GroupConfig,
                 new_id: Callable[[], str] | None = None):
        self.partition = partition
        self.config = config
        self.new_id = new_id or (lambda: str(uuid.uuid4()))
        self.offsets = Offsets()
        self.classic = ClassicGroups(config, self.new_id)
        self.consumer = (ConsumerGroups(config, new_id) if new_id is not None
                         else ConsumerGroups(config))
        self.is_loaded = False
        self.next_expiry_ms: int | None = None
        self.known_topics: set[str] = set()
        self.skipped_records = 0           # unknown record types (Kafka's loader skips them)
        self.pending = PendingOffsets()    # transactions' offsets until their marker
        self.next_order = 0                # the next offset commit's place in the log

    # ---- loading -------------------------------------------------------------------------

    def replay(self, offset: int, key: bytes, value: bytes | None,
               producer_id: int = -1) -> None:
        """One record of the partition, in log order (``producer_id``: of its batch when
        that is transactional). RecordError if it is malformed."""
        assert not self.is_loaded
        self.next_order = max(self.next_order, offset + 1)
        try:
            rec = records.decode(key, value)
        except records.UnknownRecordType:
            self.skipped_records += 1
            return
        if producer_id >= 0 and rec.key_version in (0, 1) and rec.value is not None:
            k = rec.key
            self._pend(producer_id, k["group"], k["topic"], k["partition"],
                       committed_of(rec, offset))
            return
        self._replay(rec, offset)

    def replay_marker(self, offset: int, producer_id: int, commit: bool) -> None:
        """A transaction marker of the partition, in log order."""
        assert not self.is_loaded
        self.next_order = max(self.next_order, offset + 1)
        self._end_transaction(producer_id, commit)

    def _order(self) -> int:
        self.next_order += 1
        return self.next_order - 1

    def _replay(self, rec: Rec, offset: int = -1) -> None:
        if rec.key_version in (0, 1):
            self.offsets.replay(rec, offset)
            gid = rec.key["group"]
            if rec.value is None:
                self.pending.discard(gid, rec.key["topic"], rec.key["partition"])
            if (rec.value is not None and self.classic.get(gid) is None
                    and not self.consumer.has(gid)):
                self.classic.create(gid)           # a simple group, as Kafka's replay
        elif rec.key_version == records.GROUP_METADATA_KEY_VERSION:
            self.classic.replay(rec)
        else:
            gid = rec.key["group_id"]
            group = self.classic.get(gid)
            if group is not None and group.state is State.EMPTY:
                del self.classic.groups[gid]       # it became a consumer group
            self.consumer.replay(rec)

    def loaded(self, now_ms: int) -> Result:
        assert not self.is_loaded
        self.is_loaded = True
        fx = Effects()
        self.classic.loaded(now_ms, fx)
        self.consumer.loaded(now_ms)
        self.next_expiry_ms = now_ms + self.config.offsets_retention_check_interval_ms
        return self._result(fx)

    def unload(self) -> list[Reply]:
        """Every parked request answered NOT_COORDINATOR."""
        out = []
        for token, kind in self.classic.unload():
            cls = m.JoinGroupResponse if kind == "join" else m.SyncGroupResponse
            body = records.defaults_of(cls)
            body["error_code"] = E.NOT_COORDINATOR
            out.append(Reply(token, body))
        return out

    # ---- requests ------------------------------------------------------------------------

    def handle(self, now_ms: int, api_key: int, version: int, body: dict, token,
               client_id: str = "", client_host: str = "") -> Result:
        """One request. A body that is not the request's fields (unknown names, wrong types)
        gets INVALID_REQUEST and changes nothing; missing fields take Kafka's defaults."""
        fx = Effects()
        if api_key not in _REQUESTS:
            raise ValueError(f"api {api_key} is not the group coordinator's")
        try:
            body = normalize(api_key, version, body)
        except RecordError as e:
            reply = error_response(api_key, {}, E.INVALID_REQUEST)
            if "error_message" in reply:
                reply["error_message"] = str(e)
            fx.reply(token, reply)
            return self._result(fx)
        if not self.is_loaded:
            fx.reply(token, error_response(api_key, body, E.COORDINATOR_LOAD_IN_PROGRESS))
            return self._result(fx)
        if self.next_expiry_ms is None:
            self.next_expiry_ms = now_ms + self.config.offsets_retention_check_interval_ms
        if api_key == JOIN:
            self._join(now_ms, version, body, token, client_id, client_host, fx)
        elif api_key == SYNC:
            self.classic.sync(now_ms, version, body, token, fx)
        elif api_key == HEARTBEAT:
            error = self.classic.heartbeat(now_ms, body)
            fx.reply(token, _body(m.HeartbeatResponse, error_code=error))
        elif api_key == LEAVE:
            fx.reply(token, self.classic.leave(now_ms, body, fx))
        elif api_key == OFFSET_COMMIT:
            fx.reply(token, self._commit(now_ms, version, body, fx))
        elif api_key == TXN_OFFSET_COMMIT:
            fx.reply(token, self._txn_commit(now_ms, version, body, fx))
        elif api_key == OFFSET_FETCH:
            fx.reply(token, self._fetch(version, body))
        elif api_key == OFFSET_DELETE:
            fx.reply(token, self._offset_delete(body, fx))
        elif api_key == LIST:
            fx.reply(token, self._list(body))
        elif api_key == DESCRIBE:
            fx.reply(token, self._describe(body))
        elif api_key == DELETE:
            fx.reply(token, self._delete_groups(body, fx))
        elif api_key == CONSUMER_HEARTBEAT:
            self._consumer_heartbeat(now_ms, version, body, token, client_id, client_host, fx)
        elif api_key == CONSUMER_DESCRIBE:
            fx.reply(token, self._consumer_describe(body))
        return self._result(fx)

    def _join(self, now, version, body, token, client_id, client_host, fx) -> None:
        gid = body["group_id"]
        if self.consumer.has(gid):
            if not self.consumer.is_empty(gid):
                fx.reply(token, _body(m.JoinGroupResponse, member_id="",
                                      error_code=E.INCONSISTENT_GROUP_PROTOCOL))
                return
            fx.records += self.consumer.delete(gid).records
        self.classic.join(now, version, body, token, client_id, client_host, fx)

    def _consumer_heartbeat(self, now, version, body, token, client_id, client_host, fx):
        gid = body.get("group_id", "")
        group = self.classic.get(gid)
        if group is not None:
            if group.state is not State.EMPTY:
                reply = error_response(CONSUMER_HEARTBEAT, body, E.GROUP_ID_NOT_FOUND)
                reply["error_message"] = f"Group {gid} is not a consumer group"
                fx.reply(token, reply)
                return
            fx.records.append(records.group_tombstone(gid))
            del self.classic.groups[gid]
        out = self.consumer.heartbeat(now, version, body, client_id=client_id,
                                      client_host=client_host)
        fx.records += out.records
        fx.reply(token, out.body)

    def _consumer_describe(self, body) -> dict:
        reply = _body(m.ConsumerGroupDescribeResponse)
        reply["groups"] = self.consumer.describe(body.get("group_ids", []))
        return reply

    # ---- offsets -------------------------------------------------------------------------

    def _validate_commit(self, now, version, gid, generation, member_id, instance_id) -> int:
        if self.consumer.has(gid):
            return self.consumer.validate_commit(gid, member_id, generation, version)[0]
        group = self.classic.get(gid)
        if group is None:
            if generation < 0:
                self.classic.create(gid)        # a simple group (admin or manual commits)
                return E.NONE
            return (E.GROUP_ID_NOT_FOUND if version >= OFFSET_COMMIT_GROUP_NOT_FOUND_FROM_VERSION
                    else E.ILLEGAL_GENERATION)
        if group.state is State.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and group.state is State.EMPTY:
            return E.NONE
        if generation >= 0 or member_id or instance_id is not None:
            error = group.validate_member(member_id, instance_id)
            if error:
                return error
            if generation != group.generation:
                return E.ILLEGAL_GENERATION
        elif group.state is not State.EMPTY:
            return E.UNKNOWN_MEMBER_ID
        if group.state is State.COMPLETING_REBALANCE:
            return E.REBALANCE_IN_PROGRESS
        return E.NONE

    def _commit(self, now, version, body, fx) -> dict:
        gid = body["group_id"]
        member_id = body.get("member_id") or ""
        error = (E.INVALID_GROUP_ID if not gid else self._validate_commit(
            now, version, gid, body.get("generation_id_or_member_epoch", -1), member_id,
            body.get("group_instance_id")))
        if not error:
            self.classic.touch(now, gid, member_id)
        retention = body.get("retention_time_ms", -1)
        expire = -1 if retention is None or retention == -1 else now + retention
        reply = _body(m.OffsetCommitResponse)
        for topic in body.get("topics", []):
            parts = []
            for p in topic.get("partitions", []):
                code = error
                metadata = p.get("committed_metadata")
                limit = self.config.offset_metadata_max_bytes
                if not code and metadata is not None and len(metadata) > limit:
                    code = E.OFFSET_METADATA_TOO_LARGE
                if not code:
                    fx.records.append(self.offsets.commit(
                        gid, topic["name"], p["partition_index"], p["committed_offset"],
                        p.get("committed_leader_epoch", -1), metadata, now, expire,
                        self._order()))
                parts.append({"partition_index": p["partition_index"], "error_code": code})
            reply["topics"].append({"name": topic["name"], "partitions": parts})
        return reply

    def _fetch_group(self, version, gid, topics, member_id, member_epoch,
                     require_stable: bool = False) -> dict:
        out = {"group_id": gid, "topics": [], "error_code": E.NONE}
        if (self.consumer.has(gid) and version >= OFFSET_FETCH_MEMBER_FROM_VERSION
                and (member_id is not None or member_epoch >= 0)):
            error = self.consumer.validate_fetch(gid, member_id, member_epoch)[0]
            if error:
                out["error_code"] = error
                return out
        group = self.classic.get(gid)
        exists = self.consumer.has(gid) or (group is not None and group.state is not State.DEAD)
        committed = self.offsets.of_group(gid) if exists else {}
        if topics is None:
            wanted: dict[str, list[int]] = {}
            for topic, partition in sorted(committed):
                wanted.setdefault(topic, []).append(partition)
            topics = [{"name": t, "partition_indexes": ps} for t, ps in wanted.items()]
        for topic in topics:
            parts = []
            for index in topic.get("partition_indexes", []):
                c = committed.get((topic["name"], index))
                if require_stable and self.pending.has(gid, topic["name"], index):
                    parts.append({"partition_index": index,       # KIP-447
                                  "committed_offset": INVALID_OFFSET,
                                  "committed_leader_epoch": -1, "metadata": "",
                                  "error_code": E.UNSTABLE_OFFSET_COMMIT})
                    continue
                parts.append({"partition_index": index,
                              "committed_offset": INVALID_OFFSET if c is None else c.offset,
                              "committed_leader_epoch": -1 if c is None else c.leader_epoch,
                              "metadata": "" if c is None else c.metadata,
                              "error_code": E.NONE})
            out["topics"].append({"name": topic["name"], "partitions": parts})
        return out

    def _fetch(self, version, body) -> dict:
        reply = _body(m.OffsetFetchResponse)
        groups = body.get("groups") or []
        stable = bool(body.get("require_stable"))
        for g in groups:
            reply["groups"].append(self._fetch_group(version, g["group_id"], g.get("topics"),
                                                     g.get("member_id"),
                                                     g.get("member_epoch", -1), stable))
        if not groups and body.get("group_id"):      # the v0-v7 form, one group
            one = self._fetch_group(version, body["group_id"], body.get("topics"), None, -1,
                                    stable)
            reply["topics"] = one["topics"]
            reply["error_code"] = one["error_code"]
            reply["groups"] = [one]
        return reply

    def _offset_delete(self, body, fx) -> dict:
        gid = body["group_id"]
        reply = _body(m.OffsetDeleteResponse)
        group = self.classic.get(gid)
        if self.consumer.has(gid):
            subscribed = self.consumer.subscribed_topics(gid)
        elif group is None or group.state is State.DEAD:
            reply["error_code"] = E.GROUP_ID_NOT_FOUND
            return reply
        elif group.state is not State.EMPTY and not group.uses_consumer_protocol():
            reply["error_code"] = E.NON_EMPTY_GROUP
            return reply
        else:
            subscribed = None
        for topic in body.get("topics", []):
            name = topic["name"]
            held = (name in subscribed) if subscribed is not None else group.is_subscribed(name)
            parts = []
            for p in topic.get("partitions", []):
                code = E.GROUP_SUBSCRIBED_TO_TOPIC if held else E.NONE
                if not held:
                    rec = self._delete_offset(gid, name, p["partition_index"])
                    if rec is not None:
                        fx.records.append(rec)
                parts.append({"partition_index": p["partition_index"], "error_code": code})
            reply["topics"].append({"name": name, "partitions": parts})
        return reply

    # ---- groups ----------------------------------------------------------------------------

    def _list(self, body) -> dict:
        states = {s.lower() for s in body.get("states_filter") or []}
        types = {t.lower() for t in body.get("types_filter") or []}
        reply = _body(m.ListGroupsResponse)
        if not types or "classic" in types:
            for group in self.classic.groups.values():
                state = group.state.value.lower()
                if group.state is not State.DEAD and (not states or state in states):
                    reply["groups"].append(cl.listed(group))
        reply["groups"] += self.consumer.list_groups(sorted(states), sorted(types))
        return reply

    def _describe(self, body) -> dict:
        reply = _body(m.DescribeGroupsResponse)
        for gid in body.get("groups", []):
            if self.consumer.has(gid):
                reply["groups"].append(self.consumer.describe_classic(gid))
            else:
                reply["groups"].append(cl.describe(gid, self.classic.get(gid)))
        return reply

    def _delete_groups(self, body, fx) -> dict:
        reply = _body(m.DeleteGroupsResponse)
        for gid in body.get("groups_names", []):
            reply["results"].append({"group_id": gid, "error_code": self._delete_group(gid, fx)})
        return reply

    def _delete_group(self, gid: str, fx: Effects) -> int:
        if self.consumer.has(gid):
            out = self.consumer.delete(gid)
            error = out.body.get("error_code", E.NONE)
            if not error:
                fx.records += self._delete_all_offsets(gid) + out.records
            return error
        group = self.classic.get(gid)
        if group is None or group.state is State.DEAD:
            return E.GROUP_ID_NOT_FOUND
        if group.state is not State.EMPTY:
            return E.NON_EMPTY_GROUP
        fx.records += self._delete_all_offsets(gid)
        fx.records.append(records.group_tombstone(gid))
        del self.classic.groups[gid]
        return E.NONE

    # ---- time and metadata -----------------------------------------------------------------

    def tick(self, now_ms: int) -> Result:
        fx = Effects()
        if not self.is_loaded:
            return self._result(fx)
        self.classic.tick(now_ms, fx)
        fx.records += self.consumer.tick(now_ms)
        if self.next_expiry_ms is not None and self.next_expiry_ms <= now_ms:
            self.next_expiry_ms = now_ms + self.config.offsets_retention_check_interval_ms
            self._expire(now_ms, fx)
        return self._result(fx)

    def next_deadline_ms(self) -> int | None:
        times = [self.classic.next_deadline_ms(), self.consumer.next_deadline_ms(),
                 self.next_expiry_ms]
        return min((t for t in times if t is not None), default=None)

    def _expire(self, now: int, fx: Effects) -> None:
        """Offsets past retention (KIP-211) and then the empty groups left with none."""
        retention = self.config.offsets_retention_ms
        gids = set(self.offsets.group_ids()) | set(self.classic.groups)
        for gid in sorted(gids | set(self.consumer.group_ids())):
            if self.consumer.has(gid):
                expired, none_left = self.offsets.expire(
                    gid, now, retention, lambda c: c.commit_timestamp_ms,
                    self.consumer.subscribed_topics(gid), self.pending.partitions(gid))
                fx.records += expired
                none_left = none_left and not self.pending.has_open_transaction(gid)
                if none_left and self.consumer.is_empty(gid):
                    fx.records += self.consumer.delete(gid).records
                continue
            group = self.classic.get(gid)
            if group is None or group.protocol_type is None:        # simple group
                base, keep = (lambda c: c.commit_timestamp_ms), ()
            elif group.state is State.EMPTY:
                stamp = group.state_timestamp_ms
                base, keep = (lambda c, s=stamp: c.commit_timestamp_ms if s is None else s), ()
            elif (group.uses_consumer_protocol() and group.state is State.STABLE
                  and group.subscribed_topics is not None):
                base, keep = (lambda c: c.commit_timestamp_ms), group.subscribed_topics
            else:
                continue
            expired, none_left = self.offsets.expire(gid, now, retention, base, keep,
                                                     self.pending.partitions(gid))
            fx.records += expired
            none_left = none_left and not self.pending.has_open_transaction(gid)
            if (none_left and group is not None and group.state is State.EMPTY
                    and not group.pending_join):
                fx.records.append(records.group_tombstone(gid))
                del self.classic.groups[gid]

    def metadata_changed(self, topics: dict[str, tuple[str, int]]) -> Result:
        """The cluster's topics (name -> (topic id text, partitions)): KIP-848 target
        assignments follow them; offsets of a topic seen before and now gone are deleted
        (Kafka's onPartitionsDeleted)."""
        fx = Effects()
        # An empty view is taken as "not known yet" (a broker's cache before its first
        # update), never as "every topic was deleted".
        gone = self.known_topics - topics.keys() if topics else set()
        if topics:
            self.known_topics = set(topics)
        for gid in set(self.offsets.group_ids()) | set(self.pending.open_by_group):
            for topic, partition in sorted(set(self.offsets.of_group(gid)) |
                                           self.pending.partitions(gid)):
                if topic in gone:
                    rec = self._delete_offset(gid, topic, partition)
                    if rec is not None:
                        fx.records.append(rec)
        fx.records += self.consumer.metadata_changed(topics)
        return self._result(fx)

    @staticmethod
    def _result(fx: Effects) -> Result:
        return Result([records.encode(rec) for rec in fx.records], fx.replies, fx.producer)


def _body(cls, **fields) -> dict:
    body = records.defaults_of(cls)
    body.update(fields)
    return body


_REQUESTS = {JOIN: m.JoinGroupRequest, SYNC: m.SyncGroupRequest,
             HEARTBEAT: m.HeartbeatRequest, LEAVE: m.LeaveGroupRequest,
             OFFSET_COMMIT: m.OffsetCommitRequest, OFFSET_FETCH: m.OffsetFetchRequest,
             TXN_OFFSET_COMMIT: m.TxnOffsetCommitRequest,
             OFFSET_DELETE: m.OffsetDeleteRequest, LIST: m.ListGroupsRequest,
             DESCRIBE: m.DescribeGroupsRequest, DELETE: m.DeleteGroupsRequest,
             CONSUMER_HEARTBEAT: m.ConsumerGroupHeartbeatRequest,
             CONSUMER_DESCRIBE: m.ConsumerGroupDescribeRequest}


def normalize(api_key: int, version: int, body) -> dict:
    """The request body with every field (Kafka's defaults for the missing ones), checked by
    encoding it at its version: RecordError if it is not that request."""
    cls = _REQUESTS[api_key]
    low, high = cls.VALID_VERSIONS
    try:
        message = records.from_dict(cls, body)
        try:
            codec.encode_body(message, min(max(version, low), high), [])
        except KafkaProtocolError:   # (greal) the shell's newest form of an old version
            codec.encode_body(message, high, [])
    except (KafkaProtocolError, TypeError) as e:
        raise RecordError(f"not a {cls.__name__}: {e}") from None
    return records.to_dict(message)


_RESPONSES = {JOIN: m.JoinGroupResponse, SYNC: m.SyncGroupResponse,
              HEARTBEAT: m.HeartbeatResponse, LEAVE: m.LeaveGroupResponse,
              OFFSET_COMMIT: m.OffsetCommitResponse,
              TXN_OFFSET_COMMIT: m.TxnOffsetCommitResponse,
              OFFSET_FETCH: m.OffsetFetchResponse,
              OFFSET_DELETE: m.OffsetDeleteResponse, LIST: m.ListGroupsResponse,
              DESCRIBE: m.DescribeGroupsResponse, DELETE: m.DeleteGroupsResponse,
              CONSUMER_HEARTBEAT: m.ConsumerGroupHeartbeatResponse,
              CONSUMER_DESCRIBE: m.ConsumerGroupDescribeResponse}


def error_response(api_key: int, body: dict, error: int) -> dict:
    """The answer to a request of ``api_key`` (body: its request dict) failed with ``error``
    as a whole (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...): the error in every
    place the response has one, per group, per topic partition."""
    out = records.defaults_of(_RESPONSES[api_key])
    if "error_code" in out:
        out["error_code"] = error
    if api_key in (OFFSET_COMMIT, OFFSET_DELETE, TXN_OFFSET_COMMIT):
        out["topics"] = [{"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": error}
            for p in t.get("partitions", [])]} for t in body.get("topics", [])]
    elif api_key == OFFSET_FETCH:
        out["groups"] = [{"group_id": g["group_id"], "topics": [], "error_code": error}
                         for g in body.get("groups") or []]
    elif api_key == DESCRIBE:
        out["groups"] = [{**records.defaults_of(m.DescribeGroupsResponse.DescribedGroup),
                          "group_id": g, "error_code": error} for g in body.get("groups", [])]
    elif api_key == DELETE:
        out["results"] = [{"group_id": g, "error_code": error}
                          for g in body.get("groups_names", [])]
    elif api_key == CONSUMER_DESCRIBE:
        out["groups"] = [{**records.defaults_of(m.ConsumerGroupDescribeResponse.DescribedGroup),
                          "group_id": g, "error_code": error} for g in body.get("group_ids", [])]
    elif api_key == LEAVE:
        out["members"] = [{"member_id": x.get("member_id", ""),
                           "group_instance_id": x.get("group_instance_id"), "error_code": error}
                          for x in body.get("members") or []]
    return out
