"""A second opinion: kafka-python 3's own codec (written independently, from the same JSON
definitions) reads every message we encode, and writes the same bytes back.

Skipped where kafka-python (the ``kafka-clients`` extra) is not installed.
"""

import dataclasses
import importlib
import pkgutil
import random

import pytest

from node.kafka.protocol import codec

from .kafka_values import CASES, populated

kafka_protocol = pytest.importorskip("kafka.protocol")
pytest.importorskip("kafka.protocol.api_message")


def kafka_python_classes() -> dict:
    """kafka-python's message classes by Kafka's message name."""
    classes = {}
    for info in pkgutil.walk_packages(kafka_protocol.__path__, "kafka.protocol."):
        if any(part in info.name for part in (".old", ".schemas", "generate_stubs")):
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            definition = getattr(value, "_json", None)
            if isinstance(value, type) and isinstance(definition, dict) and "name" in definition:
                classes[definition["name"]] = value
    return classes


CLASSES = kafka_python_classes()
SHARED = [(spec, version) for spec, version in CASES
          if spec.name in CLASSES and version <= CLASSES[spec.name].max_version]


def test_kafka_python_knows_the_data_path_messages():
    names = {spec.name for spec, _ in SHARED}
    assert {"ProduceRequest", "FetchResponse", "MetadataResponse", "ApiVersionsRequest"} <= names


@pytest.mark.parametrize("spec,version", SHARED, ids=lambda x: getattr(x, "name", str(x)))
def test_kafka_python_reads_our_bytes_and_writes_them_back(spec, version):
    message = populated(spec, version, random.Random(f"kafka-python/{spec.name}/{version}"))
    if spec.name == "ApiVersionsResponse":
        # kafka-python reads an ApiVersions error answer as v0, as brokers send it then.
        message = dataclasses.replace(message, error_code=0)
    out = []
    codec.encode_body(message, version, out)
    ours = b"".join(out)
    theirs = CLASSES[spec.name].decode(ours, version=version)
    if not hasattr(theirs, "_header"):
        theirs._header = None  # kafka-python's decode leaves it unset; encode reads it
    assert bytes(theirs.encode(version=version)) == ours
