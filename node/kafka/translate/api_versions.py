"""ApiVersions (answered from the registry) and SASL, which is not offered.

ApiVersions lists every API a translation serves with exactly the versions it serves
(``translate.advertised``); a too-new ApiVersions is the listener's (KIP-511).

SASL: every Kafka listener here is PLAINTEXT. Kafka's broker answers SaslHandshake and
SaslAuthenticate on such a listener with ILLEGAL_SASL_STATE (KafkaApis'
handleSaslHandshakeRequest), which is what a client configured for SASL then reports.
"""
from __future__ import annotations

from node.kafka.protocol.messages import (ApiVersionsResponse, SaslAuthenticateResponse,
                                          SaslHandshakeResponse)
from node.kafka.translate.registry import TranslationBase, advertised, register
from node.wire.errors import ErrorCode

SASL_NOT_OFFERED = "SASL is not offered: this listener is PLAINTEXT"


def api_versions_response(error_code: int = ErrorCode.NONE) -> ApiVersionsResponse:
    """ApiVersions' answer: every API a translation serves, with exactly its versions."""
    return ApiVersionsResponse(
        error_code=error_code,
        api_keys=[ApiVersionsResponse.ApiVersion(api_key=key, min_version=lo, max_version=hi)
                  for key, lo, hi in advertised()],
        throttle_time_ms=0)


class ApiVersions(TranslationBase):
    api_key = 18
    # v4 is v3 (it only allows features with min version 0, and we list none); kafka-python
    # 3 asks in v4.
    versions = (0, 4)

    def request(self, ctx, header, request):
        return api_versions_response()


class SaslHandshake(TranslationBase):
    api_key = 17
    versions = (0, 1)

    def request(self, ctx, header, request):
        return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])

    def error(self, ctx, header, request, code, message):
        return SaslHandshakeResponse(error_code=code, mechanisms=[])


class SaslAuthenticate(TranslationBase):
    api_key = 36
    versions = (0, 2)

    def request(self, ctx, header, request):
        return SaslAuthenticateResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                        error_message=SASL_NOT_OFFERED, auth_bytes=b"")


register(ApiVersions())
register(SaslHandshake())
register(SaslAuthenticate())
