"""``--override KEY=VALUE`` of the cluster, latency and peers benchmarks."""
import argparse

import pytest

from bench.perf import overrides


def _parser():
    parser = argparse.ArgumentParser(prog="bench")
    overrides.add_argument(parser)
    return parser


def test_overrides_are_a_map_the_last_one_wins():
    parser = _parser()
    args = parser.parse_args(["--override", "replica.transport=shm", "--override",
                              "a = b=c", "--override", "replica.transport=fetch"])
    assert overrides.parse(parser, args.override) == {"replica.transport": "fetch",
                                                      "a": " b=c"}
    assert overrides.parse(parser, []) == {}


@pytest.mark.parametrize("bad", ["replica.transport", "=shm", " =x"])
def test_a_malformed_override_is_a_usage_error(bad, capsys):
    parser = _parser()
    with pytest.raises(SystemExit) as exit_:
        overrides.parse(parser, parser.parse_args(["--override", bad]).override)
    assert exit_.value.code == 2 and "expected KEY=VALUE" in capsys.readouterr().err
