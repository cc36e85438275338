"""The log cleaner's Throttler (Kafka's kafka.utils.Throttler), on a simulated clock: the
rate it keeps across threads' calls, and that an unbounded one never sleeps."""
from __future__ import annotations

import pytest

from node.broker.log_cleaner import Throttler
from node.config import CLEANER_IO_UNBOUNDED


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.mark.parametrize("rate", [1e3, 1e6, 5e7])
def test_throttler_keeps_the_rate_when_work_is_faster(rate):
    clock = FakeClock()
    throttler = Throttler(rate, check_interval_ms=300, clock=clock.clock, sleep=clock.sleep)
    total, chunk = 0, int(rate // 100)
    while total < rate * 50:   # 50 s worth at the rate, done at 10 times it (1 ms a chunk)
        clock.now += 0.001
        throttler.maybe_throttle(chunk)
        total += chunk
    achieved = total / clock.now
    assert achieved <= rate * 1.1, achieved
    assert achieved >= rate * 0.8, achieved        # and not much slower than asked
    assert throttler.slept_s == pytest.approx(sum(clock.slept))


def test_throttler_does_not_sleep_below_the_rate():
    clock = FakeClock()
    throttler = Throttler(1e6, clock=clock.clock, sleep=clock.sleep)
    for _ in range(100):
        clock.now += 0.1
        throttler.maybe_throttle(1000)   # 10 KB/s against 1 MB/s
    assert clock.slept == []


def test_unbounded_throttler_never_sleeps():
    clock = FakeClock()
    throttler = Throttler(CLEANER_IO_UNBOUNDED, clock=clock.clock, sleep=clock.sleep)
    for _ in range(1000):
        throttler.maybe_throttle(10**9)
    assert clock.slept == [] and throttler.unbounded
