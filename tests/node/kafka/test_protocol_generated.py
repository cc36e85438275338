"""The generated messages.py is exactly what the generator makes of schema/*.json."""

from node.kafka.protocol import generate


def test_checked_in_messages_module_is_what_the_generator_writes():
    # Fails when someone edits messages.py by hand, or the schema or the generator
    # without regenerating: run `python -m node.kafka.protocol.generate`.
    assert generate.OUT_PATH.read_text(encoding="utf-8") == generate.render()
