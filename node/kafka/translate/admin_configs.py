"""DescribeConfigs and IncrementalAlterConfigs through the native admin handlers
(``node.broker.apis.admin.configs`` and ``alter_configs``).

- Topics (resource type 2) and brokers (4). A broker describes itself only, as Kafka:
  another broker's id is INVALID_REQUEST, and "" (the cluster-wide dynamic defaults)
  is an empty list since no broker config changes at run time here. Other resource
  types (broker loggers, client metrics, groups) are INVALID_REQUEST.
- Each entry carries Kafka's ConfigSource (DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG,
  DEFAULT_CONFIG), read-only (every broker key), sensitive (none), the synonyms when asked
  (v1+: the topic key, then the broker key it falls back to) and the type (v3+).
  Documentation is not given (null).
- IncrementalAlterConfigs: SET, DELETE, APPEND and SUBTRACT on topic overrides; broker
  keys are refused as Kafka refuses keys that are not dynamic (INVALID_CONFIG).
- AlterConfigs (the older API, still used by some tools): the configs given become the
  topic's whole override set.
"""
from __future__ import annotations

from node.kafka.protocol.messages import (AlterConfigsResponse, DescribeConfigsResponse,
                                          IncrementalAlterConfigsResponse)
from node.kafka.translate.registry import NativeCall, TranslationBase, register
from node.wire import protocol
from node.wire.errors import ErrorCode

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
SOURCE_DEFAULT = 5      # Kafka's ConfigSource.DEFAULT_CONFIG (v0 answers it as is_default)


def _broker_id(name: str) -> int | None:
    try:
        return int(name)
    except ValueError:
        return None


# ------------------------------------------------------------------ DescribeConfigs

class DescribeConfigs(TranslationBase):
    api_key = protocol.ApiKey.DESCRIBE_CONFIGS
    versions = (0, 4)

    def request(self, ctx, header, request):
        topics, brokers, keys = [], [], {}
        for r in request.resources:
            if r.resource_type == RESOURCE_TOPIC and r.resource_name:
                topics.append(r.resource_name)
                key = r.resource_name
            elif r.resource_type == RESOURCE_BROKER and _broker_id(r.resource_name) is not None:
                brokers.append(_broker_id(r.resource_name))
                key = str(_broker_id(r.resource_name))
            else:
                continue        # answered here (see response)
            if not r.configuration_keys:    # null or empty: every key (Kafka's rule)
                keys[key] = None
            elif key not in keys or keys[key] is not None:
                keys[key] = (keys.get(key) or set()) | set(r.configuration_keys)
        body = {"topics": list(dict.fromkeys(topics)), "include_sources": True,
                "keys": {k: sorted(v) for k, v in keys.items() if v is not None}}
        if brokers:
            body["brokers"] = list(dict.fromkeys(brokers))
        return NativeCall(protocol.ApiKey.DESCRIBE_CONFIGS, body)

    def response(self, ctx, header, request, body, frames):
        topics = {e[0]: e for e in body.get("topics", [])}
        brokers = {e[0]: e for e in body.get("brokers", [])}
        results = []
        for r in request.resources:
            code, message, entries = ErrorCode.NONE, None, []
            if r.resource_type == RESOURCE_TOPIC and r.resource_name:
                _, code, _, entries = topics[r.resource_name]
                if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    message = f"Topic '{r.resource_name}' does not exist."
            elif r.resource_type == RESOURCE_TOPIC:
                code, message = ErrorCode.INVALID_REQUEST, "Topic name must not be empty."
            elif r.resource_type == RESOURCE_BROKER and r.resource_name == "":
                pass    # the cluster-wide dynamic defaults: there are none
            elif r.resource_type == RESOURCE_BROKER and _broker_id(r.resource_name) is not None:
                _, code, _, entries = brokers[_broker_id(r.resource_name)]
                if code == ErrorCode.INVALID_REQUEST:
                    message = (f"Unexpected broker id, expected {ctx.broker_id} or empty "
                               f"string, but received {r.resource_name}")
            elif r.resource_type == RESOURCE_BROKER:
                code, message = ErrorCode.INVALID_REQUEST, \
                    f"Broker id must be an integer, but it is: {r.resource_name}"
            else:
                code, message = ErrorCode.INVALID_REQUEST, \
                    f"Unsupported resource type {r.resource_type}"
            if r.configuration_keys:
                wanted = set(r.configuration_keys)
                entries = [e for e in entries if e[0] in wanted]
            results.append(DescribeConfigsResponse.DescribeConfigsResult(
                error_code=code, error_message=message, resource_type=r.resource_type,
                resource_name=r.resource_name,
                configs=[self._entry(header, request, e) for e in entries]))
        return DescribeConfigsResponse(throttle_time_ms=0, results=results)

    @staticmethod
    def _entry(header, request, entry):
        key, value, source, read_only, sensitive, synonyms, config_type = entry
        listed = synonyms if request.include_synonyms else []
        return DescribeConfigsResponse.DescribeConfigsResourceResult(
            name=key, value=value, read_only=read_only,
            is_default=header.api_version == 0 and source == SOURCE_DEFAULT,
            config_source=source,
            is_sensitive=sensitive, config_type=config_type, documentation=None,
            synonyms=[DescribeConfigsResponse.DescribeConfigsSynonym(
                name=n, value=v, source=s) for n, v, s in listed])

    def error(self, ctx, header, request, code, message):
        return DescribeConfigsResponse(throttle_time_ms=0, results=[
            DescribeConfigsResponse.DescribeConfigsResult(
                error_code=code, error_message=message, resource_type=r.resource_type,
                resource_name=r.resource_name, configs=[])
            for r in request.resources])


# ------------------------------------------------------------------ IncrementalAlterConfigs

class IncrementalAlterConfigs(TranslationBase):
    """Both alter APIs run the native IncrementalAlterConfigs; AlterConfigs (below) sets
    every config given and replaces the resource's whole set."""
    api_key = protocol.ApiKey.INCREMENTAL_ALTER_CONFIGS
    versions = (0, 1)
    RESPONSE = IncrementalAlterConfigsResponse
    REPLACE = False

    @staticmethod
    def _operations(resource) -> list:
        return [[c.name, c.config_operation, c.value] for c in resource.configs]

    def request(self, ctx, header, request):
        resources = [[r.resource_type, r.resource_name, self._operations(r)]
                     for r in request.resources]
        body = {"resources": resources, "validate_only": bool(request.validate_only)}
        if self.REPLACE:
            body["replace"] = True
        return NativeCall(protocol.ApiKey.INCREMENTAL_ALTER_CONFIGS, body)

    def _answer(self, entries):
        return self.RESPONSE(throttle_time_ms=0, responses=[
            self.RESPONSE.AlterConfigsResourceResponse(
                error_code=code, error_message=message, resource_type=resource_type,
                resource_name=name)
            for resource_type, name, code, message in entries])

    def response(self, ctx, header, request, body, frames):
        return self._answer(body["resources"])

    def error(self, ctx, header, request, code, message):
        return self._answer([(r.resource_type, r.resource_name, code, message)
                             for r in request.resources])


# ------------------------------------------------------------------ AlterConfigs

class AlterConfigs(IncrementalAlterConfigs):
    api_key = 33
    versions = (0, 2)
    RESPONSE = AlterConfigsResponse
    REPLACE = True

    @staticmethod
    def _operations(resource) -> list:
        return [[c.name, 0, c.value] for c in resource.configs]    # 0: SET


register(DescribeConfigs())
register(IncrementalAlterConfigs())
register(AlterConfigs())
