"""The admin client: topics, leader elections, reassignments, cluster description.

Every call is blocking and goes to any live broker (brokers write the coordinator for
admin requests, as Kafka does in ZooKeeper mode). A broker that does not answer is
skipped for the next one; errors raise the ``node.wire.errors.KafkaError`` subclass of the
broker's code with the broker's message.
"""
from __future__ import annotations

import itertools
import os
from dataclasses import dataclass

from node.wire import errors
from node.waiting import poll_until
from node.wire.errors import ErrorCode
from node.wire import protocol
from node.client.metadata import (MetadataFetcher, PartitionMetadata, parse_bootstrap,
                                  parse_metadata)
from node.client.network import Network
from node.client.types import BrokerMetadata, KafkaTimeoutError, error

RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4   # Kafka's ConfigResource.Type numbers
ALTER_SET, ALTER_DELETE = 0, 1           # Kafka's AlterConfigOp.OpType numbers
SOURCE_NAMES = {1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",   # ConfigSource
                3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG",
                5: "DEFAULT_CONFIG"}
ELECTION_TYPES = {"preferred": protocol.ELECTION_PREFERRED, "unclean": protocol.ELECTION_UNCLEAN}
WAIT_INTERVAL_S = 0.05
# A request that carries a ``timeout_ms`` for the broker to wait in (for the controller,
# for new leaders) is given this much longer on the client's side: the broker's own
# answer at its deadline (REQUEST_TIMED_OUT, or what was done by then) arrives before the
# client gives up, so the caller learns what the broker did.
BROKER_DEADLINE_MARGIN_MS = 5_000
# Each broker's Metadata answer, asked one by one while waiting for a topic to show
# everywhere: a broker slower than this is asked again on the next poll rather than
# holding the whole wait.
EACH_BROKER_METADATA_TIMEOUT_MS = 5_000
_client_ids = itertools.count(1)


@dataclass(frozen=True)
class ClusterDescription:
    brokers: list[BrokerMetadata]
    controller_id: int  # -1 if none


@dataclass(frozen=True)
class ConfigEntry:
    """One config of a topic or broker, as Kafka's DescribeConfigs describes it."""
    name: str
    value: str | None
    source: str                      # Kafka's ConfigSource name
    read_only: bool
    sensitive: bool
    synonyms: list                   # [(name, value, source name)], most specific first


@dataclass(frozen=True)
class Reassignment:
    replicas: list[int]
    adding: list[int]
    removing: list[int]


