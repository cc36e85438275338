"""Kafka's APIs as translations onto the native handlers: one registry, one handler per API.

``TRANSLATIONS[api_key]`` is the ``Translation`` of one Kafka API. The listener
(``node.kafka.listener``) decodes a request with the generated codec
(``node.kafka.protocol``) and asks the translation for it:

- ``request(ctx, header, request)`` returns a ``NativeCall``: the native body and batch
  frames of the same request, run through the SAME handler table as the native wire
  (``node.broker.apis.kafka_apis.HANDLERS``); or a finished Kafka response object, for
  APIs answered from the context alone (ApiVersions); or None: no answer at all
  (Produce with acks=0, as Kafka); or ``CLOSE_CONNECTION`` (an acks=0 Produce that
  failed, as Kafka), which closes the connection once the answers before it are out.
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
registered below with one import line. A translation module imports the registry from
``node.kafka.translate.registry`` (a package's modules never import the package).
"""
from __future__ import annotations

from node.kafka.translate.registry import (CLOSE_CONNECTION, TRANSLATIONS, NativeCall,
                                           Translation, TranslationBase, advertised,
                                           register, top_level_error)

__all__ = ["CLOSE_CONNECTION", "TRANSLATIONS", "NativeCall", "Translation", "TranslationBase",
           "advertised", "register", "top_level_error"]

# The translations (each module registers its own; one import line per module).
from node.kafka.translate import api_versions  # noqa: E402,F401
from node.kafka.translate import metadata  # noqa: E402,F401
from node.kafka.translate import produce  # noqa: E402,F401
from node.kafka.translate import fetch  # noqa: E402,F401
from node.kafka.translate import offsets  # noqa: E402,F401
from node.kafka.translate import admin_topics  # noqa: E402,F401
from node.kafka.translate import admin_configs  # noqa: E402,F401
from node.kafka.translate import admin_cluster  # noqa: E402,F401
from node.kafka.translate import admin_logs  # noqa: E402,F401
from node.kafka.translate import groups  # noqa: E402,F401
from node.kafka.translate import txn  # noqa: E402,F401
from node.kafka.translate import txn_markers  # noqa: E402,F401
