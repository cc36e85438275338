"""bench.perf.cluster: its flags, and the memory warm-up that sets a throughput run's
floor on a VM whose host takes back freed memory (the cluster runs are benchmarks, not
tests: nothing here starts a broker)."""
from __future__ import annotations

import pytest

from bench.perf import cluster


@pytest.mark.parametrize("value", ["-1", str(cluster.WARM_MEMORY_BYTES_MAX + 1)])
def test_a_warm_memory_out_of_range_is_a_usage_error(value, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cluster.main(["--warm-memory", value])
    assert exit_info.value.code == 2
    assert "--warm-memory must be in" in capsys.readouterr().err


def test_an_in_flight_window_below_one_byte_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cluster.main(["--in-flight-bytes", "0"])
    assert exit_info.value.code == 2
    assert "--in-flight-bytes must be at least 1" in capsys.readouterr().err


def test_the_window_counts_bytes_not_batches():
    """With 16 KiB batches a call's ~375 batches stay in flight together (a window of
    batches waited each call out almost whole)."""
    class Future:
        def __init__(self, log, i):
            self.log, self.i = log, i

        def get(self, timeout):
            self.log.append(("get", self.i))

    class Producer:
        def __init__(self):
            self.log, self.calls = [], 0

        def send_many(self, topic, values):
            self.calls += 1
            self.log.append(("send", self.calls))
            return [Future(self.log, (self.calls, b)) for b in range(4)]

    producer = Producer()
    result = cluster._throughput(producer, "t", 0.05, 1000, in_flight_bytes=150_000)
    log = producer.log
    # 100,000 bytes a call (4 batches of 25,000): after the second call 200,000 are
    # pending, and two of the first call's batches are waited for, not all four.
    second = log.index(("send", 2))
    assert log[second + 1:second + 3] == [("get", (1, 0)), ("get", (1, 1))]
    assert log[second + 3] in (("send", 3), ("get", (1, 2)))   # the next call, or the end
    assert result["records"] == 1000 * producer.calls


def test_the_warm_up_writes_and_removes_its_file_and_reports_it(tmp_path):
    assert cluster.warm_memory(str(tmp_path), 0) == {}
    warmed = cluster.warm_memory(str(tmp_path), 2 << 20)["warm_memory"]
    assert warmed["bytes"] == 2 << 20
    assert warmed["seconds"] >= 0 and warmed["gb_per_s"] > 0
    assert list(tmp_path.iterdir()) == []


def test_the_page_cache_size_is_read_from_meminfo(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nBuffers:          1000 kB\n"
                       "Cached:          2500000 kB\nSwapCached:          0 kB\n")
    assert cluster.cached_bytes(str(meminfo)) == 2500000 * 1024
    meminfo.write_text("MemTotal:       24000000 kB\n")
    assert cluster.cached_bytes(str(meminfo)) is None
    assert cluster.cached_bytes(str(tmp_path / "absent")) is None


def test_this_machines_page_cache_size_is_read():
    assert cluster.cached_bytes() > 0
