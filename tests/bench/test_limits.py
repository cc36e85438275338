"""bench.perf.limits: its flags, statistics and table (pure), and one tiny real run."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from bench.perf import limits


@pytest.mark.parametrize("argv", [["--rounds", "0"], ["--trips", "0"], ["--rate", "0"],
                                  ["--message-bytes", "0"], ["--seconds", "0"],
                                  ["--growth-bytes", "1000"], ["--work-us", "-1"],
                                  ["--only", "memcpy,bogus"], ["--only", ","]])
def test_bad_flags_are_a_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        limits.parse_args(argv)
    assert exit_info.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_only_keeps_the_canonical_order_and_paced_trips_zero_drops_the_paced_mode():
    args = limits.parse_args(["--only", "unix,memcpy", "--paced-trips", "0"])
    assert args.only == ["memcpy", "unix"]
    assert limits.plan(args) == [("memcpy", None), ("unix", "back-to-back")]
    args = limits.parse_args(["--only", "semaphore"])
    assert limits.plan(args) == [("semaphore", "back-to-back"), ("semaphore", "paced")]


def test_percentile_is_the_nearest_rank():
    samples = list(range(100, 0, -1))   # 1..100, unsorted
    assert limits.percentile(samples, 0.99) == 99
    assert limits.percentile(samples, 0.5) == 50
    assert limits.percentile(samples, 1.0) == 100
    assert limits.percentile([7.0], 0.99) == 7.0


def test_a_figure_is_the_median_of_its_rounds_with_their_spread():
    rounds = [limits.trip_round([10.0, 11.0, 30.0]), limits.trip_round([20.0, 21.0, 22.0]),
              limits.trip_round([5.0, 6.0, 7.0])]
    line = limits.summarize("unix", "paced", rounds, {"trips": 3, "rate": 1000})
    assert (line["median"], line["min"], line["max"], line["p99"]) == (11.0, 6.0, 21.0, 22.0)
    assert line["unit"] == "us" and line["rounds"] == 3 and line["rate"] == 1000
    rate = limits.summarize("memcpy", None, [3.0, 1.0, 2.0], {"bytes": 10})
    assert "mode" not in rate and "p99" not in rate
    assert (rate["median"], rate["min"], rate["max"], rate["unit"]) == (2.0, 1.0, 3.0, "GB/s")


def test_an_acks_all_write_floor_is_two_paced_round_trips_and_the_table_shows_every_line():
    lines = [limits.summarize("semaphore", "paced", [limits.trip_round([10.0, 12.0])],
                              {"trips": 2, "rate": 1000}),
             limits.summarize("semaphore", "back-to-back", [limits.trip_round([5.0])],
                              {"trips": 1}),
             limits.summarize("zmq_push", None, [2386.0], {"frame_bytes": 262144})]
    (floor,) = limits.floors(lines)
    assert floor["floor"] == "acks_all_write_semaphore"
    assert (floor["median"], floor["p99"], floor["hops"]) == (22.0, 24.0, 4)
    text = limits.table(lines + [floor]).splitlines()
    assert text[0].split()[:3] == ["figure", "mode", "median"]
    assert len(text) == 2 + len(lines) + 1
    assert "1000/s" in text[2] and "11.0" in text[2] and "12.0" in text[2]
    assert "2,386.0" in text[4] and "MB/s" in text[4]
    assert text[5].startswith("acks_all_write_semaphore") and "22.0" in text[5]


def test_page_cache_growth_holds_what_each_round_freed_until_the_last_round(tmp_path,
                                                                          monkeypatch):
    """Each round's memory is taken again and kept (so the next round cannot grow
    into it), under the directory given, which is left empty; run() drops it all."""
    held: list = []
    for _ in range(2):
        rate = limits.page_cache_rate(3 << 20, held, directory=str(tmp_path))
        assert rate > 0
    assert [len(block) for block in held] == [3 << 20, 3 << 20]
    assert list(tmp_path.iterdir()) == []
    seen: list = []

    def measure(figure, args, rate, held_by_run=None):
        held_by_run.append(bytearray(8))
        seen.append(held_by_run)
        return 1.0
    monkeypatch.setattr(limits, "measure_round", measure)
    args = limits.parse_args(["--only", "page_cache_growth", "--rounds", "3",
                              "--growth-bytes", str(1 << 20)])
    (line,) = limits.run(args)
    assert line["figure"] == "page_cache_growth" and line["bytes"] == 1 << 20
    assert line["rounds"] == 3 and line["unit"] == "GB/s"
    assert len(seen) == 3 and seen[0] is seen[2] and seen[0] == []   # one list, emptied


def _semaphores() -> set[str]:
    return {name for name in os.listdir("/dev/shm") if name.startswith("sem.minikafka-limits")}


@pytest.mark.process
def test_a_tiny_real_run_measures_every_figure_and_leaves_nothing_behind():
    before = _semaphores()
    result = subprocess.run(
        [sys.executable, "-m", "bench.perf.limits", "--rounds", "1", "--trips", "20",
         "--paced-trips", "5", "--rate", "5000", "--copy-bytes", str(1 << 20),
         "--growth-bytes", str(1 << 20),
         "--frame-bytes", str(1 << 16), "--seconds", "0.05"],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    figures = [(r["figure"], r.get("mode")) for r in records if "figure" in r]
    expected = [(figure, mode) for figure in limits.FIGURES
                for mode in ((None,) if figure in limits.RATE_FIGURES
                             else ("back-to-back", "paced"))]
    assert figures == expected
    for record in records:
        assert record["median"] > 0
        if "figure" in record:
            assert record["min"] <= record["median"] <= record["max"]
            assert record["rounds"] == 1
    assert sorted(r["floor"] for r in records if "floor" in r) == sorted(
        f"acks_all_write_{figure}" for figure in limits.TRIP_FIGURES)
    assert "memory copy, large buffers" in result.stdout      # the table follows
    assert _semaphores() <= before


@pytest.mark.process
def test_a_fanout_round_times_the_later_of_two_wake_ups():
    """Each trip waits for both woken processes, each of which works --work-us after it
    woke: a trip lasts at least that long, and the later wake-up comes before the trip
    ends (the answers carry the wake-ups' own times)."""
    started = time.perf_counter()
    wakes = limits.fanout_round(20, None, 2000)
    elapsed_us = (time.perf_counter() - started) * 1e6
    assert len(wakes) == 20
    assert all(0 < wake < 1_000_000 for wake in wakes)
    assert elapsed_us >= (limits.WARMUP_TRIPS + 20) * 2000
    assert sum(wakes) < elapsed_us


def test_the_breakdown_prints_the_floor_measured_in_the_same_run(capsys):
    from bench.perf import latency
    result = {"breakdown_us": {"client send -> leader receive": {"p50": 80.0, "p99": 140.0},
                               "total": {"p50": 600.0, "p99": 900.0}},
              "rate": 1000, "traced": 10, "incomplete": 0,
              "floor_us": {"unix_round_trip": 28.2, "unix_hop": 14.1,
                           "semaphore_round_trip": 13.0, "semaphore_hop": 6.5,
                           "fanout_wake": 31.5}}
    latency.print_breakdown(result)
    floor, fanout = capsys.readouterr().out.splitlines()[-2:]
    assert floor.startswith("floor, same run (1000/s")
    assert "Unix socket 14.1 us (round trip 28.2)" in floor and "semaphores 6.5 us" in floor
    assert fanout.startswith("floor of a follower's wake-up") and "after 31.5 us" in fanout
    with pytest.raises(SystemExit) as exit_info:
        latency.main(["--floor"])
    assert exit_info.value.code == 2


def test_the_breakdown_groups_writes_by_whether_the_followers_ran_on_one_cpu(capsys):
    from bench.perf import latency

    def path(distinct: int, total_us: int, wake_us: int) -> dict:
        return {"send": 0, "client_receive": total_us * 1000, "f_answered": 1000,
                "f_received": 1000 + wake_us * 1000, "follower_cpus": distinct}
    paths = [path(1, 500, 150), path(1, 520, 170), path(1, 480, 130), path(2, 400, 50)]
    table = latency.placement_table(paths)
    assert list(table) == ["2", "1"]
    assert table["1"] == {"writes": 3, "share": 0.75, "total_p50": 500.0,
                          "follower_wake_p50": 150.0}
    assert table["2"]["writes"] == 1 and table["2"]["follower_wake_p50"] == 50.0
    latency.print_breakdown({"breakdown_us": {"total": {"p50": 500.0, "p99": 900.0}},
                             "rate": 1000, "traced": 4, "incomplete": 0, "placement": table})
    out = capsys.readouterr().out
    assert "3 writes (75%) with the followers on one CPU" in out
    assert "1 writes (25%) with the followers on 2 different CPUs" in out
    assert "follower wake-up p50 50.0 us" in out


def test_a_process_last_cpu_is_read_from_proc():
    from bench.perf import latency
    with latency.LastCpus({7: os.getpid()}) as cpus:
        assert cpus.read()[7] in os.sched_getaffinity(0)
    assert cpus.fds == {}        # closed on leaving