class Admin:
    def __init__(self, bootstrap_servers="127.0.0.1:9092", *, request_timeout_ms: int = 30_000,
                 client_id: str | None = None):
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.client_id = client_id or f"admin-{os.getpid()}-{next(_client_ids)}"
        self.request_timeout_ms = request_timeout_ms
        self.net = Network(self.client_id, request_timeout_ms)
        self.meta = MetadataFetcher(self.net, self.bootstrap, request_timeout_ms)

    # ------------------------------------------------------------- plumbing
    def _request(self, api_key: int, body: dict, timeout_ms: int | None = None) -> dict:
        """Send to the brokers one at a time until one answers; returns the body."""
        timeout_ms = timeout_ms or self.request_timeout_ms
        last: errors.KafkaError | None = None
        for endpoint in self.meta.endpoints():
            try:
                answer = self.net.request(endpoint, api_key, body, timeout_ms=timeout_ms).body
            except errors.KafkaError as e:
                last = e
                continue
            code = answer.get("error", 0) if isinstance(answer, dict) else 0
            if code and not any(isinstance(v, list) and v for v in answer.values()):
                # The request failed as a whole (a coordinator that did not answer, a
                # malformed request): there are no per-entry errors to report instead.
                raise error(code, answer.get("error_message") or errors.name_of(code))
            return answer
        raise last or error(ErrorCode.NETWORK_EXCEPTION, "no broker to ask")

    def _metadata(self, topics: list[str] | None, timeout_ms: int | None = None):
        return self.meta.refresh(topics, timeout_ms=timeout_ms, merge=False)

    @staticmethod
    def _raise_entries(entries, what: str) -> None:
        for entry in entries:
            name, code, message = entry[0], entry[1], entry[2]
            if code:
                raise error(code, f"{what} {name}: {message}" if message else f"{what} {name}")

    def wait_for(self, predicate, timeout_ms: int, what: str):
        return poll_until(predicate, timeout_ms / 1000, what, interval_s=WAIT_INTERVAL_S,
                          error=KafkaTimeoutError)

    # ------------------------------------------------------------- topics
    def create_topic(self, name: str, partitions: int = -1, replication_factor: int = -1,
                     config: dict | None = None, replica_assignment: dict | None = None,
                     timeout_ms: int = 30_000, wait: bool = True) -> None:
        """Create a topic; with ``wait``, returns once every broker's metadata shows a
        leader for every partition. ``replica_assignment``: {partition: [broker ids]} (overrides the counts)."""
        assignment = None
        if replica_assignment is not None:
            assignment = {int(p): [int(b) for b in r] for p, r in replica_assignment.items()}
            partitions, replication_factor = -1, -1
        body = {"topics": [[name, partitions, replication_factor, assignment,
                            {str(k): str(v) for k, v in (config or {}).items()}]],
                "timeout_ms": timeout_ms, "validate_only": False}
        response = self._request(protocol.ApiKey.CREATE_TOPICS, body,
                                 timeout_ms + BROKER_DEADLINE_MARGIN_MS)
        self._raise_entries(response.get("topics", []), "create topic")
        if wait:
            self.wait_for(lambda: self._all_led(name), timeout_ms,
                          f"every partition of {name} to have a leader")

    def _each_broker_metadata(self, topics: list[str] | None) -> list:
        """The Metadata answer of every live broker (brokers answer from their own
        cache, filled by the controller's UpdateMetadata, so they may differ briefly)."""
        md = self._metadata([])
        out = []
        for broker_id in sorted(md.brokers):
            try:
                response = self.net.request(md.endpoint(broker_id), protocol.ApiKey.METADATA,
                                            {"topics": topics},
                                            timeout_ms=min(self.request_timeout_ms,
                                                           EACH_BROKER_METADATA_TIMEOUT_MS))
                out.append(parse_metadata(response.body))
            except (errors.KafkaError, protocol.ProtocolError):
                return []
        return out

    def _all_led(self, topic: str) -> bool:
        """Every broker knows the topic and a leader for each of its partitions."""
        answers = self._each_broker_metadata([topic])
        return bool(answers) and all(
            bool(md.topics.get(topic)) and all(p.leader >= 0 for p in md.topics[topic].values())
            for md in answers)

    def _gone_everywhere(self, topic: str) -> bool:
        answers = self._each_broker_metadata([topic])
        return bool(answers) and all(topic not in md.topics for md in answers)

    def create_partitions(self, name: str, total: int, assignment: dict | None = None,
                          timeout_ms: int = 30_000) -> None:
        body = {"topics": [[name, total, None if assignment is None else
                            {int(p): list(r) for p, r in assignment.items()}]],
                "timeout_ms": timeout_ms}
        response = self._request(protocol.ApiKey.CREATE_PARTITIONS, body,
                                 timeout_ms + BROKER_DEADLINE_MARGIN_MS)
        self._raise_entries(response.get("topics", []), "create partitions of")

    def delete_topic(self, name: str, timeout_ms: int = 30_000, wait: bool = True) -> None:
        response = self._request(protocol.ApiKey.DELETE_TOPICS,
                                 {"topics": [name], "timeout_ms": timeout_ms},
                                 timeout_ms + BROKER_DEADLINE_MARGIN_MS)
        self._raise_entries(response.get("topics", []), "delete topic")
        if wait:
            self.wait_for(lambda: self._gone_everywhere(name), timeout_ms,
                          f"topic {name} to disappear from every broker's metadata")

    def list_topics(self) -> list[str]:
        return sorted(self._metadata(None).topics)

    def describe_topics(self, topics: list[str] | None = None
                        ) -> dict[str, list[PartitionMetadata]]:
        """{topic: [PartitionMetadata(partition, leader, leader_epoch, replicas, isr,
        offline_replicas, ...)] sorted by partition}. An unknown topic raises."""
        md = self._metadata(None if topics is None else list(topics))
        for topic, code in md.topic_errors.items():
            if topics is None or topic in topics:
                raise error(code, f"describe topic {topic}")
        wanted = md.topics if topics is None else {t: md.topics.get(t, {}) for t in topics}
        return {t: [parts[p] for p in sorted(parts)] for t, parts in wanted.items()}

    def describe_configs(self, topics: list[str]) -> dict[str, dict[str, str]]:
        response = self._request(protocol.ApiKey.DESCRIBE_CONFIGS, {"topics": list(topics)})
        out = {}
        for name, code, configs in response.get("topics", []):
            if code:
                raise error(code, f"describe configs of {name}")
            out[name] = dict(configs)
        return out

    def describe_broker_config(self) -> tuple[int, dict[str, str]]:
        """(broker id, its configs) of a live broker, asked directly (Kafka sends a
        broker's DescribeConfigs to that broker): e.g. ``zookeeper.connect``."""
        md = self._metadata([])
        for broker_id in sorted(md.brokers):
            try:
                response = self.net.request(md.endpoint(broker_id),
                                            protocol.ApiKey.DESCRIBE_CONFIGS,
                                            {"topics": [], "brokers": [broker_id]},
                                            timeout_ms=self.request_timeout_ms)
            except (errors.KafkaError, protocol.ProtocolError):
                continue
            for broker_id, code, configs in response.body.get("brokers", []):
                if not code:
                    return broker_id, dict(configs)
        raise error(ErrorCode.BROKER_NOT_AVAILABLE, "no broker answered DescribeConfigs")

    # ------------------------------------------------------------- leadership
    def elect_leaders(self, type: str = "preferred", partitions=None,
                      timeout_ms: int = 30_000) -> dict:
        """Ask for an election (``preferred`` or ``unclean``) of the given
        [(topic, partition)] or of every partition. Returns {(topic, partition):
        None or the KafkaError of that partition} (ELECTION_NOT_NEEDED included)."""
        if type not in ELECTION_TYPES:
            raise ValueError(f"election type must be preferred or unclean, got {type!r}")
        body = {"election_type": ELECTION_TYPES[type],
                "partitions": None if partitions is None else
                [[str(t), int(p)] for t, p in partitions], "timeout_ms": timeout_ms}
        response = self._request(protocol.ApiKey.ELECT_LEADERS, body,
                                 timeout_ms + BROKER_DEADLINE_MARGIN_MS)
        if response.get("error"):
            raise error(response["error"], "elect leaders")
        return {(t, p): (error(code, message) if code else None)
                for t, p, code, message in response.get("partitions", [])}

    def reassign_partitions(self, moves: dict, timeout_ms: int = 30_000) -> dict:
        """{(topic, partition): [new replicas] or None (cancel)}. Returns {(topic,
        partition): None or the KafkaError of that partition}."""
        body = {"partitions": [[str(t), int(p), None if r is None else [int(b) for b in r]]
                               for (t, p), r in moves.items()], "timeout_ms": timeout_ms}
        response = self._request(protocol.ApiKey.ALTER_PARTITION_REASSIGNMENTS, body,
                                 timeout_ms + BROKER_DEADLINE_MARGIN_MS)
        if response.get("error"):
            raise error(response["error"], "reassign partitions")
        return {(t, p): (error(code, message) if code else None)
                for t, p, code, message in response.get("partitions", [])}

    def list_reassignments(self, partitions=None) -> dict[tuple[str, int], Reassignment]:
        body = {"partitions": None if partitions is None else
                [[str(t), int(p)] for t, p in partitions]}
        response = self._request(protocol.ApiKey.LIST_PARTITION_REASSIGNMENTS, body)
        if response.get("error"):
            raise error(response["error"], "list reassignments")
        return {(t, p): Reassignment(list(replicas), list(adding), list(removing))
                for t, p, replicas, adding, removing in response.get("partitions", [])}

    def describe_config_entries(self, topic: str | None = None, broker: int | None = None
                                ) -> list[ConfigEntry]:
        """Every config of a topic or of a broker (asked of that broker), with Kafka's
        source, read-only flag and synonyms (DescribeConfigs' detail)."""
        if (topic is None) == (broker is None):
            raise ValueError("name a topic or a broker")
        body = {"topics": [] if topic is None else [topic], "include_sources": True}
        if topic is not None:
            response = self._request(protocol.ApiKey.DESCRIBE_CONFIGS, body)
            entries = response.get("topics", [])
        else:
            endpoint = self._metadata([]).endpoint(broker)
            if endpoint is None:
                raise error(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {broker}")
            body["brokers"] = [broker]
            entries = self.net.request(endpoint, protocol.ApiKey.DESCRIBE_CONFIGS, body,
                                       timeout_ms=self.request_timeout_ms).body.get("brokers", [])
        for name, code, _values, details in entries:
            if code:
                raise error(code, f"describe configs of {name}")
            return [ConfigEntry(key, value, SOURCE_NAMES.get(source, str(source)), read_only,
                                sensitive, [(k, v, SOURCE_NAMES.get(s, str(s)))
                                            for k, v, s in synonyms])
                    for key, value, source, read_only, sensitive, synonyms, _type in details]
        raise error(ErrorCode.UNKNOWN_SERVER_ERROR, "describe configs: no answer")

    def alter_configs(self, topic: str, set: dict | None = None, delete=(),
                      validate_only: bool = False, *, resource_type: int = RESOURCE_TOPIC
                      ) -> None:
        """IncrementalAlterConfigs of a topic's overrides: ``set`` {key: value}, then
        ``delete`` [key] (back to the broker's value)."""
        ops = [[str(k), ALTER_SET, str(v)] for k, v in (set or {}).items()] + \
            [[str(k), ALTER_DELETE, None] for k in delete]
        response = self._request(protocol.ApiKey.INCREMENTAL_ALTER_CONFIGS, {
            "resources": [[resource_type, topic, ops]], "validate_only": validate_only})
        for _, name, code, message in response.get("resources", []):
            if code:
                raise error(code, f"alter configs of {name}: {message}")

    def alter_broker_configs(self, broker: str, set: dict | None = None, delete=()) -> None:
        """IncrementalAlterConfigs of a broker's dynamic configs ("" = the cluster-wide
        default): the defaults of topic configs (log.retention.ms, min.insync.replicas,
        compression.type ...); any other key raises the broker's INVALID_CONFIG."""
        self.alter_configs(str(broker), set, delete, resource_type=RESOURCE_BROKER)

    # ------------------------------------------------------------- records
    def delete_records(self, offsets: dict) -> dict[tuple[str, int], int]:
        """{(topic, partition): offset (-1 = the high watermark)}: each partition's
        leader moves its log start there. Returns {(topic, partition): low watermark};
        an error raises."""
        md = self._metadata(sorted({t for t, _ in offsets}))
        by_leader: dict[int, list] = {}
        for (topic, partition), offset in offsets.items():
            found = md.partition(topic, partition)
            if found is None or found.leader < 0:
                raise error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if found is None else
                            ErrorCode.LEADER_NOT_AVAILABLE, f"delete records of "
                            f"{topic}-{partition}")
            by_leader.setdefault(found.leader, []).append([topic, partition, int(offset)])
        out = {}
        for leader, entries in sorted(by_leader.items()):
            answer = self.net.request(md.endpoint(leader), protocol.ApiKey.DELETE_RECORDS,
                                      {"partitions": entries, "timeout_ms":
                                       self.request_timeout_ms},
                                      timeout_ms=self.request_timeout_ms).body
            for topic, partition, code, low_watermark in answer.get("partitions", []):
                if code:
                    raise error(code, f"delete records of {topic}-{partition}")
                out[(topic, partition)] = low_watermark
        return out

    # ------------------------------------------------------------- cluster
    def describe_cluster(self) -> ClusterDescription:
        md = self._metadata([])
        return ClusterDescription([md.brokers[b] for b in sorted(md.brokers)], md.controller_id)

    def describe_log_dirs(self, broker_id: int) -> dict[str, dict[tuple[str, int], int]]:
        """{log dir: {(topic, partition): size in bytes}} of one broker; a directory
        that went offline raises its error."""
        md = self._metadata([])
        endpoint = md.endpoint(broker_id)
        if endpoint is None:
            raise error(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {broker_id}")
        answer = self.net.request(endpoint, protocol.ApiKey.DESCRIBE_LOG_DIRS,
                                  {"partitions": None},
                                  timeout_ms=self.request_timeout_ms).body
        out = {}
        for path, code, _total, _usable, entries in answer.get("log_dirs", []):
            if code:
                raise error(code, f"log dir {path} of broker {broker_id}")
            out[path] = {(t, p): size for t, p, size, _lag in entries}
        return out

    def close(self) -> None:
        self.net.close()

    def __enter__(self) -> "Admin":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
