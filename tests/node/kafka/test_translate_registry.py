"""The translation registry (pure): what ApiVersions advertises is what the codec can
speak, and every translation can say "no" to a request in every version it serves."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from node.kafka.protocol import (RequestHeader, VALID_VERSIONS, encode_response,
                                 request_class)
from node.kafka.translate import CLOSE_CONNECTION, TRANSLATIONS, advertised, top_level_error
from node.wire.errors import ErrorCode


def test_advertised_versions_are_within_the_schemas():
    for key, lo, hi in advertised():
        schema_lo, schema_hi = VALID_VERSIONS[key]
        assert schema_lo <= lo <= hi <= schema_hi, (key, lo, hi)


def test_the_transaction_coordinators_apis_are_advertised_in_every_codec_version():
    # InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions,
    # ListTransactions (issue 28)
    for key in (22, 24, 25, 26, 65, 66):
        assert TRANSLATIONS[key].versions == VALID_VERSIONS[key], key


def test_the_group_apis_are_advertised():
    # FindCoordinator, JoinGroup, Heartbeat, LeaveGroup, SyncGroup, OffsetCommit,
    # OffsetFetch, ConsumerGroupHeartbeat (issue 26)
    assert {10, 11, 12, 13, 14, 8, 9, 68} <= set(TRANSLATIONS)


@pytest.mark.parametrize("key", sorted(TRANSLATIONS))
def test_every_served_version_has_an_error_answer_that_encodes(key):
    translation = TRANSLATIONS[key]
    lo, hi = translation.versions
    for version in range(lo, hi + 1):
        header = RequestHeader(key, version, 1, "t")
        request = request_class(key)()
        context = SimpleNamespace(cluster_id=lambda: "c1")   # what error answers may read
        response = translation.error(context, header, request, ErrorCode.UNSUPPORTED_VERSION,
                                     "no")
        if response is None or response is CLOSE_CONNECTION:   # the connection is closed
            continue
        assert encode_response(header, response)[:4] != b"\x00\x00\x00\x00"


def test_top_level_error_only_where_the_response_has_one():
    assert top_level_error(11, ErrorCode.UNSUPPORTED_VERSION).error_code == \
        ErrorCode.UNSUPPORTED_VERSION                      # JoinGroup has one
    assert top_level_error(0, ErrorCode.UNSUPPORTED_VERSION) is None   # Produce has not
