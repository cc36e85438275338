"""Kafka's APIs as translations onto the native handlers: one registry, one handler per API.

``TRANSLATIONS[api_key]`` is the ``Translation`` of one Kafka API. The listener
(``node.kafka.listener``) decodes a request with the generated codec
(``node.kafka.protocol``) and asks the translation for it:

- ``request(ctx, header, request)`` returns a ``NativeCall``: the native body and batch
  frames of the same request, run through the SAME handler table as the native wire
  (``node.broker.apis.kafka_apis.HANDLERS``); or a finished Kafka response object, for
  APIs answered from the context alone (ApiVersions); or None: no answer at all
  (Produce with acks=0, as Kafka).
- ``response(ctx, header, request, body, frames)`` turns the native handler's answer
  (what it gave ``send_response``) into the Kafka response object. A NativeCall with a
  ``state`` gets it back as ``response(..., state=state)``: what the request side
  learned that the native handler does not echo (partitions refused before the call).
- ``error(ctx, header, request, code, message)`` is Kafka's error response for the whole
  request (AbstractRequest.getErrorResponse): every partition, or the top-level error
  code, set to ``code``. The listener uses it when a native handler refuses the request
  as a whole (an ``{"error", "error_message"}`` answer), for a version it does not
  advertise, and for a request a translation finds invalid (INVALID_REQUEST); None
  closes the connection instead (Kafka's answer to what it cannot parse).

``versions`` is what ApiVersions advertises: exactly what works. Where a native handler
lacks something Kafka needs it is extended there, so both wires gain it; a translation
never carries a second copy of a handler's logic.

The data-path translations live in this package's modules (``api_versions``,
``metadata``, ``produce``, ``fetch``, ``offsets``); the admin ones in ``admin*.py``, each
registered below with one import line.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Protocol

from node.kafka.protocol import response_class


@dataclass
class NativeCall:
    """Run ``body`` (+ batch ``frames``) through the native handler of ``api_key``.
    ``answers`` False: the handler sends nothing (Produce acks=0) and the request is
    done once it returns. ``state`` goes back to ``Translation.response``."""

    api_key: int
    body: dict
    frames: list = field(default_factory=list)
    answers: bool = True
    state: object = None


class Translation(Protocol):
    api_key: int
    versions: tuple[int, int]

    def request(self, ctx, header, request): ...

    def response(self, ctx, header, request, body: dict, frames: list): ...

    def error(self, ctx, header, request, code: int, message: str | None): ...


class TranslationBase:
    """Defaults for a translation: the error response sets the response's top-level
    ``error_code`` (and ``error_message`` where it has one); without such a field the
    connection is closed."""

    api_key: int = -1
    versions: tuple[int, int] = (0, -1)

    def error(self, ctx, header, request, code: int, message: str | None):
        return top_level_error(header.api_key, code, message)


def top_level_error(api_key: int, code: int, message: str | None = None):
    """A response of ``api_key`` with only its top-level error set; None if it has no
    top-level error field."""
    cls = response_class(api_key)
    names = {f.name for f in dataclasses.fields(cls)}
    if "error_code" not in names:
        return None
    kwargs = {"error_code": code}
    if "error_message" in names and message is not None:
        kwargs["error_message"] = message
    return cls(**kwargs)


TRANSLATIONS: dict[int, Translation] = {}


def register(translation: Translation) -> Translation:
    lo, hi = translation.versions
    assert 0 <= lo <= hi, (translation, translation.versions)
    assert translation.api_key not in TRANSLATIONS, translation.api_key
    TRANSLATIONS[translation.api_key] = translation
    return translation


def advertised() -> list[tuple[int, int, int]]:
    """(api key, min version, max version) of every API, for ApiVersions."""
    return [(key, *TRANSLATIONS[key].versions) for key in sorted(TRANSLATIONS)]


# The translations (each module registers its own; one import line per module).
from node.kafka.translate import api_versions  # noqa: E402,F401
from node.kafka.translate import metadata  # noqa: E402,F401
from node.kafka.translate import produce  # noqa: E402,F401
from node.kafka.translate import fetch  # noqa: E402,F401
from node.kafka.translate import offsets  # noqa: E402,F401
