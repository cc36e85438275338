"""The registry of Kafka API translations (``node.kafka.translate`` says how they work):
``NativeCall``, the ``Translation`` protocol, ``TranslationBase``, ``register`` and
``TRANSLATIONS``. Translation modules import this module, never their package."""
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


class _CloseConnection:
    def __repr__(self) -> str:
        return "CLOSE_CONNECTION"


# What ``request``/``response`` return to close the connection once the answers before
# it are out (Kafka's answer to an acks=0 Produce that failed: the client notices,
# refreshes its metadata and reconnects).
CLOSE_CONNECTION = _CloseConnection()

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
