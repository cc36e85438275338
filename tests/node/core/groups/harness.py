"""A test driver of one GroupShard: requests as dicts, replies by token, records kept.

Every Result's records are appended to ``self.log`` (as the shell would, after encoding)
and its replies collected by token; ``failover()`` builds a new shard from the log, as the
shell does when the coordinator moves.
"""

import itertools

from node.core.groups import records
from node.core.groups.config import GroupConfig
from node.core.groups.shard import GroupShard
from node.kafka.protocol import messages as m

JOIN, SYNC, HEARTBEAT, LEAVE = 11, 14, 12, 13
OFFSET_COMMIT, OFFSET_FETCH, OFFSET_DELETE = 8, 9, 47
LIST, DESCRIBE, DELETE = 16, 15, 42
NEWEST = {JOIN: 9, SYNC: 5, HEARTBEAT: 4, LEAVE: 5, OFFSET_COMMIT: 9, OFFSET_FETCH: 9,
          OFFSET_DELETE: 0, LIST: 5, DESCRIBE: 5, DELETE: 2, 68: 1, 69: 0}


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0: version, topics, user data (null)."""
    out = (0).to_bytes(2, "big") + len(topics).to_bytes(4, "big")
    for t in topics:
        out += len(t).to_bytes(2, "big") + t.encode()
    return out + (-1).to_bytes(4, "big", signed=True)


class Harness:
    def __init__(self, config: GroupConfig | None = None, now: int = 1_000):
        self.config = config or GroupConfig(group_initial_rebalance_delay_ms=0)
        self.ids = itertools.count(1)
        self.tokens = itertools.count(1)
        self.now = now
        self.log: list[tuple[bytes, bytes | None]] = []
        self.replies: dict[int, dict] = {}
        self.shard = self._new_shard()
        self._take(self.shard.loaded(self.now))

    def _new_shard(self) -> GroupShard:
        return GroupShard(0, self.config, new_id=lambda: f"id{next(self.ids)}")

    def _take(self, result) -> None:
        self.log += result.records
        for reply in result.replies:
            assert reply.token not in self.replies, "a token answered twice"
            self.replies[reply.token] = reply.body

    def send(self, api_key: int, body: dict, version: int | None = None,
             client_id: str = "client") -> int:
        token = next(self.tokens)
        self._take(self.shard.handle(self.now, api_key, NEWEST[api_key] if version is None
                                     else version, body, token, client_id, "/127.0.0.1"))
        return token

    def call(self, api_key: int, body: dict, version: int | None = None, **kw) -> dict:
        """A request that must be answered at once."""
        token = self.send(api_key, body, version, **kw)
        assert token in self.replies, f"api {api_key} parked"
        return self.replies.pop(token)

    def reply(self, token: int) -> dict | None:
        return self.replies.pop(token, None)

    def advance(self, ms: int) -> None:
        self.now += ms
        self._take(self.shard.tick(self.now))

    def failover(self) -> None:
        """A new shard from the records written so far (parked requests answered
        NOT_COORDINATOR, as the shell does)."""
        for reply in self.shard.unload():
            self.replies[reply.token] = reply.body
        self.shard = self._new_shard()
        for offset, (key, value) in enumerate(self.log):
            self.shard.replay(offset, key, value)
        self._take(self.shard.loaded(self.now))

    def decoded(self) -> list[records.Rec]:
        return [records.decode(k, v) for k, v in self.log]

    # ---- request bodies ----------------------------------------------------------------

    @staticmethod
    def join_body(group: str, member_id: str = "", instance: str | None = None,
                  session_ms: int = 10_000, rebalance_ms: int = 20_000,
                  protocols=(("range", subscription("t")),), protocol_type: str = "consumer"):
        return {"group_id": group, "session_timeout_ms": session_ms,
                "rebalance_timeout_ms": rebalance_ms, "member_id": member_id,
                "group_instance_id": instance, "protocol_type": protocol_type,
                "protocols": [{"name": n, "metadata": d} for n, d in protocols], "reason": None}

    @staticmethod
    def sync_body(group: str, member_id: str, generation: int, assignments=None,
                  instance: str | None = None):
        return {"group_id": group, "generation_id": generation, "member_id": member_id,
                "group_instance_id": instance, "protocol_type": "consumer",
                "protocol_name": "range",
                "assignments": [{"member_id": k, "assignment": v}
                                for k, v in (assignments or {}).items()]}

    @staticmethod
    def commit_body(group: str, offsets: dict, generation: int = -1, member_id: str = "",
                    metadata: str | None = "", retention_ms: int = -1):
        topics: dict[str, list] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, []).append(
                {"partition_index": partition, "committed_offset": offset,
                 "committed_leader_epoch": 3, "commit_timestamp": -1,
                 "committed_metadata": metadata})
        return {"group_id": group, "generation_id_or_member_epoch": generation,
                "member_id": member_id, "group_instance_id": None,
                "retention_time_ms": retention_ms,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}

    @staticmethod
    def fetch_body(group: str, topics=None):
        return {"group_id": "", "topics": [], "require_stable": False,
                "groups": [{"group_id": group, "member_id": None, "member_epoch": -1,
                            "topics": None if topics is None else
                            [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]}]}

    # ---- whole flows ---------------------------------------------------------------------

    def join_new(self, group: str, version: int = 9, **kw) -> int:
        """KIP-394's two JoinGroups; the token of the second (maybe parked)."""
        token = self.send(JOIN, self.join_body(group, **kw), version)
        first = self.replies.get(token)
        if first is not None and first["error_code"] == 79:
            del self.replies[token]
            kw.pop("member_id", None)
            return self.send(JOIN, self.join_body(group, member_id=first["member_id"], **kw),
                             version)
        return token


def empty_response(cls) -> dict:
    return records.defaults_of(cls)


