"""The generated messages.py, coordinator_records.py and txn_records.py are exactly what the
generator makes of schema/*.json, schema/coordinator/*.json and schema/transaction/*.json."""

from node.kafka.protocol import generate


def test_checked_in_messages_module_is_what_the_generator_writes():
    # Fails when someone edits messages.py by hand, or the schema or the generator
    # without regenerating: run `python -m node.kafka.protocol.generate`.
    assert generate.OUT_PATH.read_text(encoding="utf-8") == generate.render()


def test_checked_in_coordinator_records_module_is_what_the_generator_writes():
    assert generate.RECORDS_OUT_PATH.read_text(encoding="utf-8") == generate.render_records()


def test_checked_in_txn_records_module_is_what_the_generator_writes():
    assert generate.TXN_RECORDS_OUT_PATH.read_text(encoding="utf-8") == generate.render_txn_records()


def test_the_check_mode_says_every_modules_are_up_to_date(capsys):
    assert generate.main(["--check"]) == 0
    out = capsys.readouterr().out
    assert "messages.py is up to date" in out and "coordinator_records.py is up to date" in out
    assert "txn_records.py is up to date" in out
